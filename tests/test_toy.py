"""Tests for toy.py: the offline toy corpus, its vocabulary and evaluation sets."""
import errno
import os

import numpy as np
import pytest

from engine import cli
import data
from engine import toy
from data import SPECIAL_TOKENS


def test_toy_corpus_deterministic(toy_dir, tmp_path):
    again = toy.toy_corpus(tmp_path)
    files = sorted(p.relative_to(toy_dir) for p in toy_dir.rglob("*") if p.is_file())
    assert [str(f) for f in files] == ["glue/dev.tsv", "glue/test.tsv", "glue/train.tsv",
                                       "train.txt", "vocab.txt", "wordsim.txt"]
    assert all((toy_dir / f).read_bytes() == (again / f).read_bytes() for f in files)
    other = toy.toy_corpus(tmp_path, seed=1)
    assert (other / "train.txt").read_bytes() != (toy_dir / "train.txt").read_bytes()


def test_toy_vocab_and_wordpiece(toy_dir):
    tok = data.load_tokenizer(str(toy_dir / "vocab.txt"))
    assert tok.ids_to_tokens[:5] == list(SPECIAL_TOKENS)
    assert 500 <= tok.vocab_size <= 3000
    assert tok.tokenize("Rabbits chased the mubbleworts.") == [
        "rabbit", "##s", "chase", "##d", "the", "mub", "##ble", "##wort", "##s", "."]
    for nouns, verbs, adjectives in toy.TOPICS.values():  # hyphens mark the intended pieces
        for word in nouns.split():
            first, *rest = word.split("-")
            assert tok.tokenize(word.replace("-", "")) == [first] + ["##" + p for p in rest]
    ids = tok.encode((toy_dir / "train.txt").read_text())
    assert tok.unk_id not in ids


def test_toy_documents_have_topics(toy_dir):
    docs = (toy_dir / "train.txt").read_text().strip().split("\n\n")
    assert 2500 <= len(docs) <= 3500
    assert all(6 <= len(d.split("\n")) <= 15 for d in docs)
    topic_of = {w.replace("-", ""): t for t, lists in toy.TOPICS.items() for w in " ".join(lists).split()}
    purity = []
    for doc in docs[:300]:
        topics = [topic_of[w] for w in doc.lower().replace(".", " ").split() if w in topic_of]
        purity.append(max(map(topics.count, set(topics))) / len(topics))
    assert 0.75 < np.mean(purity) < 0.98  # mostly one topic, but not trivially


def test_toy_glue_and_wordsim(toy_dir):
    for split, n in (("train", 4000), ("dev", 1000), ("test", 1000)):
        lines = (toy_dir / "glue" / f"{split}.tsv").read_text().rstrip("\n").split("\n")
        header, rows = lines[0].split("\t"), [line.split("\t") for line in lines[1:]]
        assert len(rows) == n and all(len(r) == 3 for r in rows)
        if split == "test":
            assert header == ["index", "sentence1", "sentence2"]
        else:
            assert header == ["sentence1", "sentence2", "label"]
            assert sum(r[2] == "1" for r in rows) == sum(r[2] == "0" for r in rows) == n // 2
    train_sentences = set((toy_dir / "train.txt").read_text().split("\n"))
    dev = [line.split("\t")[0] for line in (toy_dir / "glue" / "dev.tsv").read_text().split("\n")[1:200]]
    assert sum(s in train_sentences for s in dev) < 20  # freshly generated, not copied
    tok = data.load_tokenizer(str(toy_dir / "vocab.txt"))
    rows = [line.split("\t") for line in (toy_dir / "wordsim.txt").read_text().splitlines()
            if not line.startswith("#")]
    assert len(rows) >= 100
    for w1, w2, score in rows:
        assert w1 in tok.vocab and w2 in tok.vocab and 0 <= float(score) <= 10


def test_toy_corpus_atomic(tmp_path, monkeypatch):
    def crash(out, rng):
        (out / "train.txt").write_text("half")
        raise RuntimeError("crash")
    monkeypatch.setattr(toy, "_write_toy", crash)
    with pytest.raises(RuntimeError):
        toy.toy_corpus(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_while_generating_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    def no_space(out, rng):
        (out / "train.txt").write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "train.txt"))

    monkeypatch.setattr(toy, "_write_toy", no_space)
    with pytest.raises(SystemExit) as stop, cli.errors():
        toy.toy_corpus(tmp_path)
    assert stop.value.code == 2 and capsys.readouterr().err.startswith(f"error: no space left in {tmp_path}")
    assert os.listdir(tmp_path) == []
