"""Exercise 6: MLM vs TACO, the miniature: reproduce it, then explain the curves (page: ex6_mlm_vs_taco.md).

1. Write first_step_reaching and speedup below; check them:
       python -m pytest exercises/test_ex6_mlm_vs_taco.py --student
2. Run the miniature (two pre-trainings, evaluated every 50 steps):
       python exercises/ex6_mlm_vs_taco.py
   It prints both curves' numbers, the speed-up your functions compute, and draws
   runs/ex6/curves.png and runs/ex6/cosine.png (with matplotlib). The runs are shared with exercises 5 and 7.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def first_step_reaching(points, target, higher_is_better=True):
    """points: [(step, value), ...] in step order. The first step whose value reaches `target`
    (>= target if higher is better, else <=), or None if the curve never gets there."""
    raise NotImplementedError


def speedup(baseline, other, higher_is_better=True):
    """How many times fewer steps `other` needs to reach the *final* value of `baseline`
    (the paper's Table 1 / Fig. 5 speed-up): baseline's first step reaching it divided by
    other's. None if `other` never reaches it."""
    raise NotImplementedError


# ----------------------------------------------------------------------------- the miniature (given)

def curve(run_dir, key):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [(r["step"], r[key]) for r in map(json.loads, f) if key in r]


def main(argv=None, functions=None):
    from engine import cli
    from engine import checkpoints
    from exercises.miniature import driver_args, finetune_score, pretrain_all, wordsim
    p = driver_args("Exercise 6: the MLM vs TACO miniature.")
    p.add_argument("--pictures", default="runs/ex6", help="folder for curves.png and cosine.png")
    args = p.parse_args(argv)
    fns = functions or sys.modules[__name__]
    results = {}
    with cli.errors():
        if args.json:  # checked before the runs, not after them
            cli.output_path(args.json, "--json", folder=False)
        variants = {"mlm": ["--objective", "mlm"], "taco": []}
        done = pretrain_all(args.out, [(flags, args.seed) for flags in variants.values()], args.steps, args.jobs)
        for name, (run_dir, r) in zip(variants, done):
            results[name] = {"ctx": r["ctx_score"], "eval_mlm_loss": r["eval_mlm_loss"], "wall_s": r["wall_s"],
                             "cpu_s": r.get("cpu_s"),
                             "wordsim": wordsim(run_dir),
                             "finetuned": finetune_score(run_dir, train_pairs=args.ft_pairs) if args.ft_pairs else None,
                             "ctx_curve": curve(run_dir, "ctx_score"), "mlm_curve": curve(run_dir, "eval_mlm_loss"),
                             "run": run_dir}
    print("step  | " + " | ".join(f"{n} ctx score, held-out MLM loss" for n in results))
    for (s, c1), (_, l1), (_, c2), (_, l2) in zip(*(results[n][k] for n in results for k in ("ctx_curve", "mlm_curve"))):
        print(f"{s:5d} | {c1:+.3f}, {l1:.3f} | {c2:+.3f}, {l2:.3f}")
    for n, r in results.items():
        ft = "" if r["finetuned"] is None else f", fine-tuned {100 * r['finetuned']:.1f}"
        print(f"{n}: final contextual score {r['ctx']:.3f}, held-out MLM loss {r['eval_mlm_loss']:.3f}, "
              f"wordsim {r['wordsim']:.3f}{ft} "
              f"({r['wall_s']:.0f} s pre-training)")
    try:
        for key, label, better in (("mlm_curve", "held-out MLM loss", False), ("ctx_curve", "contextual score", True)):
            target = results["mlm"][key][-1][1]
            s = fns.speedup(results["mlm"][key], results["taco"][key], better)
            where = fns.first_step_reaching(results["taco"][key], target, better)
            print(f"TACO reaches MLM's final {label} ({target:.3f}) at step {where}: speed-up "
                  + ("not reached" if s is None else f"{s:.2f}x"))
    except NotImplementedError:
        print("(write first_step_reaching and speedup to see the speed-ups)")
    except (TypeError, ValueError, ZeroDivisionError) as err:  # the student's functions: a sentence, not a traceback
        print(f"(your first_step_reaching / speedup failed on these curves: {type(err).__name__}: {err}; the checks "
              f"say why: python -m pytest exercises/test_ex6_mlm_vs_taco.py --student)")
    try:
        from tools import pictures
        run_dirs = [r["run"] for r in results.values()]
        os.makedirs(args.pictures, exist_ok=True)
        pictures.curves(run_dirs, os.path.join(args.pictures, "curves.png"))
        pictures.cosine(run_dirs, os.path.join(args.pictures, "cosine.png"), part="g")  # g = h - e: what TC aligns
    except cli.UsageError as err:
        print(f"note: no pictures ({err})")
    if args.json:
        with cli.errors():
            checkpoints.write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
