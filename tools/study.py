"""MLM vs TACO (and the paper's ablations) under one seed, data and budget, measured over training.

Each objective is pre-trained by taco.py (subprocesses, --jobs at a time) with the same flags; then every
checkpoint and the random init (step 0) are measured, --jobs at a time: analyze.py's probes and the
toy pair task fine-tuned once per --ft_seeds with finetune.py's loop, scored on its 1,000 dev pairs and on
5,000 held-out pairs (toy.toy_pair_eval). Output: OUT/study.json, OUT/table.md (printed), OUT/study.png;
several seeds go into OUT/seed<S>, compared in OUT/table.md. Run again, it reuses what finished with the
same settings and resumes what did not (Ctrl-C: each taco.py run saves); other runs in the way need --force.

    python tools/study.py                                          # MLM vs TACO, tiny, toy corpus, CPU
    python tools/study.py --seed 0,1,2,3,4,5,6,7 --mlm_ft_every 300 --out runs/study8   # eight pre-training seeds
    python tools/study.py --variants mlm,taco,taco_masked,mlm_tp,mlm_frozen,taco_frozen --out runs/ablations
    python tools/study.py --size small --data wikipedia,bookcorpus --steps 250000 --save_every 25000 \\
        --launcher "torchrun --standalone --nproc_per_node=8" --pairs wordsim353.tsv --ft_max_len 128
    python tools/study.py --tacl          # TaCL's miniature: MLM, then TaCL vs more MLM from it (docs/tacl.md)
    python tools/study.py --retromae --out runs/retromae_study     # MLM vs TACO vs RetroMAE (docs/retromae.md)
"""
import concurrent.futures
import contextlib
import itertools
import math
import multiprocessing
import os
import resource
import shlex
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # python tools/study.py: the root's modules
from engine import checkpoints, cli, finetuning, flags, runs  # first, before torch loads (engine/__init__.py)
import numpy as np
import torch

import finetune
from data import load_tokenizer
from engine.cli import UsageError, int_range
from engine.evalsets import read_beir, read_pairs, read_sts
from engine.tasks import TASKS, load_split
from engine.toy import toy_corpus, toy_pair_eval, toy_sentence_eval
from model import BertConfig, BertForPreTraining
from tools import analyze

VARIANTS = {  # name -> taco.py flags; all else is shared
    "mlm": ["--objective", "mlm"], "taco": ["--objective", "taco"],
    "taco_masked": ["--objective", "taco", "--tc_positions", "masked"],  # TC on masked positions only
    "mlm_tp": ["--objective", "mlm", "--predict_all"],  # MLM + token prediction at every position
    "mlm_frozen": ["--objective", "mlm", "--freeze_embeddings"],  # Fig. 4
    "taco_frozen": ["--objective", "taco", "--freeze_embeddings"],
    "mlm_untied": ["--objective", "mlm", "--untie_embeddings"],  # Appendix B
    "taco_untied": ["--objective", "taco", "--untie_embeddings"],
    "retromae": ["--objective", "retromae"],  # whole-word MLM at 30% + RetroMAE's decoder loss
}


# ----------------------------------------------------------------------------- pre-training

def taco_argv(name, args, seed, out, extra=()):
    """taco.py's flags for one variant: its VARIANTS flags, the shared settings, --taco_args, then what
    study.py needs (a checkpoint every --save_every steps, all kept) and `extra`: the last of a flag wins."""
    shared = {k: getattr(args, k) for k in ("size", "data", "steps", "max_len", "batch_size", "lr", "device",
                                            "cache_dir")}
    shared.update(steps=args.steps or None, seed=seed)  # steps 0: the recipe's
    return [*VARIANTS.get(name, []), *(f"--{k}={v}" for k, v in shared.items() if v is not None),
            *shlex.split(args.taco_args), "--save_every", str(args.save_every), "--eval_every", str(args.save_every),
            "--keep_last", "1000000", "--out", out, *extra]


def step_of(path):
    return int(os.path.basename(path)[5:-3])  # ckpt_00000200.pt


