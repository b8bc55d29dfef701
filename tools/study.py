"""MLM vs TACO (and the paper's ablations) under one seed, data and budget, measured over training.

Every objective is pre-trained by `taco.py` (a subprocess) with the same flags, --jobs runs at a
time (default: the idle CPU cores, one thread each); then every saved checkpoint and the shared
random init (step 0) are measured, --jobs at a time: analyze.py's probes, and the toy pair task
fine-tuned once per fine-tuning seed with finetune.py's loop, scored on its 1,000 dev pairs and
on 5,000 held-out pairs (toy.toy_pair_eval: the steadier score). Output: OUT/study.json,
OUT/table.md (printed) and a PNG; several pre-training seeds go into OUT/seed<S>, compared in
OUT/table.md (tools/study_tables.py). study.py never replaces a run it did not create (--force
does); stopped by a signal, it stops its taco.py runs (each saves a checkpoint), and the same
command resumes them and reuses every finished seed.

    python tools/study.py                                          # MLM vs TACO, tiny, toy corpus, CPU
    python tools/study.py --seed 0,1,2,3,4,5,6,7 --mlm_ft_every 300 --out runs/study8   # eight pre-training seeds
    python tools/study.py --variants mlm,taco,taco_masked,mlm_tp,mlm_frozen,taco_frozen --out runs/ablations
    python tools/study.py --size small --data wikipedia,bookcorpus --steps 250000 --save_every 25000 \\
        --launcher "torchrun --standalone --nproc_per_node=8" --pairs wordsim353.tsv --ft_max_len 128
    python tools/study.py --tacl          # TaCL's miniature: MLM, then TaCL vs more MLM from it (docs/tacl.md)
    python tools/study.py --retromae --out runs/retromae_study     # MLM vs TACO vs RetroMAE (docs/retromae.md)
"""
import argparse
import contextlib
import itertools
import json
import multiprocessing
import os
import resource
import shlex
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # python tools/NAME.py: the root's modules
from engine import cli
cli.start(__name__)  # first, before torch loads: how idle CPU threads wait; Ctrl-C / SIGTERM / SIGHUP from now on
import numpy as np
import torch

from tools import analyze
from tools.study_tables import format_retromae_table, format_seeds_table, format_table, format_tacl_table, plot
import finetune
from engine import checkpoints, finetuning, flags, runs
from engine.cli import UsageError, float_range, int_range
from data import load_tokenizer
from engine.evalsets import read_beir, read_pairs, read_sts
from model import BertConfig, BertForPreTraining
from engine.toy import toy_corpus, toy_pair_eval, toy_sentence_eval

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = {  # name -> taco.py flags; all else is shared
    "mlm": ["--objective", "mlm"],
    "taco": ["--objective", "taco"],
    "taco_masked": ["--objective", "taco", "--tc_positions", "masked"],  # TC on masked positions only
    "mlm_tp": ["--objective", "mlm", "--predict_all"],  # MLM + token prediction at every position
    "mlm_frozen": ["--objective", "mlm", "--freeze_embeddings"],  # Fig. 4
    "taco_frozen": ["--objective", "taco", "--freeze_embeddings"],
    "mlm_untied": ["--objective", "mlm", "--untie_embeddings"],  # Appendix B
    "taco_untied": ["--objective", "taco", "--untie_embeddings"],
    "retromae": ["--objective", "retromae"],  # whole-word MLM at 30% + RetroMAE's decoder loss
}
RETROMAE_VARIANTS = ("mlm", "taco", "retromae")
# --taco_args may set what every objective shares (--warmup, --negatives, ...), but neither what
# makes a variant what it is (else the "taco" rows could be an MLM run) nor what study.py sets.
VARIANT_KEYS = sorted({f[2:] for flags in VARIANTS.values() for f in flags if f.startswith("--")} | {"init"})
STUDY_KEYS = ("size", "data", "steps", "max_len", "batch_size", "lr", "seed", "device", "cache_dir", "threads",
              "out", "save_every", "eval_every", "keep_last", "resume", "force")
MARKER = ".made_by_study"  # in each run folder study.py creates: the runs it may resume or replace


# ----------------------------------------------------------------------------- pre-training

