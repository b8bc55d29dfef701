"""The tables and the plot of study.py's rows (tools/study.py measures them): one seed's table and
when each objective first reaches MLM's final value; over several pre-training seeds, mean ± std,
the steps at which the others reach MLM's final fine-tuned score, the paired gaps and where the
spread comes from; TaCL's and RetroMAE's miniatures' tables."""
import math

import numpy as np

from tools import analyze

# (key, label, +1 if higher is better): what "reaches MLM's final value" compares
GOALS = [("ft_heldout_mean", "fine-tuned (held-out)", 1), ("ft_mean", "fine-tuned (dev)", 1),
         ("eval_mlm_loss", "MLM loss", -1), ("wordsim_cooc", "co-occurring words' cosine", 1)]


def real(v):
    """v, or None for a missing or NaN value."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def fmt(v, s="{:.3f}"):
    return "–" if real(v) is None else s.format(v)


def format_tacl_table(rows):
    layers = len(rows[0]["self_similarity"])
    lines = ["| model | steps | eval MLM loss / acc | " + " | ".join(f"self-sim. layer {i}" for i in range(1, layers + 1))
             + " | ctx score (intra − inter) | wordsim ρ | fine-tuned dev (acc+F1)/2 |", "|" + "---|" * (layers + 6)]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['step']} | {r['eval_mlm_loss']:.3f} / {r['eval_mlm_acc']:.3f} | "
                     + " | ".join(f"{v:.3f}" for v in r["self_similarity"])
                     + f" | {r['ctx_score']:.3f} ({r['ctx_intra']:.3f} − {r['ctx_inter']:.3f}) | "
                     f"{r['wordsim_spearman']:.3f} | {pm(r, 'ft')} |")
    return "\n".join(lines)


def format_table(rows):
    """One seed's rows: the table and, per objective, the first step that reaches MLM's final value."""
    lines = ["| objective | step | eval MLM loss | eval MLM acc | ctx intra | ctx inter | ctx score (blocks) "
             "| ctx score (documents) | co-occurring words' cosine (Fig. 3a) | wordsim ρ (extra) "
             "| fine-tuned dev (acc+F1)/2 | fine-tuned held-out (acc+F1)/2 |", "|" + "---|" * 12]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['step']} | {fmt(r['eval_mlm_loss'])} | {fmt(r['eval_mlm_acc'])} | "
                     f"{fmt(r['ctx_intra'])} | {fmt(r['ctx_inter'])} | {fmt(r['ctx_score'])} | {fmt(r['ctx_doc_score'])} | "
                     f"{fmt(r['wordsim_cooc'])} | {fmt(r['wordsim_spearman'])} | {pm(r, 'ft')} | {pm(r, 'ft_heldout')} |")
    ref = [r for r in rows if r["variant"] == "mlm"]
    if ref:  # the speed-up claim: the first step at which each objective matches MLM's final value
        goals = [g for g in GOALS if ref[-1].get(g[0]) is not None]
        lines.append(f"\nFirst step at which each objective reaches MLM's final value (step {ref[-1]['step']}): "
                     + ", ".join(f"{label} {ref[-1][k]:.3f}" for k, label, _ in goals))
        for v in dict.fromkeys(r["variant"] for r in rows):
            hits = [first_match(rows, v, k, better) for k, _, better in goals]
            lines.append(f"- {v}: " + ", ".join(f"{label} {'not reached' if h is None else f'step {h}'}"
                                                for (_, label, _), h in zip(goals, hits)))
    return "\n".join(lines)


def pm(r, prefix):
    """A row's fine-tuned score as mean ± std over the fine-tuning seeds, in points."""
    return ms(r.get(f"{prefix}_scores") or [], 100, "{:.1f}")


def value(r, key):
    """r[key], or key(r) for a function; None for a missing or NaN value."""
    return real(key(r) if callable(key) else r.get(key))


def first_match(rows, variant, key, better=1):
    """The first step at which `variant` reaches MLM's final value of `key` (a row key or a
    function of a row) in one seed's rows (None: never)."""
    goal = value([r for r in rows if r["variant"] == "mlm"][-1], key)
    return next((r["step"] for r in rows if r["variant"] == variant and value(r, key) is not None
                 and better * value(r, key) >= better * goal), None)


