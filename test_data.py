"""Tests for data.py: corpus loading and caching, packing, batches, masking, the paper's data by default."""
import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import cli
import data
from data import DataError, WordPieceTokenizer

HERE = Path(__file__).resolve().parent


# ----------------------------------------------------------------------------- corpora and caching

def test_local_documents(tmp_path, capsys):
    (tmp_path / "paras.txt").write_text("one\ntwo\n\n\nthree\n  \nfour\n")
    (tmp_path / "lines.txt").write_text("a b\nc d\n")
    assert data.load_documents(tmp_path / "paras.txt")["text"] == ["one\ntwo", "three", "four"]
    assert data.load_documents(str(tmp_path))["text"] == ["a b", "c d", "one\ntwo", "three", "four"]
    (tmp_path / "latin1.txt").write_bytes("café\n\nnaïve ok\n".encode("latin-1"))
    assert data.load_documents(tmp_path / "latin1.txt")["text"] == ["caf\ufffd", "na\ufffdve ok"]
    assert "is not UTF-8; 2 bad byte" in capsys.readouterr().err


@pytest.mark.parametrize("content, needle", [
    (None, "unknown data source"), (b"", "empty"), (b"\n \n", "empty"), (b"PK\x03\x04\x00\x00", "binary")])
def test_bad_corpus(tmp_path, content, needle):
    path = tmp_path / "corpus.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError, match=needle):
        data.load_documents(str(path))


def test_tokenize_corpus_cached(toy_dir, tmp_path, monkeypatch):
    cache = toy_dir.parent
    tok = data.load_tokenizer("toy", cache)
    tokens = data.tokenize_corpus("toy", tok, cache)
    path = Path(tokens.filename)
    assert tokens.dtype == np.uint16 and not tokens.flags.writeable
    assert 300_000 < len(tokens) < 700_000 and tokens[-1] == tok.sep_id
    assert (tokens == tok.sep_id).sum() == 3000 and tok.cls_id not in tokens
    first_doc = (toy_dir / "train.txt").read_text().split("\n\n")[0]
    assert list(tokens[:len(tok.encode(first_doc)) + 1]) == tok.encode(first_doc) + [tok.sep_id]
    mtime = path.stat().st_mtime_ns
    monkeypatch.setattr(WordPieceTokenizer, "encode", lambda self, text: 1 / 0)
    again = data.tokenize_corpus("toy", tok, cache)  # reused: encode is never called
    assert Path(again.filename) == path and path.stat().st_mtime_ns == mtime
    monkeypatch.undo()
    grown = tmp_path / "vocab.txt"
    grown.write_text("\n".join(tok.ids_to_tokens + ["zebra"]) + "\n")
    other = data.tokenize_corpus("toy", WordPieceTokenizer(grown), cache)
    assert Path(other.filename) != path and np.array_equal(other, tokens)


def test_tokenize_local_file_key_follows_file(tmp_path, small):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello [CLS] world\n\n\nunaffable [MASK][SEP]\n")  # spelled specials dropped
    first = data.tokenize_corpus(corpus, small, tmp_path / "cache")
    assert list(first) == [5, 6, 3, 7, 8, 9, 3]
    corpus.write_text("hello\n\nworld x\n")
    assert list(data.tokenize_corpus(corpus, small, tmp_path / "cache")) == [5, 3, 6, 20, 3]


def test_a_folder_gives_its_text_files_not_its_vocabulary(tmp_path, small, toy_dir):
    """--data FOLDER: its own *.txt files, sorted; a vocab.txt beside the text is skipped with a
    warning (a folder holding a corpus and the vocabulary trained on it); what else it holds is
    named, not read. One line says what was read (files, documents, tokens), or which cache was reused."""
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("hello world\n\nx y\n")
    (folder / "B.TXT").write_text("unaffable\n")
    (folder / "vocab.txt").write_text((toy_dir / "vocab.txt").read_text())
    (folder / "notes.md").write_text("hello\n")
    (folder / ".hidden.txt").write_text("hello\n")
    (folder / "sub" / "c.txt").write_text("hello\n")
    assert data.load_documents(str(folder))["text"] == ["unaffable", "hello world", "x y"]
    said = []
    tokens = data.tokenize_corpus(str(folder), small, tmp_path / "cache", say=said.append)
    assert list(tokens) == [7, 8, 9, 3, 5, 6, 3, 20, 21, 3]
    warning, summary = said
    assert warning.startswith(f"warning: {folder}: skipped vocab.txt: it looks like a vocabulary")
    assert summary.startswith(f"data: {folder}/ (2 *.txt files; not read: notes.md, sub/): 3 documents,")
    assert "tokenized into 10 tokens" in summary
    said.clear()
    data.tokenize_corpus(str(folder), small, tmp_path / "cache", say=said.append)
    assert said[1] == (f"data: {folder}/ (2 *.txt files; not read: notes.md, sub/): 10 tokens, tokenized before: "
                       f"reusing the token cache {data.token_cache_path(str(folder), small, tmp_path / 'cache')}")
    # named in --data, a vocabulary is read, with a warning
    said.clear()
    data.tokenize_corpus(str(folder / "vocab.txt"), small, tmp_path / "cache", say=said.append)
    assert "vocab.txt looks like a vocabulary" in said[0] and "read as training text because --data names it" in said[0]


