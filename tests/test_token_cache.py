"""Tests for token_cache.py: a corpus tokenised once and cached, the cache verified before it is
trusted (damaged, truncated, stale or foreign caches are rebuilt or named), worker processes, a full
disk and signals while tokenising (docs/data.md, docs/robustness.md)."""
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engine import cli
from engine.corpus import token_cache_path, tokenize_corpus
import data
from engine import token_cache
from data import DataError, WordPieceTokenizer

HERE = Path(__file__).resolve().parents[1]  # the repository root


def test_tokenize_corpus_cached(toy_dir, tmp_path, monkeypatch):
    cache = toy_dir.parent
    tok = data.load_tokenizer("toy", cache)
    tokens = tokenize_corpus("toy", tok, cache)
    path = Path(tokens.filename)
    assert tokens.dtype == np.uint16 and not tokens.flags.writeable
    assert 300_000 < len(tokens) < 700_000 and tokens[-1] == tok.sep_id
    assert (tokens == tok.sep_id).sum() == 3000 and tok.cls_id not in tokens
    first_doc = (toy_dir / "train.txt").read_text().split("\n\n")[0]
    assert list(tokens[:len(tok.encode(first_doc)) + 1]) == tok.encode(first_doc) + [tok.sep_id]
    mtime = path.stat().st_mtime_ns
    monkeypatch.setattr(WordPieceTokenizer, "encode", lambda self, text: 1 / 0)
    again = tokenize_corpus("toy", tok, cache)  # reused: encode is never called
    assert Path(again.filename) == path and path.stat().st_mtime_ns == mtime
    monkeypatch.undo()
    grown = tmp_path / "vocab.txt"
    grown.write_text("\n".join(tok.ids_to_tokens + ["zebra"]) + "\n")
    other = tokenize_corpus("toy", WordPieceTokenizer(grown), cache)
    assert Path(other.filename) != path and np.array_equal(other, tokens)


def test_tokenize_local_file_key_follows_file(tmp_path, small):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello [CLS] world\n\n\nunaffable [MASK][SEP]\n")  # spelled specials dropped
    first = tokenize_corpus(corpus, small, tmp_path / "cache")
    assert list(first) == [5, 6, 3, 7, 8, 9, 3]
    corpus.write_text("hello\n\nworld x\n")
    assert list(tokenize_corpus(corpus, small, tmp_path / "cache")) == [5, 3, 6, 20, 3]


def test_the_array_is_the_same_for_any_num_proc(toy_dir, tmp_path):
    """Each process tokenises the next contiguous share of the documents into a part file; the parts,
    concatenated in order, are the array one process makes (docs/data.md, Processes)."""
    tok = data.load_tokenizer("toy", toy_dir.parent)
    one = tokenize_corpus("toy", tok, tmp_path / "one", num_proc=1)
    three = tokenize_corpus("toy", tok, tmp_path / "three", num_proc=3)
    assert np.array_equal(one, three) and one.dtype == three.dtype
    assert sorted(p.name for p in (tmp_path / "three" / "tokens").iterdir()) == [  # no part file left
        Path(three.filename).stem + ".json", Path(three.filename).name]


def test_a_fork_that_fails_is_its_own_error(small, tmp_path, monkeypatch):
    """A second tokenising process that cannot be started: its OSError comes through (not an
    AttributeError from ending a process that never started), and the first one is ended."""
    import datasets
    import multiprocessing
    process = type(multiprocessing.get_context("fork").Process())
    start, started = process.start, []

    def start_one(self):
        if started:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        start(self)
        started.append(self)
    monkeypatch.setattr(process, "start", start_one)
    docs = datasets.Dataset.from_dict({"text": ["hello world"] * 100})
    with pytest.raises(OSError, match="Resource temporarily unavailable"):
        token_cache.tokenize_parts(docs, small, np.uint16, [tmp_path / f"{i}.part" for i in range(3)])
    assert started[0].exitcode is not None