def plan_run(name, args, seed, out_dir, extra=(), init=None):
    """One variant's run in out_dir/name -> (run dir, taco.py flags, or None when it holds this run finished). The
    same run (its settings; a continuation of `init`'s newest checkpoint) resumes; other settings need --force."""
    out = os.path.join(out_dir, name)
    argv = taco_argv(name, args, seed, out, extra)
    want = {k: v for k, v in vars(flags.get_args(argv)).items() if k not in flags.RESUMABLE}  # a mistake: one line
    config = {}
    with contextlib.suppress(OSError, ValueError):  # none there (or not JSON): not this run
        config = checkpoints.read_json(os.path.join(out, "config.json"))
    saved, have = checkpoints.list_checkpoints(out), config.get("args") or {}
    same = all(have.get(k) == v for k, v in want.items())
    if same and init is not None:  # a continuation: of the init's newest checkpoint (config.json's "init" names it)
        start = checkpoints.list_checkpoints(init)
        same = bool(start) and os.path.basename(start[0]) in str(config.get("init"))
    if same and saved and step_of(saved[0]) == want["steps"]:
        return out, None
    if not (same or args.force or not (config or saved)):
        raise UsageError(f"{out} holds a run with other settings; pass --force to replace it, or choose another --out")
    # on from its newest checkpoint; from the start if it stopped before its first, or replacing another run
    return out, argv + (["--resume"] if same and saved else ["--force"] if config or saved else [])


def pretrain(plans, args):
    """Run the planned taco.py commands, --jobs at a time, each logging to RUN/pretrain.log."""
    def run(out, argv):
        cmd = [*(shlex.split(args.launcher) or [sys.executable]), os.path.join(ROOT, "taco.py"), *argv,
               *(["--threads", str(args.threads)] if args.threads else [])]
        print(f"pre-training {out} (log: {out}/pretrain.log)", flush=True)
        os.makedirs(out, exist_ok=True)
        with open(log := os.path.join(out, "pretrain.log"), "a") as f:
            print(f"$ {shlex.join(cmd)}", file=f, flush=True)
            code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
        if code:  # taco.py's last line says why
            with open(log, errors="replace") as f:
                last = f.read().replace("\r", "\n").strip().splitlines()[-1:]
            raise UsageError(f"taco.py failed for {out} (exit {code}): {' '.join(last)}; see {log}")
        print(f"{out}: pre-trained", flush=True)

    for out, argv in plans:
        if argv is None:
            print(f"{os.path.basename(out)}: reusing the finished run in {out}")
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:  # Ctrl-C reaches the runs: they save and end
        list(pool.map(lambda plan: run(*plan), [plan for plan in plans if plan[1] is not None]))


# ----------------------------------------------------------------------------- measuring

_CACHE = {}  # per process: what the measurements of one run's checkpoints share


def cached(key, make):
    return _CACHE[key] if key in _CACHE else _CACHE.setdefault(key, make())


def finetune_scores(encoder, tok, vocab, args):
    """The encoder fine-tuned on the toy pair task once per --ft_seeds, with finetune.py's loop and its
    recipe for the size -> (dev scores, --ft_heldout pairs' scores or []), each (accuracy + F1) / 2."""
    def splits():  # the toy pair task's train and dev splits, and the --ft_heldout pairs, encoded
        encode = lambda split, folder: finetune.encode(tok, load_split(TASKS["toy"], split, folder), args.ft_max_len)
        data = {s: encode(s, os.path.join(toy_corpus(args.cache_dir), "glue")) for s in ("train", "dev")}
        if args.ft_train:
            data["train"] = {k: (v[:args.ft_train] if v is not None else None) for k, v in data["train"].items()}
        return data, encode("dev", toy_pair_eval(args.cache_dir, n=args.ft_heldout)) if args.ft_heldout else None
    data, heldout = cached(("ft", vocab), splits)
    recipe, fargs = finetuning.ft_recipe(encoder.config), finetuning.get_args(["--max_len", str(args.ft_max_len)])
    vars(fargs).update(rank=0, world=1, source="study", pad_id=tok.pad_id, device=cli.device(args.device),
                       warmup=recipe["warmup"], weight_decay=recipe["weight_decay"])
    fargs.dtype, fargs.autocast = cli.precision(fargs.device)  # finetune.py's: bf16 on capable CUDA, else fp32
    weights, dev, held = {"bert." + k: v for k, v in encoder.state_dict().items()}, [], []
    for seed in args.ft_seeds:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
            record, model = finetune.run_one(TASKS["toy"], data, encoder.config, weights, fargs,  # quiet: no bars
                                             recipe["lr"], fargs.batch_size, args.ft_epochs, seed)
        dev.append(record["metrics"]["main"])
        if heldout is not None:
            held.append(finetune.evaluate(model, TASKS["toy"], {"dev": heldout}, fargs)["main"])
    return dev, held


def score_fields(prefix, scores):
    return {f"{prefix}_scores": scores, f"{prefix}_mean": float(np.mean(scores)) if scores else None,
            f"{prefix}_std": float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0}


