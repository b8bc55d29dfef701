"""The token cache: a corpus tokenised once into one flat array of ids (uint16 for vocabularies up to
65,535), documents ended by [SEP], kept as .npy with a manifest (.json: length, dtype, sha256, largest
id, the sources' fingerprints) and verified before every use. corpus.py decides where a corpus's cache
lives and reads the documents; this module builds and checks the array (docs/data.md).

Tokenising runs in plain forked processes, each writing its contiguous share of the documents to a part
file; a stop (an error, Ctrl-C, SIGTERM) ends every one of them and leaves no file behind.
"""
import errno
import hashlib
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from engine import cli
from engine.cli import DataError

FORMAT = 2  # bump when the layout changes (2: with a manifest)


def verified(path, tokenizer, say=None):
    """The token array at `path` as a read-only memmap if it agrees with its manifest (length, dtype,
    sha256, largest id) and its sources are unchanged; else None (with `say`, after a warning saying
    why: it is then removed, to be rebuilt)."""
    manifest = path.with_suffix(".json")
    if not (path.exists() or manifest.exists()):
        return None
    try:
        m = json.loads(Path(cli.regular_file(manifest, "manifest")).read_text())
        tokens = np.load(cli.regular_file(path, "array"), mmap_mode="r")  # never a FIFO: it would block
        if not isinstance(m, dict) or m.get("format") != FORMAT:
            reason = "its manifest is not this version's"
        elif tokens.ndim != 1 or tokens.dtype.name != m.get("dtype") or tokens.dtype.kind not in "iu":
            reason = f"it holds {tokens.dtype} {tokens.shape}, not the {m.get('dtype')} ids of its manifest"
        elif len(tokens) != m.get("length"):
            reason = f"it holds {len(tokens):,} tokens, its manifest {m.get('length')} (truncated?)"
        elif (changed := _source_changed(m["sources"])) is not None:
            reason = f"{changed} changed since it was built"
        elif token_digest(tokens) != (m.get("sha256"), m.get("max_id")):
            reason = "its checksum differs from its manifest's (overwritten or corrupted)"
        elif m["max_id"] >= tokenizer.vocab_size:
            reason = f"it holds id {m['max_id']}, outside the vocabulary of {tokenizer.vocab_size}"
        else:
            return tokens
    except cli.UsageError as err:  # missing, a folder, a FIFO, ...
        reason = f"its {err}"
    except (OSError, ValueError, EOFError, TypeError, KeyError) as err:  # an empty, cut or foreign file
        reason = f"it cannot be read ({type(err).__name__}: empty, cut short or not an array)"
    if say:
        try:
            manifest.unlink(missing_ok=True)  # first: no other process may take it as valid meanwhile
            path.unlink(missing_ok=True)
        except OSError as err:
            raise DataError(f"token cache {path} cannot be used ({reason}) nor removed ({err.strerror}): "
                            f"remove it and its .json by hand") from None
        say(f"warning: token cache {path} cannot be used: {reason}; rebuilding it")
    return None


def build(path, docs, sources, tokenizer, num_proc, say):
    """Tokenise `docs` (a datasets.Dataset, column "text") into `path` and its manifest, which records
    `sources` (file_fingerprint's, or {"hub": name}) and, written last, is the commit; returns the
    array's memmap. `say` gets the line saying what was read."""
    mb = docs.data.nbytes / 1e6  # the UTF-8 text (and 4 bytes of offset per document)
    if num_proc is None:  # a process per 100 MB of text (each costs a start-up), at most one per core
        num_proc = max(1, min(os.cpu_count() or 1, round(mb / 100)))
    num_proc = min(num_proc, len(docs))
    dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= 65535 else np.int32)  # small ids: 4x less disk
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}-{os.getpid()}.npy")
    shares = [path.with_name(f".{path.stem}-{os.getpid()}-{i}.part") for i in range(num_proc)]
    total = 0
    try:
        t0 = time.perf_counter()
        tokenize_parts(docs, tokenizer, dtype, shares)
        secs = time.perf_counter() - t0
        total = sum(p.stat().st_size for p in shares) // dtype.itemsize
        with open(tmp, "wb") as f:  # the parts one after the other, by plain writes: never all in memory
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                     "fortran_order": False, "shape": (total,)})
            os.posix_fallocate(f.fileno(), 0, f.tell() + total * dtype.itemsize)  # no SIGBUS mid-copy
            for part in shares:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, f, 1 << 24)
        digest, top = token_digest(np.load(tmp, mmap_mode="r"))
        os.replace(tmp, path)
        tmp.write_text(json.dumps({"format": FORMAT, "length": total, "dtype": dtype.name, "sha256": digest,
                                   "max_id": top, "vocab_size": tokenizer.vocab_size, "sources": sources}, indent=2))
        os.replace(tmp, path.with_suffix(".json"))  # the manifest, the commit
    except OSError as err:
        if not cli.disk_full(err):
            raise
        for f in [path, tmp] + shares:  # before DiskFull measures the space left
            f.unlink(missing_ok=True)
        raise cli.DiskFull(path.parent, 128 + (total or len(docs) * 64) * dtype.itemsize, "the token cache",
                           " (or point $TACO_CACHE / --cache_dir at a disk with room)") from None
    finally:
        for f in [tmp] + shares:
            f.unlink(missing_ok=True)
    say(f"{len(docs):,} documents, {mb:,.1f} MB of text, tokenized into {total:,} tokens in {secs:,.1f} s: "
        f"{mb / secs:.2f} MB/s with {num_proc} process{'es' if num_proc > 1 else ''} "
        f"({mb / secs / num_proc:.2f} MB/s each); cached in {path}")
    return np.load(path, mmap_mode="r")


