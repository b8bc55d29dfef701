"""Where a run's text comes from: hub datasets (Wikipedia, BookCorpus, WikiText-103), local text files
and folders, the built-in toy corpus; tokenised once into one flat token array that token_cache.py
builds and verifies (docs/data.md). tools/prepare.py runs it ahead of a run (the paper's corpora take
hours to tokenise)."""
import hashlib
import json
import os
import re
import sys
from pathlib import Path

from engine import cli, token_cache
from engine.cli import DataError, default_cache_dir
from engine.toy import SPECIAL_TOKENS, toy_corpus

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


def read_documents(path):
    """Documents of a local text file: blank-line-separated paragraph groups, or one per line if the
    file has no blank line. Bytes that are not UTF-8 become U+FFFD (which the tokenizer drops) with one
    warning per file; NUL bytes mean binary and are refused."""
    raw = Path(cli.regular_file(path, "data file")).read_bytes()
    if b"\x00" in raw[:8192]:
        raise DataError(f"{path} looks binary (NUL bytes): pass UTF-8 text files")
    text = raw.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - raw.count("\ufffd".encode())  # minus genuine U+FFFD
    if bad:
        print(f"warning: {path} is not UTF-8; {bad} bad byte sequence(s) dropped", file=sys.stderr)
    groups = re.split(r"\n[ \t\r]*\n", text)
    docs = [d.strip() for d in (groups if len(groups) > 1 else text.splitlines()) if d.strip()]
    if not docs:
        raise DataError(f"{path} is empty: pass a file with text in it")
    return docs