def taco_argv(name, args, seed, out, extra=(), user=None):
    """taco.py's flags for one variant: its VARIANTS flags, the shared settings, --taco_args
    (or `user`), what study.py needs (a checkpoint every --save_every steps, all kept), `extra`."""
    shared = {k: getattr(args, k) for k in ("size", "data", "steps", "max_len", "batch_size", "lr", "device",
                                            "cache_dir")}
    shared.update(steps=args.steps or None, seed=seed)  # steps 0: the recipe's
    user = shlex.split(args.taco_args) if user is None else user
    return (VARIANTS.get(name, []) + [f"--{k}={v}" for k, v in shared.items() if v is not None] + list(user)
            + ["--save_every", str(args.save_every), "--eval_every", str(args.save_every), "--keep_last", "1000000",
               "--out", out, *extra])


def check_taco_args(args, names):
    """Refuse --taco_args that would change what a variant is or what study.py sets: per variant
    and seed, the settings with the user's flags last (where they would win) against without."""
    try:
        user = shlex.split(args.taco_args)
        flags.get_args(user)  # taco.py's parser: reads no file; a mistake is a UsageError
    except UsageError as err:  # name the flag the mistake is in
        raise UsageError(f"--taco_args: {err}") from None
    except ValueError as err:  # shlex's: an unclosed quote
        raise UsageError(f"--taco_args {args.taco_args!r}: {err}") from None
    for name, seed in itertools.product(names, args.seed):
        alone = vars(flags.get_args(taco_argv(name, args, seed, "OUT", user=[])))
        mixed = vars(flags.get_args(taco_argv(name, args, seed, "OUT", user=[]) + user))
        k = next((k for k in (*VARIANT_KEYS, *STUDY_KEYS) if mixed[k] != alone[k]), None)
        if k in VARIANT_KEYS:
            raise UsageError(f"--taco_args sets --{k}, which decides what a variant is (here {name!r}); "
                             f"choose objectives with --variants ({', '.join(VARIANTS)})")
        if k:
            raise UsageError(f"--taco_args sets --{k}, which study.py sets itself"
                             + (f"; pass --{k} to study.py" if k in vars(args) else ""))
        if mixed["objective"] == "taco" and mixed["tc_weight"] == 0:
            raise UsageError(f"--taco_args --tc_weight 0 makes {name!r} an MLM run; leave --tc_weight out")


def plan_run(name, args, seed, out_dir, extra=(), init=None):
    """One variant's run in out_dir/name -> (run dir, taco.py flags, or None when it holds this run
    finished; a continuation's must have started from `init`'s newest checkpoint). study.py resumes
    or replaces only runs it created (MARKER); another in the way is an error unless --force."""
    out = os.path.join(out_dir, name)
    argv = taco_argv(name, args, seed, out, extra)
    want = {k: v for k, v in vars(flags.get_args(argv)).items() if k not in flags.RESUMABLE}
    config = {}
    with contextlib.suppress(OSError, ValueError):
        config = checkpoints.read_json(os.path.join(out, "config.json"))  # an object, or it raises
    have = config.get("args")
    same = isinstance(have, dict) and all(have.get(k) == v for k, v in want.items())
    if same and init is not None:
        start, same = checkpoints.latest_checkpoint(init), False  # unless both hashes are read and agree
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            same = start is not None and (config.get("init") or {}).get("sha256") == \
                checkpoints.read_json(start[:-3] + ".json")["sha256"]
    last = checkpoints.latest_checkpoint(out) if same else None
    if last and os.path.basename(last) == f"ckpt_{want['steps']:08d}.pt":
        return out, None
    if not os.path.exists(os.path.join(out, "config.json")) and not checkpoints.list_checkpoints(out):
        return out, argv  # nothing there yet
    if os.path.exists(os.path.join(out, MARKER)):  # ours: go on where it stopped, or start again
        return out, argv + (["--resume"] if last else ["--force"])
    if args.force:
        return out, argv + ["--force"]
    raise UsageError(f"{out} holds a run that study.py did not create{'' if same else ' (other settings)'}; "
                     f"pass --force to replace it, or choose another --out")


