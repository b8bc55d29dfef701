"""Tests for corpus.py: the sources --data reads (text, JSON Lines, Parquet, save_to_disk, folders of them), the
token cache (built once, the same for any number of processes, never reused stale, rebuilt when damaged), and
tokenising that ends with its run: Ctrl-C, kill -9, a full disk (docs/data.md, docs/robustness.md)."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import data
from data import DataError, WordPieceTokenizer
from engine.corpus import cache_path, load_documents, resolve, tokenize_corpus

HERE = Path(__file__).resolve().parents[1]  # the repository root


def documents(spec, tmp_path):
    """The documents of --data `spec`, less the white space around them (which tokenises to nothing)."""
    return [d.strip() for d in load_documents(resolve(spec), tmp_path / "work")["text"]]


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


def test_a_corpus_rewritten_with_the_same_size_and_time_is_retokenised(tmp_path, small):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n")
    assert list(tokenize_corpus(corpus, small, tmp_path / "cache")) == [5, 6, 3]
    st = corpus.stat()
    corpus.write_text("world hello\n")
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert list(tokenize_corpus(corpus, small, tmp_path / "cache")) == [6, 5, 3]


def test_the_array_is_the_same_for_any_num_proc(toy_dir, tmp_path):
    tok = data.load_tokenizer("toy", toy_dir.parent)
    one = tokenize_corpus("toy", tok, tmp_path / "one", num_proc=1)
    three = tokenize_corpus("toy", tok, tmp_path / "three", num_proc=3)
    assert np.array_equal(one, three) and one.dtype == three.dtype
    stem = Path(three.filename).stem  # nothing left on the way but the builders' lock
    assert sorted(p.name for p in (tmp_path / "three" / "tokens").iterdir()) == [stem + s for s in (".json", ".lock", ".npy")]


@pytest.mark.parametrize("how", ["truncated", "zero-byte", "no manifest", "other length", "ids outside the vocabulary"])
def test_a_damaged_token_cache_is_rebuilt(tmp_path, small, capsys, how):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n\nunaffable\n")
    good = list(tokenize_corpus(corpus, small, tmp_path / "cache"))
    path = cache_path(resolve(corpus), small, tmp_path / "cache")
    manifest = json.loads(path.with_suffix(".json").read_text())
    if how in ("truncated", "zero-byte"):
        path.write_bytes(path.read_bytes()[:(0 if how == "zero-byte" else 100)])
    elif how == "no manifest":
        path.with_suffix(".json").unlink()
    else:
        key = "length" if how == "other length" else "max_id"
        path.with_suffix(".json").write_text(json.dumps({**manifest, key: manifest[key] + 1000}))
    said = []
    assert list(tokenize_corpus(corpus, small, tmp_path / "cache", say=said.append)) == good
    assert said[0] == f"warning: token cache {path} cannot be used (cut short or damaged); rebuilding it"


def test_text_files_read_by_paragraph_or_by_line(tmp_path):
    (tmp_path / "paras.txt").write_text("one\ntwo\n\n\nthree\r\n\r\nfour\n")
    (tmp_path / "lines.txt").write_text("a b\nc d\n")
    (tmp_path / "latin1.txt").write_bytes("café\n\nnaïve ok\n".encode("latin-1"))
    assert documents(tmp_path / "paras.txt", tmp_path) == ["one\ntwo", "three", "four"]
    assert documents(tmp_path, tmp_path) == ["caf\ufffd", "na\ufffdve ok", "a b", "c d", "one\ntwo", "three", "four"]


def test_the_corpora_users_have(tmp_path, small):
    """JSON Lines as the hub exports it (id, url, title, text), JSON, Parquet, a folder of Parquet shards and a
    save_to_disk folder: the `text` column, one document per row."""
    import datasets
    rows = {"id": ["1", "2"], "url": ["u1", "u2"], "title": ["t1", "t2"], "text": ["hello world", "unaffable x"]}
    ds = datasets.Dataset.from_dict(rows)
    ds.to_json(tmp_path / "wiki.jsonl")
    ds.to_json(tmp_path / "wiki.json")
    (tmp_path / "shards").mkdir()
    ds.select([0]).to_parquet(tmp_path / "shards" / "train-00000-of-00002.parquet")
    ds.select([1]).to_parquet(tmp_path / "shards" / "train-00001-of-00002.parquet")
    ds.save_to_disk(tmp_path / "saved")
    datasets.DatasetDict({"train": ds}).save_to_disk(tmp_path / "saved_dict")
    for spec in ("wiki.jsonl", "wiki.json", "shards", "saved", "saved_dict"):
        assert documents(tmp_path / spec, tmp_path) == rows["text"], spec
        assert list(tokenize_corpus(tmp_path / spec, small, tmp_path / "cache")) == [5, 6, 3, 7, 8, 9, 20, 3]


@pytest.mark.parametrize("files, message", [
    ({"corpus.csv": "text\nhello\n"}, "taco reads text (.txt), JSON Lines or JSON (.jsonl, .json) and Parquet"),
    ({"wiki_00": "text", "sub/": None}, "has no .txt, .jsonl, .json or .parquet files"),
    ({"rows.jsonl": '{"body": "hello"}\n'}, "has no 'text' column (it has body): rename the column"),
])
def test_what_cannot_be_read_is_one_line(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).mkdir() if name.endswith("/") else (tmp_path / name).write_text(text)
    spec = tmp_path / next(iter(files)) if len(files) == 1 else tmp_path
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        documents(spec, tmp_path)


# taco.py with a tokenizer slowed down (2 ms a document), so that tokenising takes long enough to be stopped.
SLOW_TACO = """
import sys
sys.path.insert(0, {here!r})
import time, data
encode = data.WordPieceTokenizer.encode
data.WordPieceTokenizer.encode = lambda self, text: (time.sleep(0.002), encode(self, text))[1]
import taco
taco.main(sys.argv[1:])
"""


def processes_of(session):
    ps = subprocess.run(["ps", "-eo", "sid=,stat="], capture_output=True, text=True).stdout.splitlines()
    return [l for l in ps if int(l.split()[0]) == session and not l.split()[1].startswith("Z")]


def wait_for(condition, timeout=60):
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["Ctrl-C", "kill -9"])
def test_stopping_a_run_while_it_tokenises_ends_every_process(tmp_path, toy_dir, how):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it): exit 130, one line, no process left.
    kill -9 of taco.py alone: its tokenising processes end with it, and the next run removes what they left."""
    wrapper = tmp_path / "slow_taco.py"
    wrapper.write_text(SLOW_TACO.format(here=str(HERE)))
    cache, out, log = tmp_path / "cache", tmp_path / "run", tmp_path / "stderr"
    cmd = [sys.executable, str(wrapper), "--data", str(toy_dir / "train.txt"), "--vocab", str(toy_dir / "vocab.txt"),
           "--cache_dir", str(cache), "--out", str(out), "--num_proc", "2", "--threads", "1"]
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    # once the processes tokenise (a Ctrl-C while Python runs an at-fork hook, in the first instant, is dropped)
    wait_for(lambda: re.search(r"tokenizing.*[1-9]\d*/3000", log.read_text()))
    if how == "Ctrl-C":
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=120) == 130
        lines = [l for l in log.read_text().replace("\r", "\n").splitlines() if l.strip() and "tokenizing" not in l
                 and not l.startswith(("data:", "Generating"))]
        assert lines == ["interrupted"], lines
    else:
        proc.kill()
        proc.wait()
    wait_for(lambda: not processes_of(proc.pid), timeout=10)
    assert processes_of(proc.pid) == []  # the tokenising processes too
    if how == "Ctrl-C":
        assert not out.exists()
    else:  # what it left: its work folder, gone with the next build
        assert sorted(p.suffix for p in (cache / "tokens").iterdir()) == [".lock", ".work"]
        tok = WordPieceTokenizer(toy_dir / "vocab.txt")
        tokenize_corpus(str(toy_dir / "train.txt"), tok, cache)
        assert sorted(p.suffix for p in (cache / "tokens").iterdir()) == [".json", ".lock", ".npy"]


