"""MLM vs TACO (and the paper's ablations) under one seed, data and budget, measured over training.

Every objective is pre-trained by `taco.py` (a subprocess) with the same flags; every saved
checkpoint, plus the shared random init (step 0), is then measured with analyze.py (contextual
score with blocks and with documents as contexts, co-occurring words' embedding cosine, the
word-similarity Spearman) and fine-tuned on the toy pair task over several seeds with
finetune.py's own loop. Output: OUT/study.json, OUT/table.md, the printed table and one PNG
(matplotlib is optional; without it the table is still written). Several pre-training seeds
run one after another, each into OUT/seed<S>, and OUT/table.md then gives mean ± std over them
and the step ratio at which each objective first reaches MLM's final fine-tuned score.

    python study.py                                          # MLM vs TACO, tiny, toy corpus, CPU
    python study.py --seed 0,1,2 --out runs/study3           # the same over three pre-training seeds
    python study.py --variants mlm,taco,taco_masked,mlm_tp,mlm_frozen,taco_frozen --out runs/ablations
    python study.py --size small --data wikipedia,bookcorpus --steps 250000 --save_every 25000 \\
        --launcher "torchrun --standalone --nproc_per_node=8" --pairs wordsim353.tsv --ft_max_len 128
    python study.py --tacl          # TaCL's miniature: MLM, then TaCL vs more MLM from it (docs/tacl.md)
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
import cli
import finetune
import checkpoints
import taco
from cli import float_range, int_range
from data import load_tokenizer
from evalsets import read_beir, read_pairs, read_sts
from model import BertConfig, BertForPreTraining
from toy import toy_corpus, toy_sentence_eval

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


def pretrain(name, args, seed, out_dir, extra=()):
    """Run taco.py for one variant (its VARIANTS flags, then `extra`) unless out_dir/name already
    holds that finished run; -> run dir."""
    out = os.path.join(out_dir, name)
    shared = {k: getattr(args, k) for k in ("size", "data", "steps", "max_len", "batch_size", "lr", "device",
                                            "cache_dir")}
    shared["seed"] = seed
    shared["steps"] = shared["steps"] or None  # 0: the recipe's
    argv = VARIANTS.get(name, []) + [f"--{k}={v}" for k, v in shared.items() if v is not None]
    argv += shlex.split(args.taco_args) + ["--save_every", str(args.save_every), "--eval_every",
                                           str(args.save_every), "--keep_last", "1000000", "--out", out, *extra]
    want = {k: v for k, v in vars(taco.get_args(argv)).items() if k not in taco.RESUMABLE}
    with contextlib.suppress(OSError, ValueError, KeyError):
        have = checkpoints.read_json(os.path.join(out, "config.json"))["args"]
        last = checkpoints.latest_checkpoint(out)
        if all(have.get(k) == v for k, v in want.items()) and last and last.endswith(f"{want['steps']:08d}.pt"):
            print(f"{name}: reusing the finished run in {out}")
            return out
    print(f"{name}: pre-training -> {out} (log: {out}.log)", flush=True)
    cmd = shlex.split(args.launcher) if args.launcher else [sys.executable]
    with open(out + ".log", "w") as log:
        proc = subprocess.Popen(cmd + [os.path.join(HERE, "taco.py"), *argv, "--force"], stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:  # Ctrl-C reached taco.py too: let it save its checkpoint and stop
            proc.wait()
            raise
    if rc:
        with open(out + ".log") as f:
            tail = [line for line in f.read().replace("\r", "\n").splitlines() if line.strip()][-1:]
        raise cli.UsageError(f"taco.py failed for {name} (exit {rc}): {' '.join(tail)}; see {out}.log")
    return out


def finetune_scores(config, weights, tok, args, ft):
    """Fine-tune one encoder on the toy pair task with every seed -> dev main scores (acc+F1)/2.
    Learning rate, warm-up and weight decay: finetune.py's recipe for the model's size."""
    recipe = finetune.ft_recipe(config)
    fargs = argparse.Namespace(**{**vars(ft["args"]), "warmup": recipe["warmup"], "weight_decay": recipe["weight_decay"]})
    scores = []
    for seed in args.ft_seeds:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
            # quiet: finetune prints a line and a progress bar per epoch
            record, _ = finetune.run_one(finetune.TASKS["toy"], ft["data"], config, weights, fargs,
                                         args.ft_lr or recipe["lr"], args.ft_batch_size, args.ft_epochs, seed)
        scores.append(record["metrics"]["main"])
    return scores


def measure(name, run, args, ft, pairs, init_rows):
    """One row per checkpoint of a run (and its step-0 init): analysis, eval MLM, fine-tuning.
    init_rows: {(model config, seed, data, max_len): step-0 row}, shared by the objectives."""
    cfg = checkpoints.read_json(os.path.join(run, "config.json"))
    evals = {r["step"]: r for r in checkpoints.read_jsonl(os.path.join(run, "metrics.jsonl")) if "eval_mlm_loss" in r}
    torch.manual_seed(cfg["args"]["seed"])  # taco.py's init, exactly: the step-0 row
    init = BertForPreTraining(BertConfig(**cfg["model_config"])).bert
    rows, tok, batches = [], None, None
    init_key = json.dumps([cfg["model_config"], cfg["args"]["seed"], cfg["args"]["data"], cfg["args"]["max_len"]])
    for path in [None] + sorted(checkpoints.list_checkpoints(run)):
        if path is None:
            if init_key in init_rows:  # objectives that share an init share its row: measure it once
                rows.append({**init_rows[init_key], "variant": name})
                print(f"  {name} step 0: the shared init, measured above", flush=True)
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
        rows.append({"variant": name, "seed": cfg["args"]["seed"], "step": step, "eval_mlm_loss": ev.get("eval_mlm_loss"),
                     "eval_mlm_acc": ev.get("eval_mlm_acc"), **{f"ctx_{k}": v for k, v in res["context"]["cosine"].items()},
                     **{f"ctx_doc_{k}": v for k, v in res["context_doc"]["cosine"].items()},
                     "wordsim_cooc": res["wordsim"]["cooc_mean_cosine"], "wordsim_spearman": res["wordsim"]["spearman"],
                     "ft_scores": scores,
                     "ft_mean": float(np.mean(scores)) if scores else None,
                     "ft_std": float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0})
        r = rows[-1]
        if step == 0:
            init_rows[init_key] = r
        print(f"  {name} step {step}: ctx {r['ctx_score']:.3f} (documents {r['ctx_doc_score']:.3f}), "
              f"co-occurring words' cosine {r['wordsim_cooc']:.3f}"
              + (f", fine-tuned {100 * r['ft_mean']:.1f}" if scores else ""), flush=True)
    return rows


# (key, label, +1 if higher is better): what "reaches MLM's final value" compares
GOALS = [("ft_mean", "fine-tuned", 1), ("eval_mlm_loss", "MLM loss", -1), ("wordsim_cooc", "co-occurring words' cosine", 1)]


def fmt(v, s="{:.3f}"):
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else s.format(v)


# ----------------------------------------------------------------------------- TaCL's miniature

def tacl_runs(args, seed):
    """MLM for --steps, then --continue_steps more of TaCL and, as the control, of MLM, both
    from MLM's final checkpoint with the same flags (weight decay 0, as TaCL's AdamW). -> run dirs."""
    init = pretrain("mlm", args, seed, args.out)
    same = ["--init", init, "--steps", str(args.continue_steps), "--weight_decay", "0"]
    return {"mlm (init)": init, "tacl": pretrain("tacl", args, seed, args.out, ["--objective", "tacl", *same]),
            "mlm_continued": pretrain("mlm_continued", args, seed, args.out, ["--objective", "mlm", *same])}


def measure_final(run_dirs, args, ft, pairs):
    """The final checkpoint of each run: held-out MLM, self-similarity per layer, contextual score,
    fine-tuning; and one sentence's token x token cosines. -> (rows, tokens, {name: cosines})."""
    rows, panels, batches = [], {}, None
    for name, run in run_dirs.items():
        encoder, tok, run_args, _ = analyze.load_encoder(checkpoints.latest_checkpoint(run))
        if batches is None:
            batches = analyze.heldout_batches(run_args["data"], tok, run_args["max_len"], run_args["eval_blocks"],
                                              32, args.cache_dir)
            sentence = analyze.heatmap_sentence(run_args["data"], args.cache_dir)
        res = analyze.analyze(encoder, tok, batches, pairs)
        ev = [r for r in checkpoints.read_jsonl(os.path.join(run, "metrics.jsonl")) if "eval_mlm_loss" in r][-1]
        weights = {"bert." + k: v for k, v in encoder.state_dict().items()}
        scores = finetune_scores(encoder.config, weights, tok, args, ft) if args.ft_seeds else []
        rows.append({"variant": name, "step": ev["step"], "eval_mlm_loss": ev["eval_mlm_loss"],
                     "eval_mlm_acc": ev["eval_mlm_acc"], "self_similarity": res["self_similarity"],
                     **{f"ctx_{k}": v for k, v in res["context"]["cosine"].items()},
                     "wordsim_spearman": res["wordsim"]["spearman"], "ft_scores": scores,
                     "ft_mean": float(np.mean(scores)) if scores else None,
                     "ft_std": float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0})
        tokens, panels[name] = analyze.token_cosines(encoder, tok, sentence)
        print(f"  {name}: self-similarity {', '.join(f'{v:.3f}' for v in res['self_similarity'])}, "
              f"ctx {rows[-1]['ctx_score']:.3f}" + (f", fine-tuned {100 * rows[-1]['ft_mean']:.1f}" if scores else ""),
              flush=True)
    return rows, tokens, panels