def measure_checkpoint(run, path, args, fine_tune=True, sentences=False):
    """One checkpoint of a run (None: its random init, step 0) -> its row but "variant" and "seed": held-out MLM (the
    run's log), the probes, fine-tuning if `fine_tune`, with `sentences` the [CLS] vector's toy probes, CPU seconds."""
    t0, cfg = time.process_time(), checkpoints.read_json(os.path.join(run, "config.json"))
    if path is None:
        torch.manual_seed(cfg["args"]["seed"])  # taco.py's init, exactly
        encoder, step = BertForPreTraining(BertConfig(**cfg["model_config"])).bert.eval(), 0
    else:
        encoder, step = analyze.load_encoder(path)[0], step_of(path)
    a, vocab = cfg["args"], os.path.join(run, "vocab.txt")
    tok = cached(("tok", vocab), lambda: load_tokenizer(vocab))
    batches = cached(("blocks", vocab, a["data"], a["max_len"], a["eval_blocks"]), lambda: analyze.heldout_batches(
        a["data"], tok, a["max_len"], a["eval_blocks"], 32, args.cache_dir))
    res = analyze.analyze(encoder, tok, batches, cached(("pairs",), lambda: word_pairs(args)))
    dev, heldout = finetune_scores(encoder, tok, vocab, args) if args.ft_seeds and fine_tune else ([], [])
    ev = next((r for r in checkpoints.read_jsonl(os.path.join(run, "metrics.jsonl"))
               if r.get("step") == step and "eval_mlm_loss" in r), {})
    row = {"step": step, "eval_mlm_loss": ev.get("eval_mlm_loss"), "eval_mlm_acc": ev.get("eval_mlm_acc"),
           **{f"ctx_{k}": v for k, v in res["context"]["cosine"].items()},
           **{f"ctx_doc_{k}": v for k, v in res["context_doc"]["cosine"].items()},
           "wordsim_cooc": res["wordsim"]["cooc_mean_cosine"], "wordsim_spearman": res["wordsim"]["spearman"],
           "self_similarity": res["self_similarity"], **score_fields("ft", dev), **score_fields("ft_heldout", heldout)}
    if sentences:  # RetroMAE's: the [CLS] vector as a sentence embedding, on the toy grammar's sets
        evalset = toy_sentence_eval(args.cache_dir)
        ret = analyze.dense_retrieval(encoder, tok, read_beir(os.path.join(evalset, "retrieval")), "dot")
        row.update({k: ret[k] for k in ("ndcg@10", "mrr@10", "recall@100")}, sts_spearman=analyze.sentence_similarity(
            encoder, tok, read_sts(os.path.join(evalset, "sts.tsv")))["spearman"])
    return {**row, "cpu_s": round(time.process_time() - t0, 1)}


def word_pairs(args):
    return read_pairs(os.path.join(toy_corpus(args.cache_dir), "wordsim.txt") if args.pairs == "toy" else args.pairs)


def say(label, r):
    print(f"  {label}: ctx {r['ctx_score']:.3f}, co-occurring words' cosine {r['wordsim_cooc']:.3f}, fine-tuned "
          f"{pm(r, 'ft')} (held-out {pm(r, 'ft_heldout')}) [{r['cpu_s']:.0f} s CPU]", flush=True)


def _worker(threads):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the study, whose pool then ends the workers
    torch.set_num_threads(threads or 1)


def _measure(job):
    return job[0], measure_checkpoint(*job[1:])


def measured_checkpoints(run, run_args):
    """(step, path) of a run's checkpoints every --save_every steps and at its end, in order; not the
    extra one a run stopped by a signal saved where it stopped (it resumed from there)."""
    return sorted((step_of(p), p) for p in checkpoints.list_checkpoints(run)
                  if step_of(p) % run_args["save_every"] == 0 or step_of(p) == run_args["steps"])


# ----------------------------------------------------------------------------- the studies