def ms(vals, scale=1.0, f="{:.3f}"):
    """mean ± sample std of the values that are there; "–" if none."""
    vals = [scale * v for v in vals if real(v) is not None]
    if not vals:
        return "–"
    return f.format(np.mean(vals)) + (" ± " + f.replace("+", "").format(np.std(vals, ddof=1)) if len(vals) > 1 else "")


def scores(rows):
    """The fine-tuned scores the seeds table compares, {name: (label, function of a row)}: the
    steady one (held-out pairs, every fine-tuning seed), the 1,000 dev pairs with every seed and,
    to show the fine-tuning noise, with each half of the seeds (the first half is the old protocol
    when --ft_seeds starts 1,2,3)."""
    n = min((len(r["ft_scores"]) for r in rows if r.get("ft_scores")), default=0)
    out = {}
    if any(r.get("ft_heldout_scores") for r in rows):
        out["heldout"] = (f"held-out pairs, {n} fine-tuning seeds", lambda r: r["ft_heldout_mean"])
    if n:
        out["dev"] = (f"dev 1,000, {n} seeds", lambda r: r["ft_mean"])
    if n >= 2:
        for half, sl in (("first", slice(0, n // 2)), ("second", slice(n // 2, 2 * (n // 2)))):
            out[half] = (f"dev 1,000, {half} {n // 2} seeds",
                         lambda r, sl=sl: float(np.mean(r["ft_scores"][sl])) if r.get("ft_scores") else None)
    return out


def format_seeds_table(rows, seeds):
    """Several pre-training seeds: mean ± std over them per objective and step; per seed the step
    at which each objective first reaches MLM's final fine-tuned score (for each score of
    scores()), how often and the median; the paired gap to MLM's final score; where the spread
    comes from (fine-tuning seeds, dev pairs, pre-training); the contextual score's ordering."""
    held = any(r.get("ft_heldout_scores") for r in rows)
    lines = [f"Mean ± std over pre-training seeds {', '.join(map(str, seeds))} (fine-tuned: the mean over "
             "fine-tuning seeds of each pre-training seed, then mean ± std over pre-training seeds; points)\n",
             "| objective | step | eval MLM loss | ctx score (blocks) | ctx score (documents) "
             "| co-occurring words' cosine (Fig. 3a) | wordsim ρ (extra) | fine-tuned dev (acc+F1)/2 "
             + ("| fine-tuned held-out (acc+F1)/2 |" if held else "|"), "|" + "---|" * (9 if held else 8)]
    for v, step in dict.fromkeys((r["variant"], r["step"]) for r in rows):
        at = [r for r in rows if r["variant"] == v and r["step"] == step]
        lines.append(f"| {v} | {step} | {ms([r['eval_mlm_loss'] for r in at])} | {ms([r['ctx_score'] for r in at])} | "
                     f"{ms([r['ctx_doc_score'] for r in at])} | {ms([r['wordsim_cooc'] for r in at])} | "
                     f"{ms([r['wordsim_spearman'] for r in at])} | {ms([r['ft_mean'] for r in at], 100, '{:.1f}')} |"
                     + (f" {ms([r['ft_heldout_mean'] for r in at], 100, '{:.1f}')} |" if held else ""))
    kinds, others = scores(rows), [v for v in dict.fromkeys(r["variant"] for r in rows) if v != "mlm"]
    if not kinds or not any(r["variant"] == "mlm" for r in rows):
        return "\n".join(lines)
    by_seed = {s: [r for r in rows if r["seed"] == s] for s in seeds}
    last = max(r["step"] for r in rows if r["variant"] == "mlm")
    lines += ["", f"### When each objective first reaches MLM's final fine-tuned score (step {last:,}), per seed", "",
              "| seed | " + " | ".join(f"MLM final, {label} | " + " | ".join(others) for label, _ in kinds.values())
              + " |",
              "|" + "---|" * (1 + len(kinds) * (1 + len(others)))]
    hits = {}
    for s in seeds:
        cells = []
        for label, key in kinds.values():
            goal = value([r for r in by_seed[s] if r["variant"] == "mlm"][-1], key)
            cells.append(fmt(goal and 100 * goal, "{:.1f}"))
            for v in others:
                hits[label, v, s] = first_match(by_seed[s], v, key)
                cells.append(f"not by {last:,}" if hits[label, v, s] is None else f"{hits[label, v, s]:,}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines.append("")
    for label, _ in kinds.values():
        for v in others:
            steps = [hits[label, v, s] for s in seeds]
            reached = [h for h in steps if h is not None]
            median = np.median([math.inf if h is None else h for h in steps])
            lines.append(f"- {v}, {label}: reaches it with {len(reached)} of {len(seeds)} seeds; median step "
                         + (f"{median:,.0f} ({median / last:.2f} of MLM's steps)" if math.isfinite(median)
                            else f"not by {last:,}"))
    lines += gap_lines(rows, seeds, kinds, others, last) + noise_lines(rows, seeds, kinds, others, last)
    if "taco" in others:
        pairs = [(a["ctx_score"], b["ctx_score"]) for a in rows if a["variant"] == "taco" and a["step"]
                 for b in rows if b["variant"] == "mlm" and b["seed"] == a["seed"] and b["step"] == a["step"]]
        lines.append(f"\nContextual score (blocks): TACO's is above MLM's at {sum(t > m for t, m in pairs)} of "
                     f"{len(pairs)} (seed, step) checkpoints measured for both.")
    return "\n".join(lines)


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


def gap_lines(rows, seeds, kinds, others, last):
    """Per step, each objective's score minus MLM's final score, paired by seed: with the steady
    score and with the first half of the fine-tuning seeds on the dev pairs."""
    kinds = [kinds[k] for k in ("heldout", "first") if k in kinds]
    lines = ["", f"### Paired gap: objective at a step minus MLM at step {last:,}, same seed (points)", "",
             "| objective | step | " + " | ".join(f"{label}: mean ± std | seeds ahead" for label, _ in kinds) + " |",
             "|" + "---|" * (2 + 2 * len(kinds))]
    for v in others:
        per_kind = [gaps(rows, seeds, v, key, last) for _, key in kinds]
        for step in sorted(per_kind[0]):
            if not step:
                continue
            cells = [f"{ms(g.get(step, []), 100, '{:+.1f}')} | {sum(x >= 0 for x in g.get(step, []))} of "
                     f"{len(g.get(step, []))}" for g in per_kind]
            lines.append(f"| {v} | {step} | " + " | ".join(cells) + " |")
    return lines


def noise_lines(rows, seeds, kinds, others, last):
    """Where the spread over pre-training seeds comes from, per objective and step (points):
    the spread of one fine-tuning around its checkpoint's mean (pooled over seeds; held-out and
    dev pairs), that of the seeds' means, the part of it left for pre-training, and the error of
    one fine-tuned model's 1,000 dev pairs against its held-out score. Then the same for the
    crossing criterion's gap (objective at a step minus MLM's final)."""
    if not {"heldout", "dev", "first", "second"} <= set(kinds) or len(seeds) < 2:
        return []
    n = len(rows[0]["ft_scores"])
    lines = ["", "### Where the spread comes from (fine-tuned score, points)", "",
             "| objective | step | one fine-tuning vs its checkpoint's mean, held-out | same, dev 1,000 "
             f"| pre-training seeds' means ({n} fine-tunings each, held-out) | of which pre-training "
             "| dev 1,000 minus held-out, one fine-tuned model (mean ± std) |", "|" + "---|" * 7]
    for v, step in dict.fromkeys((r["variant"], r["step"]) for r in rows if r["step"] and r["ft_heldout_scores"]):
        at = [r for r in rows if r["variant"] == v and r["step"] == step]
        ft_h = math.sqrt(np.mean([np.var(r["ft_heldout_scores"], ddof=1) for r in at]))
        ft_d = math.sqrt(np.mean([np.var(r["ft_scores"], ddof=1) for r in at]))
        between = float(np.std([r["ft_heldout_mean"] for r in at], ddof=1))
        pre = math.sqrt(max(0.0, between ** 2 - ft_h ** 2 / n))
        dev_err = ms([d - h for r in at for d, h in zip(r["ft_scores"], r["ft_heldout_scores"])], 100, "{:+.1f}")
        lines.append(f"| {v} | {step} | {100 * ft_h:.1f} | {100 * ft_d:.1f} | {100 * between:.1f} | {100 * pre:.1f} "
                     f"| {dev_err} |")
    held, dev_all, first, second = (kinds[k][1] for k in ("heldout", "dev", "first", "second"))
    lines += ["", f"The crossing criterion's gap (objective at a step minus MLM at {last:,}, same seed), "
              f"pooled over the steps from {last // 2:,} on:"]
    for v in others:
        g = {k: gaps(rows, seeds, v, key, last) for k, key in (("h", held), ("d", dev_all), ("a", first), ("b", second))}
        steps = [s for s in g["h"] if s >= last // 2]
        halves = [a - b for s in steps for a, b in zip(g["a"][s], g["b"][s])]
        ft_half = math.sqrt(np.mean(np.square(halves)) / 2)  # one half's fine-tuning noise: Var(a - b) = 2 Var
        shift = [d - h for s in steps for d, h in zip(g["d"][s], g["h"][s])]
        dev = float(np.std(shift, ddof=1))
        old = math.sqrt(ft_half ** 2 + dev ** 2)
        spread = math.sqrt(np.mean([np.var(g["h"][s], ddof=1) for s in steps]))
        pre = math.sqrt(max(0.0, spread ** 2 - ft_half ** 2 / 2))  # all seeds: half the variance of a half
        lines.append(f"- {v}: measured with {n // 2} fine-tuning seeds on the 1,000 dev pairs, the gap carries "
                     f"{100 * ft_half:.1f} points of fine-tuning noise and {100 * dev:.1f} of dev-pair sampling "
                     f"({100 * old:.1f} together; the dev pairs also shift it by {100 * np.mean(shift):+.1f} on "
                     f"average); over pre-training seeds, the held-out gap ({n} seeds) spreads "
                     f"{100 * spread:.1f} points, {100 * pre:.1f} of them pre-training")
    return lines


def plot(rows, path):
    """2 x 2 panels, one colour per objective: every pre-training seed as a thin line, their mean
    as a thick one. matplotlib is optional: a note if it is missing."""
    plt = analyze.pyplot()
    if plt is None:
        print("note: pip install matplotlib for the plots; the table above has every number")
        return
    held = any(r.get("ft_heldout_scores") for r in rows)
    ft_key = "ft_heldout_mean" if held else "ft_mean"
    panels = [("ctx_score", "contextual score (intra - inter cosine; dashed: documents)"),
              ("wordsim_cooc", "co-occurring words' embedding cosine (Fig. 3a)"),
              ("eval_mlm_loss", "held-out MLM loss"),
              (ft_key, f"fine-tuned {'held-out' if held else 'dev'} (acc+F1)/2 (dotted: MLM's final)")]
    variants, seeds = list(dict.fromkeys(r["variant"] for r in rows)), list(dict.fromkeys(r.get("seed") for r in rows))
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (key, title) in zip(axes.flat, panels):
        for i, v in enumerate(variants):
            for k, style in [(key, "-"), ("ctx_doc_score", "--")] if key == "ctx_score" else [(key, "-")]:
                mine = [r for r in rows if r["variant"] == v and value(r, k) is not None]
                n = len({r.get("seed") for r in mine})
                if not mine:
                    continue
                for s in seeds if n > 1 else ():
                    line = [(r["step"], r[k]) for r in mine if r.get("seed") == s]
                    if line:
                        ax.plot(*zip(*line), style, color=f"C{i}", lw=0.6, alpha=0.35)
                steps = sorted({r["step"] for r in mine})
                mean = [np.mean([r[k] for r in mine if r["step"] == x]) for x in steps]
                ax.plot(steps, mean, style, marker="o", ms=3, color=f"C{i}", lw=2,
                        label=(f"{v} (mean of {n} seeds)" if n > 1 else v) if style == "-" else None)
                if k == ft_key and v == "mlm" and mean:  # MLM's final
                    ax.axhline(mean[-1], color=f"C{i}", ls=":", lw=1)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("pre-training step")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    analyze.save_figure(fig, path, plt)  # OUT/seed<S> made if missing
    print(f"plot: {path}")


def format_retromae_table(rows):
    lines = ["| objective | steps | retrieval nDCG@10 | MRR@10 | Recall@100 | STS ρ | ctx score | wordsim ρ "
             "| fine-tuned dev (acc+F1)/2 |", "|" + "---|" * 9]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['step']} | {r['ndcg@10']:.3f} | {r['mrr@10']:.3f} | {r['recall@100']:.3f} | "
                     f"{r['sts_spearman']:.3f} | {r['ctx_score']:.3f} | {r['wordsim_spearman']:.3f} | {pm(r, 'ft')} |")
    return "\n".join(lines)