def pretrain_all(plans, args):
    """Run the planned taco.py commands, --jobs at a time, each logging to RUN/pretrain.log ->
    {run dir: (wall s, CPU s)}. When one fails, or the study is stopped, the others are stopped."""
    launcher = shlex.split(args.launcher) if args.launcher else [sys.executable]
    todo, running, times = [(out, argv) for out, argv in plans if argv is not None], {}, {}
    for out in [out for out, argv in plans if argv is None]:
        print(f"{os.path.basename(out)}: reusing the finished run in {out}")
    try:
        while todo or running:
            while todo and len(running) < args.jobs:
                out, argv = todo.pop(0)
                os.makedirs(out, exist_ok=True)
                open(os.path.join(out, MARKER), "a").close()
                cmd = [*launcher, os.path.join(ROOT, "taco.py"), *argv]
                cmd += ["--threads", str(args.threads)] if args.threads else []
                with open(os.path.join(out, "pretrain.log"), "a") as log:
                    log.write(f"$ {shlex.join(cmd)}\n")
                    log.flush()
                    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
                running[proc.pid] = (out, proc, time.time())
                print(f"pre-training {out} (log: {log.name})", flush=True)
            time.sleep(0.2)
            for pid, (out, proc, t0) in list(running.items()):
                pid, status, usage = os.wait4(pid, os.WNOHANG)  # with the child's CPU time
                if not pid:
                    continue
                del running[proc.pid]
                proc.returncode = os.waitstatus_to_exitcode(status)
                times[out] = (round(time.time() - t0), round(usage.ru_utime + usage.ru_stime))
                if proc.returncode:
                    with open(os.path.join(out, "pretrain.log"), errors="replace") as f:
                        tail = [line for line in f.read().replace("\r", "\n").splitlines() if line.strip()][-1:]
                    raise UsageError(f"taco.py failed for {out} (exit {proc.returncode}): {' '.join(tail)}; "
                                     f"see {out}/pretrain.log" + (" (the other runs were stopped; the same "
                                     "command resumes them)" if running else ""))
                print(f"{out}: pre-trained in {times[out][0]} s ({times[out][1]} s CPU)", flush=True)
    finally:
        stop_children([proc for _, proc, _ in running.values()])
    return times


def stop_children(procs, grace=60):
    """SIGTERM to every child still running (taco.py saves a checkpoint and exits 143), SIGKILL
    after `grace` seconds; a second SIGINT or SIGTERM meanwhile is ignored (taco.py would not save)."""
    procs = [p for p in procs if p.poll() is None]
    for s in (signal.SIGINT, signal.SIGTERM) if procs else ():
        signal.signal(s, signal.SIG_IGN)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    deadline = time.time() + grace
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# ----------------------------------------------------------------------------- measuring

_CACHE = {}  # per process: what every checkpoint's measurement shares


def cached(key, make):
    return _CACHE[key] if key in _CACHE else _CACHE.setdefault(key, make())


def finetune_data(args, vocab_file, device):
    """finetune.py's settings, the toy pair task's train / dev splits encoded, the --ft_heldout pairs (or None)."""
    tok = load_tokenizer(vocab_file)
    fargs = finetuning.get_args(["--max_len", str(args.ft_max_len)])
    fargs.rank, fargs.world, fargs.source, fargs.pad_id, fargs.device = 0, 1, "study", tok.pad_id, device
    fargs.dtype, fargs.autocast = cli.precision(device)  # finetune.py's: bf16 on capable CUDA, else fp32
    task, glue = finetune.TASKS["toy"], os.path.join(toy_corpus(args.cache_dir), "glue")
    data = {s: finetune.encode(tok, finetune.load_split(task, s, glue), args.ft_max_len) for s in ("train", "dev")}
    if args.ft_train:
        data["train"] = {k: (v[:args.ft_train] if v is not None else None) for k, v in data["train"].items()}
    folder = args.ft_heldout and toy_pair_eval(args.cache_dir, n=args.ft_heldout)
    heldout = finetune.encode(tok, finetune.load_split(task, "dev", folder), args.ft_max_len) if folder else None
    return {"args": fargs, "data": data, "heldout": heldout}