def study_seeds(args, names):
    """The default mode: every seed's runs pre-trained side by side, then every checkpoint measured side
    by side; each seed's rows saved in its folder once they are in -> all rows."""
    outs = {seed: args.out if len(args.seed) == 1 else os.path.join(args.out, f"seed{seed}") for seed in args.seed}
    plans = {(seed, name): plan_run(name, args, seed, outs[seed]) for seed in args.seed for name in names}
    rows = {seed: r for seed in args.seed if (r := measured(outs[seed], args, seed, [plans[seed, n] for n in names]))}
    for seed in rows:  # measured by `--seed S --out OUT/seedS`: only the aggregate is new
        print(f"seed {seed}: reusing the measured study in {outs[seed]}")
    todo = [seed for seed in args.seed if seed not in rows]
    pretrain([plans[seed, name] for seed in todo for name in names], args)
    jobs = []  # ((seed, objective, step), measure_checkpoint's arguments), seed by seed
    for seed, name in itertools.product(todo, names):
        run = plans[seed, name][0]
        a = checkpoints.read_json(os.path.join(run, "config.json"))["args"]
        every = args.mlm_ft_every if name == "mlm" else 0  # MLM's last: the goal, always fine-tuned
        jobs += [((seed, name, step), run, p, args, not every or step % every == 0 or step == a["steps"])
                 for step, p in [(0, None), *measured_checkpoints(run, a)]]  # None: the random init
    n = min(args.jobs, len(jobs))  # spawn, not fork: a forked child would inherit PyTorch's thread pool mid-use
    pool = multiprocessing.get_context("spawn").Pool(n, _worker, (args.threads,)) if n > 1 else None
    with pool or contextlib.nullcontext():  # its end ends the workers, on an error too
        for i, ((seed, name, step), row) in enumerate(pool.imap(_measure, jobs) if pool else map(_measure, jobs)):
            say(f"seed {seed} {name} step {step}", row)
            rows.setdefault(seed, []).append({"variant": name, "seed": seed, **row, "step": step})
            if i + 1 == len(jobs) or jobs[i + 1][0][0] != seed:  # the seed's last row
                save(outs[seed], args, {"measure_cpu_s": round(sum(r["cpu_s"] for r in rows[seed]))}, rows[seed],
                     format_table(rows[seed]))
    return [r for seed in args.seed for r in rows[seed]]


def measured(out, args, seed, plans):
    """out/study.json's rows if they hold this seed measured with the same settings, and its runs are
    there, finished with the same settings (a run trained again since is measured again)."""
    skip = {"seed", "out", "threads", "jobs", "force"}  # where and how fast, not what
    with contextlib.suppress(OSError, ValueError, KeyError):
        saved = checkpoints.read_json(os.path.join(out, "study.json"))
        if all(argv is None for _, argv in plans) and {r["seed"] for r in saved["rows"]} == {seed} and all(
                saved["settings"].get(k) == v for k, v in vars(args).items() if k not in skip):
            return saved["rows"]


def miniature(args, t0):
    """One seed: MLM for --steps, then continuations from its weights (new optimizer and schedule) for --continue_steps
    -> rows of the init and of each final encoder. --tacl: tacl and the control mlm_continued, weight decay 0 (as
    TaCL's AdamW) -> OUT/tacl*; --retromae: mlm, taco, retromae from OUT/stage0, [CLS] probed -> OUT/study.json."""
    seed, steps = args.seed[0], str(args.continue_steps)
    first = plan_run("mlm", args, seed, args.out if args.tacl else os.path.join(args.out, "stage0"))
    if args.tacl:
        tail, objectives = ["--weight_decay", "0"], {"tacl": ["--objective", "tacl"], "mlm_continued": VARIANTS["mlm"]}
    else:  # one checkpoint each, at its end
        tail, objectives = ["--save_every", steps, "--eval_every", steps], {v: [] for v in ("mlm", "taco", "retromae")}
    plan = lambda: {name: plan_run(name, args, seed, args.out, [*own, "--init", first[0], "--steps", steps, *tail],
                                   first[0]) for name, own in objectives.items()}
    plan()  # every run in the way refused before any training
    pretrain([first], args)
    plans = plan()  # again: what to reuse depends on the init's checkpoint
    pretrain(list(plans.values()), args)
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
            tokens, panels[name] = analyze.token_cosines(encoder, tok, analyze.heatmap_sentence(run_args["data"],
                                                                                                 args.cache_dir))
    times = {"pretrain_s": round(t_train), "total_s": round(time.time() - t0)}
    save(args.out, args, times, rows, format_tacl_table(rows) if args.tacl else format_retromae_table(rows),
         name="tacl" if args.tacl else "study", drawn=False)
    if args.tacl:
        analyze.plot_heatmaps(panels, tokens, os.path.join(args.out, "tacl_heatmap.png"))
    print(f"wall time: {times['total_s']} s ({times['pretrain_s']} s pre-training)")
    return rows


def save(out, args, times, rows, table, name="study", drawn=True):
    """OUT/<name>.json (settings, times, every row), OUT/table.md (--tacl: tacl_table.md), the table printed
    unless OUT is one seed's of several, and unless not `drawn` the plot (OUT/study.png)."""
    checkpoints.write_json(os.path.join(out, f"{name}.json"), {"settings": vars(args), "time": times, "rows": rows})
    checkpoints.write_bytes(os.path.join(out, "tacl_table.md" if name == "tacl" else "table.md"), f"{table}\n".encode())
    if out == args.out:
        print(table)
    if drawn:
        plot(rows, os.path.join(out, "study.png"))