def format_tacl_table(rows):
    layers = len(rows[0]["self_similarity"])
    lines = ["| model | steps | eval MLM loss / acc | " + " | ".join(f"self-sim. layer {i}" for i in range(1, layers + 1))
             + " | ctx score (intra − inter) | wordsim ρ | fine-tuned dev (acc+F1)/2 |", "|" + "---|" * (layers + 6)]
    for r in rows:
        ft = f"{100 * r['ft_mean']:.1f} ± {100 * r['ft_std']:.1f}" if r["ft_scores"] else "–"
        lines.append(f"| {r['variant']} | {r['step']} | {r['eval_mlm_loss']:.3f} / {r['eval_mlm_acc']:.3f} | "
                     + " | ".join(f"{v:.3f}" for v in r["self_similarity"])
                     + f" | {r['ctx_score']:.3f} ({r['ctx_intra']:.3f} − {r['ctx_inter']:.3f}) | "
                     f"{r['wordsim_spearman']:.3f} | {ft} |")
    return "\n".join(lines)


def format_table(rows):
    """One seed's rows: the table and, per objective, the first step that reaches MLM's final value."""
    lines = ["| objective | step | eval MLM loss | eval MLM acc | ctx intra | ctx inter | ctx score (blocks) "
             "| ctx score (documents) | co-occurring words' cosine (Fig. 3a) | wordsim ρ (extra) "
             "| fine-tuned dev (acc+F1)/2 |", "|" + "---|" * 11]
    for r in rows:
        ft = fmt(r["ft_mean"] and 100 * r["ft_mean"], "{:.1f}") + (f" ± {100 * r['ft_std']:.1f}" if r["ft_scores"] else "")
        lines.append(f"| {r['variant']} | {r['step']} | {fmt(r['eval_mlm_loss'])} | {fmt(r['eval_mlm_acc'])} | "
                     f"{fmt(r['ctx_intra'])} | {fmt(r['ctx_inter'])} | {fmt(r['ctx_score'])} | {fmt(r['ctx_doc_score'])} | "
                     f"{fmt(r['wordsim_cooc'])} | {fmt(r['wordsim_spearman'])} | {ft} |")
    ref = [r for r in rows if r["variant"] == "mlm"]
    if ref:  # the speed-up claim: the first step at which each objective matches MLM's final value
        goals = [g for g in GOALS if ref[-1][g[0]] is not None]
        lines.append(f"\nFirst step at which each objective reaches MLM's final value (step {ref[-1]['step']}): "
                     + ", ".join(f"{label} {ref[-1][k]:.3f}" for k, label, _ in goals))
        for v in dict.fromkeys(r["variant"] for r in rows):
            hits = [first_match(rows, v, k, better) for k, _, better in goals]
            lines.append(f"- {v}: " + ", ".join(f"{label} {'not reached' if h is None else f'step {h}'}"
                                                for (_, label, _), h in zip(goals, hits)))
    return "\n".join(lines)