def finetune_scores(config, weights, args, ft):
    """Fine-tune one encoder on the toy pair task once per --ft_seeds, with finetune.py's recipe for
    its size -> (dev main scores, held-out main scores or []), main = (acc+F1)/2."""
    recipe = finetuning.ft_recipe(config)
    fargs = argparse.Namespace(**{**vars(ft["args"]), "warmup": recipe["warmup"], "weight_decay": recipe["weight_decay"]})
    task, dev, heldout = finetune.TASKS["toy"], [], []
    for seed in args.ft_seeds:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
            # quiet: finetune prints a line and a progress bar per epoch
            record, model = finetune.run_one(task, ft["data"], config, weights, fargs,
                                             args.ft_lr or recipe["lr"], fargs.batch_size, args.ft_epochs, seed)
        dev.append(record["metrics"]["main"])
        if ft["heldout"] is not None:
            heldout.append(finetune.evaluate(model, task, {"dev": ft["heldout"]}, fargs)["main"])
    return dev, heldout


def word_pairs(args):
    return read_pairs(os.path.join(toy_corpus(args.cache_dir), "wordsim.txt") if args.pairs == "toy" else args.pairs)


def measure_checkpoint(run, path, args, fine_tune=True, sentences=False):
    """One checkpoint of a run (path None: its random init, step 0) -> its row, less "variant" and
    "seed": held-out MLM (the run's log), analysis, fine-tuning (unless not `fine_tune`), with
    `sentences` the [CLS] vector's toy retrieval and similarity, the CPU seconds."""
    t0 = time.process_time()
    cfg = checkpoints.read_json(os.path.join(run, "config.json"))
    if path is None:
        torch.manual_seed(cfg["args"]["seed"])  # taco.py's init, exactly
        encoder, step = BertForPreTraining(BertConfig(**cfg["model_config"])).bert.eval(), 0
    else:
        encoder, _, _, _ = analyze.load_encoder(path)
        step = int(os.path.basename(path)[5:-3])  # ckpt_00000200.pt
    a, vocab = cfg["args"], os.path.join(run, "vocab.txt")
    tok = cached(("tok", vocab), lambda: load_tokenizer(vocab))
    batches = cached(("blocks", vocab, a["data"], a["max_len"], a["eval_blocks"]),
                     lambda: analyze.heldout_batches(a["data"], tok, a["max_len"], a["eval_blocks"], 32, args.cache_dir))
    res = analyze.analyze(encoder, tok, batches, cached(("pairs",), lambda: word_pairs(args)))
    dev, heldout = [], []
    if args.ft_seeds and fine_tune:
        ft = cached(("ft", vocab), lambda: finetune_data(args, vocab, cli.device(args.device)))
        dev, heldout = finetune_scores(encoder.config, {"bert." + k: v for k, v in encoder.state_dict().items()},
                                       args, ft)
    ev = next((r for r in checkpoints.read_jsonl(os.path.join(run, "metrics.jsonl"))
               if r.get("step") == step and "eval_mlm_loss" in r), {})
    row = {"step": step, "eval_mlm_loss": ev.get("eval_mlm_loss"), "eval_mlm_acc": ev.get("eval_mlm_acc"),
           **{f"ctx_{k}": v for k, v in res["context"]["cosine"].items()},
           **{f"ctx_doc_{k}": v for k, v in res["context_doc"]["cosine"].items()},
           "wordsim_cooc": res["wordsim"]["cooc_mean_cosine"], "wordsim_spearman": res["wordsim"]["spearman"],
           "self_similarity": res["self_similarity"], **score_fields("ft", dev), **score_fields("ft_heldout", heldout),
           "sha256": path and checkpoints.read_json(path[:-3] + ".json")["sha256"]}  # what was measured
    if sentences:  # RetroMAE's: the [CLS] vector as a sentence embedding, on the toy grammar's sets
        evalset = toy_sentence_eval(args.cache_dir)
        ret = analyze.dense_retrieval(encoder, tok, read_beir(os.path.join(evalset, "retrieval")), "dot")
        row.update({k: ret[k] for k in ("ndcg@10", "mrr@10", "recall@100")}, sts_spearman=analyze.sentence_similarity(
            encoder, tok, read_sts(os.path.join(evalset, "sts.tsv")))["spearman"])
    return {**row, "cpu_s": round(time.process_time() - t0, 1)}