def looks_like_vocabulary(path, head=1 << 16):
    """Does a text file (its first 64 KB) read as a WordPiece vocabulary rather than text: one token per
    line (no spaces), with BERT's special tokens ([PAD], [CLS], ...) or many "##" pieces?"""
    with open(path, "rb") as f:
        lines = f.read(head).decode("utf-8", errors="replace").splitlines()
    words = [w.strip() for w in lines[:-1] or lines if w.strip()]  # the last line may be cut short
    return (len(words) >= 5 and sum(len(w.split()) > 1 for w in words) <= len(words) // 100
            and (sum(w in SPECIAL_TOKENS for w in words) >= 2
                 or sum(w.startswith("##") and len(w) > 2 for w in words) >= len(words) // 20))


def _resolve(data_spec, cache_dir):
    """'toy,wikipedia,notes.txt,dir/' -> (parts: ("file", Path) or ("hub", name), a label per part of
    the spec for the summary line, warnings). A folder gives its own *.txt files, sorted, less those
    that look like a vocabulary (a vocab.txt beside the text); a file named in --data is always read."""
    parts, labels, warnings = [], [], []
    vocabulary = "like a vocabulary (one token a line, [PAD]/[CLS] or ## pieces), not text"
    for name in (s.strip() for s in str(data_spec).split(",") if s.strip()):
        path = Path(name).expanduser()
        if name in SOURCES:
            parts.append(("file", toy_corpus(cache_dir) / "train.txt") if name == "toy" else ("hub", name))
            labels.append(name)
        elif path.is_dir():
            entries = sorted(p for p in path.iterdir() if not p.name.startswith("."))
            texts = [p for p in entries if p.suffix.lower() == ".txt" and not p.is_dir()]
            others = [p.name + "/" * p.is_dir() for p in entries if p not in texts]
            held = ", ".join(others[:3]) + ", ..." * (len(others) > 3)
            if not texts:
                raise DataError(f"folder {path} has no *.txt files{f' (it holds {held})' * bool(others)}: --data "
                                f"reads a folder's *.txt files; rename them, or name the files in --data")
            vocabs = [p for p in texts if looks_like_vocabulary(cli.regular_file(p, "data file"))]
            if vocabs:
                look = "it looks" if len(vocabs) == 1 else "they look"
                warnings.append(f"{path}: skipped {', '.join(p.name for p in vocabs)}: {look} {vocabulary}; "
                                f"name it in --data to read it anyway")
            if not (texts := [p for p in texts if p not in vocabs]):
                raise DataError(f"folder {path} holds only a vocabulary ({', '.join(p.name for p in vocabs)}), "
                                f"no text: put the training text in it as *.txt files")
            parts += [("file", p) for p in texts]
            labels.append(f"{path}/ ({len(texts)} *.txt file{'s' * (len(texts) > 1)}{f'; not read: {held}' * bool(others)})")
        elif os.path.lexists(path):  # a file, or a FIFO / symlink loop: say which
            parts.append(("file", Path(cli.regular_file(path, "data file"))))
            labels.append(str(path))
            if looks_like_vocabulary(path):
                warnings.append(f"{path} looks {vocabulary}; it is read as training text because --data names it")
        else:
            raise DataError(f"unknown data source {name!r}: use {', '.join(SOURCES)}, a file or a folder")
    if not parts:
        raise DataError("no data source given: pass toy, a hub source name, a file or a folder")
    return parts, labels, warnings


def load_documents(data_spec, cache_dir=None, parts=None):
    """A datasets.Dataset with one "text" column, one document per row, of data_spec: a comma-separated
    list of SOURCES names, text files and folders (or of `parts`, data_spec as _resolve gave it)."""
    import datasets
    sets = []
    for kind, what in parts or _resolve(data_spec, cache_dir)[0]:
        if kind == "file":
            sets.append(datasets.Dataset.from_dict({"text": read_documents(what)}))
            continue
        repo, config, split, column, rows_per_doc = SOURCES[what]
        try:
            ds = datasets.load_dataset(repo, config, split=split).select_columns([column])
        except Exception as e:  # offline, hub unreachable, dataset moved, ...
            raise DataError(f"could not load {what} ({repo}) from the Hugging Face hub: {cli.reason(e)}; pass "
                            f"local text files or folders of them as --data, or --data toy for the "
                            f"offline toy corpus") from None
        if column != "text":
            ds = ds.rename_column(column, "text")
        if rows_per_doc > 1:
            ds = ds.map(lambda b: {"text": [" ".join(b["text"])]}, batched=True, batch_size=rows_per_doc)
        sets.append(ds)
    return sets[0] if len(sets) == 1 else datasets.concatenate_datasets(sets)


def unavailable(data_spec, cache_dir=None):
    """Why data_spec cannot be loaded now (a name that is no source, hub sources offline and not cached),
    found without loading it, or None: asked when the vocabulary is missing too, so that one message
    names everything missing."""
    try:
        parts = _resolve(data_spec, cache_dir)[0]
    except DataError as err:
        return str(err)
    import datasets
    missing = []
    for name in (what for kind, what in parts if kind == "hub"):
        try:
            datasets.load_dataset_builder(*SOURCES[name][:2])  # the hub's metadata or the local cache
        except Exception as e:
            missing.append(f"{name}: {cli.reason(e)}")
    return (f"nor can --data {data_spec} be loaded ({'; '.join(missing)}): pass local text files or folders "
            f"of them as --data" if missing else None)


def token_cache_path(data_spec, tokenizer, cache_dir=None, parts=None):
    """Where tokenize_corpus caches data_spec's tokens (or `parts`'): a key hashed from the sources (a
    local file by path, size and mtime), the vocabulary and the array format."""
    sources = [[str(what.resolve()), (st := what.stat()).st_size, st.st_mtime_ns] if kind == "file"
               else list(SOURCES[what]) for kind, what in parts or _resolve(data_spec, cache_dir)[0]]
    vocab = hashlib.sha256(Path(tokenizer.vocab_file).read_bytes()).hexdigest()
    recipe = {"format": token_cache.FORMAT, "sources": sources, "vocab": vocab, "lower": tokenizer.do_lower_case}
    key = hashlib.sha256(json.dumps(recipe).encode()).hexdigest()
    return Path(cache_dir or default_cache_dir()) / "tokens" / f"{key[:20]}.npy"


def tokenize_corpus(data_spec, tokenizer, cache_dir=None, num_proc=None, say=None):
    """Every document tokenised once into one flat array, each ended by [SEP], as a read-only memmap of
    the token cache (built, or verified and reused; a damaged one is rebuilt with a warning). Warnings
    and what was read go to `say` (default: stderr), and so does a line naming a reused cache if `say`
    is given (a run's log). Under DDP rank 0 builds it; the others wait for cached_tokens."""
    quiet_reuse, say = say is None, say or (lambda line: print(line, file=sys.stderr))
    parts, labels, warnings = _resolve(data_spec, cache_dir)
    for warning in warnings:
        say(f"warning: {warning}")
    path, what = token_cache_path(data_spec, tokenizer, cache_dir, parts), ", ".join(labels)
    tokens = token_cache.verified(path, tokenizer, say)
    if tokens is None:
        fingerprints = [token_cache.file_fingerprint(part) if kind == "file" else {"hub": part}
                        for kind, part in parts]  # taken before the text is read
        tokens = token_cache.build(path, load_documents(data_spec, cache_dir, parts), fingerprints, tokenizer,
                                   num_proc, lambda line: say(f"data: {what}: {line}"))
    elif not quiet_reuse:
        say(f"data: {what}: {len(tokens):,} tokens, tokenized before: reusing the token cache {path}")
    return tokens


def cached_tokens(data_spec, tokenizer, cache_dir=None):
    """data_spec's cached token array if it verifies, else None, silently: what DDP's other ranks wait
    for while rank 0 builds it."""
    return token_cache.verified(token_cache_path(data_spec, tokenizer, cache_dir), tokenizer)


def tokens_sha256(data_spec, tokenizer, cache_dir=None):
    """The checksum of data_spec's token array, from the manifest tokenize_corpus verified (runs.Run
    records it, so that --resume can refuse other data)."""
    manifest = token_cache_path(data_spec, tokenizer, cache_dir).with_suffix(".json")
    return json.loads(manifest.read_text())["sha256"]