def first_match(rows, variant, key, better):
    """The first step at which `variant` reaches MLM's final value of `key` (None: never)."""
    goal = [r for r in rows if r["variant"] == "mlm"][-1][key]
    return next((r["step"] for r in rows if r["variant"] == variant and r[key] is not None
                 and not (isinstance(r[key], float) and math.isnan(r[key])) and better * r[key] >= better * goal), None)


def format_seeds_table(rows, seeds):
    """Several pre-training seeds: mean ± std over seeds per objective and step, then per seed the
    step ratio at which each objective first reaches MLM's final fine-tuned score."""
    def ms(vals, scale=1.0, f="{:.3f}"):
        vals = [scale * v for v in vals if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if not vals:
            return "–"
        return f.format(np.mean(vals)) + (" ± " + f.format(np.std(vals, ddof=1)) if len(vals) > 1 else "")
    lines = [f"Mean ± std over pre-training seeds {', '.join(map(str, seeds))} (fine-tuned: the mean over "
             "fine-tuning seeds of each pre-training seed, then mean ± std over pre-training seeds)\n",
             "| objective | step | eval MLM loss | ctx score (blocks) | ctx score (documents) "
             "| co-occurring words' cosine (Fig. 3a) | wordsim ρ (extra) | fine-tuned dev (acc+F1)/2 |", "|" + "---|" * 8]
    keys = list(dict.fromkeys((r["variant"], r["step"]) for r in rows))
    for v, step in keys:
        at = [r for r in rows if r["variant"] == v and r["step"] == step]
        lines.append(f"| {v} | {step} | {ms([r['eval_mlm_loss'] for r in at])} | {ms([r['ctx_score'] for r in at])} | "
                     f"{ms([r['ctx_doc_score'] for r in at])} | {ms([r['wordsim_cooc'] for r in at])} | "
                     f"{ms([r['wordsim_spearman'] for r in at])} | {ms([r['ft_mean'] for r in at], 100, '{:.1f}')} |")
    if any(r["variant"] == "mlm" and r["ft_mean"] is not None for r in rows):
        lines.append("\nFirst step at which each objective reaches MLM's final fine-tuned score, per seed "
                     "(step / MLM's final step):")
        for v in dict.fromkeys(r["variant"] for r in rows):
            ratios, parts = [], []
            for seed in seeds:
                mine = [r for r in rows if r["seed"] == seed]
                last = [r for r in mine if r["variant"] == "mlm"][-1]
                hit = first_match(mine, v, "ft_mean", 1)
                parts.append(f"seed {seed}: " + ("not reached" if hit is None else
                                                 f"step {hit} ({hit / last['step']:.2f}; MLM final {100 * last['ft_mean']:.1f})"))
                ratios.append(hit / last["step"] if hit is not None else None)
            mean = (f"; mean ratio {np.mean(ratios):.2f}" if all(x is not None for x in ratios)
                    else "; not reached with every seed")
            lines.append(f"- {v}: " + ", ".join(parts) + mean)
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
    panels = [("ctx_score", "contextual score (intra - inter cosine; dashed: documents)"),
              ("wordsim_cooc", "co-occurring words' embedding cosine (Fig. 3a)"),
              ("eval_mlm_loss", "held-out MLM loss"), ("ft_mean", "fine-tuned dev (acc+F1)/2")]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (key, title) in zip(axes.flat, panels):
        for v in dict.fromkeys(r["variant"] for r in rows):
            for k, style in [(key, "-"), ("ctx_doc_score", "--")] if key == "ctx_score" else [(key, "-")]:
                steps = sorted({r["step"] for r in rows if r["variant"] == v and r.get(k) is not None})
                if not steps:
                    continue
                # one seed: the fine-tuning seeds' spread; several: mean and spread over pre-training seeds
                at = [[r for r in rows if r["variant"] == v and r["step"] == s and r.get(k) is not None] for s in steps]
                y = np.array([np.mean([r[k] for r in a]) for a in at])
                e = np.array([np.std([r[k] for r in a], ddof=1) if len(a) > 1 else a[0]["ft_std"] if k == "ft_mean"
                              else 0.0 for a in at])
                ax.errorbar(steps, y, yerr=e, fmt="o" + style, ms=3, capsize=2, label=v if style == "-" else None,
                            color=f"C{list(dict.fromkeys(r['variant'] for r in rows)).index(v)}")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("pre-training step")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=80)
    print(f"plot: {path}")


