"""MLM vs TACO (and the paper's ablations) under one seed, data and budget, measured over training.

Every objective is pre-trained by `taco.py` (a subprocess) with the same flags; every saved
checkpoint, plus the shared random init (step 0), is then measured with analyze.py (contextual
score, word-similarity Spearman) and fine-tuned on the toy pair task over several seeds with
finetune.py's own loop. Output: OUT/study.json, OUT/table.md, the printed table and one PNG
(matplotlib is optional; without it the table is still written).

    python study.py                                          # MLM vs TACO, tiny, toy corpus, CPU
    python study.py --variants mlm,taco,taco_masked,mlm_tp,mlm_frozen,taco_frozen --out runs/ablations
    python study.py --size small --data wikipedia,bookcorpus --steps 250000 --save_every 25000 \\
        --launcher "torchrun --standalone --nproc_per_node=8" --pairs wordsim353.tsv --ft_max_len 128
    python study.py --retromae --out runs/retromae_study     # MLM vs TACO vs RetroMAE from one MLM init

The --retromae mode (docs/retromae.md) pre-trains MLM for --steps, continues mlm, taco and
retromae from it for --continue_steps each, and measures the [CLS] vector as a sentence
embedding (toy retrieval and similarity) next to the contextual score and fine-tuning.
"""
import argparse
import contextlib
import json
import math
import os
import shlex
import subprocess
import sys
import time

import numpy as np
import torch

import analyze
import finetune
import taco
from data import DataError, load_tokenizer, toy_corpus, toy_sentence_eval
from model import BertConfig, BertForPreTraining

HERE = os.path.dirname(os.path.abspath(__file__))
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


def pretrain(name, args):
    """Run taco.py for one variant unless OUT/name already holds that finished run; -> run dir."""
    out = os.path.join(args.out, name)
    shared = {k: getattr(args, k) for k in ("size", "data", "steps", "max_len", "batch_size", "lr", "seed", "device",
                                            "cache_dir")}
    shared["steps"] = shared["steps"] or None  # 0: the recipe's
    argv = VARIANTS[name] + [f"--{k}={v}" for k, v in shared.items() if v is not None]
    argv += shlex.split(args.taco_args) + ["--save_every", str(args.save_every), "--eval_every",
                                           str(args.save_every), "--keep_last", "1000000", "--out", out]
    want = {k: v for k, v in vars(taco.get_args(argv)).items() if k not in taco.RESUMABLE}
    with contextlib.suppress(OSError, ValueError, KeyError):
        with open(os.path.join(out, "config.json")) as f:
            have = json.load(f)["args"]
        last = taco.latest_checkpoint(out)
        if all(have.get(k) == v for k, v in want.items()) and last and last.endswith(f"{want['steps']:08d}.pt"):
            print(f"{name}: reusing the finished run in {out}")
            return out
    print(f"{name}: pre-training -> {out} (log: {out}.log)", flush=True)
    cmd = shlex.split(args.launcher) if args.launcher else [sys.executable]
    with open(out + ".log", "w") as log:
        rc = subprocess.run(cmd + [os.path.join(HERE, "taco.py"), *argv, "--force"], stdout=log,
                            stderr=subprocess.STDOUT).returncode
    if rc:
        with open(out + ".log") as f:
            tail = [line for line in f.read().replace("\r", "\n").splitlines() if line.strip()][-1:]
        raise taco.UsageError(f"taco.py failed for {name} (exit {rc}): {' '.join(tail)}; see {out}.log")
    return out


def finetune_scores(config, weights, tok, args, ft):
    """Fine-tune one encoder on the toy pair task with every seed -> dev main scores (acc+F1)/2."""
    scores = []
    for seed in args.ft_seeds:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
            # quiet: finetune prints a line and a progress bar per epoch
            lr = args.ft_lr or (2e-5 if config.hidden_size >= 512 else 5e-4)
            record, _ = finetune.run_one(finetune.TASKS["toy"], ft["data"], config, weights, ft["args"],
                                         lr, args.ft_batch_size, args.ft_epochs, seed)
        scores.append(record["metrics"]["main"])
    return scores