# ----------------------------------------------------------------------------- tables and plot

# (key, label, +1 if higher is better): what "reaches MLM's final value" compares
GOALS = [("ft_heldout_mean", "fine-tuned (held-out)", 1), ("ft_mean", "fine-tuned (dev)", 1),
         ("eval_mlm_loss", "MLM loss", -1), ("wordsim_cooc", "co-occurring words' cosine", 1)]
CTX = ["ctx score (blocks)", "ctx score (documents)", "co-occurring words' cosine (Fig. 3a)", "wordsim ρ (extra)"]
CTX_KEYS = ["ctx_score", "ctx_doc_score", "wordsim_cooc", "wordsim_spearman"]
FT = ["fine-tuned dev (acc+F1)/2", "fine-tuned held-out (acc+F1)/2"]


def real(v):
    """v, or None for a missing or NaN value."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def value(r, key):
    """r[key], or key(r) for a function; None for a missing or NaN value."""
    return real(key(r) if callable(key) else r.get(key))


def fmt(v, s="{:.3f}"):
    return "–" if real(v) is None else s.format(v)


def ms(vals, scale=1.0, f="{:.3f}"):
    """mean ± sample std of the values that are there; "–" if none."""
    vals = [scale * v for v in vals if real(v) is not None]
    std = " ± " + f.replace("+", "").format(np.std(vals, ddof=1)) if len(vals) > 1 else ""
    return f.format(np.mean(vals)) + std if vals else "–"


def pm(r, prefix):
    """A row's fine-tuned score as mean ± std over the fine-tuning seeds, in points."""
    return ms(r.get(f"{prefix}_scores") or [], 100, "{:.1f}")


def md(header, body):
    """A Markdown table's lines: the header's cells, the rule, then one line per list of cells."""
    line = lambda cells: "| " + " | ".join(map(str, cells)) + " |"
    return [line(header), "|" + "---|" * len(header), *map(line, body)]


def first_match(rows, variant, key, better=1):
    """The first step at which `variant` reaches MLM's final value of `key` (a row key or a
    function of a row) in one seed's rows (None: never)."""
    goal = value([r for r in rows if r["variant"] == "mlm"][-1], key)
    return next((r["step"] for r in rows if r["variant"] == variant and value(r, key) is not None
                 and better * value(r, key) >= better * goal), None)


def format_table(rows):
    """One seed's rows: the table and, per objective, the first step that reaches MLM's final value."""
    keys = ["eval_mlm_loss", "eval_mlm_acc", "ctx_intra", "ctx_inter", *CTX_KEYS]
    lines = md(["objective", "step", "eval MLM loss", "eval MLM acc", "ctx intra", "ctx inter", *CTX, *FT],
               [[r["variant"], r["step"], *(fmt(r[k]) for k in keys), pm(r, "ft"), pm(r, "ft_heldout")] for r in rows])
    if ref := [r for r in rows if r["variant"] == "mlm"]:  # the speed-up claim
        goals = [g for g in GOALS if ref[-1].get(g[0]) is not None]
        lines.append(f"\nFirst step at which each objective reaches MLM's final value (step {ref[-1]['step']}): "
                     + ", ".join(f"{label} {ref[-1][k]:.3f}" for k, label, _ in goals))
        for v in dict.fromkeys(r["variant"] for r in rows):
            hits = [first_match(rows, v, k, better) for k, _, better in goals]
            lines.append(f"- {v}: " + ", ".join(f"{label} {'not reached' if h is None else f'step {h}'}"
                                                for (_, label, _), h in zip(goals, hits)))
    return "\n".join(lines)


def format_tacl_table(rows):
    layers = range(1, len(rows[0]["self_similarity"]) + 1)
    return "\n".join(md(["model", "steps", "eval MLM loss / acc", *(f"self-sim. layer {i}" for i in layers),
                         "ctx score (intra − inter)", "wordsim ρ", FT[0]],
                        [[r["variant"], r["step"], f"{fmt(r['eval_mlm_loss'])} / {fmt(r['eval_mlm_acc'])}",
                          *map(fmt, r["self_similarity"]), f"{fmt(r['ctx_score'])} ({fmt(r['ctx_intra'])} − "
                          f"{fmt(r['ctx_inter'])})", fmt(r["wordsim_spearman"]), pm(r, "ft")] for r in rows]))