# ----------------------------------------------------------------------------- the RetroMAE miniature

RETROMAE_VARIANTS = ("mlm", "taco", "retromae")


def retromae_study(args, pairs, device):
    """Stage 0: MLM for --steps. Then mlm, taco and retromae continue from its final weights for
    --continue_steps each (new optimizer and schedule, as RetroMAE continues bert-base); the init
    and every final encoder are measured alike -> rows."""
    seed = args.seed[0]
    os.makedirs(os.path.join(args.out, "stage0"), exist_ok=True)
    stage0 = pretrain("mlm", args, seed, os.path.join(args.out, "stage0"))
    cont = argparse.Namespace(**{**vars(args), "steps": args.continue_steps, "save_every": args.continue_steps,
                                 "taco_args": f"{args.taco_args} --init {shlex.quote(stage0)}"})
    run_dirs = {name: pretrain(name, cont, seed, args.out) for name in RETROMAE_VARIANTS}
    tok = load_tokenizer(os.path.join(stage0, "vocab.txt"))
    evalset = toy_sentence_eval(args.cache_dir)
    sts = read_sts(os.path.join(evalset, "sts.tsv"))
    beir = read_beir(os.path.join(evalset, "retrieval"))
    cfg = checkpoints.read_json(os.path.join(stage0, "config.json"))["args"]
    batches = analyze.heldout_batches(cfg["data"], tok, cfg["max_len"], cfg["eval_blocks"], 32, args.cache_dir)
    ft = finetune_data(args, os.path.join(stage0, "vocab.txt"), device) if args.ft_seeds else {}
    rows = []
    for name, run in [("init (MLM stage 0)", stage0)] + list(run_dirs.items()):
        encoder, _, _, _ = analyze.load_encoder(checkpoints.latest_checkpoint(run))
        steps = args.steps + (0 if run == stage0 else args.continue_steps)
        ret = analyze.dense_retrieval(encoder, tok, beir, "dot")
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


