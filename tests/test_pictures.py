"""pictures.py: the toy topics recovered, each picture a file, what each picture claims, and one-line
errors on the shared error path (cli.errors): matplotlib missing, bad flags, bad --out, bad files."""
import json
import random
import shutil
import sys

import numpy as np
import pytest
import torch

from tools import pictures
import taco
from data import load_tokenizer
from engine.corpus import tokenize_corpus
from engine.toy import TOPICS, _ToyGrammar


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pictures") / "run"
    taco.main(["--steps", "2", "--warmup", "1", "--batch_size", "4", "--max_len", "32", "--eval_blocks", "8",
               "--eval_every", "1", "--log_every", "1", "--out", str(out)])
    return str(out)


@pytest.fixture(scope="module")
def mlm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pictures") / "mlm"
    taco.main(["--objective", "mlm", "--steps", "2", "--warmup", "1", "--batch_size", "4", "--max_len", "32",
               "--eval_blocks", "8", "--eval_every", "1", "--log_every", "1", "--out", str(out)])
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
    out = tmp_path / f"{picture}.png"
    pictures.main([picture, run, run, "--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def drawn(monkeypatch, fn, *args, **kwargs):
    """The matplotlib figure a picture function would save."""
    monkeypatch.setattr(pictures, "save", lambda fig, out, plt: fig)
    return fn(*args, **kwargs)


def test_curves_one_colour_per_run_and_each_objectives_own_loss(run, mlm_run, tmp_path, monkeypatch):
    """Each run keeps its colour in every panel, every panel has a legend, and the auxiliary loss is
    named per objective (a RetroMAE run's 'tc' is its decoder's loss, not TC)."""
    retro = tmp_path / "retro"
    shutil.copytree(run, retro)
    config = json.loads((retro / "config.json").read_text())
    config["args"]["objective"] = "retromae"
    (retro / "config.json").write_text(json.dumps(config))
    fig = drawn(monkeypatch, pictures.curves, [mlm_run, run, str(retro)], "x.png")
    loss, mlm, aux, ctx = fig.axes
    colours = {ax: {line.get_label().split(" (")[0]: line.get_color() for line in ax.get_lines()} for ax in fig.axes}
    assert colours[loss]["run"] == colours[aux]["run"] == colours[ctx]["run"] != colours[loss]["mlm"]
    assert "mlm" not in colours[aux]  # an MLM run has no auxiliary loss
    assert all(ax.get_legend() is not None for ax in fig.axes)
    assert "TC (token alignment)" in aux.get_title() and "RetroMAE decoder" in aux.get_title()
    assert "MLM + λ·TC" in loss.get_title() and "encoder MLM + decoder" in loss.get_title()
    labels = [line.get_label() for line in aux.get_lines()]
    assert "run (taco: TC)" in labels and "retro (retromae: RetroMAE decoder)" in labels


def test_cosine_shows_blocks_and_document_boundaries(run, monkeypatch):
    """Two consecutive blocks, their edge drawn white, document boundaries red, the mean cosines
    within a document, across documents of a block and across blocks in the title."""
    fig = drawn(monkeypatch, pictures.cosine, [run], "x.png", part="g", n_blocks=2)
    ax = fig.axes[0]
    title = ax.get_title()
    assert "cosine of g" in title and "same document:" in title and "other block:" in title
    assert ax.get_images()[0].get_array().shape == (64, 64)  # 2 blocks of 32 tokens
    colours = {line.get_color() for line in ax.get_lines()}
    assert "white" in colours


def test_pca_colours_by_block_and_by_topic(run, monkeypatch):
    fig = drawn(monkeypatch, pictures.pca, [run], "x.png", max_tokens=100)
    titles = [ax.get_title() for ax in fig.axes]
    assert "coloured by block" in titles[0] and "topic" in titles[1]


def test_torn_metrics_line_is_tolerated(run, tmp_path, capsys):
    """A kill during an append leaves a last line cut short: it is dropped with a warning, as checkpoints.read_jsonl promises."""
    torn = tmp_path / "torn"
    shutil.copytree(run, torn)
    with open(torn / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "lo')
    pictures.main(["curves", str(torn), "--out", str(tmp_path / "c.png")])
    assert (tmp_path / "c.png").exists() and "dropped its last line" in capsys.readouterr().err


def one_line_error(argv, capsys):
    """-> (exit code, stderr from its first `error:` line on): the corpus's progress lines before it aside."""
    with pytest.raises(SystemExit) as exit_:
        pictures.main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    return exit_.value.code, lines[next((i for i, line in enumerate(lines) if line.startswith("error: ")), 0):]


def test_without_matplotlib_one_clear_line(run, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    rc, err = one_line_error(["curves", run, "--out", str(tmp_path / "c.png")], capsys)
    assert rc == 2 and err == ["error: pictures.py draws with matplotlib, which is not installed: pip install matplotlib"]


@pytest.fixture(scope="module")
def hf_other_vocab(tmp_path_factory):
    """A Hugging Face folder whose config says 7 more words than its vocab.txt holds."""
    from model import BertConfig, BertForPreTraining
    tok = load_tokenizer("toy")
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size + 7, hidden_size=16, num_hidden_layers=1,
                                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=64))
    path = tmp_path_factory.mktemp("hf")
    model.save_pretrained(str(path), vocab_file=tok.vocab_file)
    return str(path)


@pytest.mark.parametrize("argv, message", [
    (["curves", "{tmp}"], "has no metrics.jsonl"),
    (["cosine", "{tmp}/nothing"], "error: "),
    (["curves", "{run}", "--out", "{tmp}/no/such/dir/c.png"], "does not exist"),
    (["cosine", "{run}", "--block", "-1"], "argument --block: -1 is not in [0, inf)"),
    (["cosine", "{run}", "--block", "100", "--out", "{tmp}/c.png"], "--block 100 --blocks 2: the held-out set has"),
    (["pca", "{run}", "--tokens", "0"], "argument --tokens: 0 is not in [2, inf)"),
    (["curves", "{run}", "--out", "{tmp}/c.xyz"], "c.xyz: name a .png, .pdf, .svg file"),
    (["curves", "{run}", "--out", "{tmp}/curves"], "curves: name a .png, .pdf, .svg file"),
    (["curves", "{run}", "--out", "{tmp}"], "name a .png, .pdf, .svg file"),  # a folder is no picture
    (["cosine", "{hf}", "--out", "{tmp}/c.png"], "word embeddings; put beside it the vocab.txt the model was trained with"),
])
def test_mistakes_are_one_line(run, hf_other_vocab, tmp_path, capsys, argv, message):
    rc, err = one_line_error([a.format(tmp=tmp_path, run=run, hf=hf_other_vocab) for a in argv], capsys)
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not list(tmp_path.glob("*.png"))  # refused before any picture was written


@pytest.mark.parametrize("cache", ["file", "unwritable"])
def test_bad_taco_cache_is_one_line(run, tmp_path, capsys, monkeypatch, cache):
    """TACO_CACHE pointing at a file, or at a folder that cannot be created: one line, exit 2."""
    path = tmp_path / "a_file"
    path.write_text("not a folder")
    monkeypatch.setenv("TACO_CACHE", str(path) if cache == "file" else str(path / "below"))
    rc, err = one_line_error(["cosine", run, "--out", str(tmp_path / "c.png")], capsys)
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and "a_file" in err[0], err


@pytest.mark.parametrize("picture", ["cosine", "pca", "curves"])
def test_every_picture_says_where_at_150_dpi(run, tmp_path, capsys, picture):
    """Every picture alike: the line `wrote PATH`, the file saved at 150 dpi (fit to print); a folder where the
    file would go is refused in one line."""
    from PIL import Image
    out = tmp_path / f"{picture}.png"
    pictures.main([picture, run, "--out", str(out)])
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    assert Image.open(out).info["dpi"][0] == pytest.approx(150, abs=0.1)
    (tmp_path / "taken.png").mkdir()
    rc, err = one_line_error([picture, run, "--out", str(tmp_path / "taken.png")], capsys)
    assert rc == 2 and len(err) == 1 and "is a folder; pass a file" in err[0], err


def test_pca_of_a_vocabulary_without_topic_words_is_one_line(run, tmp_path, capsys):
    """A run whose vocab.txt has none of the toy topics' words (same size, other tokens): one line, exit 2."""
    other = tmp_path / "other"
    shutil.copytree(run, other)
    vocab = (other / "vocab.txt").read_text().splitlines()
    (other / "vocab.txt").write_text("\n".join(w if w.startswith("[") else f"zz{i}" for i, w in enumerate(vocab)) + "\n")
    rc, err = one_line_error(["pca", str(other), "--out", str(tmp_path / "p.png")], capsys)
    errors = [line for line in err if line.startswith("error: ")]  # after the new vocabulary's tokenizing bar
    assert rc == 2 and errors == err[-1:] and "none of the toy topics' words" in err[-1] and "Traceback" not in err, err