def format_retromae_table(rows):
    keys = ["ndcg@10", "mrr@10", "recall@100", "sts_spearman", "ctx_score", "wordsim_spearman"]
    return "\n".join(md(["objective", "steps", "retrieval nDCG@10", "MRR@10", "Recall@100", "STS ρ", "ctx score",
                         "wordsim ρ", FT[0]], [[r["variant"], r["step"], *map(fmt, map(r.get, keys)), pm(r, "ft")]
                                              for r in rows]))


def scores(rows):
    """The fine-tuned scores the seeds table compares, {name: (label, function of a row)}: the steady one (held-out
    pairs, every seed), the 1,000 dev pairs with every seed and, to show the noise, with each half of the seeds."""
    n, out = min((len(r["ft_scores"]) for r in rows if r.get("ft_scores")), default=0), {}
    if any(r.get("ft_heldout_scores") for r in rows):
        out["heldout"] = (f"held-out pairs, {n} fine-tuning seeds", lambda r: r["ft_heldout_mean"])
    if n:
        out["dev"] = (f"dev 1,000, {n} seeds", lambda r: r["ft_mean"])
    for half, sl in (("first", slice(0, n // 2)), ("second", slice(n // 2, 2 * (n // 2)))) if n >= 2 else ():
        out[half] = (f"dev 1,000, {half} {n // 2} seeds",
                     lambda r, sl=sl: float(np.mean(r["ft_scores"][sl])) if r.get("ft_scores") else None)
    return out


def gaps(rows, seeds, v, key, last):
    """{step: [variant's score at step - MLM's final score, per seed]} (same fine-tuning seeds, same pairs)."""
    out = {}
    for s in seeds:
        mine = [r for r in rows if r["seed"] == s]
        goal = value([r for r in mine if r["variant"] == "mlm" and r["step"] == last][0], key)
        for r in mine:
            if r["variant"] == v and value(r, key) is not None and goal is not None:
                out.setdefault(r["step"], []).append(value(r, key) - goal)
    return out


def format_seeds_table(rows, seeds):
    """Several pre-training seeds: mean ± std per objective and step; per seed the first step reaching MLM's final
    fine-tuned score (each of scores()), how often, the median; the paired gap to it; the contextual score."""
    ft, at = ["ft_mean", "ft_heldout_mean"][:1 + any(r.get("ft_heldout_scores") for r in rows)], {}
    for r in rows:  # (variant, step) -> its rows, one per seed
        at.setdefault((r["variant"], r["step"]), []).append(r)
    lines = [f"Mean ± std over pre-training seeds {', '.join(map(str, seeds))} (fine-tuned: the mean over "
             "fine-tuning seeds of each pre-training seed, then mean ± std over pre-training seeds; points)\n",
             *md(["objective", "step", "eval MLM loss", *CTX, *FT[:len(ft)]],
                 [[v, step, *(ms([r[k] for r in rs]) for k in ["eval_mlm_loss", *CTX_KEYS]),
                   *(ms([r[k] for r in rs], 100, "{:.1f}") for k in ft)] for (v, step), rs in at.items()])]
    kinds, variants = scores(rows), list(dict.fromkeys(r["variant"] for r in rows))
    others = [v for v in variants if v != "mlm"]
    if not kinds or not others or "mlm" not in variants:
        return "\n".join(lines)
    last, hits, body = max(r["step"] for r in rows if r["variant"] == "mlm"), {}, []
    for s in seeds:
        mine = [r for r in rows if r["seed"] == s]
        body.append([s])
        for label, key in kinds.values():
            goal = value([r for r in mine if r["variant"] == "mlm"][-1], key)
            body[-1].append(fmt(goal and 100 * goal, "{:.1f}"))
            for v in others:
                hits[label, v, s] = h = first_match(mine, v, key)
                body[-1].append(f"not by {last:,}" if h is None else f"{h:,}")
    lines += ["", f"### When each objective first reaches MLM's final fine-tuned score (step {last:,}), per seed", "",
              *md(["seed", *(c for label, _ in kinds.values() for c in (f"MLM final, {label}", *others))], body), ""]
    for (label, _), v in itertools.product(kinds.values(), others):
        steps = [hits[label, v, s] for s in seeds]
        median = np.median([math.inf if h is None else h for h in steps])
        lines.append(f"- {v}, {label}: reaches it with {sum(h is not None for h in steps)} of {len(seeds)} seeds; "
                     "median step " + (f"{median:,.0f} ({median / last:.2f} of MLM's steps)"
                                       if math.isfinite(median) else f"not by {last:,}"))
    if paired := [kinds[k] for k in ("heldout", "first") if k in kinds]:  # minus MLM's final, paired by seed
        body = []
        for v in others:
            per_kind = [gaps(rows, seeds, v, key, last) for _, key in paired]
            body += [[v, step, *(c for g in per_kind for c in (ms(g.get(step, []), 100, "{:+.1f}"),
                     f"{sum(x >= 0 for x in g.get(step, []))} of {len(g.get(step, []))}"))]
                     for step in sorted(s for s in per_kind[0] if s)]
        lines += ["", f"### Paired gap: objective at a step minus MLM at step {last:,}, same seed (points)", "",
                  *md(["objective", "step", *(c for label, _ in paired for c in (f"{label}: mean ± std",
                                                                                "seeds ahead"))], body)]
    if "taco" in others:
        pairs = [(a["ctx_score"], b["ctx_score"]) for a in rows if a["variant"] == "taco" and a["step"]
                 for b in rows if b["variant"] == "mlm" and b["seed"] == a["seed"] and b["step"] == a["step"]]
        lines.append(f"\nContextual score (blocks): TACO's is above MLM's at {sum(t > m for t, m in pairs)} of "
                     f"{len(pairs)} (seed, step) checkpoints measured for both.")
    return "\n".join(lines)


def plot(rows, path):
    """2 x 2 panels, a colour per objective, each seed a thin line, their mean a thick one; no matplotlib: a note."""
    if (plt := analyze.pyplot()) is None:
        return print("note: pip install matplotlib for the plots; the table above has every number")
    ft = "ft_heldout_mean" if any(r.get("ft_heldout_scores") for r in rows) else "ft_mean"
    panels = [(["ctx_score", "ctx_doc_score"], "contextual score (intra - inter cosine; dashed: documents)"),
              (["wordsim_cooc"], "co-occurring words' embedding cosine (Fig. 3a)"),
              (["eval_mlm_loss"], "held-out MLM loss"),
              ([ft], f"fine-tuned {'held-out' if ft == 'ft_heldout_mean' else 'dev'} (acc+F1)/2 (dotted: MLM's final)")]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (keys, title) in zip(axes.flat, panels):
        for (i, v), (k, style) in itertools.product(enumerate(dict.fromkeys(r["variant"] for r in rows)),
                                                    zip(keys, ("-", "--"))):
            mine = [r for r in rows if r["variant"] == v and value(r, k) is not None]
            seeds, steps = list(dict.fromkeys(r.get("seed") for r in mine)), sorted({r["step"] for r in mine})
            for s in seeds if len(seeds) > 1 else ():
                ax.plot(*zip(*[(r["step"], r[k]) for r in mine if r.get("seed") == s]), style, color=f"C{i}",
                        lw=0.6, alpha=0.35)
            mean = [np.mean([r[k] for r in mine if r["step"] == x]) for x in steps]
            ax.plot(steps, mean, style, marker="o", ms=3, color=f"C{i}", lw=2,
                    label=(f"{v} (mean of {len(seeds)} seeds)" if len(seeds) > 1 else v) if style == "-" else None)
            if k == ft and v == "mlm" and mean:  # MLM's final
                ax.axhline(mean[-1], color=f"C{i}", ls=":", lw=1)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("pre-training step")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    analyze.save_figure(fig, path, plt)  # OUT/seed<S> made if missing
    print(f"plot: {path}")


# ----------------------------------------------------------------------------- command line

def main(argv=None):
    p = cli.ArgumentParser(description="Pre-train several objectives alike; measure every checkpoint.",
                           formatter_class=cli.HelpFormatter)
    seed, add = int_range(0, 2**32 - 1), p.add_argument
    add("--out", default="runs/study", help="one run folder per objective, plus study.json, table.md, study.png")
    add("--variants", default="mlm,taco", help=f"comma-separated: {', '.join(VARIANTS)}")
    add("--seed", type=cli.list_of(seed), default=[0], help="pre-training seeds; several go into OUT/seed<S>, "
        "compared in OUT/table.md")
    add("--tacl", action="store_true", help="TaCL's miniature: MLM for --steps, then tacl and mlm from it")
    add("--retromae", action="store_true", help="RetroMAE's miniature: MLM (OUT/stage0), then mlm, taco, retromae")
    add("--continue_steps", type=int_range(1), default=600, help="--tacl / --retromae: steps of each continuation")
    add("--force", action="store_true", help="replace runs in OUT with other settings (the same settings: reused)")
    # pre-training, every objective alike: taco.py's flags (its parser checks them)
    add("--steps", type=int_range(0), default=1200, help="pre-training steps (0: the recipe's; tiny's 600 end on "
        "MLM's unigram plateau)")
    add("--save_every", type=int_range(1), default=150, help="checkpoint (and measure) every N steps")
    for flag, kind, default in [("size", str, "tiny"), ("data", str, "toy"), ("max_len", int, None),
                                ("batch_size", int, None), ("lr", float, None)]:
        add(f"--{flag}", type=kind, default=default, help=f"taco.py --{flag}")
    add("--taco_args", default="", type=lambda s: shlex.join(shlex.split(s)),  # a bad quote: one line
        help="more taco.py flags for every objective, e.g. '--warmup 100'")
    add("--launcher", default="", help="command before taco.py, e.g. 'torchrun --nproc_per_node=8' ('': python)")
    add("--pairs", default="toy", help="WordSim353-format file for the word similarity (toy: the toy corpus's)")
    # fine-tuning on the toy pair task: cheap settings, the same for every checkpoint
    add("--ft_seeds", type=lambda s: cli.list_of(seed)(s) if s.strip() else [], default=None,
        help="fine-tuning seeds per checkpoint ('' = none; default 1,2,3,4,5,6; 1,2,3 for --tacl / --retromae)")
    add("--ft_heldout", type=int_range(0), default=None, help="held-out pairs of the toy pair task that score each "
        "fine-tuned model besides the 1,000 dev pairs (0 = none; default 5000; none for --tacl / --retromae)")
    add("--mlm_ft_every", type=int_range(0), default=0, help="fine-tune mlm every N steps and at its end (0: always)")
    add("--ft_epochs", type=int_range(1), default=2, help="fine-tuning epochs")
    add("--ft_train", type=int_range(0), default=2000, help="training pairs used (0 = all 4000)")
    add("--ft_max_len", type=int_range(4, 512), default=64, help="fine-tuning tokens per pair")
    # system
    add("--device", default=None, help="cpu or cuda (default: cuda if available)")
    add("--jobs", type=int_range(0), default=0, help="processes side by side (0: one per CPU core; 1 on CUDA)")
    add("--threads", type=int_range(0), default=0, help="CPU threads per process (0: 1 with --jobs > 1, else all)")
    add("--cache_dir", default=None, help="toy corpus and token cache (default $TACO_CACHE or ~/.cache/taco)")
    args, t0 = p.parse_args(argv), time.time()
    with cli.errors():
        mini = args.tacl or args.retromae
        args.ft_seeds = ([1, 2, 3] if mini else [1, 2, 3, 4, 5, 6]) if args.ft_seeds is None else args.ft_seeds
        args.ft_heldout = (0 if mini else 5000) if args.ft_heldout is None else args.ft_heldout
        names = [v.strip() for v in args.variants.split(",") if v.strip()]
        if not names or any(v not in VARIANTS for v in names):
            raise UsageError(f"unknown variant in {args.variants!r}; choose from {', '.join(VARIANTS)}")
        if len(set(args.seed)) < len(args.seed) or mini and len(args.seed) > 1:
            raise UsageError(f"--seed {','.join(map(str, args.seed))}: give distinct seeds (one for a miniature)")
        cli.output_path(args.out, "--out", folder=True)
        device = cli.device(args.device)
        word_pairs(args)  # a bad file fails before training
        if args.ft_seeds and args.ft_heldout:
            toy_pair_eval(args.cache_dir, n=args.ft_heldout)  # generated once, before the workers need it
        args.jobs = args.jobs or (1 if device.type == "cuda" or args.launcher else os.cpu_count() or 1)
        args.threads = args.threads or (1 if args.jobs > 1 else 0)
        if args.threads:
            torch.set_num_threads(args.threads)
        print(f"study: {args.jobs} job(s) side by side" + (f", {args.threads} thread(s) each" if args.threads else ""),
              flush=True)
        with runs.RunLock(args.out, "--out"):  # one study per folder at a time
            if mini:
                return miniature(args, t0)
            rows = study_seeds(args, names)
            usage = map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))  # with the children's
            times = {"wall_s": round(time.time() - t0), "cpu_s": round(sum(u.ru_utime + u.ru_stime for u in usage))}
            if len(args.seed) > 1:
                save(args.out, args, times, rows, format_seeds_table(rows, args.seed)
                     + f"\n\nWall time {times['wall_s']:,} s, CPU time {times['cpu_s']:,} s (this command; "
                       f"--jobs {args.jobs}, --threads {args.threads or 'default'}).")
            print(f"wall time {times['wall_s']} s, CPU time {times['cpu_s']} s")
            return rows


if __name__ == "__main__":
    main()