def main(argv=None):
    p = cli.ArgumentParser(description="Pre-train several objectives alike; measure every checkpoint.",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="runs/study", help="one run directory per objective, plus study.json / table.md")
    p.add_argument("--variants", default="mlm,taco", help=f"comma-separated: {', '.join(VARIANTS)}")
    p.add_argument("--tacl", action="store_true", help="TaCL's miniature instead of --variants: MLM for --steps, "
                   "then --continue_steps of tacl and of mlm from it; OUT/tacl.json, tacl_table.md, tacl_heatmap.png")
    p.add_argument("--retromae", action="store_true", help="RetroMAE's miniature instead: MLM for --steps, then "
                   "mlm, taco and retromae continued from it for --continue_steps (--variants ignored)")
    p.add_argument("--continue_steps", type=int_range(1), default=600,
                   help="--tacl / --retromae: steps of each continuation")
    # pre-training: None = taco.py's default for --size
    p.add_argument("--size", default="tiny", help="model size (taco.py --size)")
    p.add_argument("--data", default="toy", help="pre-training text (taco.py --data)")
    p.add_argument("--steps", type=int_range(0), default=1200,
                   help="pre-training steps (0: taco.py's recipe for --size; "
                   "tiny's 600 ends before MLM has left its unigram plateau)")
    p.add_argument("--save_every", type=int_range(1), default=150, help="checkpoint (and measure) every N steps")
    p.add_argument("--max_len", type=int_range(8, 512), default=None, help="pre-training block length")
    p.add_argument("--batch_size", type=int_range(1), default=None, help="pre-training global batch")
    p.add_argument("--lr", type=float_range(0, lo_open=True), default=None, help="pre-training peak learning rate")
    p.add_argument("--seed", type=cli.list_of(int_range(0, 2**32 - 1)), default=[0],
                   help="pre-training seed, shared by every objective; several (0,1,2) run one after another "
                   "into OUT/seed<S> and OUT/table.md gives mean ± std over them")
    p.add_argument("--taco_args", default="", help="further taco.py flags for every objective, e.g. '--warmup 100'")
    p.add_argument("--launcher", default="", help="command in front of taco.py, e.g. 'torchrun --nproc_per_node=8' "
                   "(default: this Python)")
    p.add_argument("--pairs", default="toy", help="WordSim353-format file for the word similarity (toy: the toy corpus's)")
    # fine-tuning on the toy pair task: cheap settings, the same for every checkpoint
    p.add_argument("--ft_seeds", type=cli.list_of(int_range(0, 2**32 - 1), empty_ok=True), default=[1, 2, 3],
                   help="fine-tuning seeds per checkpoint ('' = none)")
    p.add_argument("--ft_lr", type=float_range(0, lo_open=True), default=None, help="fine-tuning learning rate "
                   "(default: finetune.py's recipe for the model size: 5e-4 for tiny / mini)")
    p.add_argument("--ft_epochs", type=int_range(1), default=2, help="fine-tuning epochs")
    p.add_argument("--ft_batch_size", type=int_range(1), default=32, help="fine-tuning batch size")
    p.add_argument("--ft_train", type=int_range(0), default=2000, help="training pairs used (0 = all 4000)")
    p.add_argument("--ft_max_len", type=int_range(4, 512), default=64, help="fine-tuning tokens per pair")
    # system
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--threads", type=int_range(0), default=0, help="CPU threads per process (0 = PyTorch's default); "
                   "1 is much faster on a machine shared with other jobs")
    p.add_argument("--cache_dir", default=None, help="toy corpus / token cache (default $TACO_CACHE or ~/.cache/taco)")
    p.add_argument("--plot", default=None, help="PNG path (default OUT/study.png; --tacl: OUT/tacl_heatmap.png)")
    args = p.parse_args(argv)
    t0 = time.time()
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # for the taco.py subprocesses
    with cli.errors():
        names = [v.strip() for v in args.variants.split(",") if v.strip()]
        if not names or any(v not in VARIANTS for v in names):
            raise cli.UsageError(f"unknown variant in {args.variants!r}; choose from {', '.join(VARIANTS)}")
        cli.output_path(args.out, "--out", folder=True)
        device = cli.device(args.device)
        if len(set(args.seed)) < len(args.seed):
            raise cli.UsageError(f"--seed {','.join(map(str, args.seed))}: give one seed or distinct seeds, e.g. 0,1,2")
        pairs = read_pairs(os.path.join(toy_corpus(args.cache_dir), "wordsim.txt")
                                   if args.pairs == "toy" else args.pairs)  # a bad file fails before training
        if args.plot:
            cli.output_path(args.plot, "--plot", folder=False)
        if args.tacl:
            if len(args.seed) > 1:
                raise cli.UsageError("--tacl runs one pre-training seed: pass one --seed")
            os.makedirs(args.out, exist_ok=True)
            return tacl_study(args, pairs, device, t0)
        if args.retromae:
            if len(args.seed) > 1:
                raise cli.UsageError("--retromae runs one pre-training seed: pass one --seed")
            os.makedirs(args.out, exist_ok=True)
            return finish_retromae(args, retromae_study(args, pairs, device), t0)
        rows, wall, ft, init_rows = [], {}, None, {}
        for seed in args.seed:
            t_seed = time.time()
            out = args.out if len(args.seed) == 1 else os.path.join(args.out, f"seed{seed}")
            os.makedirs(out, exist_ok=True)
            done = finished(out, args, seed)
            if done:  # e.g. measured by `study.py --seed S --out OUT/seedS`: only the aggregate is new
                print(f"seed {seed}: reusing the measured study in {out}")
                rows += done["rows"]
                wall[seed] = done["wall"][str(seed)]
                continue
            run_dirs = {name: pretrain(name, args, seed, out) for name in names}
            t_train = time.time() - t_seed
            if ft is None:  # the toy task, tokenised once; the run's vocab (all runs share it)
                ft = finetune_data(args, os.path.join(run_dirs[names[0]], "vocab.txt"), device) if args.ft_seeds else {}
            mine = [row for name in names for row in measure(name, run_dirs[name], args, ft, pairs, init_rows)]
            wall[seed] = {"pretrain_s": round(t_train), "total_s": round(time.time() - t_seed)}
            save(out, args, {seed: wall[seed]}, mine, format_table(mine))
            print(f"seed {seed}: wall time {wall[seed]['total_s']} s ({wall[seed]['pretrain_s']} s pre-training)")
            rows += mine
        if len(args.seed) > 1:
            save(args.out, args, wall, rows, format_seeds_table(rows, args.seed))
        print(f"wall time: {round(time.time() - t0)} s")
        return rows