def damage(path, how):
    """Damage a cached token array the ways a crash, a full disk or a person can."""
    tokens = np.load(path)
    if how == "zero-byte":
        path.write_bytes(b"")
    elif how == "truncated":
        os.truncate(path, path.stat().st_size // 2)
    elif how == "overwritten":  # another valid array of the same length and dtype
        np.save(path, tokens[::-1].copy())
    elif how == "random bytes":
        raw = bytearray(path.read_bytes())
        raw[200:600] = np.random.default_rng(0).integers(0, 256, 400, dtype=np.uint8).tobytes()
        path.write_bytes(raw)
    elif how == "float":
        np.save(path, tokens.astype(np.float32))
    elif how == "no manifest":
        path.with_suffix(".json").unlink()
    elif how == "manifest garbage":
        path.with_suffix(".json").write_text("[1, 2")
    elif how == "a folder":
        path.unlink()
        path.mkdir()


@pytest.mark.parametrize("how", ["zero-byte", "truncated", "overwritten", "random bytes", "float", "no manifest",
                                 "manifest garbage"])
def test_a_damaged_token_cache_is_rebuilt(tmp_path, small, capsys, how):
    """The cache is verified before every use (its manifest: length, dtype, sha256, largest id,
    the sources' content); a damaged one is rebuilt with a warning, never trusted."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n\nunaffable x y\n" * 50)
    want = np.array(tokenize_corpus(corpus, small, tmp_path / "cache"))
    path = token_cache_path(corpus, small, tmp_path / "cache")
    damage(path, how)
    capsys.readouterr()
    got = tokenize_corpus(corpus, small, tmp_path / "cache")
    assert np.array_equal(got, want) and got.dtype == want.dtype
    assert f"warning: token cache {path} cannot be used: " in capsys.readouterr().err
    assert sorted(p.name for p in path.parent.iterdir()) == [path.stem + ".json", path.name]  # no temp file


def test_a_cache_that_cannot_be_removed_is_one_line(tmp_path, small):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n")
    tokenize_corpus(corpus, small, tmp_path / "cache")
    path = token_cache_path(corpus, small, tmp_path / "cache")
    damage(path, "a folder")
    with pytest.raises(DataError, match="is a folder, not a file.* nor removed .*remove it and its .json by hand"):
        tokenize_corpus(corpus, small, tmp_path / "cache")


def test_a_corpus_rewritten_with_the_same_size_and_time_is_retokenised(tmp_path, small, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n\nx y\n")
    assert list(tokenize_corpus(corpus, small, tmp_path / "cache")) == [5, 6, 3, 20, 21, 3]
    st = corpus.stat()
    corpus.write_text("world hello\n\ny x\n")
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and mtime as before: the key is the same
    assert list(tokenize_corpus(corpus, small, tmp_path / "cache")) == [6, 5, 3, 21, 20, 3]
    assert f"{corpus} changed since it was built; rebuilding it" in capsys.readouterr().err
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # touched, content unchanged: compared, reused
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
    tokenize_corpus(corpus, small, tmp_path / "cache")
    assert "warning" not in capsys.readouterr().err


def test_ids_outside_the_vocabulary_never_reach_the_model(tmp_path, small, capsys):
    """A cache whose manifest agrees with it but that holds an id >= the vocabulary size (made
    with another vocabulary of the same name and size) is rebuilt."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n")
    tokenize_corpus(corpus, small, tmp_path / "cache")
    path = token_cache_path(corpus, small, tmp_path / "cache")
    forged = np.array([5, 6, 999, 3], dtype=np.uint16)
    np.save(path, forged)
    manifest = json.loads(path.with_suffix(".json").read_text())
    manifest["sha256"], manifest["max_id"] = token_cache.token_digest(np.load(path, mmap_mode="r"))
    manifest["length"] = 4
    path.with_suffix(".json").write_text(json.dumps(manifest))
    tokens = tokenize_corpus(corpus, small, tmp_path / "cache")
    assert "holds id 999, outside the vocabulary of 29" in capsys.readouterr().err
    assert tokens.max() < small.vocab_size


