"""Small pre-training runs for the exercises that train (5, 6, 7) and for the walkthrough: the
tiny BERT (2 layers, 128 wide) on the offline toy corpus, 16 blocks of 64 tokens a step, 300
steps at a high learning rate: about half a minute a run on a laptop CPU.

    from exercises.miniature import pretrain, wordsim
    run_dir, result = pretrain("runs/mini", ["--window", "15"], seed=0)   # -> ctx_score, eval_mlm_loss, wall_s, ...
    rho = wordsim(run_dir)                                              # word similarity of the input embeddings

Runs are named by their flags and seed (runs/mini/taco-seed0, runs/mini/objective_mlm-seed0, ...)
and a finished run with the same settings is reused, so exercises 5, 6 and 7 share their MLM and
TACO runs.
"""
import argparse
import contextlib
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as `python exercises/ex5_ablations.py`: the repository's modules
    sys.path.insert(0, ROOT)

import torch  # noqa: E402

import cli  # noqa: E402
import finetune  # noqa: E402
import taco  # noqa: E402
from data import load_tokenizer  # noqa: E402
from toy import toy_corpus  # noqa: E402

# taco.py flags shared by every miniature run: the tiny recipe with 4x fewer tokens a step, fewer
# steps and twice the learning rate (TACO's contextual score opens within 100 steps)
MINI = {"size": "tiny", "data": "toy", "steps": 300, "warmup": 30, "batch_size": 16, "max_len": 64, "lr": 2e-3,
        "eval_blocks": 32, "eval_every": 50, "save_every": 100_000, "log_every": 10, "keep_last": 1}


def run_name(flags, seed):
    return ("_".join(f.lstrip("-") for f in flags) or "taco") + f"-seed{seed}"


def pretrain(root, flags=(), seed=0, steps=None, quiet=True):
    """taco.py with the MINI settings plus `flags` (e.g. ["--objective", "mlm"]) into root/<name>;
    -> (run directory, its final evaluation: eval_mlm_loss, eval_mlm_acc, ctx_* and wall_s)."""
    settings = {**MINI, "seed": seed}
    if steps:  # the warm-up keeps its tenth
        settings.update(steps=steps, warmup=steps // 10)
    out = os.path.join(root, run_name(flags, seed) + (f"-steps{steps}" if steps else ""))
    argv = [f"--{k}={v}" for k, v in settings.items()] + list(flags) + ["--out", out, "--force"]
    args = taco.get_args(argv)
    taco.check_args(taco.get_args(argv), 1)  # a user mistake (cli.UsageError) surfaces before the quiet part
    done = os.path.join(out, "miniature.json")
    with contextlib.suppress(OSError, ValueError, KeyError):
        with open(done) as f:
            previous = json.load(f)
        want = {k: v for k, v in vars(args).items() if k not in taco.RESUMABLE}
        if previous["args"] == json.loads(json.dumps(want)):
            return out, {**previous["result"], "reused": True}
    for name in os.listdir(out) if os.path.isdir(out) else []:  # results of an older run there
        if name == "miniature.json" or name.startswith("finetune-"):
            os.remove(os.path.join(out, name))
    t0 = time.time()
    with open(os.devnull, "w") as null, contextlib.ExitStack() as hush:
        if quiet:  # taco.py's progress bar and summary line
            hush.enter_context(contextlib.redirect_stderr(null))
            hush.enter_context(contextlib.redirect_stdout(null))
        taco.train(args, hush)  # hush also releases what the run holds (its lock on --out)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        last = [json.loads(line) for line in f if "ctx_score" in line][-1]
    result = {**{k: v for k, v in last.items() if k.startswith(("eval_", "ctx_"))}, "wall_s": time.time() - t0}
    with open(done, "w") as f:
        json.dump({"args": {k: v for k, v in vars(taco.get_args(argv)).items() if k not in taco.RESUMABLE},
                   "result": result}, f)
    return out, result


def finetune_score(run, seed=1, train_pairs=1000, epochs=2, max_len=64, dev_pairs=None):
    """Fine-tune the run's newest checkpoint on the toy pair task (same topic or not: a stand-in for
    GLUE) with `train_pairs` of its 4,000 training pairs; -> dev (accuracy + F1) / 2, in [0, 1],
    on its 1,000 dev pairs (or the first `dev_pairs`). Kept in the run directory and reused.
    After a miniature pre-training it stays at chance (58.3: answering "same topic" always), for
    TACO too: the pair task needs the longer pre-training of study.py."""
    cached = os.path.join(run, f"finetune-seed{seed}-pairs{train_pairs}-epochs{epochs}-len{max_len}-dev{dev_pairs}.json")
    with contextlib.suppress(OSError, ValueError):
        with open(cached) as f:
            return json.load(f)["main"]
    config, weights, vocab, source = finetune.load_pretrained(run)
    tok = load_tokenizer(vocab)
    args = finetune.get_args(["--max_len", str(max_len)])
    for k, v in finetune.ft_recipe(config).items():  # warm-up and weight decay of the toy recipe
        setattr(args, k, v)
    args.rank, args.world, args.source, args.pad_id = 0, 1, source, tok.pad_id
    args.device, args.dtype, args.autocast = torch.device("cpu"), "fp32", contextlib.nullcontext()
    task, glue = finetune.TASKS["toy"], os.path.join(toy_corpus(), "glue")
    data = {}
    for split, n in (("train", train_pairs), ("dev", dev_pairs)):  # cut first, then tokenise
        pairs = finetune.load_split(task, split, glue)
        data[split] = finetune.encode(tok, {k: v[:n] if v is not None else None for k, v in pairs.items()}, max_len)
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        record, _ = finetune.run_one(task, data, config, weights, args, 5e-4, 32, epochs, seed)
    with open(cached, "w") as f:
        json.dump(record["metrics"], f)
    return record["metrics"]["main"]



def wordsim(run_dir):
    """Spearman of the input word embeddings' cosines with the toy corpus's word-pair scores (Fig. 3a):
    same-topic words should be close."""
    import analyze
    encoder, tok, _, _ = analyze.load_encoder(run_dir)
    pairs = analyze.read_pairs(os.path.join(toy_corpus(), "wordsim.txt"))
    return analyze.word_similarity(encoder.embeddings.word.weight.detach(), tok, pairs)["spearman"]


# ----------------------------------------------------------------------------- what the drivers of exercises 5-7 share

def driver_args(description):
    """The command line exercises 5, 6 and 7 share: --seed, --steps, --ft_pairs, --out, --json."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--seed", type=int, default=0, help="pre-training seed (the same for every run)")
    p.add_argument("--steps", type=int, default=None, help="pre-training steps (default: exercises/miniature.py's)")
    p.add_argument("--ft_pairs", type=int, default=0, help="also fine-tune on this many toy pairs (0: no fine-tuning; "
                   "after a miniature pre-training it stays at chance, see exercise 5's page)")
    p.add_argument("--out", default="runs/mini", help="where the runs go, one directory per run and seed "
                   "(finished ones are reused)")
    p.add_argument("--json", default=None, help="also write the results to this file")
    return p


def choose(spec, choices, what):
    """The names in a comma-separated --settings / --variants value; an unknown one is a UsageError."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in names if s not in choices]
    if unknown or not names:
        raise cli.UsageError(f"unknown {what} {', '.join(unknown) or repr(spec)}; choose from {', '.join(choices)}")
    return names