def measure(name, run, args, ft, pairs, init_rows):
    """One row per checkpoint of a run (and its step-0 init): analysis, eval MLM, fine-tuning.
    init_rows: {(model config, seed, data, max_len): step-0 row}, shared by the objectives."""
    with open(os.path.join(run, "config.json")) as f:
        cfg = json.load(f)
    evals = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "eval_mlm_loss" in r:
                evals[r["step"]] = r
    torch.manual_seed(cfg["args"]["seed"])  # taco.py's init, exactly: the step-0 row
    init = BertForPreTraining(BertConfig(**cfg["model_config"])).bert
    rows, tok, batches = [], None, None
    init_key = json.dumps([cfg["model_config"], cfg["args"]["seed"], cfg["args"]["data"], cfg["args"]["max_len"]])
    for path in [None] + sorted(taco.list_checkpoints(run)):
        if path is None:
            if init_key in init_rows:  # objectives that share an init share its row: measure it once
                rows.append({**init_rows[init_key], "variant": name})
                continue
            encoder, step = init.eval(), 0
        else:
            encoder, tok, _, _ = analyze.load_encoder(path)
            step = int(os.path.basename(path)[5:-3])  # ckpt_00000200.pt
        if batches is None:
            tok = load_tokenizer(os.path.join(run, "vocab.txt"))
            batches = analyze.heldout_batches(cfg["args"]["data"], tok, cfg["args"]["max_len"],
                                              cfg["args"]["eval_blocks"], 32, args.cache_dir)
        res = analyze.analyze(encoder, tok, batches, pairs)
        weights = {"bert." + k: v for k, v in encoder.state_dict().items()}
        scores = finetune_scores(encoder.config, weights, tok, args, ft) if args.ft_seeds else []
        ev = evals.get(step, {})
        rows.append({"variant": name, "step": step, "eval_mlm_loss": ev.get("eval_mlm_loss"),
                     "eval_mlm_acc": ev.get("eval_mlm_acc"), **{f"ctx_{k}": v for k, v in res["context"]["cosine"].items()},
                     "wordsim_spearman": res["wordsim"]["spearman"], "ft_scores": scores,
                     "ft_mean": float(np.mean(scores)) if scores else None,
                     "ft_std": float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0})
        r = rows[-1]
        if step == 0:
            init_rows[init_key] = r
        print(f"  {name} step {step}: ctx {r['ctx_score']:.3f}, wordsim {r['wordsim_spearman']:.3f}"
              + (f", fine-tuned {100 * r['ft_mean']:.1f}" if scores else ""), flush=True)
    return rows


def format_table(rows):
    fmt = lambda v, s="{:.3f}": "–" if v is None or (isinstance(v, float) and math.isnan(v)) else s.format(v)
    lines = ["| objective | step | eval MLM loss | eval MLM acc | ctx intra | ctx inter | ctx score | wordsim ρ "
             "| fine-tuned dev (acc+F1)/2 |", "|" + "---|" * 9]
    for r in rows:
        ft = fmt(r["ft_mean"] and 100 * r["ft_mean"], "{:.1f}") + (f" ± {100 * r['ft_std']:.1f}" if r["ft_scores"] else "")
        lines.append(f"| {r['variant']} | {r['step']} | {fmt(r['eval_mlm_loss'])} | {fmt(r['eval_mlm_acc'])} | "
                     f"{fmt(r['ctx_intra'])} | {fmt(r['ctx_inter'])} | {fmt(r['ctx_score'])} | "
                     f"{fmt(r['wordsim_spearman'])} | {ft} |")
    ref = [r for r in rows if r["variant"] == "mlm"]
    if ref:  # the speed-up claim: the first step at which each objective matches MLM's final value
        goals = [(k, label, better) for k, label, better in (("ft_mean", "fine-tuned", 1), ("eval_mlm_loss", "MLM loss", -1),
                 ("wordsim_spearman", "wordsim ρ", 1)) if ref[-1][k] is not None]
        lines.append(f"\nFirst step at which each objective reaches MLM's final value (step {ref[-1]['step']}): "
                     + ", ".join(f"{label} {ref[-1][k]:.3f}" for k, label, _ in goals))
        for v in dict.fromkeys(r["variant"] for r in rows):
            hits = [next((r["step"] for r in rows if r["variant"] == v and r[k] is not None
                          and better * r[k] >= better * ref[-1][k]), None) for k, _, better in goals]
            lines.append(f"- {v}: " + ", ".join(f"{label} {'not reached' if h is None else f'step {h}'}"
                                                for (_, label, _), h in zip(goals, hits)))
    return "\n".join(lines)


