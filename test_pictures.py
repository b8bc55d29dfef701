"""pictures.py: the toy topics recovered, each picture a PNG, one-line errors (matplotlib missing included)."""
import random
import sys

import numpy as np
import pytest

import pictures
import taco
from data import load_tokenizer, tokenize_corpus
from toy import TOPICS, _ToyGrammar


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pictures") / "run"
    taco.main(["--steps", "2", "--warmup", "1", "--batch_size", "4", "--max_len", "32", "--eval_blocks", "8",
               "--eval_every", "1", "--log_every", "1", "--out", str(out)])
    return str(out)


def test_document_topics_match_the_generator():
    """Replay the toy generator's draws (data._write_toy, seed 0) for its first 300 documents and
    compare their true topics with the ones recovered from the tokens."""
    rng, topics = random.Random(0), list(TOPICS)
    grammar, truth = _ToyGrammar(rng), []
    for _ in range(300):
        topic, past = rng.choice(topics), rng.random() < 0.3
        "\n".join(grammar.sentence(topic, past) for _ in range(rng.randint(6, 15)))
        truth.append(topics.index(topic))
    tok = load_tokenizer("toy")
    tokens = np.asarray(tokenize_corpus("toy", tok))
    ends = np.flatnonzero(tokens == tok.sep_id)[:300]
    found = pictures.document_topics(tokens[:ends[-1] + 1], tok)[ends]  # the topic at each document's [SEP]
    assert (found == np.array(truth)).mean() >= 0.98


@pytest.mark.parametrize("picture", ["cosine", "pca", "curves"])
def test_each_picture_is_a_png(run, tmp_path, picture):
    pytest.importorskip("matplotlib")
    out = tmp_path / f"{picture}.png"
    pictures.main([picture, run, run, "--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def one_line_error(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        pictures.main(argv)
    return exit_.value.code, capsys.readouterr().err.strip().splitlines()


def test_without_matplotlib_one_clear_line(run, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    rc, err = one_line_error(["curves", run, "--out", str(tmp_path / "c.png")], capsys)
    assert rc == 2 and err == ["error: pictures.py draws with matplotlib, which is not installed: pip install matplotlib"]


@pytest.mark.parametrize("argv, message", [
    (["curves", "{tmp}"], "has no metrics.jsonl"),
    (["cosine", "{tmp}/nothing"], "error: "),
    (["curves", "{run}", "--out", "{tmp}/no/such/dir/c.png"], "its folder does not exist"),
])
def test_mistakes_are_one_line(run, tmp_path, capsys, argv, message):
    pytest.importorskip("matplotlib")
    rc, err = one_line_error([a.format(tmp=tmp_path, run=run) for a in argv], capsys)
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0]