def tokenize_parts(docs, tokenizer, dtype, parts):
    """The documents' ids, each ended by [SEP], into the files `parts` in order: part i holds the i-th
    contiguous share of the documents, tokenised by its own forked process (with one part, by this
    one). Not a pool: a stop terminates and joins every one of them."""
    bounds = [len(docs) * i // len(parts) for i in range(len(parts) + 1)]
    bar = tqdm(total=len(docs), desc="tokenizing", unit=" documents", dynamic_ncols=True)
    if len(parts) == 1:
        with bar:
            return _tokenize_part(docs, 0, len(docs), tokenizer, dtype, parts[0], bar.update)
    ctx = multiprocessing.get_context("fork")
    done = [ctx.RawValue("q", 0) for _ in parts]  # documents done, per process (one writer each)

    def work(i):
        try:
            _tokenize_part(docs, bounds[i], bounds[i + 1], tokenizer, dtype, parts[i],
                           lambda n: setattr(done[i], "value", done[i].value + n))
        except OSError as err:
            if cli.disk_full(err):
                os._exit(errno.ENOSPC)  # the parent says it, in one line
            raise

    procs = [ctx.Process(target=work, args=(i,), daemon=True) for i in range(len(parts))]
    try:
        for p in procs:
            p.start()
        while any(p.exitcode is None for p in procs):
            multiprocessing.connection.wait([p.sentinel for p in procs], timeout=0.2)
            bar.update(sum(d.value for d in done) - bar.n)
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if errno.ENOSPC in failed:
                raise OSError(errno.ENOSPC, "No space left on device")
            if failed:
                raise DataError(f"a tokenising process ended with exit code {failed[0]} (killed: out of memory?); "
                                f"try a lower --num_proc")
    finally:
        started = [p for p in procs if p.pid is not None]  # a failed fork leaves the rest unstarted
        for p in started:
            p.terminate()  # a no-op for one that has ended
        for p in started:
            p.join()
        bar.close()


def _tokenize_part(docs, start, end, tokenizer, dtype, part, progress, batch=1000):
    sep, control = tokenizer.sep_id, set(tokenizer.special_ids) - {tokenizer.unk_id}
    with open(part, "wb") as f:
        for i in range(start, end, batch):
            texts = docs[i:min(i + batch, end)]["text"]
            ids = []
            for text in texts:
                # Text that spells "[CLS]" or "[SEP]" (say, an article about BERT) must not inject
                # control tokens; an empty document adds nothing rather than a lone [SEP].
                x = tokenizer.encode(text)
                x = [t for t in x if t not in control] if "[" in text else x
                ids += x + [sep] if x else x
            f.write(np.asarray(ids, dtype).tobytes())
            progress(len(texts))


def token_digest(tokens, chunk=1 << 20):
    """(sha256 of the array's bytes, its largest id) of a memory-mapped array, read from its file in
    chunks by plain reads, not through the map: the pages read never count in this process's
    resident memory (through the map a 10 GB cache would make every rank 10 GB larger)."""
    h, top, left = hashlib.sha256(), -1, tokens.nbytes
    buf = memoryview(bytearray(min(chunk, left)))
    with open(tokens.filename, "rb") as f:
        f.seek(tokens.offset)
        while left:
            n = f.readinto(buf[:min(len(buf), left)])
            if not n:
                raise EOFError(f"{tokens.filename} ends before its {tokens.nbytes:,} bytes of tokens")
            h.update(buf[:n])
            top, left = max(top, int(np.frombuffer(buf[:n], tokens.dtype).max())), left - n
    return h.hexdigest(), top


def file_fingerprint(path):
    """A source file as the manifest records it: by its content (sha256), size, times and inode (ctime
    changes with every write and cannot be set back, unlike mtime)."""
    st, h = os.stat(path), hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return {"file": str(Path(path).resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns, "inode": st.st_ino, "sha256": h.hexdigest()}


def _source_changed(recorded):
    """The first recorded source file whose content differs now, or None. A file whose size, times
    and inode are unchanged has not been written since; else its content is compared."""
    for old in (source for source in recorded if "file" in source):
        try:
            st = os.stat(old["file"])
            if ((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) != (
                    old["size"], old["mtime_ns"], old["ctime_ns"], old["inode"])
                    and file_fingerprint(old["file"])["sha256"] != old["sha256"]):
                return old["file"]
        except OSError:
            return old["file"]
    return None
