"""Tests for data.py: corpus sources, packing, batches, masking, the paper's data by default."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import data
from engine.corpus import cache_path, resolve, tokenize_corpus
from engine import flags
from data import DataError

HERE = Path(__file__).resolve().parents[1]  # the repository root


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
    path = cache_path(resolve(str(corpus)), tok, cache_dir)
    n = int(gigabytes * 1e9) // 2  # uint16 tokens
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tokens = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint16, shape=(n,))
        for i in range(0, n, 1 << 24):
            stop = min(n, i + (1 << 24))
            tokens[i:stop] = np.arange(i, stop) % (tok.vocab_size - 5) + 5
        del tokens  # a manifest: the cache is used as it is
        path.with_suffix(".json").write_text(json.dumps({"length": n, "dtype": "uint16", "max_id": tok.vocab_size - 1}))
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


def test_training_peak_rss_on_a_corpus_64x_the_toy_one(tmp_path):
    """Peak RSS of a short run stays flat on a token cache 64x the toy corpus's (413,903 tokens): the cache stays
    a memory map, and batches read only their blocks."""
    toy = 413_903 * 2 / 1e9  # GB of uint16 tokens
    small, big = training_peak_rss(tmp_path, toy), training_peak_rss(tmp_path, 64 * toy)
    print(f"\npeak RSS of taco.py: {small:.0f} MB on the toy corpus's size, {big:.0f} MB on 64x ({64 * toy * 1e3:.0f} MB)")
    # made resident, the 53 MB array would add ~50 MB; the peak itself wanders by ~15 MB from run to run
    assert big - small < 64 * toy * 1e3 / 2


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
    blocks = data.make_blocks(tokenize_corpus("toy", tok, toy_dir.parent), 128, tok.cls_id, tok.sep_id)[:]
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
    blocks = torch.from_numpy(data.make_blocks(tokenize_corpus("toy", tok, toy_dir.parent), 128,
                                               tok.cls_id, tok.sep_id)[:].astype(np.int64))
    inputs, labels = data.mask_tokens(blocks, tok, generator=torch.Generator().manual_seed(0))
    assert (labels[:, 0] == -100).all() and (labels[blocks == tok.sep_id] == -100).all()
    assert not torch.isin(inputs[(labels != -100) & (inputs != tok.mask_id)],
                          torch.tensor(tok.special_ids)).any()


# ----------------------------------------------------------------------------- command line, the paper's data by default

def test_cli_data_error_exits_2(tmp_path):
    result = subprocess.run([sys.executable, str(HERE / "tools" / "prepare.py"), "--data", str(tmp_path / "nope.txt"),
                             "--vocab", "toy", "--cache_dir", str(tmp_path)],
                            capture_output=True, text=True, env={**os.environ, "TACO_CACHE": str(tmp_path)})
    assert result.returncode == 2 and "unknown data source" in result.stderr


def test_default_data_follows_the_size():
    for size, data_spec, vocab in (("tiny", "toy", "toy"), ("mini", "toy", "toy"),
                                   ("small", "wikipedia,bookcorpus", "bert-base-uncased"),
                                   ("base", "wikipedia,bookcorpus", "bert-base-uncased")):
        args = flags.get_args(["--size", size])
        assert (args.data, args.vocab) == (data_spec, vocab)
    assert flags.get_args(["--size", "base", "--data", "toy"]).vocab == "toy"


@pytest.mark.parametrize("extra, needle", [
    ([], "could not fetch vocab.txt of 'bert-base-uncased'"),
    (["--vocab", "LOCAL"], "could not load wikipedia (wikimedia/wikipedia)"),  # then the corpus
])
def test_headline_command_offline_says_what_to_pass(tmp_path, toy_dir, extra, needle):
    """`taco.py --size small` without the hub: one error line naming what is missing and --data toy, exit 2, and
    neither a run directory nor a file of the cache written."""
    extra = [str(toy_dir / "vocab.txt") if a == "LOCAL" else a for a in extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "TACO_CACHE": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, str(HERE / "taco.py"), "--size", "small", "--out", str(tmp_path / "run")]
                            + extra, capture_output=True, text=True, env=env, cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and needle in lines[0] and "--data toy" in lines[0]
    files = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.suffix != ".lock"]  # (builders' lock)
    assert not (tmp_path / "run").exists() and not files


def test_large_model_on_the_toy_corpus_warns(monkeypatch, capsys, tmp_path):
    """The warning comes before any work: the test stops the run at its first step (loading
    the vocab) from outside."""
    import taco
    from engine.cli import UsageError

    def stop(*args, **kwargs):
        raise UsageError("stopped by the test")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.txt").write_text("some text\n")
    monkeypatch.setattr(taco, "load_tokenizer", stop)
    for argv, warns in ((["--size", "small", "--data", "toy"], True), (["--size", "base", "--data", "toy,x.txt"], True),
                        (["--size", "small", "--data", "x.txt"], False), (["--size", "tiny"], False),
                        (["--size", "mini", "--data", "toy"], False)):
        with pytest.raises(SystemExit):
            taco.main(argv)
        err = capsys.readouterr().err
        assert ("warning: --size" in err and "toy corpus" in err) == warns, argv
        assert err.strip().endswith("error: stopped by the test")
