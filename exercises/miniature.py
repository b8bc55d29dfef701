"""Small pre-training runs for the exercises that train (5, 6, 7) and for the walkthrough: the
tiny BERT (2 layers, 128 wide) on the offline toy corpus, 16 blocks of 64 tokens a step, 300
steps at a high learning rate: about 15 CPU-seconds a run with one thread.

    from exercises.miniature import pretrain, pretrain_all, wordsim
    run_dir, result = pretrain("runs/mini", ["--window", "15"], seed=0)   # -> ctx_score, eval_mlm_loss, wall_s, cpu_s, ...
    done = pretrain_all("runs/mini", [([], 0), (["--objective", "mlm"], 0)])  # side by side, one thread each
    rho = wordsim(run_dir)                                              # word similarity of the input embeddings

Every run uses ONE thread: on a small model PyTorch's default (all cores, in every process)
makes the runs slower on a busy machine, not faster, and its numbers depend on the thread count.
Several runs go side by side instead, one process each, as many as the machine has free cores
(pretrain_all, the drivers' --jobs). A run's numbers are the same whichever way it ran.

Runs are named by their flags and seed (runs/mini/taco-seed0, runs/mini/objective_mlm-seed0, ...)
and a finished run with the same settings is reused, so exercises 5, 6 and 7 and the walkthrough
share their MLM and TACO runs.
"""
import argparse
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as `python exercises/ex5_ablations.py`: the repository's modules
    sys.path.insert(0, ROOT)

import engine  # noqa: E402  (first, before torch loads: idle CPU threads sleep; engine/__init__.py)
import torch  # noqa: E402

from engine import cli  # noqa: E402
from engine.flags import RESUMABLE, check_args, get_args  # noqa: E402
from engine import checkpoints  # noqa: E402
import finetune  # noqa: E402
from engine import finetuning  # noqa: E402
import taco  # noqa: E402
from data import load_tokenizer  # noqa: E402
from engine.evalsets import read_pairs  # noqa: E402
from engine.toy import toy_corpus  # noqa: E402

# taco.py flags shared by every miniature run: the tiny recipe with 4x fewer tokens a step, fewer
# steps and twice the learning rate (TACO's contextual score opens within 100 steps)
MINI = {"size": "tiny", "data": "toy", "steps": 300, "warmup": 30, "batch_size": 16, "max_len": 64, "lr": 2e-3,
        "eval_blocks": 32, "eval_every": 50, "save_every": 100_000, "log_every": 10, "keep_last": 1}


def run_name(flags, seed, steps=None):
    steps = "" if steps in (None, MINI["steps"]) else f"-steps{steps}"
    return ("_".join(f.lstrip("-") for f in flags) or "taco") + f"-seed{seed}" + steps


