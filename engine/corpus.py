"""Where a run's text comes from, and its token cache (docs/data.md).

--data names sources, comma-separated: the built-in toy corpus, hub datasets (the paper's Wikipedia and BookCorpus,
WikiText-103), and local files and folders of them: text (.txt: documents separated by blank lines, or one per line
in a file without blank lines), JSON Lines / JSON and Parquet files with a `text` column (as the hub exports them),
and folders saved by `datasets`' save_to_disk. Every document is tokenised once, by `datasets.map(num_proc=...)`,
into one flat array of ids (each document ended by [SEP]; uint16 for vocabularies up to 65,535), kept in the cache as
TOKENS/<key>.npy and memory-mapped. The key hashes what the array depends on: the sources (a local file by path, size
and times, a hub dataset by name) and the vocabulary. tools/prepare.py builds it ahead of a run.
"""
import contextlib
import ctypes
import fcntl
import functools
import hashlib
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from engine import cli
from engine.cli import DataError, default_cache_dir
from engine.toy import toy_corpus

# name -> (hub dataset id, config, split, text column, rows joined into one document). All are data-only
# repos (Parquet or Arrow) that load with datasets >= 3, unlike the old script-based "bookcorpus" and
# "wikitext". SamuelYang/bookcorpus is an Arrow dump of the original 74M rows, one sentence per row and no
# book boundaries: runs of 100 rows make one pseudo-document, rather than a [SEP] after every sentence.
SOURCES = {
    "wikipedia": ("wikimedia/wikipedia", "20231101.en", "train", "text", 1),
    "bookcorpus": ("SamuelYang/bookcorpus", None, "train", "text", 100),
    "wikitext103": ("Salesforce/wikitext", "wikitext-103-raw-v1", "train", "text", 1),
    "toy": None,  # built offline by toy.toy_corpus()
}
READERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}  # file type -> datasets' reader
FORMAT = 3  # bump when the array's layout or the key changes


def resolve(data_spec, cache_dir=None):
    """'toy,wikipedia,notes.txt,dir/' -> the parts to read, in order: ("hub", name), ("file", path) or ("saved",
    folder). A folder gives its files of the kinds READERS names, sorted, or is one save_to_disk wrote."""
    parts = []
    for name in (s.strip() for s in str(data_spec).split(",") if s.strip()):
        path = Path(name).expanduser()
        if name in SOURCES:
            parts.append(("file", toy_corpus(cache_dir) / "train.txt") if name == "toy" else ("hub", name))
        elif (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
            parts.append(("saved", path))
        elif path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix.lower() in READERS and not p.name.startswith(".")
                           and p.stat().st_size)  # (an empty file holds no document)
            if not files:
                raise DataError(f"folder {path} has no .txt, .jsonl, .json or .parquet files: --data reads those, "
                                f"or a folder saved by datasets' save_to_disk")
            parts += [("file", p) for p in files]
        elif path.is_file() and path.suffix.lower() in READERS:
            if not path.stat().st_size:
                raise DataError(f"--data {path} is empty: pass a file with text in it")
            parts.append(("file", path))
        elif path.exists():
            raise DataError(f"--data {path}: taco reads text (.txt), JSON Lines or JSON (.jsonl, .json) and Parquet "
                            f"(.parquet) files with a 'text' column, and save_to_disk folders: convert it to one")
        else:
            raise DataError(f"unknown data source {name!r}: use {', '.join(SOURCES)}, a file or a folder")
    if not parts:
        raise DataError("no data source given: pass toy, a hub source name, a file or a folder")
    return parts


def hub_reachable():
    """Can the Hugging Face hub be reached? If not (no network, a firewalled node), it is asked nothing more: its
    client would retry every request for ~25 s. The local caches serve what they hold, as with HF_HUB_OFFLINE=1."""
    import datasets
    import huggingface_hub.constants as hub
    if hub.HF_HUB_OFFLINE:
        return False
    try:
        socket.create_connection((urlparse(hub.ENDPOINT).hostname, 443), timeout=5).close()
        return True
    except OSError:
        hub.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
        return False


