"""taco.py end to end: a short run of every objective and ablation, what a run says, --init of a
toy run and of a real model, bad input, every precision and torch.compile, the documented commands."""
import dataclasses
import functools
import json
import math
import os
import re
import shlex
import sys

import pytest
import torch
import torch.nn.functional as F

from tools import bench
from engine import checkpoints, hf
import taco
from engine import flags
from model import BertConfig, BertForPreTraining

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root


@pytest.fixture(autouse=True)
def keep_threads():
    """A run's --threads sets the process's thread count: the next test gets the count it had
    (the session's `straight` run, which later tests resume, was trained with it)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_tiny_mlm_probability_trains_warns_and_evaluates(tmp_path, capsys, quick, run_taco):
    """End to end: every micro-batch empty (0.0001 x 8 x 30 tokens): a warning up front, a run
    that ends (no "non-finite loss"), an evaluation without MLM numbers (no ZeroDivisionError)."""
    out = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "4", "--eval_every", "2", "--eval_blocks", "1", "--mlm_probability", "0.0001",
                             "--out", out]) == 0
    captured = capsys.readouterr()
    assert "warning: --mlm_probability 0.0001 chooses 0.02 tokens per micro-batch of 8 x 32 on average" in captured.err
    assert "done: no eval MLM (masking chose no held-out token), contextual score" in captured.out
    last = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))][-1]
    assert last["mlm"] == 0 and "eval_mlm_loss" not in last and math.isfinite(last["ctx_score"])


# ----------------------------------------------------------------------------- pre-training end to end

def test_short_run_learns_and_writes_its_directory(tmp_path, quick, run_taco):
    out = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "40", "--out", out]) == 0
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["args"]["objective"] == "taco" and config["model_config"]["hidden_size"] == 128
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    assert [l["step"] for l in lines][:3] == [2, 4, 6] and lines[-1]["step"] == 40
    first, last = lines[0], lines[-1]
    assert last["mlm"] < first["mlm"] - 0.5 and last["tc"] < first["tc"] - 0.5
    assert {"eval_mlm_loss", "eval_mlm_acc", "ctx_intra", "ctx_inter", "ctx_score", "tokens_per_s",
            "grad_norm", "lr"} <= last.keys()
    assert os.path.exists(os.path.join(out, "vocab.txt"))
    assert checkpoints.latest_checkpoint(out).endswith("ckpt_00000040.pt")


def test_objectives_and_ablations_run(tmp_path, quick, run_taco, final_weights):
    for extra in (["--objective", "mlm"], ["--tc_positions", "masked", "--predict_all"],
                  ["--freeze_embeddings", "--untie_embeddings", "--tc_positions", "unmasked"]):
        out = str(tmp_path / "_".join(extra))
        assert run_taco(quick + ["--steps", "4", "--out", out] + extra) == 0
        lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
        if "--predict_all" in extra:  # MLM+TP logs both parts, and their sum with TC
            assert all(l["loss"] == pytest.approx(l["mlm"] + l["tp"] + l["tc"], rel=1e-5) for l in lines)
        assert ("tp" in lines[0]) == ("--predict_all" in extra)
    ckpt = final_weights(str(tmp_path / "--freeze_embeddings_--untie_embeddings_--tc_positions_unmasked"), 4)
    torch.manual_seed(0)  # frozen embeddings stay at their (seeded) initialisation
    fresh = BertForPreTraining(BertConfig(**json.load(open(os.path.join(
        str(tmp_path / "--freeze_embeddings_--untie_embeddings_--tc_positions_unmasked"), "config.json")))["model_config"]))
    assert torch.equal(ckpt["bert.embeddings.word.weight"], fresh.bert.embeddings.word.weight)
    assert not torch.equal(ckpt["mlm.decoder.weight"], ckpt["bert.embeddings.word.weight"])


def test_what_a_run_says(tmp_path, capsys, quick, run_taco):
    """The start line says what the run will cost. In a log (stderr not a terminal: no progress
    bar) a line every --log_every steps, a line at each evaluation with the contextual score, and
    once an estimate of the time left."""
    out = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "24", "--out", out]) == 0
    captured = capsys.readouterr()
    assert "taco | tiny (" in captured.out and "| 24 steps x 8 x 32 tokens = 6.1k tokens (" in captured.out
    err = captured.err.splitlines()
    assert "train:" not in captured.err  # no bar
    progress = [l for l in err if l.startswith("step ") and "/24 | " in l]
    assert [l.split(" |")[0] for l in progress] == [f"step {s}/24" for s in range(2, 25, 2)]
    assert re.fullmatch(r"step 2/24 \| loss \S+ mlm \S+ tc \S+ \| lr \S+ \| \S+ tok/s \| .+ left", progress[0])
    evals = [l for l in err if re.match(r"step \d+: held-out MLM loss", l)]
    logged = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    scores = [f"contextual score {r['ctx_score']:.3f} (" for r in logged if "ctx_score" in r]
    assert [l.split(":")[0] for l in evals] == ["step 8", "step 16", "step 24"]
    assert all(score in line for score, line in zip(scores, evals, strict=True))


def test_each_objective_names_its_own_loss(tmp_path, capsys, monkeypatch, quick, run_taco):
    """The loss compute_loss returns third is TACO's TC, TaCL's or RetroMAE's decoder loss: the
    log lines and the bar name it (tc / tacl / dec; none for MLM). metrics.jsonl keeps the key
    "tc" and says which loss it holds ("tc_is")."""
    mlm = str(tmp_path / "mlm")
    for objective, name, extra in (("mlm", None, []), ("retromae", "dec", []), ("tacl", "tacl", ["--init", mlm])):
        out = str(tmp_path / f"{objective}_log")
        assert run_taco(quick + ["--steps", "4", "--objective", objective, "--out", mlm if objective == "mlm" else out]
                        + extra) == 0
        line = [l for l in capsys.readouterr().err.splitlines() if l.startswith("step 4/4 | ")][0]
        assert re.search(r"\| loss \S+ mlm \S+" + (f" {name} \\S+" if name else "") + r" \| lr", line), line
        logged = [json.loads(l) for l in open(os.path.join(out if name else mlm, "metrics.jsonl"))]
        assert {r["tc_is"] for r in logged} == {name} and all("tc" in r for r in logged)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # as on a terminal: the bar
    assert run_taco(quick + ["--steps", "4", "--objective", "tacl", "--init", mlm, "--out", str(tmp_path / "bar")]) == 0
    bar = capsys.readouterr().err.split("\r")[-1]
    assert "train: 100%" in bar and "tacl=" in bar and "tc=" not in bar and "ctx=" in bar


def test_init_continues_from_trained_weights_with_a_fresh_optimizer(tmp_path, capsys, quick, run_taco, final_weights):
    """--init RUN|ckpt|HF dir: weights only. With --freeze_embeddings it is Fig. 4's second
    variant: the *trained* embedding layer stays exactly as the init left it."""
    first, cont = str(tmp_path / "first"), str(tmp_path / "cont")
    assert run_taco(quick + ["--steps", "4", "--out", first]) == 0
    trained = final_weights(first, 4)
    assert run_taco(quick + ["--steps", "2", "--out", cont, "--init", first, "--freeze_embeddings"]) == 0
    ckpt = torch.load(os.path.join(cont, "ckpt_00000002.pt"), weights_only=True)
    for k in ("word", "position", "token_type", "norm"):  # the whole embedding layer, frozen
        for name, v in trained.items():
            if name.startswith(f"bert.embeddings.{k}."):
                assert torch.equal(ckpt["model"][name], v), name
    moved = "bert.layers.0.mlp.fc.weight"
    assert not torch.equal(ckpt["model"][moved], trained[moved])  # the rest trains on
    assert max(s["step"].item() for s in ckpt["optimizer"]["state"].values()) == 2  # a new optimizer
    config = json.load(open(os.path.join(cont, "config.json")))
    assert config["init"].endswith("ckpt_00000004.pt")

    hf = str(tmp_path / "hf")  # a Hugging Face directory works the same way
    model = BertForPreTraining(BertConfig(**json.load(open(os.path.join(first, "config.json")))["model_config"]))
    model.load_state_dict(trained)
    model.save_pretrained(hf, vocab_file=os.path.join(first, "vocab.txt"))
    assert run_taco(quick + ["--steps", "2", "--out", str(tmp_path / "from_hf"), "--init", hf,
                            "--freeze_embeddings"]) == 0
    from_hf = final_weights(str(tmp_path / "from_hf"), 2)
    assert torch.equal(from_hf["bert.embeddings.word.weight"], trained["bert.embeddings.word.weight"])

    capsys.readouterr()
    assert run_taco(quick + ["--out", str(tmp_path / "x"), "--init", str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bigger = tmp_path / "vocab.txt"
    bigger.write_text(open(os.path.join(first, "vocab.txt")).read() + "extra\n")
    assert run_taco(quick + ["--out", str(tmp_path / "y"), "--init", first, "--vocab", str(bigger)]) == 2
    err = capsys.readouterr().err
    assert "has a vocabulary of" in err and "Traceback" not in err and not (tmp_path / "y").exists()


BAD_TACO_ARGS = [
    (["--size", "huge"], "invalid choice"),
    (["--objective", "bert"], "invalid choice"),
    # every numeric flag has a range (cli.int_range / float_range); NaN and inf never pass
    (["--max_len", "1024"], "argument --max_len: 1024 is not in [8, 512]"),
    (["--negatives", "0"], "argument --negatives: 0 is not in [1, inf)"),
    (["--lr", "-1"], "argument --lr: -1 is not in (0, inf)"),
    (["--lr", "nan"], "argument --lr: nan is not in"),
    (["--clip", "-1"], "argument --clip: -1 is not in (0, inf)"),
    (["--eval_blocks", "-1"], "argument --eval_blocks: -1 is not in [0, inf)"),
    (["--tc_weight", "nan"], "argument --tc_weight: nan is not in [0, inf)"),
    (["--temperature", "inf"], "argument --temperature: inf is not in (0, inf)"),
    (["--mlm_probability", "1"], "argument --mlm_probability: 1 is not in (0, 1)"),
    (["--steps", "1.5"], "argument --steps: expected an integer, got '1.5'"),
    (["--seed", "-1"], "argument --seed: -1 is not in [0, 4294967295]"),
    (["--keep_last", "0"], "argument --keep_last: 0 is not in [1, inf)"),
    (["--window", "1"], "argument --window: 1 is not in [2, inf)"),
    (["--device", "gpu"], "--device gpu: expected cpu, cuda or cuda:N"),
    (["--device", "mps"], "only cpu and cuda"),
    *([(["--device", "cuda"], "sees no CUDA device")] if not torch.cuda.is_available() else []),
    (["--negatives", "500"], "exceeds the 224 tokens"),
    (["--device_batch_size", "1"], "--device_batch_size must be >= 2"),
    (["--device_batch_size", "0"], "argument --device_batch_size: 0 is not in [1, inf)"),
    (["--batch_size", "7", "--device_batch_size", "6"], "no divisor of the per-process batch 7 between 2"),
    (["--data", "/nonexistent/corpus.txt", "--vocab", "toy"], "nonexistent"),
    (["--vocab", "/nonexistent/vocab.txt"], "nonexistent"),
    (["--warmup", "100"], "--warmup must be between 0 and --steps"),
    (["--unknown_flag"], "unrecognized arguments"),
]


@pytest.mark.parametrize("batch,world,asked,micro", [
    (1280, 16, 32, 20), (1280, 8, 32, 32), (1280, 64, 32, 20), (1280, 32, 32, 20), (1280, 16, 40, 40),
    (12, 1, 8, 6), (8, 1, 32, 8), (30, 2, 4, 3), (1280, 1, 1000, 640),
])
def test_device_batch_is_the_largest_divisor_up_to_the_flag(batch, world, asked, micro):
    """Any world size works without the flag: the micro-batch rounds down to a divisor of the
    per-process batch, so the global batch is what the command says."""
    args = flags.get_args(["--batch_size", str(batch), "--device_batch_size", str(asked)])
    accum = flags.check_args(args, world)
    assert args.device_batch_size == micro and world * accum * micro == batch


def test_a_rounded_down_micro_batch_is_announced(tmp_path, capsys, quick, run_taco):
    assert run_taco(quick + ["--out", str(tmp_path / "run"), "--batch_size", "12", "--device_batch_size", "8"]) == 0
    out, err = capsys.readouterr()
    assert ("warning: micro-batches of 6 sequences, the largest divisor of the per-process batch 12 up to "
            "--device_batch_size 8; TACO's negatives come from them") in err
    assert "batch 12 = 1 x 2 x 6" in out


@pytest.mark.parametrize("extra,message", BAD_TACO_ARGS)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra, message, quick, run_taco):
    out = tmp_path / "run"
    assert run_taco(quick + ["--out", str(out)] + extra) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("error: ")
    assert not out.exists()  # nothing half-written


def test_bad_files_are_one_line_and_exit_2(tmp_path, capsys, quick, run_taco):
    empty, vocab = tmp_path / "empty.txt", tmp_path / "vocab.txt"
    empty.write_text("")
    vocab.write_text("hello\nworld\n")
    for extra, message in [(["--data", str(empty), "--vocab", "toy"], "is empty"),
                           (["--vocab", str(vocab)], "[PAD]")]:
        assert run_taco(quick + ["--out", str(tmp_path / "run")] + extra) == 2
        err = [l for l in capsys.readouterr().err.splitlines() if l.startswith(("error", "Traceback"))]
        assert len(err) == 1 and message in err[0]
        assert not (tmp_path / "run").exists()
    run = str(tmp_path / "sized")
    assert run_taco(quick + ["--steps", "4", "--out", run]) == 0
    assert run_taco(quick + ["--steps", "4", "--out", run, "--resume", "--force", "--size", "mini"]) == 2
    assert "holds another model or optimizer than this command builds" in capsys.readouterr().err


# ----------------------------------------------------------------------------- continuing a real model

@functools.lru_cache(maxsize=8)  # the init's are computed once
def sentence_vectors(spec, texts):
    """Unit mean-pooled last-layer states of `texts` (64 tokens at most) under the model `spec`."""
    from tools import analyze
    encoder, tok, _, _ = analyze.load_encoder(spec)
    ids = [[tok.cls_id] + tok.encode(t)[:62] + [tok.sep_id] for t in texts]
    batch = torch.tensor([x + [tok.pad_id] * (64 - len(x)) for x in ids])
    mask = batch != tok.pad_id
    with torch.no_grad():
        h, _ = encoder(batch, attention_mask=mask)
    return F.normalize((h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True), dim=-1)


def drift(before, after):
    """(lowest cosine of a text's vector before and after, mean cosine of two texts' vectors after
    minus before): a collapse (every token alike) drives the first down and the second up."""
    off = ~torch.eye(len(before), dtype=torch.bool)
    return (before * after).sum(1).min().item(), ((after @ after.T)[off].mean() - (before @ before.T)[off].mean()).item()


def test_init_picks_a_recipe_that_fits_the_init(tmp_path, minilm, quick, run_taco, capsys):
    """A trained model (a Hugging Face one here) continues with the "continue" recipe, a toy run
    with its own; --size still wins; a far higher --lr is warned of; an init whose vocabulary is
    not the toy corpus's needs --data. The flags are parsed without reading a file: the recipe is
    chosen once the init is loaded (taco.train)."""
    def with_init(argv):
        args = flags.get_args(argv + ["--force"])  # MiniLM has no MLM head
        flags.apply_recipe(args, checkpoints.load_init(args.init))
        return args
    unread = flags.get_args(["--init", str(tmp_path / "not-there-yet.pt")])  # parsing opens nothing
    assert unread.recipe is None and unread.steps is None and unread.vocab == str(tmp_path / "vocab.txt")
    args = with_init(["--init", minilm, "--data", "x.txt"])
    assert (args.recipe, args.lr, args.warmup, args.steps, args.batch_size) == ("continue", 2e-5, 100, 1000, 32)
    assert "Hugging Face model" in args.recipe_why
    assert with_init(["--init", minilm, "--data", "x.txt", "--steps", "100"]).warmup == 10  # the recipe's 10%
    warnings = []
    flags.check_args(with_init(["--init", minilm, "--data", "x.txt", "--lr", "1e-3"]), 1, warnings.append)
    assert len(warnings) == 1 and "50x the continue recipe" in warnings[0] and "collapse" in warnings[0]
    flags.check_args(with_init(["--init", minilm, "--data", "x.txt", "--lr", "1e-4"]), 1, warnings.append)
    assert len(warnings) == 1  # the official recipes' 1e-4 is no mistake
    sized = flags.get_args(["--init", minilm, "--data", "x.txt", "--size", "small", "--force"])
    assert (sized.recipe, sized.lr) == ("small", 1e-4)
    assert run_taco(quick + ["--init", minilm, "--out", str(tmp_path / "x"), "--force"]) == 2
    err = capsys.readouterr().err
    assert "pass --data" in err and err.count("\n") == 1 and not (tmp_path / "x").exists()
    toy = str(tmp_path / "toy")
    assert run_taco(quick + ["--steps", "1", "--out", toy]) == 0
    args = with_init(["--init", toy])  # a toy run continues on the toy corpus with its own recipe
    assert (args.recipe, args.data, args.lr, args.steps) == ("tiny", "toy", 1e-3, 600)


def test_a_model_without_an_mlm_head_is_continued_only_with_force(tmp_path, minilm, real_text, run_taco, capsys):
    """A sentence encoder (MiniLM: no MLM head) continued by MLM trains a fresh head, and the encoder with it, from
    chance: refused in one line, naming --force."""
    assert run_taco(["--init", minilm, "--data", real_text[0], "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --init {minilm} has no MLM head") and "pass --force" in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_an_init_with_fewer_positions_than_max_len_is_one_line(tmp_path, toy_dir, run_taco, capsys):
    hf = str(tmp_path / "hf")
    vocab = str(toy_dir / "vocab.txt")
    size = len(open(vocab).read().split("\n")) - 1
    BertForPreTraining(BertConfig.from_size("tiny", vocab_size=size, max_position_embeddings=64)).save_pretrained(
        hf, vocab_file=vocab)
    assert run_taco(["--init", hf, "--out", str(tmp_path / "x")]) == 2  # the continue recipe's max_len 128
    err = capsys.readouterr().err
    assert err == f"error: --max_len 128: --init {hf} has 64 positions; pass --max_len 64 or less\n"
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("objective", ["mlm", "taco", "tacl", "retromae"])
def test_continuing_a_real_model_with_the_defaults_keeps_it(objective, tmp_path, minilm, real_text, run_taco,
                                                           capsys, final_weights):
    """The journey that destroyed MiniLM under the toy recipe (lr 1e-3; retrieval nDCG@10 0.732 ->
    0.015): each objective on real text with the defaults. A few steps, and a cheap proxy of
    destruction: held-out texts' sentence vectors (a toy lr moves them in two steps: next test).
    Its [CLS] pooler, which no objective trains, comes out as it went in."""
    text, held_out = real_text
    out = str(tmp_path / objective)
    assert run_taco(["--init", minilm, "--data", text, "--objective", objective, "--steps", "2", "--batch_size", "4",
                     "--max_len", "64", "--eval_blocks", "2", "--threads", "1", "--out", out, "--force"]) == 0
    said = capsys.readouterr().out
    assert "| recipe continue (--init is a Hugging Face model: lr 2e-05)" in said
    assert re.search(r"done: eval MLM loss \S+, acc \S+ \(--init's \S+\)", said)  # the fresh head starts from chance
    lowest, spread = drift(sentence_vectors(minilm, held_out), sentence_vectors(out, held_out))
    assert lowest > 0.99 and abs(spread) < 0.02
    pooler = hf.read_weights(minilm)["pooler.dense.weight"]
    assert torch.equal(final_weights(out, 2)["pooler.weight"], pooler)


def test_a_toy_lr_collapses_a_real_model_and_is_warned_of(tmp_path, minilm, real_text, run_taco, capsys):
    """The proxy above sees the damage the issue measured: two steps at lr 1e-3."""
    text, held_out = real_text
    out = str(tmp_path / "toy_lr")
    assert run_taco(["--init", minilm, "--data", text, "--objective", "mlm", "--steps", "2", "--batch_size", "4",
                     "--max_len", "64", "--eval_blocks", "2", "--lr", "1e-3", "--threads", "1", "--out", out, "--force"]) == 0
    assert "warning: --lr 0.001 is 50x the continue recipe's 2e-05" in capsys.readouterr().err
    lowest, spread = drift(sentence_vectors(minilm, held_out), sentence_vectors(out, held_out))
    assert lowest < 0.9 and spread > 0.2  # seen: 0.40 and +0.52


# ----------------------------------------------------------------------------- precisions, torch.compile, the documented commands

THREE_STEPS = ["--steps", "3", "--batch_size", "8", "--max_len", "32", "--negatives", "8", "--save_every", "3",
               "--eval_every", "3", "--eval_blocks", "8", "--log_every", "1"]


def train(out, cache_dir, *extra):
    """taco.main in-process, three steps -> (metrics lines, final checkpoint)."""
    taco.main(THREE_STEPS + ["--cache_dir", cache_dir, "--out", str(out), *extra])
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
    texts = [open(os.path.join(HERE, "README.md")).read(), taco.__doc__, bench.__doc__]
    commands = []
    for text in texts:
        for line in text.replace("\\\n", " ").splitlines():
            if not line.strip().startswith(("python ", "torchrun ")):
                continue
            words = shlex.split(line.split(" #")[0].replace("$obj", "taco"))  # README's loop over objectives
            for script in ("taco.py", "tools/bench.py"):
                if script in words:
                    launcher = dict(w.lstrip("-").split("=", 1) for w in words[:words.index(script)] if "=" in w)
                    world = int(launcher.get("nproc_per_node", 1)) * int(launcher.get("nnodes", 1))
                    commands.append((script, words[words.index(script) + 1:], world))
    return commands


def test_documented_gpu_commands_parse(tmp_path):
    """The commands README and the docstrings promise (1 GPU, 8 GPUs, 2 nodes, bench) are
    accepted by the argument parsers and taco's checks, with their world size. An `--init
    path/to/...` stands for a Hugging Face folder (its recipe depends on what it holds)."""
    hf, vocab = str(tmp_path / "hf"), tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(27)]) + "\n")
    BertForPreTraining(BertConfig.from_size("tiny", vocab_size=32)).save_pretrained(hf, vocab_file=str(vocab))
    commands = [(s, [hf if a.startswith("path/to/") else a for a in argv], w) for s, argv, w in documented_commands()]
    assert sum(s == "taco.py" and w == 8 for s, _, w in commands) >= 2  # torchrun lines found
    assert sum(s == "taco.py" and w == 16 for s, _, w in commands) >= 1
    assert any(s == "tools/bench.py" and "bf16" in argv for s, argv, _ in commands)
    for script, argv, world in commands:
        if script == "taco.py":
            args = flags.get_args(argv)
            flags.apply_recipe(args, args.init and checkpoints.load_init(args.init))  # an --init's, once loaded
            flags.check_args(args, world)
        else:
            bench.get_args(argv)


def test_paper_sizes_save_and_evaluate_under_one_percent_of_the_time():
    """--size small..large: a checkpoint every 25,000 steps, an evaluation every 10,000 (at a base
    step of 0.05 s on 8 GPUs, a save of 8.7 s and an evaluation of 1 s: 0.70% + 0.20%); tiny and
    mini keep 200 / 100 (the default run's numbers); a flag still wins."""
    for size in ("small", "medium", "base", "large"):
        args = flags.get_args(["--size", size])
        assert (args.save_every, args.eval_every) == (25_000, 10_000)
        assert 8.7 / (args.save_every * 0.05) + 1.0 / (args.eval_every * 0.05) < 0.01
    for size in ("tiny", "mini"):
        assert (flags.get_args(["--size", size]).save_every, flags.get_args(["--size", size]).eval_every) == (200, 100)
    assert flags.get_args(["--size", "base", "--save_every", "500"]).save_every == 500


def test_the_loop_reads_the_device_at_most_twice_a_step(tmp_path, monkeypatch, quick, run_taco):
    """The loop's own host syncs (Tensor.tolist / .item called from runs.py or train()): the agreed
    check of every step (finite, stop signals), and the losses only on a step that logs them."""
    calls = []
    for name in ("tolist", "item"):
        real = getattr(torch.Tensor, name)

        def counted(self, *a, _real=real, **k):
            caller = sys._getframe(1).f_code
            if caller.co_filename.endswith(os.path.join("engine", "runs.py")) or caller.co_name == "train":
                calls.append(caller.co_name)
            return _real(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, counted)
    assert run_taco(quick + ["--steps", "8", "--log_every", "4", "--eval_every", "100", "--save_every", "100",
                             "--out", str(tmp_path / "run")]) == 0
    assert calls.count("agree") == 8 and calls.count("log") == 2 and len(calls) == 10, calls


def test_the_slurm_script_runs_a_command_taco_accepts(tmp_path):
    """docs/reproduce.md's Slurm script, run by bash with srun, scontrol and torchrun standing in: the torchrun line
    it makes is accepted by taco's parser and checks for 16 processes, and a requeued job (a checkpoint in OUT) resumes."""
    import subprocess
    text = open(os.path.join(HERE, "docs", "reproduce.md")).read()
    script = text.split("## On a cluster")[1].split("```bash\n")[1].split("```")[0]
    stand_ins = tmp_path / "bin"
    stand_ins.mkdir()
    for name, body in {"scontrol": 'printf "node-a\\nnode-b\\n"', "srun": '"$@"',
                       "torchrun": 'printf "%s\\n" "$@" > "$CALLS"'}.items():
        (stand_ins / name).write_text(f"#!/bin/sh\n{body}\n")
        (stand_ins / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{stand_ins}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node-[a-b]",
           "SLURM_NNODES": "2", "SLURM_JOB_ID": "7", "CALLS": str(tmp_path / "calls")}
    for requeued in (False, True):
        if requeued:  # the first job saved a checkpoint before it was preempted
            (tmp_path / "runs" / "base").mkdir(parents=True)
            (tmp_path / "runs" / "base" / "ckpt_00025000.pt").write_bytes(b"")
        subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, check=True)
        argv = (tmp_path / "calls").read_text().splitlines()
        launcher, taco_argv = argv[:argv.index("taco.py")], argv[argv.index("taco.py") + 1:]
        assert "--rdzv_endpoint=node-a:29500" in launcher and "--nnodes=2" in launcher
        args = flags.get_args(taco_argv)
        flags.check_args(args, 16)
        assert (args.size, args.resume, args.device_batch_size) == ("base", requeued, 20)  # 80 a process: 4 x 20


def test_log_sends_what_metrics_jsonl_records(tmp_path, monkeypatch, quick, run_taco, capsys):
    """--log tensorboard: the numbers of metrics.jsonl, step by step (a stand-in for torch.utils.tensorboard's
    SummaryWriter); a package that is not installed is one line before anything is written."""
    import types
    sent = []

    class Writer:
        def __init__(self, folder):
            sent.append(("folder", folder))

        def add_scalar(self, name, value, step):
            sent.append((step, name, value))

        def flush(self):
            pass
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=Writer))
    out = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "4", "--out", out, "--log", "tensorboard"]) == 0
    logged = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    assert sent[0] == ("folder", os.path.join(out, "tensorboard"))
    assert set(sent[1:]) == {(r["step"], k, v) for r in logged for k, v in r.items() if k not in ("step", "time", "tc_is")}
    assert all(r["time"] > 1e9 for r in logged)  # wall time on every line
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    assert run_taco(quick + ["--out", str(tmp_path / "w"), "--log", "wandb"]) == 2
    assert capsys.readouterr().err.strip().endswith("error: --log wandb needs its package: pip install wandb")
    assert not (tmp_path / "w").exists()


def test_config_records_what_made_the_run(straight):
    made_by = json.load(open(os.path.join(straight, "config.json")))["made_by"]
    assert set(made_by) == {"commit", "torch", "cuda", "python", "host", "devices"} and made_by["torch"] == torch.__version__
    assert made_by["commit"] is None or re.fullmatch(r"[0-9a-f]{40}\+?", made_by["commit"])