def say(label, r):
    """The line printed for a measured checkpoint."""
    print(f"  {label}: ctx {r['ctx_score']:.3f} (documents {r['ctx_doc_score']:.3f}), co-occurring words' cosine "
          f"{r['wordsim_cooc']:.3f}" + (f", nDCG@10 {r['ndcg@10']:.3f}, STS {r['sts_spearman']:.3f}" if "ndcg@10" in r else "")
          + (f", fine-tuned {100 * r['ft_mean']:.1f}" if r["ft_mean"] is not None else "")
          + (f" (held-out {100 * r['ft_heldout_mean']:.1f})" if r["ft_heldout_mean"] is not None else "")
          + f" [{r['cpu_s']:.0f} s CPU]", flush=True)


def score_fields(prefix, scores):
    return {f"{prefix}_scores": scores, f"{prefix}_mean": float(np.mean(scores)) if scores else None,
            f"{prefix}_std": float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0}


def _worker_init(threads):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the study, which ends its workers
    torch.set_num_threads(threads or 1)


def _measure(job):
    keys, *work = job
    return keys, measure_checkpoint(*work)


def measure_all(jobs, args):
    """Measure every (keys, measure_checkpoint's arguments) in `jobs`, --jobs at a time in worker processes
    of --threads each (in this process with --jobs 1): yields (keys, row) as each row comes."""
    if args.jobs == 1 or len(jobs) <= 1:
        yield from map(_measure, jobs)
        return
    # spawn, not fork: a forked child would inherit PyTorch's thread pool mid-use
    with multiprocessing.get_context("spawn").Pool(min(args.jobs, len(jobs)), _worker_init, (args.threads,)) as pool:
        yield from pool.imap_unordered(_measure, jobs)
        pool.close()
        pool.join()


def measured_checkpoints(run, run_args):
    """(step, path) of a run's checkpoints every --save_every steps and at its end, in order; not
    the extra one a run stopped by a signal saved where it stopped (it resumed from there)."""
    every, steps = run_args["save_every"], run_args["steps"]
    found = ((int(os.path.basename(p)[5:-3]), p) for p in checkpoints.list_checkpoints(run))  # ckpt_00000200.pt
    return sorted((step, p) for step, p in found if step % every == 0 or step == steps)


def study_seeds(args, names):
    """The default mode: every seed's runs pre-trained side by side, then every checkpoint measured
    side by side; each seed saved in its folder once its rows are in -> all rows, times."""
    outs = {seed: args.out if len(args.seed) == 1 else os.path.join(args.out, f"seed{seed}") for seed in args.seed}
    rows, times = {}, {}
    for seed, out in outs.items():
        if saved := finished(out, args, seed):  # measured by `--seed S --out OUT/seedS`: only the aggregate is new
            print(f"seed {seed}: reusing the measured study in {out}")
            rows[seed], times[seed] = saved["rows"], saved.get("time", {})
    todo = [seed for seed in args.seed if seed not in rows]
    plans = {(seed, name): plan_run(name, args, seed, outs[seed]) for seed in todo for name in names}
    pretrained = pretrain_all(list(plans.values()), args)
    jobs, got = [], {}  # a job's keys: the (seed, objective, step) of each row it measures
    for seed in todo:
        inits = {}  # objectives that share an init share its step-0 row
        for name in names:
            run = plans[seed, name][0]
            cfg = checkpoints.read_json(os.path.join(run, "config.json"))
            init = json.dumps([cfg["model_config"], seed, cfg["args"]["data"], cfg["args"]["max_len"]])
            if init not in inits:
                jobs.append((inits.setdefault(init, []), run, None, args, True))
            inits[init].append((seed, name, 0))
            every, last = (args.mlm_ft_every if name == "mlm" else 0), cfg["args"]["steps"]  # MLM's last: the goal
            jobs += [([(seed, name, step)], run, p, args, not every or step % every == 0 or step == last)
                     for step, p in measured_checkpoints(run, cfg["args"])]
    left, cpu = {seed: sum(job[0][0][0] == seed for job in jobs) for seed in todo}, dict.fromkeys(todo, 0)
    with contextlib.closing(measure_all(jobs, args)) as measured:  # a failure ends the workers at once
        for keys, row in measured:
            seed, name, step = keys[0]
            got.update(dict.fromkeys(keys, row))
            say(f"seed {seed} {name} step {step}", row)
            left[seed], cpu[seed] = left[seed] - 1, cpu[seed] + row["cpu_s"]
            if left[seed]:
                continue
            keys = sorted((k for k in got if k[0] == seed), key=lambda k: (names.index(k[1]), k[2]))
            rows[seed] = [{"variant": k[1], "seed": seed, **got[k], "step": k[2]} for k in keys]
            trained = [plans[seed, n][0] for n in names if plans[seed, n][0] in pretrained]
            times[seed] = {"pretrain": {os.path.relpath(o, args.out): pretrained[o] for o in trained},
                           "measure_cpu_s": round(cpu[seed])}
            save(outs[seed], args, times[seed], rows[seed], format_table(rows[seed]))
    return [r for seed in args.seed for r in rows[seed]], times