def load_documents(parts, work):
    """A datasets.Dataset with one "text" column, one document per row, of resolve()'s parts, in order. datasets'
    Arrow copies of local files go to the folder `work`, made afresh for each build (its cache would know a
    file rewritten in place by its modification time alone)."""
    import datasets
    sets, run = [], []  # run: consecutive local files read alike, loaded in one call

    def flush():
        if run:
            reader, by = run[0][1:]
            files = [str(p) for p, _, _ in run]
            kwargs = {"sample_by": by, "encoding_errors": "replace"} if reader == "text" else {}
            try:
                ds = datasets.load_dataset(reader, data_files=files, split="train", cache_dir=str(work), **kwargs)
            except Exception as err:  # a malformed JSON line, a file that is not Parquet, ...: what datasets met
                if cli.disk_full(err):
                    raise
                why = cli.reason(cli.cause(err, lambda e: e.__cause__ is None))
                raise DataError(f"--data: cannot read {', '.join(files[:3])}{' ...' * (len(files) > 3)}: {why}") from err
            sets.append(text_column(ds, files[0]))
            run.clear()

    for kind, what in parts:
        if kind == "file":
            reader = READERS[what.suffix.lower()]
            by = reader == "text" and ("paragraph" if b"\n\n" in what.open("rb").read(1 << 20).replace(b"\r", b"")
                                       else "line")
            if run and run[0][1:] != (reader, by):
                flush()
            run.append((what, reader, by))
            continue
        flush()
        if kind == "saved":
            ds = datasets.load_from_disk(str(what))
            sets.append(text_column(ds["train"] if isinstance(ds, datasets.DatasetDict) else ds, what))
            continue
        repo, config, split, column, rows_per_doc = SOURCES[what]
        hub_reachable()
        try:
            ds = datasets.load_dataset(repo, config, split=split).select_columns([column])
        except Exception as e:  # offline, hub unreachable, dataset moved, ...
            raise DataError(f"could not load {what} ({repo}) from the Hugging Face hub ({type(e).__name__}): pass "
                            f"local files or folders of them as --data, or --data toy for the offline toy corpus") from None
        ds = ds.rename_column(column, "text") if column != "text" else ds
        if rows_per_doc > 1:
            ds = ds.map(lambda b: {"text": [" ".join(b["text"])]}, batched=True, batch_size=rows_per_doc)
        sets.append(ds)
    flush()
    return sets[0] if len(sets) == 1 else datasets.concatenate_datasets(sets)


def text_column(ds, where):
    if "text" not in ds.column_names:
        raise DataError(f"{where} has no 'text' column (it has {', '.join(ds.column_names)}): rename the column "
                        f"that holds the text to 'text'")
    return ds.select_columns(["text"])


# ----------------------------------------------------------------------------- the token cache

def cache_path(parts, tokenizer, cache_dir=None):
    """Where the token array of `parts` is cached: a key hashed from the sources (a local file by path, size and
    times: any write changes its ctime, which cannot be set back; a saved folder by its files'), the vocabulary and
    the array's format."""
    def identity(kind, what):
        if kind == "hub":
            return list(SOURCES[what])
        files = sorted(what.rglob("*")) if kind == "saved" else [what]
        return [[str(p.resolve()), (st := p.stat()).st_size, st.st_mtime_ns, st.st_ctime_ns] for p in files if p.is_file()]
    vocab = hashlib.sha256(Path(tokenizer.vocab_file).read_bytes()).hexdigest()
    recipe = {"format": FORMAT, "sources": [identity(*part) for part in parts], "vocab": vocab,
              "lower": tokenizer.do_lower_case}
    key = hashlib.sha256(json.dumps(recipe).encode()).hexdigest()
    return Path(cache_dir or default_cache_dir()) / "tokens" / f"{key[:20]}.npy"


def cached(path, tokenizer):
    """The token array at `path` as a read-only memmap if it is whole (its length and type as its manifest, written
    after it, says) and fits the vocabulary; else None."""
    try:
        meta = json.loads(path.with_suffix(".json").read_text())
        tokens = np.load(path, mmap_mode="r")
        if tokens.shape == (meta["length"],) and tokens.dtype == meta["dtype"] and meta["max_id"] < tokenizer.vocab_size:
            return tokens
    except (OSError, ValueError, KeyError, TypeError, EOFError):  # absent, cut short, or not ours
        pass
    return None