def test_disk_full_while_tokenising(tmp_path, small, monkeypatch):
    """ENOSPC when the array's space is reserved (injected): one line naming the folder and the
    bytes needed, no temp file, no cache."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n" * 1000)

    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    cache = tmp_path / "cache"
    with pytest.raises(cli.DiskFull, match=rf"no space left in {cache / 'tokens'} for the token cache: it needs 6,128 "
                                           r"bytes, .* free; free some space there \(or point \$TACO_CACHE"):
        tokenize_corpus(corpus, small, cache)
    assert list((cache / "tokens").iterdir()) == []


def wait_for(predicate, timeout=120):
    deadline = time.time() + timeout
    while not predicate() and time.time() < deadline:
        time.sleep(0.05)


def group_processes(pgid):
    """Pids of the live (not zombie) processes of a process group."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat="], capture_output=True, text=True).stdout.split("\n")
    return [int(p) for p, g, st in (l.split() for l in out if l.strip()) if int(g) == pgid and not st.startswith("Z")]


# taco.py with a tokenizer slowed down from outside (2 ms a document), so that a signal surely
# lands while the documents are being tokenised, however fast the machine.
SLOW_TACO = """
import sys, time
sys.path.insert(0, {here!r})
import data
encode = data.WordPieceTokenizer.encode
data.WordPieceTokenizer.encode = lambda self, text: (time.sleep(0.002), encode(self, text))[1]
import taco
taco.main(sys.argv[1:])
"""


@pytest.mark.parametrize("sig, group, num_proc", [(signal.SIGINT, True, 1), (signal.SIGINT, True, 2),
                                                  (signal.SIGTERM, False, 2)])
def test_a_signal_while_tokenising_ends_everything(tmp_path, toy_dir, sig, group, num_proc):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) or SIGTERM to taco.py
    alone (kill, timeout) while its processes tokenise: exit 128 + signal, one line, no traceback,
    no process left, no temp file, no --out left behind."""
    wrapper = tmp_path / "slow_taco.py"
    wrapper.write_text(SLOW_TACO.format(here=str(HERE)))
    cache, out, log = tmp_path / "cache", tmp_path / "run", tmp_path / "stderr"
    cmd = [sys.executable, str(wrapper), "--data", str(toy_dir / "train.txt"), "--vocab", str(toy_dir / "vocab.txt"),
           "--cache_dir", str(cache), "--out", str(out), "--num_proc", str(num_proc), "--threads", "1"]
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    wait_for(lambda: "tokenizing" in log.read_text() and (num_proc == 1 or len(group_processes(proc.pid)) > 1))
    os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
    assert proc.wait(timeout=120) == 128 + sig
    wait_for(lambda: not group_processes(proc.pid), timeout=10)
    assert group_processes(proc.pid) == []  # the tokenising processes too
    lines = [l for l in log.read_text().replace("\r", "\n").splitlines() if l.strip() and "tokenizing" not in l]
    assert lines == ["interrupted" if sig == signal.SIGINT else "stopped by SIGTERM"], lines
    assert not out.exists() and not list(cache.glob("tokens/*"))


def test_disk_full_for_real_while_tokenising(tmp_path, toy_dir):
    """The token cache on a full disk (a 10 MB tmpfs; the array needs 16 MB): it used to end in
    "Bus error" (exit 135) with a temp file and a stale lock; now one line, exit 2, nothing left."""
    from test_runs import unshare_tmpfs
    prefix = unshare_tmpfs()
    if prefix is None:
        pytest.skip("needs unshare and a private tmpfs (user namespaces)")
    full = tmp_path / "full"
    full.mkdir()
    corpus = tmp_path / "big.txt"
    corpus.write_text((toy_dir / "train.txt").read_text() * 20)
    script = ("import os, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
              "print(sorted(os.path.relpath(os.path.join(d, f), {full!r}) for d, _, fs in os.walk({full!r}) "
              "for f in fs)); sys.exit(r.returncode)").format(full=str(full))
    cmd = prefix + [sys.executable, "-c", script, sys.executable, str(HERE / "taco.py"), "--data", str(corpus),
                    "--vocab", str(toy_dir / "vocab.txt"), "--cache_dir", str(full / "cache"), "--out",
                    str(full / "run"), "--num_proc", "2", "--threads", "1"]
    r = subprocess.run(cmd, env={**os.environ, "FULL": str(full)}, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: no space left in {full / 'cache' / 'tokens'} for the token cache: it needs ")
    assert "Traceback" not in r.stderr and r.stdout.strip().splitlines()[-1] == "[]"  # no temp file, no lock