def miniature_study(args, t0):
    """One pre-training seed, MLM for --steps, then continuations from its final weights (new
    optimizer and schedule) for --continue_steps each -> rows of the init and of every final encoder.
    --tacl: tacl and, as the control, mlm_continued, both with weight decay 0 (as TaCL's AdamW);
    OUT/tacl.json, tacl_table.md, tacl_heatmap.png. --retromae: mlm, taco and retromae from OUT/stage0,
    their [CLS] vectors probed too; OUT/study.json, table.md."""
    seed = args.seed[0]
    first = plan_run("mlm", args, seed, args.out if args.tacl else os.path.join(args.out, "stage0"))
    if args.tacl:
        cont, tail = args, ["--steps", str(args.continue_steps), "--weight_decay", "0"]
        objectives = {"tacl": ["--objective", "tacl"], "mlm_continued": ["--objective", "mlm"]}
    else:  # each continuation's --steps and --save_every: --continue_steps
        cont, tail = argparse.Namespace(**{**vars(args), "steps": args.continue_steps,
                                           "save_every": args.continue_steps}), []
        objectives = dict.fromkeys(RETROMAE_VARIANTS, [])
    plan = lambda: {name: plan_run(name, cont, seed, args.out, [*objective, "--init", first[0], *tail], first[0])
                    for name, objective in objectives.items()}
    plan()  # every run in the way refused before any training
    pretrain_all([first], args)
    plans = plan()  # again: what to reuse depends on the init's checkpoint
    pretrain_all(list(plans.values()), args)
    t_train, rows, panels = time.time() - t0, [], {}
    for name, run in {"mlm (init)" if args.tacl else "init (MLM stage 0)": first[0],
                      **{name: plan[0] for name, plan in plans.items()}}.items():
        path = checkpoints.latest_checkpoint(run)
        rows.append({"variant": name, **measure_checkpoint(run, path, args, sentences=args.retromae)})
        if args.retromae:  # steps of pre-training in all
            rows[-1]["step"] = args.steps + (0 if run == first[0] else args.continue_steps)
        say(name, rows[-1])
        if args.tacl:  # one sentence's token x token cosines
            encoder, tok, run_args, _ = analyze.load_encoder(path)
            sentence = analyze.heatmap_sentence(run_args["data"], args.cache_dir)
            tokens, panels[name] = analyze.token_cosines(encoder, tok, sentence)
    times = {"pretrain_s": round(t_train), "total_s": round(time.time() - t0)}
    save(args.out, args, times, rows, format_tacl_table(rows) if args.tacl else format_retromae_table(rows),
         name="tacl" if args.tacl else "study", drawn=False)
    if args.tacl:
        analyze.plot_heatmaps(panels, tokens, args.plot or os.path.join(args.out, "tacl_heatmap.png"))
    print(f"wall time: {times['total_s']} s ({times['pretrain_s']} s pre-training)")
    return rows