def finished(out, args, seed):
    """out/study.json if it holds this seed measured with the same settings, else None."""
    skip = {"seed", "out", "plot", "threads"}  # where and how fast, not what
    with contextlib.suppress(OSError, ValueError, KeyError):
        saved = checkpoints.read_json(os.path.join(out, "study.json"))
        same = all(saved["settings"].get(k) == v for k, v in vars(args).items() if k not in skip)
        if same and str(seed) in saved["wall"] and {r["seed"] for r in saved["rows"]} == {seed}:
            return saved
    return None


def finetune_data(args, vocab_file, device):
    """finetune.py's settings and the toy pair task's train / dev splits, encoded once."""
    tok = load_tokenizer(vocab_file)
    fargs = finetune.get_args(["--max_len", str(args.ft_max_len)])
    fargs.rank, fargs.world, fargs.source, fargs.pad_id = 0, 1, "study", tok.pad_id
    fargs.device = device
    bf16 = fargs.device.type == "cuda" and torch.cuda.is_bf16_supported()
    fargs.dtype = "bf16" if bf16 else "fp32"
    fargs.autocast = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    task, glue = finetune.TASKS["toy"], os.path.join(toy_corpus(args.cache_dir), "glue")
    data = {s: finetune.encode(tok, finetune.load_split(task, s, glue), args.ft_max_len) for s in ("train", "dev")}
    if args.ft_train:
        data["train"] = {k: (v[:args.ft_train] if v is not None else None) for k, v in data["train"].items()}
    return {"args": fargs, "data": data}