def plot(rows, path):
    """2 x 2 panels, one line per objective. matplotlib is optional: a note if it is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: pip install matplotlib for the plots; the table above has every number")
        return
    panels = [("ctx_score", "contextual score (intra - inter cosine)"), ("wordsim_spearman", "word similarity Spearman"),
              ("eval_mlm_loss", "held-out MLM loss"), ("ft_mean", "fine-tuned dev (acc+F1)/2")]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (key, title) in zip(axes.flat, panels):
        for v in dict.fromkeys(r["variant"] for r in rows):
            pts = [(r["step"], r[key], r["ft_std"]) for r in rows if r["variant"] == v and r[key] is not None]
            if pts:
                x, y, e = map(np.array, zip(*pts))
                ax.errorbar(x, y, yerr=e if key == "ft_mean" else None, marker="o", ms=3, capsize=2, label=v)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("pre-training step")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=80)
    print(f"plot: {path}")


def toy_task(args, tok):
    """The toy pair task for finetune_scores, tokenised once: {"args", "data"}."""
    fargs = finetune.get_args(["--max_len", str(args.ft_max_len)])
    fargs.rank, fargs.world, fargs.source, fargs.pad_id = 0, 1, "study", tok.pad_id
    fargs.device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    bf16 = fargs.device.type == "cuda" and torch.cuda.is_bf16_supported()
    fargs.dtype = "bf16" if bf16 else "fp32"
    fargs.autocast = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    task, glue = finetune.TASKS["toy"], os.path.join(toy_corpus(args.cache_dir), "glue")
    data = {s: finetune.encode(tok, finetune.load_split(task, s, glue), args.ft_max_len) for s in ("train", "dev")}
    if args.ft_train:
        data["train"] = {k: (v[:args.ft_train] if v is not None else None) for k, v in data["train"].items()}
    return {"args": fargs, "data": data}


# ----------------------------------------------------------------------------- the RetroMAE miniature

RETROMAE_VARIANTS = ("mlm", "taco", "retromae")


def retromae_study(args, pairs):
    """Stage 0: MLM for --steps. Then mlm, taco and retromae continue from its final weights for
    --continue_steps each (new optimizer and schedule, as RetroMAE continues bert-base); the init
    and every final encoder are measured alike -> rows."""
    os.makedirs(os.path.join(args.out, "stage0"), exist_ok=True)
    stage0 = pretrain("mlm", argparse.Namespace(**{**vars(args), "out": os.path.join(args.out, "stage0")}))
    cont = argparse.Namespace(**{**vars(args), "steps": args.continue_steps, "save_every": args.continue_steps,
                                 "taco_args": f"{args.taco_args} --init {shlex.quote(stage0)}"})
    runs = {name: pretrain(name, cont) for name in RETROMAE_VARIANTS}
    tok = load_tokenizer(os.path.join(stage0, "vocab.txt"))
    evalset = toy_sentence_eval(args.cache_dir)
    sts = analyze.read_sts(os.path.join(evalset, "sts.tsv"))
    with open(os.path.join(stage0, "config.json")) as f:
        cfg = json.load(f)["args"]
    batches = analyze.heldout_batches(cfg["data"], tok, cfg["max_len"], cfg["eval_blocks"], 32, args.cache_dir)
    ft = toy_task(args, tok) if args.ft_seeds else {}
    rows = []
    for name, run in [("init (MLM stage 0)", stage0)] + list(runs.items()):
        encoder, _, _, _ = analyze.load_encoder(taco.latest_checkpoint(run))
        steps = args.steps + (0 if run == stage0 else args.continue_steps)
        ret = analyze.cls_retrieval(encoder, tok, os.path.join(evalset, "retrieval"), "dot")
        res = analyze.analyze(encoder, tok, batches, pairs)
        weights = {"bert." + k: v for k, v in encoder.state_dict().items()}
        scores = finetune_scores(encoder.config, weights, tok, args, ft) if args.ft_seeds else []
        rows.append({"variant": name, "step": steps, **{k: ret[k] for k in ("ndcg@10", "mrr@10", "recall@100")},
                     "sts_spearman": analyze.sentence_similarity(encoder, tok, sts)["spearman"],
                     "ctx_score": res["context"]["cosine"]["score"], "wordsim_spearman": res["wordsim"]["spearman"],
                     "ft_scores": scores, "ft_mean": float(np.mean(scores)) if scores else None,
                     "ft_std": float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0})
        r = rows[-1]
        print(f"  {name}: nDCG@10 {r['ndcg@10']:.3f}, STS {r['sts_spearman']:.3f}, ctx {r['ctx_score']:.3f}"
              + (f", fine-tuned {100 * r['ft_mean']:.1f}" if scores else ""), flush=True)
    return rows


def format_retromae_table(rows):
    lines = ["| objective | steps | retrieval nDCG@10 | MRR@10 | Recall@100 | STS ρ | ctx score | wordsim ρ "
             "| fine-tuned dev (acc+F1)/2 |", "|" + "---|" * 9]
    for r in rows:
        ft = "–" if r["ft_mean"] is None else f"{100 * r['ft_mean']:.1f} ± {100 * r['ft_std']:.1f}"
        lines.append(f"| {r['variant']} | {r['step']} | {r['ndcg@10']:.3f} | {r['mrr@10']:.3f} | {r['recall@100']:.3f} | "
                     f"{r['sts_spearman']:.3f} | {r['ctx_score']:.3f} | {r['wordsim_spearman']:.3f} | {ft} |")
    return "\n".join(lines)


def ints(s):
    return [int(v) for v in s.split(",") if v.strip()]


def main(argv=None):
    p = argparse.ArgumentParser(description="Pre-train several objectives alike; measure every checkpoint.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="runs/study", help="one run directory per objective, plus study.json / table.md")
    p.add_argument("--variants", default="mlm,taco", help=f"comma-separated: {', '.join(VARIANTS)}")
    p.add_argument("--retromae", action="store_true", help="RetroMAE's miniature instead: MLM for --steps, then "
                   "mlm, taco and retromae continued from it for --continue_steps (--variants ignored)")
    p.add_argument("--continue_steps", type=int, default=600, help="--retromae: steps of each continuation")
    # pre-training: None = taco.py's default for --size
    p.add_argument("--size", default="tiny", help="model size (taco.py --size)")
    p.add_argument("--data", default="toy", help="pre-training text (taco.py --data)")
    p.add_argument("--steps", type=int, default=1200, help="pre-training steps (0: taco.py's recipe for --size; "
                   "tiny's 600 ends before MLM has left its unigram plateau)")
    p.add_argument("--save_every", type=int, default=300, help="checkpoint (and measure) every N steps")
    p.add_argument("--max_len", type=int, default=None, help="pre-training block length")
    p.add_argument("--batch_size", type=int, default=None, help="pre-training global batch")
    p.add_argument("--lr", type=float, default=None, help="pre-training peak learning rate")
    p.add_argument("--seed", type=int, default=0, help="pre-training seed, shared by every objective")
    p.add_argument("--taco_args", default="", help="further taco.py flags for every objective, e.g. '--warmup 100'")
    p.add_argument("--launcher", default="", help="command in front of taco.py, e.g. 'torchrun --nproc_per_node=8' "
                   "(default: this Python)")
    p.add_argument("--pairs", default="toy", help="WordSim353-format file for the word similarity (toy: the toy corpus's)")
    # fine-tuning on the toy pair task: cheap settings, the same for every checkpoint
    p.add_argument("--ft_seeds", type=ints, default=[1, 2, 3], help="fine-tuning seeds per checkpoint ('' = none)")
    p.add_argument("--ft_lr", type=float, default=None, help="fine-tuning learning rate (default: finetune.py's, "
                   "5e-4 below hidden size 512, else 2e-5)")
    p.add_argument("--ft_epochs", type=int, default=2, help="fine-tuning epochs")
    p.add_argument("--ft_batch_size", type=int, default=32, help="fine-tuning batch size")
    p.add_argument("--ft_train", type=int, default=2000, help="training pairs used (0 = all 4000)")
    p.add_argument("--ft_max_len", type=int, default=64, help="fine-tuning tokens per pair")
    # system
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads per process (0 = PyTorch's default); "
                   "1 is much faster on a machine shared with other jobs")
    p.add_argument("--cache_dir", default=None, help="toy corpus / token cache (default $TACO_CACHE or ~/.cache/taco)")
    p.add_argument("--plot", default=None, help="PNG path (default OUT/study.png)")
    args = p.parse_args(argv)
    t0 = time.time()
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # for the taco.py subprocesses
    try:
        names = [v.strip() for v in args.variants.split(",") if v.strip()]
        if not names or any(v not in VARIANTS for v in names):
            raise taco.UsageError(f"unknown variant in {args.variants!r}; choose from {', '.join(VARIANTS)}")
        if args.save_every < 1 or args.ft_epochs < 1 or args.ft_train < 0:
            raise taco.UsageError("--save_every and --ft_epochs must be >= 1, --ft_train >= 0")
        pairs = analyze.read_pairs(os.path.join(toy_corpus(args.cache_dir), "wordsim.txt")
                                   if args.pairs == "toy" else args.pairs)  # a bad file fails before training
        os.makedirs(args.out, exist_ok=True)
        if args.retromae:
            if args.continue_steps < 1:
                raise taco.UsageError("--continue_steps must be >= 1")
            return finish_retromae(args, retromae_study(args, pairs), t0)
        runs = {name: pretrain(name, args) for name in names}
        t_train = time.time() - t0
        # the toy task, tokenised once; the run's vocab (all runs share it)
        ft = toy_task(args, load_tokenizer(os.path.join(runs[names[0]], "vocab.txt"))) if args.ft_seeds else {}
        init_rows = {}
        rows = [row for name in names for row in measure(name, runs[name], args, ft, pairs, init_rows)]
    except (taco.UsageError, finetune.FinetuneError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    table = format_table(rows)
    wall = {"pretrain_s": round(t_train), "total_s": round(time.time() - t0)}
    with open(os.path.join(args.out, "study.json"), "w") as f:
        json.dump({"settings": {k: v for k, v in vars(args).items()}, "wall": wall, "rows": rows}, f, indent=2)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    plot(rows, args.plot or os.path.join(args.out, "study.png"))
    print(f"wall time: {wall['total_s']} s ({wall['pretrain_s']} s pre-training)")
    return rows


def finish_retromae(args, rows, t0):
    """study.json, table.md and the printed table of the --retromae mode."""
    table = format_retromae_table(rows)
    wall = {"total_s": round(time.time() - t0)}
    with open(os.path.join(args.out, "study.json"), "w") as f:
        json.dump({"settings": vars(args), "wall": wall, "rows": rows}, f, indent=2)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    print(f"wall time: {wall['total_s']} s")
    return rows


if __name__ == "__main__":
    main()
