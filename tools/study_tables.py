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
CTX = ["ctx score (blocks)", "ctx score (documents)", "co-occurring words' cosine (Fig. 3a)", "wordsim ρ (extra)"]
CTX_KEYS = ["ctx_score", "ctx_doc_score", "wordsim_cooc", "wordsim_spearman"]
FT = ["fine-tuned dev (acc+F1)/2", "fine-tuned held-out (acc+F1)/2"]


def real(v):
    """v, or None for a missing or NaN value."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def fmt(v, s="{:.3f}"):
    return "–" if real(v) is None else s.format(v)


def md(header, body):
    """A Markdown table's lines: the header's cells, the rule, then one line per list of cells."""
    line = lambda cells: "| " + " | ".join(map(str, cells)) + " |"
    return [line(header), "|" + "---|" * len(header), *map(line, body)]


def format_tacl_table(rows):
    layers = range(1, len(rows[0]["self_similarity"]) + 1)
    return "\n".join(md(["model", "steps", "eval MLM loss / acc", *(f"self-sim. layer {i}" for i in layers),
                         "ctx score (intra − inter)", "wordsim ρ", FT[0]],
                        [[r["variant"], r["step"], f"{fmt(r['eval_mlm_loss'])} / {fmt(r['eval_mlm_acc'])}",
                          *map(fmt, r["self_similarity"]),
                          f"{fmt(r['ctx_score'])} ({fmt(r['ctx_intra'])} − {fmt(r['ctx_inter'])})",
                          fmt(r["wordsim_spearman"]), pm(r, "ft")] for r in rows]))


def format_retromae_table(rows):
    keys = ["ndcg@10", "mrr@10", "recall@100", "sts_spearman", "ctx_score", "wordsim_spearman"]
    return "\n".join(md(["objective", "steps", "retrieval nDCG@10", "MRR@10", "Recall@100", "STS ρ", "ctx score",
                         "wordsim ρ", FT[0]], [[r["variant"], r["step"], *(fmt(r[k]) for k in keys), pm(r, "ft")]
                                              for r in rows]))


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
    ft = ["ft_mean", "ft_heldout_mean"][:1 + any(r.get("ft_heldout_scores") for r in rows)]
    body = []
    for v, step in dict.fromkeys((r["variant"], r["step"]) for r in rows):
        at = [r for r in rows if r["variant"] == v and r["step"] == step]
        body.append([v, step, *(ms([r[k] for r in at]) for k in ["eval_mlm_loss", *CTX_KEYS]),
                     *(ms([r[k] for r in at], 100, "{:.1f}") for k in ft)])
    lines = [f"Mean ± std over pre-training seeds {', '.join(map(str, seeds))} (fine-tuned: the mean over "
             "fine-tuning seeds of each pre-training seed, then mean ± std over pre-training seeds; points)\n",
             *md(["objective", "step", "eval MLM loss", *CTX, *FT[:len(ft)]], body)]
    kinds, variants = scores(rows), list(dict.fromkeys(r["variant"] for r in rows))
    others = [v for v in variants if v != "mlm"]
    if not kinds or not others or "mlm" not in variants:
        return "\n".join(lines)
    by_seed = {s: [r for r in rows if r["seed"] == s] for s in seeds}
    last = max(r["step"] for r in rows if r["variant"] == "mlm")
    hits, body = {}, []
    for s in seeds:
        body.append([s])
        for label, key in kinds.values():
            goal = value([r for r in by_seed[s] if r["variant"] == "mlm"][-1], key)
            body[-1].append(fmt(goal and 100 * goal, "{:.1f}"))
            for v in others:
                hits[label, v, s] = first_match(by_seed[s], v, key)
                body[-1].append(f"not by {last:,}" if hits[label, v, s] is None else f"{hits[label, v, s]:,}")
    lines += ["", f"### When each objective first reaches MLM's final fine-tuned score (step {last:,}), per seed", "",
              *md(["seed", *(c for label, _ in kinds.values() for c in (f"MLM final, {label}", *others))], body), ""]
    for label, _ in kinds.values():
        for v in others:
            steps = [hits[label, v, s] for s in seeds]
            median = np.median([math.inf if h is None else h for h in steps])
            lines.append(f"- {v}, {label}: reaches it with {sum(h is not None for h in steps)} of {len(seeds)} seeds; "
                         "median step " + (f"{median:,.0f} ({median / last:.2f} of MLM's steps)"
                                           if math.isfinite(median) else f"not by {last:,}"))
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
    if not kinds:
        return []
    body = []
    for v in others:
        per_kind = [gaps(rows, seeds, v, key, last) for _, key in kinds]
        for step in sorted(s for s in per_kind[0] if s):
            at = [g.get(step, []) for g in per_kind]
            body.append([v, step, *(c for g in at for c in (ms(g, 100, "{:+.1f}"), f"{sum(x >= 0 for x in g)} of "
                                                                                 f"{len(g)}"))])
    header = [c for label, _ in kinds for c in (f"{label}: mean ± std", "seeds ahead")]
    return ["", f"### Paired gap: objective at a step minus MLM at step {last:,}, same seed (points)", "",
            *md(["objective", "step", *header], body)]


def noise_lines(rows, seeds, kinds, others, last):
    """Where the spread over pre-training seeds comes from, per objective and step (points):
    the spread of one fine-tuning around its checkpoint's mean (pooled over seeds; held-out and
    dev pairs), that of the seeds' means, the part of it left for pre-training, and the error of
    one fine-tuned model's 1,000 dev pairs against its held-out score. Then the same for the
    crossing criterion's gap (objective at a step minus MLM's final)."""
    if not {"heldout", "dev", "first", "second"} <= set(kinds) or len(seeds) < 2:
        return []
    n, body = len(rows[0]["ft_scores"]), []
    for v, step in dict.fromkeys((r["variant"], r["step"]) for r in rows if r["step"] and r["ft_heldout_scores"]):
        at = [r for r in rows if r["variant"] == v and r["step"] == step]
        ft_h = math.sqrt(np.mean([np.var(r["ft_heldout_scores"], ddof=1) for r in at]))
        ft_d = math.sqrt(np.mean([np.var(r["ft_scores"], ddof=1) for r in at]))
        between = float(np.std([r["ft_heldout_mean"] for r in at], ddof=1))
        pre = math.sqrt(max(0.0, between ** 2 - ft_h ** 2 / n))
        dev_err = ms([d - h for r in at for d, h in zip(r["ft_scores"], r["ft_heldout_scores"])], 100, "{:+.1f}")
        body.append([v, step, *(f"{100 * x:.1f}" for x in (ft_h, ft_d, between, pre)), dev_err])
    lines = ["", "### Where the spread comes from (fine-tuned score, points)", "",
             *md(["objective", "step", "one fine-tuning vs its checkpoint's mean, held-out", "same, dev 1,000",
                  f"pre-training seeds' means ({n} fine-tunings each, held-out)", "of which pre-training",
                  "dev 1,000 minus held-out, one fine-tuned model (mean ± std)"], body),
             "", f"The crossing criterion's gap (objective at a step minus MLM at {last:,}, same seed), "
             f"pooled over the steps from {last // 2:,} on:"]
    for v in others:
        h, d, a, b = (gaps(rows, seeds, v, kinds[k][1], last) for k in ("heldout", "dev", "first", "second"))
        steps = [s for s in h if s >= last // 2]
        halves = [x - y for s in steps for x, y in zip(a[s], b[s])]
        ft_half = math.sqrt(np.mean(np.square(halves)) / 2)  # one half's fine-tuning noise: Var(a - b) = 2 Var
        shift = [x - y for s in steps for x, y in zip(d[s], h[s])]
        dev = float(np.std(shift, ddof=1))
        spread = math.sqrt(np.mean([np.var(h[s], ddof=1) for s in steps]))
        pre = math.sqrt(max(0.0, spread ** 2 - ft_half ** 2 / 2))  # all seeds: half the variance of a half
        lines.append(f"- {v}: measured with {n // 2} fine-tuning seeds on the 1,000 dev pairs, the gap carries "
                     f"{100 * ft_half:.1f} points of fine-tuning noise and {100 * dev:.1f} of dev-pair sampling "
                     f"({100 * math.hypot(ft_half, dev):.1f} together; the dev pairs also shift it by "
                     f"{100 * np.mean(shift):+.1f} on average); over pre-training seeds, the held-out gap ({n} seeds) "
                     f"spreads {100 * spread:.1f} points, {100 * pre:.1f} of them pre-training")
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
    panels = [(["ctx_score", "ctx_doc_score"], "contextual score (intra - inter cosine; dashed: documents)"),
              (["wordsim_cooc"], "co-occurring words' embedding cosine (Fig. 3a)"),
              (["eval_mlm_loss"], "held-out MLM loss"),
              ([ft_key], f"fine-tuned {'held-out' if held else 'dev'} (acc+F1)/2 (dotted: MLM's final)")]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (keys, title) in zip(axes.flat, panels):
        for i, v in enumerate(dict.fromkeys(r["variant"] for r in rows)):
            for k, style in zip(keys, ("-", "--")):
                mine = [r for r in rows if r["variant"] == v and value(r, k) is not None]
                if not mine:
                    continue
                seeds = list(dict.fromkeys(r.get("seed") for r in mine))
                for s in seeds if len(seeds) > 1 else ():
                    ax.plot(*zip(*[(r["step"], r[k]) for r in mine if r.get("seed") == s]), style, color=f"C{i}",
                            lw=0.6, alpha=0.35)
                steps = sorted({r["step"] for r in mine})
                mean = [np.mean([r[k] for r in mine if r["step"] == x]) for x in steps]
                ax.plot(steps, mean, style, marker="o", ms=3, color=f"C{i}", lw=2,
                        label=(f"{v} (mean of {len(seeds)} seeds)" if len(seeds) > 1 else v) if style == "-" else None)
                if k == ft_key and v == "mlm":  # MLM's final
                    ax.axhline(mean[-1], color=f"C{i}", ls=":", lw=1)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("pre-training step")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    analyze.save_figure(fig, path, plt)  # OUT/seed<S> made if missing
    print(f"plot: {path}")