def save(out, args, wall, rows, table):
    """OUT/study.json (settings, wall times, every row), OUT/table.md, the printed table, the plot."""
    checkpoints.write_json(os.path.join(out, "study.json"), {"settings": vars(args), "wall": wall, "rows": rows})
    checkpoints.atomic_write(os.path.join(out, "table.md"), lambda f: f.write((table + "\n").encode()))
    print(table)
    plot(rows, os.path.join(out, "study.png") if not args.plot or out != args.out else args.plot)


def tacl_study(args, pairs, device, t0):
    """--tacl: TaCL's miniature, for one pre-training seed; OUT/tacl.json, tacl_table.md, tacl_heatmap.png."""
    run_dirs = tacl_runs(args, args.seed[0])
    t_train = time.time() - t0
    ft = finetune_data(args, os.path.join(next(iter(run_dirs.values())), "vocab.txt"), device) if args.ft_seeds else {}
    rows, tokens, panels = measure_final(run_dirs, args, ft, pairs)
    table = format_tacl_table(rows)
    wall = {"pretrain_s": round(t_train), "total_s": round(time.time() - t0)}
    checkpoints.write_json(os.path.join(args.out, "tacl.json"), {"settings": vars(args), "wall": wall, "rows": rows})
    checkpoints.atomic_write(os.path.join(args.out, "tacl_table.md"), lambda f: f.write((table + "\n").encode()))
    print(table)
    analyze.plot_heatmaps(panels, tokens, args.plot or os.path.join(args.out, "tacl_heatmap.png"))
    print(f"wall time: {wall['total_s']} s ({wall['pretrain_s']} s pre-training)")
    return rows


def finish_retromae(args, rows, t0):
    """study.json, table.md and the printed table of the --retromae mode."""
    table = format_retromae_table(rows)
    wall = {"total_s": round(time.time() - t0)}
    checkpoints.write_json(os.path.join(args.out, "study.json"), {"settings": vars(args), "wall": wall, "rows": rows})
    checkpoints.atomic_write(os.path.join(args.out, "table.md"), lambda f: f.write((table + "\n").encode()))
    print(table)
    print(f"wall time: {wall['total_s']} s")
    return rows


if __name__ == "__main__":
    main()