@contextlib.contextmanager
def threads(n):
    """torch uses n threads inside the block (then what it used before)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def finished(root, flags=(), seed=0, steps=None):
    """(run directory, its result) if that run is already done with these very settings, else (run directory, None)."""
    out, argv = _settings(root, flags, seed, steps)
    with contextlib.suppress(OSError, ValueError, KeyError):
        with open(os.path.join(out, "miniature.json")) as f:
            previous = json.load(f)
        want = {k: v for k, v in vars(get_args(argv)).items() if k not in RESUMABLE}
        if previous["args"] == json.loads(json.dumps(want)):
            return out, {**previous["result"], "reused": True}
    return out, None


def _settings(root, flags, seed, steps):
    settings = {**MINI, "seed": seed}
    if steps:  # the warm-up keeps its tenth
        settings.update(steps=steps, warmup=steps // 10)
    out = os.path.join(root, run_name(flags, seed, steps))
    return out, [f"--{k}={v}" for k, v in settings.items()] + list(flags) + ["--out", out, "--force"]


def pretrain(root, flags=(), seed=0, steps=None, quiet=True, n_threads=1):
    """taco.py with the MINI settings plus `flags` (e.g. ["--objective", "mlm"]) into root/<name>,
    with `n_threads` threads; -> (run directory, its final evaluation: eval_mlm_loss, eval_mlm_acc,
    ctx_*, wall_s and cpu_s, the run's own seconds; "reused": True if it was done before)."""
    out, argv = _settings(root, flags, seed, steps)
    check_args(get_args(argv), 1)  # a user mistake (cli.UsageError) surfaces before the quiet part
    out, done = finished(root, flags, seed, steps)
    if done:
        return out, done
    for name in os.listdir(out) if os.path.isdir(out) else []:  # results of an older run there
        if name == "miniature.json" or name.startswith("finetune-"):
            os.remove(os.path.join(out, name))
    t0, c0 = time.time(), time.process_time()
    with open(os.devnull, "w") as null, contextlib.ExitStack() as hush, threads(n_threads):
        if quiet:  # taco.py's progress bar and summary line
            hush.enter_context(contextlib.redirect_stderr(null))
            hush.enter_context(contextlib.redirect_stdout(null))
        taco.train(get_args(argv))  # the run releases what it holds (its lock on --out) on any exit
    with open(os.path.join(out, "metrics.jsonl")) as f:
        last = [json.loads(line) for line in f if "ctx_score" in line][-1]
    result = {**{k: v for k, v in last.items() if k.startswith(("eval_", "ctx_"))},
              "wall_s": time.time() - t0, "cpu_s": time.process_time() - c0, "threads": n_threads}
    checkpoints.write_json(os.path.join(out, "miniature.json"), {
        "args": {k: v for k, v in vars(get_args(argv)).items() if k not in RESUMABLE}, "result": result})
    return out, result


def commit():
    """The checked-out commit (short), "+ uncommitted changes" if tracked files differ from it."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    try:
        head = git("rev-parse", "--short", "HEAD")
        return head + (" + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def cpu_name():
    """The processor's model name: one thread's float sums, and so the runs' last digits, depend on it."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def free_cores():
    """Cores this process may use, less the machine's load (1-minute average); at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # (macOS)
    return max(1, min(cores, round(cores - os.getloadavg()[0])))


def _one_thread():  # each worker process of pretrain_all, at its start
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)


def pretrain_all(root, specs, steps=None, jobs=0, log=print):
    """Pre-train every (flags, seed) of `specs` into root, reusing finished ones; the others side by
    side in `jobs` processes of one thread each (0: as many as free_cores()). -> [(run dir, result)]
    in the order of `specs`. Every run checks its flags first: a mistake stops all before any work."""
    for flags, seed in specs:
        check_args(get_args(_settings(root, flags, seed, steps)[1]), 1)
    results = {i: finished(root, flags, seed, steps) for i, (flags, seed) in enumerate(specs)}
    todo = [i for i, (_, r) in results.items() if r is None]
    jobs = min(jobs or free_cores(), len(todo)) if todo else 0
    if todo:
        log(f"pre-training {len(todo)} miniature run(s) of {len(specs)} ({len(specs) - len(todo)} reused), "
            f"{jobs} side by side, 1 thread each ...")
    if jobs == 1:  # no pool: the same run in this process
        for i in todo:
            results[i] = pretrain(root, *specs[i], steps)
            log(f"  {os.path.basename(results[i][0])}: {results[i][1]['wall_s']:.0f} s")
    elif jobs > 1:
        spawn = multiprocessing.get_context("spawn")  # a fresh interpreter per worker: safe with torch's threads
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=spawn, initializer=_one_thread) as pool:
            futures = {pool.submit(pretrain, root, *specs[i], steps): i for i in todo}
            for future in concurrent.futures.as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                log(f"  {os.path.basename(results[i][0])}: {results[i][1]['wall_s']:.0f} s")
    return [results[i] for i in range(len(specs))]


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
    args = finetuning.get_args(["--max_len", str(max_len)])
    for k, v in finetuning.ft_recipe(config).items():  # warm-up and weight decay of the toy recipe
        setattr(args, k, v)
    args.rank, args.world, args.source, args.pad_id = 0, 1, source, tok.pad_id
    args.device, args.dtype, args.autocast = torch.device("cpu"), "fp32", contextlib.nullcontext()
    task, glue = finetune.TASKS["toy"], os.path.join(toy_corpus(), "glue")
    data = {}
    for split, n in (("train", train_pairs), ("dev", dev_pairs)):  # cut first, then tokenise
        pairs = finetune.load_split(task, split, glue)
        data[split] = finetune.encode(tok, {k: v[:n] if v is not None else None for k, v in pairs.items()}, max_len)
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null), threads(1):
        record, _ = finetune.run_one(task, data, config, weights, args, 5e-4, 32, epochs, seed)
    with open(cached, "w") as f:
        json.dump(record["metrics"], f)
    return record["metrics"]["main"]



def wordsim(run_dir):
    """Spearman of the input word embeddings' cosines with the toy corpus's word-pair scores (Fig. 3a):
    same-topic words should be close."""
    from tools import analyze
    encoder, tok, _, _ = analyze.load_encoder(run_dir)
    pairs = read_pairs(os.path.join(toy_corpus(), "wordsim.txt"))
    with threads(1):
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
    p.add_argument("--jobs", type=int, default=0, help="runs side by side, one thread each (0: as many as the "
                   "machine has free cores, from its load average)")
    return p


def choose(spec, choices, what):
    """The names in a comma-separated --settings / --variants value; an unknown one is a UsageError."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in names if s not in choices]
    if unknown or not names:
        raise cli.UsageError(f"unknown {what} {', '.join(unknown) or repr(spec)}; choose from {', '.join(choices)}")
    return names