def test_disk_full_for_real_while_tokenising(tmp_path, toy_dir):
    """The token cache on a full disk (a 10 MB tmpfs; the array needs 16 MB): one line, exit 2, nothing left."""
    from test_runs import on_a_full_disk
    corpus = tmp_path / "big.txt"
    corpus.write_text((toy_dir / "train.txt").read_text() * 20)
    script = ("import os, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
              "print(sorted(os.path.relpath(os.path.join(d, f), {full!r}) for d, _, fs in os.walk({full!r}) "
              "for f in fs)); sys.exit(r.returncode)")
    r = on_a_full_disk(tmp_path, lambda full: [
        sys.executable, "-c", script.format(full=str(full)), sys.executable, str(HERE / "taco.py"), "--data",
        str(corpus), "--vocab", str(toy_dir / "vocab.txt"), "--cache_dir", str(full / "cache"), "--out",
        str(full / "run"), "--num_proc", "2", "--threads", "1"])
    assert r.returncode == 2, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: no space left in ") and "Traceback" not in r.stderr, r.stderr[-3000:]
    left = json.loads(r.stdout.strip().splitlines()[-1].replace("'", '"'))
    assert [os.path.splitext(f)[1] for f in left] == [".lock"]  # nothing but the builders' (empty) lock


@pytest.mark.parametrize("name, content", [("bad.jsonl", '{"text": "hello"}\n{"text": \n'),
                                           ("bad.parquet", "not parquet at all")])
def test_a_file_datasets_cannot_read_is_one_line(tmp_path, name, content):
    (tmp_path / name).write_text(content)
    with pytest.raises(DataError, match=rf"--data: cannot read {tmp_path / name}: "):
        documents(tmp_path / name, tmp_path)


def test_two_runs_building_one_cache_at_once(tmp_path, toy_dir):
    """Two processes tokenising the same corpus side by side (a study's runs): one builds, the other waits for it
    and reuses its cache."""
    code = ("import sys; sys.path.insert(0, {here!r}); from data import WordPieceTokenizer; "
            "from engine.corpus import tokenize_corpus; "
            "print(len(tokenize_corpus({data!r}, WordPieceTokenizer({vocab!r}), {cache!r}, say=print)))")
    code = code.format(here=str(HERE), data=str(toy_dir / "train.txt"), vocab=str(toy_dir / "vocab.txt"),
                       cache=str(tmp_path / "cache"))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    said = "".join(out for out, _ in outs)
    assert said.count("tokenized into 413,903 tokens") == 1 and said.count("reusing the token cache") == 1
