"""GPU readiness without a GPU: every --dtype path of taco.py (fp32, bf16 autocast, fp16
autocast with its GradScaler) and --compile train a few steps on CPU and agree with fp32;
the GPU commands of README and the docstrings parse."""
import dataclasses
import functools
import json
import math
import os
import shlex

import pytest
import torch

import bench
import taco
from model import BertConfig, BertForPreTraining

FAST = ["--steps", "3", "--batch_size", "8", "--max_len", "32", "--negatives", "8", "--save_every", "3",
        "--eval_every", "3", "--eval_blocks", "8", "--log_every", "1"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


def train(out, cache_dir, *extra):
    """taco.main in-process -> (metrics lines, final checkpoint)."""
    taco.main(FAST + ["--cache_dir", cache_dir, "--out", str(out), *extra])
    lines = [json.loads(l) for l in open(out / "metrics.jsonl")]
    return lines, torch.load(out / "ckpt_00000003.pt", weights_only=True)


def test_every_dtype_and_compile_train_and_agree_with_fp32(tmp_path, cache_dir, monkeypatch):
    """Dropout off (set from outside), so that the runs differ only in precision: on CPU the
    fp32 attention dropout draws its masks in another way than SDPA's under autocast.
    --compile runs with the aot_eager backend: Dynamo captures the model and AOTAutograd its
    backward (where a model that does not compile fails) in seconds; Inductor's code generation
    is the slow opt-in test below. Checkpoints of a compiled run hold the plain keys."""
    real = BertConfig.from_size
    monkeypatch.setattr(BertConfig, "from_size", lambda *a, **k: dataclasses.replace(
        real(*a, **k), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    runs = {d: train(tmp_path / d, cache_dir, "--dtype", d) for d in ("fp32", "bf16", "fp16")}
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    runs["compiled"] = train(tmp_path / "compiled", cache_dir, "--compile")
    fp32 = runs["fp32"][0]
    for run, tolerance in (("bf16", 5e-3), ("fp16", 1e-3), ("compiled", 1e-4)):  # seen: 3e-4, 6e-5, 0
        lines, ckpt = runs[run]
        for a, b in zip(fp32, lines):
            for key in ("loss", "mlm", "tc", "eval_mlm_loss"):
                if key in a:
                    assert b[key] == pytest.approx(a[key], abs=tolerance), (run, key, a["step"])
        assert all(v.dtype == torch.float32 for v in ckpt["model"].values())  # fp32 master weights
    for dtype in ("bf16", "fp16"):
        assert json.load(open(tmp_path / dtype / "config.json"))["dtype"] == dtype
    assert runs["fp16"][1]["scaler"]["scale"] == 2.0 ** 16  # GradScaler on, no overflow seen
    assert runs["fp32"][1]["scaler"] == {} and runs["bf16"][1]["scaler"] == {}  # off
    BertForPreTraining(BertConfig(**runs["compiled"][1]["model_config"])).load_state_dict(
        runs["compiled"][1]["model"])  # no "_orig_mod." prefixes


def test_fp16_overflow_is_skipped_by_the_grad_scaler(tmp_path, cache_dir, monkeypatch):
    """A scale so large that the first backward overflows: GradScaler skips that step and backs
    off (the non-finite guard leaves it to the scaler), and training goes on."""
    monkeypatch.setattr(torch.amp, "GradScaler", functools.partial(
        torch.amp.GradScaler, init_scale=2.0 ** 100, backoff_factor=2.0 ** -92))
    lines, ckpt = train(tmp_path / "fp16", cache_dir, "--dtype", "fp16")
    assert ckpt["scaler"]["scale"] == 2.0 ** 8  # backed off once
    assert [l["skipped"] for l in lines] == [0, 0, 0] and all(l["grad_norm"] < 1e3 for l in lines[1:])
    assert not math.isfinite(lines[0]["grad_norm"])  # the overflowing step


@pytest.mark.skipif("TACO_SLOW" not in os.environ, reason="~2 min of Inductor compilation: TACO_SLOW=1")
def test_compile_with_inductor(tmp_path, cache_dir):
    eager, _ = train(tmp_path / "eager", cache_dir)
    compiled, _ = train(tmp_path / "compiled", cache_dir, "--compile")
    for a, b in zip(eager, compiled):
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-3)


def documented_commands():
    """(script, argv, world size) of every `taco.py` / `bench.py` command in README's code
    blocks and in the scripts' docstrings; backslash continuations joined, comments cut."""
    here = os.path.dirname(os.path.abspath(__file__))
    texts = [open(os.path.join(here, "README.md")).read(), taco.__doc__, bench.__doc__]
    commands = []
    for text in texts:
        for line in text.replace("\\\n", " ").splitlines():
            if not line.strip().startswith(("python ", "torchrun ")):
                continue
            words = shlex.split(line.split(" #")[0].replace("$obj", "taco"))  # README's loop over objectives
            for script in ("taco.py", "bench.py"):
                if script in words:
                    launcher = dict(w.lstrip("-").split("=", 1) for w in words[:words.index(script)] if "=" in w)
                    world = int(launcher.get("nproc_per_node", 1)) * int(launcher.get("nnodes", 1))
                    commands.append((script, words[words.index(script) + 1:], world))
    return commands


def test_documented_gpu_commands_parse():
    """The commands README and the docstrings promise (1 GPU, 8 GPUs, 2 nodes, bench) are
    accepted by the argument parsers and taco's checks, with their world size."""
    commands = documented_commands()
    assert sum(s == "taco.py" and w == 8 for s, _, w in commands) >= 2  # torchrun lines found
    assert sum(s == "taco.py" and w == 16 for s, _, w in commands) >= 1
    assert any(s == "bench.py" and "bf16" in argv for s, argv, _ in commands)
    for script, argv, world in commands:
        if script == "taco.py":
            taco.check_args(taco.get_args(argv), world)
        else:
            bench.get_args(argv)