def tokenize_corpus(data_spec, tokenizer, cache_dir=None, num_proc=None, say=None):
    """data_spec's documents as one flat array of ids, a read-only memmap of the token cache: reused when it is
    there and whole, else built (a damaged one is rebuilt, with a warning). `say` (default: stderr) gets what was
    read, and, if given, that the cache was reused."""
    parts = resolve(data_spec, cache_dir)
    path = cache_path(parts, tokenizer, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as held:
        if (tokens := cached(path, tokenizer)) is None:  # one builder at a time: a run beside it waits, then reuses
            fcntl.flock(held.enter_context(open(path.with_suffix(".lock"), "w")), fcntl.LOCK_EX)
            tokens = cached(path, tokenizer)
        if tokens is not None:
            if say:  # a run's log says it; a tool is quiet
                say(f"data: {data_spec}: {len(tokens):,} tokens, tokenized before: reusing the token cache {path}")
            return tokens
        say = say or (lambda line: print(line, file=sys.stderr))
        if path.exists():
            say(f"warning: token cache {path} cannot be used (cut short or damaged); rebuilding it")
        return build(path, parts, tokenizer, num_proc, lambda line: say(f"data: {data_spec}: {line}"))


def build(path, parts, tokenizer, num_proc, say):
    """Tokenise the documents of `parts` into the array at `path`, then its manifest (the commit). What is made on
    the way lives in PATH.work/ until the array is written; a killed builder's is removed by the next."""
    import datasets
    work, tmp = path.with_suffix(".work"), path.with_name(f"{path.name}.tmp{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= 65535 else np.int32)  # small ids: 4x less disk
    t0 = time.perf_counter()
    try:
        docs = load_documents(parts, work)
        mb = docs.data.nbytes / 1e6  # the UTF-8 text (and 4 bytes of offset per document)
        if num_proc is None:  # a process per 100 MB of text (each costs a start-up), at most one per core
            num_proc = max(1, min(os.cpu_count() or 1, round(mb / 100)))
        num_proc = min(num_proc, len(docs)) or None
        with tokenising():
            ids = docs.map(functools.partial(encode_batch, tokenizer=tokenizer), batched=True,
                           num_proc=num_proc, remove_columns=docs.column_names, desc="tokenizing",
                           features=datasets.Features({"ids": datasets.Sequence(datasets.Value(dtype.name))}),
                           cache_file_name=str(work / "ids.arrow"), new_fingerprint=path.stem,
                           load_from_cache_file=False)
        chunks = ids.data.column("ids").chunks
        total = sum(len(chunk.flatten()) for chunk in chunks)
        with open(tmp, "wb") as f:  # chunk by chunk, by plain writes: never all in memory
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                     "fortran_order": False, "shape": (total,)})
            top = 0
            for chunk in chunks:
                values = chunk.flatten().to_numpy()
                f.write(values.tobytes())
                top = max(top, int(values.max(initial=0)))
        os.replace(tmp, path)
        path.with_suffix(".json").write_text(json.dumps({"length": total, "dtype": dtype.name, "max_id": top}))
    finally:
        tmp.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    secs = time.perf_counter() - t0
    say(f"{len(docs):,} documents, {mb:,.1f} MB of text, tokenized into {total:,} tokens in {secs:,.1f} s with "
        f"{num_proc or 1} process{'es' * bool((num_proc or 1) > 1)}; cached in {path}")
    return np.load(path, mmap_mode="r")


def encode_batch(batch, tokenizer):
    """datasets.map's function: each document's ids, ended by [SEP]. Text that spells "[CLS]" or "[SEP]" (an
    article about BERT) injects no control token; an empty document adds nothing rather than a lone [SEP]."""
    sep, control = tokenizer.sep_id, set(tokenizer.special_ids) - {tokenizer.unk_id}
    out = []
    for text in batch["text"]:
        x = tokenizer.encode(text)
        x = [t for t in x if t not in control] if "[" in text else x
        out.append(x + [sep] if x else x)
    return {"ids": out}


@contextlib.contextmanager
def tokenising():
    """While datasets' processes tokenise: each one (and the pool's manager) ends with this process, even one
    killed by kill -9; and Ctrl-C, which reaches the whole process group, is this process's alone (it ends the
    pool): in the others, forked with this handler, it does nothing from their first instant."""
    parent, handler = os.getpid(), signal.getsignal(signal.SIGINT)
    FORKS_DIE_WITH_PARENT.append(parent)
    ours = handler is signal.default_int_handler and threading.current_thread() is threading.main_thread()
    if ours:
        signal.signal(signal.SIGINT, lambda signum, frame: os.getpid() == parent and handler(signum, frame))
    try:
        yield
    finally:
        FORKS_DIE_WITH_PARENT.remove(parent)
        if ours:
            signal.signal(signal.SIGINT, handler)


FORKS_DIE_WITH_PARENT = []  # the processes tokenising now, whose forks end with them


def die_with_parent():
    if os.getppid() in FORKS_DIE_WITH_PARENT and sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


os.register_at_fork(after_in_child=die_with_parent)