@pytest.mark.parametrize("files, message", [
    ({"vocab.txt": "VOCAB"}, "holds only a vocabulary (vocab.txt), no text"),
    ({"wiki_00": "text", "wiki_01": "text"}, "has no *.txt files (it holds wiki_00, wiki_01): --data reads a folder's"),
])
def test_a_folder_without_text_is_one_line(tmp_path, toy_dir, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text((toy_dir / "vocab.txt").read_text() if text == "VOCAB" else text)
    with pytest.raises(DataError, match=re.escape(message)):
        data.load_documents(str(tmp_path))


@pytest.mark.parametrize("text, vocabulary", [
    ("SMALL", True),  # BERT's special tokens, one token a line
    ("\n".join(["the", "##s", "##ing", "cat", "##ed"] * 20), True),  # WordPiece pieces without specials
    ("\n".join(["apple", "banana", "cherry", "date", "elder"] * 20), False),  # a word list is text
    ("BERT adds [CLS] and [SEP] to every input.\n[PAD] pads.\nThe end.\nMore text here.\nAnd here.\n", False),
    ("one line\n", False),
])
def test_looks_like_vocabulary(tmp_path, text, vocabulary):
    from conftest import SMALL
    path = tmp_path / "f.txt"
    path.write_text("\n".join(SMALL) + "\n" if text == "SMALL" else text)
    assert data.looks_like_vocabulary(path) == vocabulary


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
    want = np.array(data.tokenize_corpus(corpus, small, tmp_path / "cache"))
    path = data.token_cache_path(corpus, small, tmp_path / "cache")
    damage(path, how)
    capsys.readouterr()
    got = data.tokenize_corpus(corpus, small, tmp_path / "cache")
    assert np.array_equal(got, want) and got.dtype == want.dtype
    assert f"warning: token cache {path} cannot be used: " in capsys.readouterr().err
    assert sorted(p.name for p in path.parent.iterdir()) == [path.stem + ".json", path.name]  # no temp file


def test_a_cache_that_cannot_be_removed_is_one_line(tmp_path, small):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n")
    data.tokenize_corpus(corpus, small, tmp_path / "cache")
    path = data.token_cache_path(corpus, small, tmp_path / "cache")
    damage(path, "a folder")
    with pytest.raises(DataError, match="is a folder, not a file.* nor removed .*remove it and its .json by hand"):
        data.tokenize_corpus(corpus, small, tmp_path / "cache")


def test_a_corpus_rewritten_with_the_same_size_and_time_is_retokenised(tmp_path, small, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n\nx y\n")
    assert list(data.tokenize_corpus(corpus, small, tmp_path / "cache")) == [5, 6, 3, 20, 21, 3]
    st = corpus.stat()
    corpus.write_text("world hello\n\ny x\n")
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and mtime as before: the key is the same
    assert list(data.tokenize_corpus(corpus, small, tmp_path / "cache")) == [6, 5, 3, 21, 20, 3]
    assert f"{corpus} changed since it was built; rebuilding it" in capsys.readouterr().err
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # touched, content unchanged: compared, reused
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
    data.tokenize_corpus(corpus, small, tmp_path / "cache")
    assert "warning" not in capsys.readouterr().err


def test_ids_outside_the_vocabulary_never_reach_the_model(tmp_path, small, capsys):
    """A cache whose manifest agrees with it but that holds an id >= the vocabulary size (made
    with another vocabulary of the same name and size) is rebuilt."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n")
    data.tokenize_corpus(corpus, small, tmp_path / "cache")
    path = data.token_cache_path(corpus, small, tmp_path / "cache")
    forged = np.array([5, 6, 999, 3], dtype=np.uint16)
    np.save(path, forged)
    manifest = json.loads(path.with_suffix(".json").read_text())
    manifest["sha256"], manifest["max_id"] = data.token_digest(np.load(path, mmap_mode="r"))
    manifest["length"] = 4
    path.with_suffix(".json").write_text(json.dumps(manifest))
    tokens = data.tokenize_corpus(corpus, small, tmp_path / "cache")
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
        data.tokenize_corpus(corpus, small, cache)
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
import tokenizer
encode = tokenizer.WordPieceTokenizer.encode
tokenizer.WordPieceTokenizer.encode = lambda self, text: (time.sleep(0.002), encode(self, text))[1]
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


# ----------------------------------------------------------------------------- packing

def copied_blocks(tokens, max_len, cls_id, sep_id):
    """The reference: every block at once, in a (n, max_len) array (what make_blocks did before
    it returned views: a copy of the whole corpus)."""
    n, body = len(tokens) // (max_len - 2), max_len - 2
    out = np.empty((n, max_len), dtype=tokens.dtype)
    out[:, 0], out[:, 1:-1], out[:, -1] = cls_id, np.asarray(tokens[:n * body]).reshape(n, body), sep_id
    return out


def test_make_blocks():
    tokens = np.arange(5, 5 + 1000, dtype=np.uint16)
    tokens[::37] = 3  # document separators
    blocks = data.make_blocks(tokens, 64, cls_id=2, sep_id=3)
    assert len(blocks) == 1000 // 62
    every = blocks[:]
    assert every.shape == (1000 // 62, 64) and every.dtype == np.uint16
    assert (every[:, 0] == 2).all() and (every[:, 1:] != 2).all() and (every[:, -1] == 3).all()
    assert np.array_equal(every[:, 1:-1].ravel(), tokens[:len(blocks) * 62])  # tail dropped
    assert every[3].tolist() == [2, *tokens[3 * 62:4 * 62].tolist(), 3]
    for bad in (7, 513):
        with pytest.raises(DataError, match="max_len"):
            data.make_blocks(tokens, bad, 2, 3)
    with pytest.raises(DataError, match="fewer than one block"):
        data.make_blocks(tokens[:100], 128, 2, 3)
    for bad in (np.array([0, len(blocks)]), [-1]):
        with pytest.raises(IndexError):
            blocks[bad]
    with pytest.raises(IndexError):
        blocks.split(len(blocks) + 1)


@pytest.mark.parametrize("n_tokens, max_len", [(1000, 64), (1001, 8), (62, 64), (5000, 512)])
def test_blocks_equal_the_copied_reference(n_tokens, max_len):
    """Rows gathered per batch, slices and the train / held-out split equal the blocks of the
    full copy element-wise, in any index order (the training loop's permutation)."""
    tokens = np.random.default_rng(0).integers(5, 30_000, n_tokens).astype(np.uint16)
    ref = copied_blocks(tokens, max_len, 2, 3)
    blocks = data.make_blocks(tokens, max_len, 2, 3)
    assert len(blocks) == len(ref) and np.array_equal(blocks[:], ref)
    idx = np.random.default_rng(1).permutation(len(ref))
    assert np.array_equal(blocks[idx], ref[idx]) and np.array_equal(blocks[torch.tensor(idx)], ref[idx])
    n_eval = min(4, len(ref) // 10)
    train, held = blocks.split(len(blocks) - n_eval)
    assert len(train) == len(ref) - n_eval and len(held) == n_eval
    assert np.array_equal(held[:], ref[len(ref) - n_eval:]) and np.array_equal(train[:], ref[:len(ref) - n_eval])
    assert np.array_equal(train[idx[idx < len(train)]], ref[idx[idx < len(train)]])
    assert np.array_equal(held[1:3], ref[len(ref) - n_eval:][1:3])


def test_int32_permutation_is_the_int64_one():
    """taco.py shuffles blocks with an int32 randperm (half the memory): the same order."""
    for n, seed in ((13_788, 0), (1_000_003, 7)):
        g = lambda: torch.Generator().manual_seed(seed)
        assert torch.equal(torch.randperm(n, generator=g(), dtype=torch.int32).long(), torch.randperm(n, generator=g()))


def test_blocks_do_not_copy_the_corpus(tmp_path):
    """A ~100 MB memory-mapped cache: cutting blocks, splitting off the held-out tail and
    gathering a batch allocate only the batch (numpy reports its buffers to tracemalloc);
    the old make_blocks allocated the whole corpus again."""
    import tracemalloc
    path = tmp_path / "tokens.npy"
    tokens = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint16, shape=(50_000_000,))
    for i in range(0, len(tokens), 1 << 22):  # token at position p: p mod 65,536
        tokens[i:i + (1 << 22)] = np.arange(i, min(i + (1 << 22), len(tokens))).astype(np.uint16)
    del tokens
    tokens = np.load(path, mmap_mode="r")
    tracemalloc.start()
    try:
        blocks = data.make_blocks(tokens, 128, 2, 3)
        train, held = blocks.split(len(blocks) - 64)
        rows = np.arange(0, len(train), len(train) // 32)[:32]
        batch = train[rows]
        held[:]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert blocks.tokens is tokens and batch.shape == (32, 128)
    assert np.array_equal(batch[:, 1:-1], (rows[:, None] * 126 + np.arange(126)) % 65_536)
    assert peak < 1_000_000, f"{peak / 1e6:.0f} MB allocated for a 100 MB corpus"


def training_peak_rss(cache_dir, gigabytes, taco_dir=HERE):
    """Peak resident memory (MB, VmHWM) of `python taco.py` run from taco_dir
    for 3 steps of the tiny model on a synthetic token cache of `gigabytes` GB, planted where
    tokenize_corpus looks for the tokens of a one-line stand-in corpus file. taco_dir may be a
    checkout of another commit (`git archive REV | tar -x -C DIR`) whose cache key is the same."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    corpus = cache_dir / f"corpus-{gigabytes}gb.txt"
    if not corpus.exists():
        corpus.write_text("a stand-in: its token cache is synthetic\n")
    tok = data.load_tokenizer("toy", cache_dir)
    path = data.token_cache_path(str(corpus), tok, cache_dir)
    n = int(gigabytes * 1e9) // 2  # uint16 tokens
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tokens = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint16, shape=(n,))
        for i in range(0, n, 1 << 24):
            stop = min(n, i + (1 << 24))
            tokens[i:stop] = np.arange(i, stop) % (tok.vocab_size - 5) + 5
        del tokens
    # The training process reads its own high-water mark: a child's ru_maxrss would start at the
    # RSS of the process that forked it.
    run_taco_then_report = ("import runpy, sys\n"
                            "sys.argv[0] = 'taco.py'\n"
                            "try:\n    runpy.run_path('taco.py', run_name='__main__')\n"
                            "finally:\n    print(*[l for l in open('/proc/self/status') if l.startswith('VmHWM')])")
    result = subprocess.run([sys.executable, "-c", run_taco_then_report, "--data", str(corpus), "--vocab", "toy",
                             "--cache_dir", str(cache_dir), "--steps", "3", "--batch_size", "8",
                             "--max_len", "128", "--eval_blocks", "8", "--eval_every", "3",
                             "--save_every", "3", "--out", str(cache_dir / "run"), "--force"],
                            cwd=taco_dir, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    return int(result.stdout.split("VmHWM:")[-1].split()[0]) / 1024  # kB -> MB


@pytest.mark.skipif("TACO_RSS_GB" not in os.environ,
                    reason="slow (writes GBs): TACO_RSS_GB=1 pytest test_data.py -k peak_rss -s")
def test_training_peak_rss_does_not_grow_with_the_corpus(tmp_path):
    """Training on a TACO_RSS_GB-sized token cache takes no more memory than on a 10 MB one."""
    gigabytes = float(os.environ["TACO_RSS_GB"])
    small, big = training_peak_rss(tmp_path, 0.01), training_peak_rss(tmp_path, gigabytes)
    print(f"\npeak RSS of taco.py: {small:.0f} MB on a 0.01 GB token cache, {big:.0f} MB on {gigabytes} GB")
    assert big - small < 100


def test_toy_blocks(toy_dir):
    tok = data.load_tokenizer("toy", toy_dir.parent)
    blocks = data.make_blocks(data.tokenize_corpus("toy", tok, toy_dir.parent), 128, tok.cls_id, tok.sep_id)[:]
    assert blocks.shape[1] == 128 and (blocks[:, 1:] != tok.cls_id).all() and (blocks != tok.pad_id).all()


# ----------------------------------------------------------------------------- masking

def test_mask_tokens_statistics():
    tok = SimpleNamespace(special_ids=[0, 1, 2, 3, 4], mask_id=4, vocab_size=1000)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (400, 512), generator=g)
    ids[:, 0], ids[:, 100], ids[:, -50:] = 2, 3, 0  # [CLS], [SEP], padding
    original = ids.clone()
    inputs, labels = data.mask_tokens(ids, tok, 0.15, torch.Generator().manual_seed(1))
    assert torch.equal(ids, original) and inputs.dtype == labels.dtype == torch.long
    special = ids < 5
    selected = labels != -100
    assert not selected[special].any() and torch.equal(inputs[special], ids[special])
    assert torch.equal(labels[selected], ids[selected])
    assert abs(selected.sum().item() / (~special).sum().item() - 0.15) < 0.005
    n = selected.sum().item()
    masked = (inputs == 4) & selected
    kept = (inputs == ids) & selected
    randomized = selected & ~masked & ~kept
    assert abs(masked.sum().item() / n - 0.8) < 0.01
    assert abs(kept.sum().item() / n - 0.1) < 0.01  # includes rare random draws of the same id
    assert abs(randomized.sum().item() / n - 0.1) < 0.01
    assert (inputs[randomized] >= 5).all() and torch.equal(inputs[~selected], ids[~selected])
    again = data.mask_tokens(ids, tok, 0.15, torch.Generator().manual_seed(1))
    other = data.mask_tokens(ids, tok, 0.15, torch.Generator().manual_seed(2))
    assert torch.equal(again[0], inputs) and torch.equal(again[1], labels)
    assert not torch.equal(other[1], labels)


def test_mask_tokens_toy_vocab(toy_dir):
    tok = data.load_tokenizer("toy", toy_dir.parent)
    blocks = torch.from_numpy(data.make_blocks(data.tokenize_corpus("toy", tok, toy_dir.parent), 128,
                                               tok.cls_id, tok.sep_id)[:].astype(np.int64))
    inputs, labels = data.mask_tokens(blocks, tok, generator=torch.Generator().manual_seed(0))
    assert (labels[:, 0] == -100).all() and (labels[blocks == tok.sep_id] == -100).all()
    assert not torch.isin(inputs[(labels != -100) & (inputs != tok.mask_id)],
                          torch.tensor(tok.special_ids)).any()


# ----------------------------------------------------------------------------- command line, the paper's data by default

def test_cli_data_error_exits_2(tmp_path):
    result = subprocess.run([sys.executable, str(HERE / "data.py"), "--data", str(tmp_path / "nope.txt"),
                             "--vocab", "toy", "--cache_dir", str(tmp_path)],
                            capture_output=True, text=True, env={**os.environ, "TACO_CACHE": str(tmp_path)})
    assert result.returncode == 2 and "unknown data source" in result.stderr


def test_default_data_follows_the_size():
    import taco
    for size, data_spec, vocab in (("tiny", "toy", "toy"), ("mini", "toy", "toy"),
                                   ("small", "wikipedia,bookcorpus", "bert-base-uncased"),
                                   ("base", "wikipedia,bookcorpus", "bert-base-uncased")):
        args = taco.get_args(["--size", size])
        assert (args.data, args.vocab) == (data_spec, vocab)
    assert taco.get_args(["--size", "base", "--data", "toy"]).vocab == "toy"


@pytest.mark.parametrize("extra, needles", [
    ([], ["could not fetch vocab.txt of 'bert-base-uncased'",  # everything missing, in one message
          "nor can --data wikipedia,bookcorpus be loaded (wikipedia: ", "; bookcorpus: "]),
    (["--vocab", "LOCAL"], ["could not load wikipedia (wikimedia/wikipedia)"]),  # only the corpus
])
def test_headline_command_offline_says_what_to_pass(tmp_path, toy_dir, extra, needles):
    """`taco.py --size small` without the hub: one error line naming all that is missing and
    --data toy, exit 2, and neither a run directory nor a cache written."""
    extra = [str(toy_dir / "vocab.txt") if a == "LOCAL" else a for a in extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "TACO_CACHE": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, str(HERE / "taco.py"), "--size", "small", "--out", str(tmp_path / "run")]
                            + extra, capture_output=True, text=True, env=env, cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and all(n in lines[0] for n in needles) and "--data toy" in lines[0]
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_large_model_on_the_toy_corpus_warns(monkeypatch, capsys):
    """The warning comes before any work: the test stops the run at its first step (loading
    the vocab) from outside."""
    import runs
    import taco

    def stop(*args, **kwargs):
        raise DataError("stopped by the test")
    monkeypatch.setattr(runs.Run, "tokenizer", stop)
    for argv, warns in ((["--size", "small", "--data", "toy"], True), (["--size", "base", "--data", "toy,x.txt"], True),
                        (["--size", "small", "--data", "x.txt"], False), (["--size", "tiny"], False),
                        (["--size", "mini", "--data", "toy"], False)):
        with pytest.raises(SystemExit):
            taco.main(argv)
        err = capsys.readouterr().err
        assert ("warning: --size" in err and "toy corpus" in err) == warns, argv
        assert err.strip().endswith("error: stopped by the test")