def main(argv=None):
    p = cli.ArgumentParser(description="Pre-train several objectives alike; measure every checkpoint.",
                           formatter_class=cli.HelpFormatter)
    p.add_argument("--out", default="runs/study", help="one run directory per objective, plus study.json / table.md")
    p.add_argument("--variants", default="mlm,taco", help=f"comma-separated: {', '.join(VARIANTS)}")
    p.add_argument("--tacl", action="store_true", help="TaCL's miniature instead of --variants: MLM for --steps, "
                   "then --continue_steps of tacl and of mlm from it; OUT/tacl.json, tacl_table.md, tacl_heatmap.png")
    p.add_argument("--retromae", action="store_true", help="RetroMAE's miniature instead: MLM for --steps, then "
                   "mlm, taco and retromae continued from it for --continue_steps (--variants ignored)")
    p.add_argument("--continue_steps", type=int_range(1), default=600, help="--tacl / --retromae: steps per continuation")
    p.add_argument("--force", action="store_true", help="replace runs in OUT that study.py did not create "
                   "(without it, such a run in the way is an error; finished runs with the same settings are reused)")
    # pre-training, every objective alike: taco.py's flags (its parser checks their values)
    p.add_argument("--steps", type=int_range(0), default=1200, help="pre-training steps (0: taco.py's recipe for "
                   "--size; tiny's 600 ends before MLM has left its unigram plateau)")
    p.add_argument("--save_every", type=int_range(1), default=150, help="checkpoint (and measure) every N steps")
    for flag, kind, default, what in [("size", str, "tiny", "model size"), ("data", str, "toy", "text"),
                                      ("max_len", int, None, "block length"), ("batch_size", int, None, "global batch"),
                                      ("lr", float, None, "peak learning rate")]:
        p.add_argument(f"--{flag}", type=kind, default=default, help=f"pre-training {what} (taco.py --{flag}"
                       + (", default: its recipe's)" if default is None else ")"))
    p.add_argument("--seed", type=cli.list_of(int_range(0, 2**32 - 1)), default=[0], help="pre-training seed, shared "
                   "by every objective; several (0,1,2) go into OUT/seed<S>, OUT/table.md: mean ± std over them")
    p.add_argument("--taco_args", default="", help="further taco.py flags for every objective, e.g. '--warmup 100' "
                   "(not flags that make a variant another one, e.g. --objective, nor study.py's own)")
    p.add_argument("--launcher", default="", help="command in front of taco.py, e.g. 'torchrun --nproc_per_node=8' "
                   "(default: this Python)")
    p.add_argument("--pairs", default="toy", help="WordSim353-format file for the word similarity (toy: the toy corpus's)")
    # fine-tuning on the toy pair task: cheap settings, the same for every checkpoint
    p.add_argument("--ft_seeds", type=cli.list_of(int_range(0, 2**32 - 1), empty_ok=True), default=None,
                   help="fine-tuning seeds per checkpoint ('' = none; default 1,2,3,4,5,6, and 1,2,3 for --tacl / "
                   "--retromae)")
    p.add_argument("--ft_heldout", type=int_range(0), default=None, help="held-out pairs of the toy pair task, from "
                   "a random stream of their own, that score each fine-tuned model besides the 1,000 dev pairs "
                   "(0 = none; default 5000, none for --tacl / --retromae)")
    p.add_argument("--mlm_ft_every", type=int_range(0), default=0, help="fine-tune mlm's checkpoints only every N "
                   "steps and its last (0 = every one): the others are compared with its last; the rest of the "
                   "analysis covers every checkpoint")
    p.add_argument("--ft_lr", type=float_range(0, lo_open=True), default=None, help="fine-tuning learning rate "
                   "(default: finetune.py's recipe for the model size: 5e-4 for tiny / mini)")
    p.add_argument("--ft_epochs", type=int_range(1), default=2, help="fine-tuning epochs")
    p.add_argument("--ft_train", type=int_range(0), default=2000, help="training pairs used (0 = all 4000)")
    p.add_argument("--ft_max_len", type=int_range(4, 512), default=64, help="fine-tuning tokens per pair")
    # system
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--jobs", type=int_range(0), default=0, help="processes side by side: pre-training runs, then "
                   "checkpoint measurements (0 = the CPU cores other work leaves idle; 1 on CUDA or with --launcher)")
    p.add_argument("--threads", type=int_range(0), default=0, help="CPU threads per process (0 = one each when "
                   "--jobs > 1, else taco.py's and PyTorch's default)")
    p.add_argument("--cache_dir", default=None, help="toy corpus / token cache (default $TACO_CACHE or ~/.cache/taco)")
    p.add_argument("--plot", default=None, help="PNG path (default OUT/study.png; --tacl: OUT/tacl_heatmap.png)")
    args = p.parse_args(argv)
    t0 = time.time()
    with cli.errors():
        try:
            return study(args, t0)
        except KeyboardInterrupt as stop:  # cli.Stop (SIGINT, SIGTERM): the `finally` blocks have stopped the children
            signum = getattr(stop, "signum", signal.SIGINT)
            print(f"study.py stopped by {signal.Signals(signum).name}; the same command goes on: finished runs and "
                  "measured seeds are reused, stopped runs resumed", file=sys.stderr)
            sys.exit(128 + signum)


