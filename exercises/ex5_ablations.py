"""Exercise 5: ablations of TACO, predict first, then measure (page: ex5_ablations.md).

1. Before running anything, fill in PREDICTIONS below: for each setting, will the contextual
   score and the word similarity of the input embeddings end "higher", "lower" or "same" as the
   baseline (W=5, K=50, tau=0.07, lambda=1), and why, in one sentence?
2. Check that every prediction is filled in:  python -m pytest exercises/test_ex5_ablations.py --student
3. Measure:  python exercises/ex5_ablations.py      (6 miniature pre-trainings, see the page for the time)
   It prints each setting next to the baseline and marks your predictions (✓ / ✗).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# setting -> the taco.py flags that change it (everything else is exercises/miniature.py's MINI)
SETTINGS = {
    "baseline": [],
    "W=15": ["--window", "15"],
    "K=4": ["--negatives", "4"],
    "tau=0.5": ["--temperature", "0.5"],
    "lambda=0.1": ["--tc_weight", "0.1"],
    "lambda=0 (MLM)": ["--objective", "mlm"],
}
CHOICES = ("higher", "lower", "same")
SAME = {"ctx": 0.03, "wordsim": 0.05}  # a difference within this counts as "same"

# ---- your predictions: replace each None by "higher", "lower" or "same" and give a reason ----
# ctx: the contextual score (intra - inter cosine of last-layer states, held-out blocks)
# wordsim: Spearman of the input embeddings' cosines with the toy word-pair scores (same topic = similar)
PREDICTIONS = {
    "W=15": {"ctx": None, "wordsim": None, "why": ""},
    "K=4": {"ctx": None, "wordsim": None, "why": ""},
    "tau=0.5": {"ctx": None, "wordsim": None, "why": ""},
    "lambda=0.1": {"ctx": None, "wordsim": None, "why": ""},
    "lambda=0 (MLM)": {"ctx": None, "wordsim": None, "why": ""},
}
# ---- end of your part ----


def direction(delta, tolerance):
    return "same" if abs(delta) <= tolerance else "higher" if delta > 0 else "lower"


def run(settings, out, seed, steps, ft_pairs, predictions, jobs=0):
    """Pre-train (and measure) every setting; -> {setting: {"ctx", "wordsim", "eval_mlm_loss", "finetuned",
    "wall_s", "cpu_s"}}, printed as a table next to the predictions."""
    from exercises.miniature import finetune_score, pretrain_all, wordsim
    results = {}
    done = pretrain_all(out, [(SETTINGS[name], seed) for name in settings], steps, jobs)
    for name, (run_dir, r) in zip(settings, done):
        results[name] = {"ctx": r["ctx_score"], "wordsim": wordsim(run_dir), "eval_mlm_loss": r["eval_mlm_loss"],
                         "finetuned": finetune_score(run_dir, train_pairs=ft_pairs) if ft_pairs else None,
                         "wall_s": r["wall_s"], "cpu_s": r.get("cpu_s"), "run": run_dir}
        x = results[name]
        print(f"{name}: contextual score {x['ctx']:.3f}, wordsim {x['wordsim']:.3f}, held-out MLM loss "
              f"{x['eval_mlm_loss']:.3f}" + (f", fine-tuned {100 * x['finetuned']:.1f}" if ft_pairs else "")
              + f" ({r['wall_s']:.0f} s pre-training{', reused' if r.get('reused') else ''})", flush=True)
    base = results.get("baseline")
    print("\n| setting | ctx score | wordsim ρ | held-out MLM loss | fine-tuned | your ctx / wordsim prediction |\n"
          "|---|---|---|---|---|---|")
    for name, r in results.items():
        cells, guess = [], predictions.get(name, {})
        for key in ("ctx", "wordsim"):
            cell = f"{r[key]:.3f}"
            if base and name != "baseline":
                seen = direction(r[key] - base[key], SAME[key])
                cell += f" ({seen})"
                if guess.get(key):
                    cell += " ✓" if guess[key] == seen else f" ✗ you said {guess[key]}"
            cells.append(cell)
        ft = "–" if r["finetuned"] is None else f"{100 * r['finetuned']:.1f}"
        print(f"| {name} | {cells[0]} | {cells[1]} | {r['eval_mlm_loss']:.3f} | {ft} | "
              f"{guess.get('ctx') or '–'} / {guess.get('wordsim') or '–'} |")
    return results


def main(argv=None):
    from engine import cli
    from engine import checkpoints
    from exercises.miniature import MINI, choose, driver_args
    p = driver_args("Exercise 5: TACO's W, K, tau and lambda, measured against your predictions.")
    p.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated, from: " + ", ".join(SETTINGS))
    args = p.parse_args(argv)
    with cli.errors():
        if args.json:
            cli.output_path(args.json, "--json", folder=False)
        names = choose(args.settings, SETTINGS, "setting")
        results = run(names, args.out, args.seed, args.steps, args.ft_pairs, PREDICTIONS, args.jobs)
        if args.json:  # one laptop's file; exercises/collect.py gathers the class's into one table
            checkpoints.write_json(args.json, {"exercise": "ex5_ablations", "seed": args.seed,
                                               "steps": args.steps or MINI["steps"],
                                               "predictions": PREDICTIONS, "results": results})
    return results


if __name__ == "__main__":
    main()