def study(args, t0):
    """main() once its flags are parsed -> the rows measured."""
    miniature = args.tacl or args.retromae
    defaults = dict(ft_seeds=[1, 2, 3], ft_heldout=0) if miniature else dict(ft_seeds=[1, 2, 3, 4, 5, 6], ft_heldout=5000)
    vars(args).update({k: v for k, v in defaults.items() if getattr(args, k) is None})
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not names or any(v not in VARIANTS for v in names):
        raise UsageError(f"unknown variant in {args.variants!r}; choose from {', '.join(VARIANTS)}")
    cli.output_path(args.out, "--out", folder=True)
    device = cli.device(args.device)
    if len(set(args.seed)) < len(args.seed):
        raise UsageError(f"--seed {','.join(map(str, args.seed))}: give one seed or distinct seeds, e.g. 0,1,2")
    if miniature and len(args.seed) > 1:
        raise UsageError(f"--{'tacl' if args.tacl else 'retromae'} runs one pre-training seed: pass one --seed")
    check_taco_args(args, ["mlm"] if args.tacl else list(RETROMAE_VARIANTS) if args.retromae else names)
    word_pairs(args)  # a bad file fails before training
    if args.ft_seeds and args.ft_heldout:
        toy_pair_eval(args.cache_dir, n=args.ft_heldout)  # generated once, before the workers need it
    if args.plot:
        analyze.picture_path(args.plot, "--plot")
    if not args.jobs:
        args.jobs = 1 if device.type == "cuda" or args.launcher else cli.free_cores()
    args.threads = args.threads or (1 if args.jobs > 1 else 0)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"study: {args.jobs} job(s) side by side" + (f", {args.threads} thread(s) each" if args.threads else ""),
          flush=True)
    with runs.RunLock(args.out, "--out"):  # one study per folder at a time
        if miniature:
            return miniature_study(args, t0)
        rows, times = study_seeds(args, names)
        usage = map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))  # with the children's
        cpu = round(sum(u.ru_utime + u.ru_stime for u in usage))
        times = {"per_seed": times, "wall_s": round(time.time() - t0), "cpu_s": cpu}
        if len(args.seed) > 1:
            save(args.out, args, times, rows, format_seeds_table(rows, args.seed)
                 + f"\n\nWall time {times['wall_s']:,} s, CPU time {times['cpu_s']:,} s (this command; "
                   f"--jobs {args.jobs}, --threads {args.threads or 'default'}).")
        print(f"wall time {times['wall_s']} s, CPU time {times['cpu_s']} s")
        return rows


def finished(out, args, seed):
    """out/study.json if it holds this seed measured with the same settings, from the checkpoints
    that are there now (a run trained again since is measured again), else None."""
    skip = {"seed", "out", "plot", "threads", "jobs", "force"}  # where and how fast, not what
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        saved = checkpoints.read_json(os.path.join(out, "study.json"))
        same = all(saved["settings"].get(k) == v for k, v in vars(args).items() if k not in skip)
        if same and saved["rows"] and {r["seed"] for r in saved["rows"]} == {seed} and all(
                checkpoints.read_json(os.path.join(out, r["variant"], f"ckpt_{r['step']:08d}.json"))["sha256"] == r["sha256"]
                for r in saved["rows"] if r.get("sha256")):
            return saved


def save(out, args, times, rows, table, name="study", drawn=True):
    """OUT/<name>.json (settings, times, every row), OUT/table.md (--tacl: tacl_table.md), the table
    printed unless OUT is one seed's of several, and unless not `drawn` the plot (OUT/study.png or --plot)."""
    checkpoints.write_json(os.path.join(out, f"{name}.json"), {"settings": vars(args), "time": times, "rows": rows})
    checkpoints.atomic_write(os.path.join(out, "tacl_table.md" if name == "tacl" else "table.md"),
                             lambda f: f.write((table + "\n").encode()))
    if out == args.out:
        print(table)
    if drawn:
        plot(rows, args.plot if args.plot and out == args.out else os.path.join(out, "study.png"))


if __name__ == "__main__":
    main()
