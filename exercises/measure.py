"""Re-measure every table of exercises 5, 6 and 7, over several pre-training seeds, in one command.

    python exercises/measure.py                              # seeds 0,1,2: every table, printed as markdown
    python exercises/measure.py --update_pages               # and written into the pages, between their markers
    python exercises/measure.py --steps 20 --seeds 0,1 --out /tmp/m   # a quick check that it works (numbers meaningless)

It runs the exercises' own drivers as a student would (`ex6_mlm_vs_taco.py`, `ex5_ablations.py`, then
`ex7_embeddings.py`, which reuses exercise 5's runs), each run with ONE thread and as many runs side by
side as --jobs (default: the machine's free cores), and times each exercise: wall seconds and CPU
seconds (this process and its workers). Exercise 6 is timed from scratch in a folder of its own; its
runs must equal exercise 5's baseline and MLM runs to the last digit (printed: one thread makes a run
reproducible). It prints the commit, thread count, cores and load, every table in the pages' layout,
and checks the claims the pages make in words (e.g. "K=4 lowers the contextual score in every seed").
With --update_pages the tables go into the pages ex5-7 (the times), their results pages
answers/results/ex5_ablations.md ... (the tables and the conclusions) and TEACHERS.md between
`<!-- measure.py:NAME -->` and `<!-- /measure.py -->`; the words around them are the authors' (a claim marked ✗ means they need rewriting). Drivers' own output: OUT/log.txt.
"""
import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import resource
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

PAGES = {name: os.path.join(ROOT, "exercises", name) for name in  # the results: after the predictions (answers/)
         ("ex5_ablations.md", "ex6_mlm_vs_taco.md", "ex7_embeddings.md", "answers/results/ex5_ablations.md",
          "answers/results/ex6_mlm_vs_taco.md", "answers/results/ex7_embeddings.md", "TEACHERS.md")}
LABEL5 = {"baseline": "baseline (W=5, K=50, τ=0.07, λ=1)", "W=15": "W=15", "K=4": "K=4", "tau=0.5": "τ=0.5",
          "lambda=0.1": "λ=0.1", "lambda=0 (MLM)": "λ=0 (MLM)"}


# ----------------------------------------------------------------------------- where and how it ran

def cpu_seconds():
    """User + system CPU seconds of this process and of its finished children (the pool's workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def machine(jobs):
    import torch
    from exercises.miniature import commit, cpu_name, free_cores
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return {"commit": commit(), "date": datetime.date.today().isoformat(), "threads_per_run": 1,
            "jobs": jobs or free_cores(), "cores": cores, "load_at_start": load, "cpu": cpu_name(),
            "torch": torch.__version__, "python": platform.python_version()}


def cpu_of(info):
    return info.get("cpu") or "an unrecorded CPU"


# ----------------------------------------------------------------------------- running the exercises

def timed(label, fn, log):
    """fn() with its wall and CPU seconds; its printing goes to the log file."""
    t0, c0 = time.time(), cpu_seconds()
    with contextlib.redirect_stdout(log):
        print(f"\n===== {label} =====", flush=True)
        result = fn()
    took = {"wall_s": time.time() - t0, "cpu_s": cpu_seconds() - c0}
    print(f"{label}: {took['wall_s']:.0f} s wall, {took['cpu_s']:.0f} CPU-s", flush=True)
    return result, took


def measure(seeds, out, steps, jobs, log):
    from exercises import ex5_ablations, ex6_mlm_vs_taco, ex7_embeddings
    common = ["--out", os.path.join(out, "runs"), "--jobs", str(jobs)] + (["--steps", str(steps)] if steps else [])
    results = {"ex5": {}, "ex6": {}, "ex7": {}, "time": {}}
    first = seeds[0]
    fresh = ["--out", os.path.join(out, "ex6-alone"), "--jobs", str(jobs)] + (["--steps", str(steps)] if steps else [])
    results["ex6"][first], results["time"]["ex6"] = timed(
        f"exercise 6 from scratch, seed {first} (2 runs)",
        lambda: ex6_mlm_vs_taco.main(fresh + ["--seed", str(first), "--pictures", os.path.join(out, "ex6-pictures")]), log)
    for seed in seeds:
        label = "from scratch" if seed == first else "(seed timing not kept)"
        results["ex5"][seed], took5 = timed(f"exercise 5, seed {seed}, {label} (6 runs)",
                                            lambda: ex5_ablations.main(common + ["--seed", str(seed)]), log)
        results["ex7"][seed], took7 = timed(f"exercise 7, seed {seed}, after exercise 5 (4 new runs)",
                                            lambda: ex7_embeddings.main(common + ["--seed", str(seed)]), log)
        if seed == first:
            results["time"]["ex5"], results["time"]["ex7"] = took5, took7
        else:
            results["ex6"][seed], _ = timed(f"exercise 6, seed {seed}, after exercise 5 (reused)",
                                            lambda: ex6_mlm_vs_taco.main(common + ["--seed", str(seed), "--pictures",
                                                                                   os.path.join(out, "ex6-pictures")]),
                                            log)
    same = all(results["ex6"][first][a][k] == results["ex5"][first][b][k] for a, b in
               (("taco", "baseline"), ("mlm", "lambda=0 (MLM)")) for k in ("ctx", "eval_mlm_loss"))
    results["reproducible"] = same
    return results


# ----------------------------------------------------------------------------- the tables

def spread(values, digits=3):
    """'mean (min – max)' as the pages write it; a minus sign, not a hyphen."""
    f = f"{{:.{digits}f}}"
    text = f"{f.format(statistics.mean(values))} ({f.format(min(values))} – {f.format(max(values))})"
    return text.replace("-", "−").replace(" − ", " – ")


def per_seed(values, digits=3, sign=""):
    return " / ".join(f"{v:{sign}.{digits}f}" for v in values).replace("-", "−")


def tables(r, seeds, info):
    t = {}
    ex5, ex6, ex7 = r["ex5"], r["ex6"], r["ex7"]
    t["preliminary"] = "" if len(seeds) >= 3 else (
        f"> **PRELIMINARY.** The tables below are {len(seeds)} seed(s) ({', '.join(map(str, seeds))}) measured at "
        f"commit {info['commit']}, not the final code; the final ones, over seeds 0, 1, 2, are written here by "
        f"`python exercises/measure.py --update_pages`. Until then, read them as an example of the layout.")
    note = (f"Measured with `python exercises/measure.py` (seed{'s' if len(seeds) > 1 else ''} "
            f"{', '.join(map(str, seeds))}) at commit {info['commit']}, {info['date']}, on {cpu_of(info)}, one "
            f"thread per run, {info['jobs']} run(s) side by side on {info['cores']} cores (load average at the start {info['load_at_start']}); mean (min – max over the "
            f"seeds). One thread gives the same numbers on every machine with this CPU; another CPU may differ in the "
            f"last digits.")
    t["ex5-table"] = note + "\n\n| setting | contextual score | wordsim ρ | held-out MLM loss |\n| --- | --- | --- | --- |\n" + "\n".join(
        f"| {LABEL5[name]} | {spread([ex5[s][name]['ctx'] for s in seeds])} | "
        f"{spread([ex5[s][name]['wordsim'] for s in seeds])} | {spread([ex5[s][name]['eval_mlm_loss'] for s in seeds])} |"
        for name in LABEL5)
    t["ex5-seeds"] = ("Per seed (" + " / ".join(map(str, seeds)) + "), the contextual score and its change against the "
                      "same seed's baseline:\n\n| setting | contextual score | change | held-out MLM loss change |\n"
                      "| --- | --- | --- | --- |\n" + "\n".join(
                          f"| {LABEL5[name]} | {per_seed([ex5[s][name]['ctx'] for s in seeds])} | "
                          + ("–" if name == "baseline" else
                             per_seed([ex5[s][name]['ctx'] - ex5[s]['baseline']['ctx'] for s in seeds], sign="+"))
                          + " | " + ("–" if name == "baseline" else per_seed(
                              [ex5[s][name]['eval_mlm_loss'] - ex5[s]['baseline']['eval_mlm_loss'] for s in seeds],
                              sign="+"))
                          + " |" for name in LABEL5))
    t["ex6-table"] = note + "\n\n| objective | contextual score at the last step | held-out MLM loss | wordsim ρ |\n| --- | --- | --- | --- |\n" + "\n".join(
        f"| {name.upper() if name == 'mlm' else 'TACO'} | {spread([ex6[s][name]['ctx'] for s in seeds])} | "
        f"{spread([ex6[s][name]['eval_mlm_loss'] for s in seeds])} | {spread([ex6[s][name]['wordsim'] for s in seeds])} |"
        for name in ("mlm", "taco"))
    steps = [step for step, _ in ex6[seeds[0]]["taco"]["ctx_curve"]]
    show = [s for s in steps if s in (50, 100, 200) or s == steps[-1]] or steps
    curve = {(s, name, key): dict(ex6[s][name][key]) for s in seeds for name in ("mlm", "taco")
             for key in ("ctx_curve", "mlm_curve")}
    t["ex6-curves"] = (f"The curves (every {steps[1] - steps[0] if len(steps) > 1 else steps[0]} steps; seed "
                       + " / ".join(map(str, seeds)) + "):\n\n| step | MLM contextual score | TACO contextual score | "
                       "MLM held-out loss | TACO held-out loss |\n| --- | --- | --- | --- | --- |\n" + "\n".join(
                           f"| {step} | " + " | ".join(per_seed([curve[(s, name, key)][step] for s in seeds])
                                                        for key in ("ctx_curve", "mlm_curve") for name in ("mlm", "taco"))
                           + " |" for step in show))
    from exercises.solutions.ex6_mlm_vs_taco import first_step_reaching, speedup
    rows = []
    for key, label, better in (("ctx_curve", "contextual score", True), ("mlm_curve", "held-out MLM loss", False)):
        cells = [speedup(ex6[s]["mlm"][key], ex6[s]["taco"][key], better) for s in seeds]
        rows.append(f"| {label} | " + " / ".join("not reached" if c is None else f"{c:.2f}" for c in cells) + " |")
    opens = [first_step_reaching(ex6[s]["taco"]["ctx_curve"], 0.2) for s in seeds]
    t["ex6-speedups"] = ("The speed-ups `speedup` computes (reference solution), per seed, and TACO's first step with a "
                         "contextual score ≥ 0.2: " + " / ".join(str(o) for o in opens) + ".\n\n| curve | speed-up "
                         "(seed " + " / ".join(map(str, seeds)) + ") |\n| --- | --- |\n" + "\n".join(rows))
    t["ex7-table"] = note + "\n\n| variant | contextual score | held-out MLM loss | wordsim ρ |\n| --- | --- | --- | --- |\n" + "\n".join(
        f"| {name} | {spread([ex7[s][name]['ctx'] for s in seeds])} | {spread([ex7[s][name]['eval_mlm_loss'] for s in seeds])} "
        f"| {spread([ex7[s][name]['wordsim'] for s in seeds])} |" for name in ex7[seeds[0]])
    cpu = {name: [x["cpu_s"] for s in seeds for x in r[name][s].values() if isinstance(x, dict) and x.get("cpu_s")]
           for name in ("ex5", "ex7")}
    runs_cpu = cpu["ex5"] + cpu["ex7"]
    per_run = (f"one run takes {min(runs_cpu):.0f} – {max(runs_cpu):.0f} CPU-seconds (one thread)"
               if runs_cpu else "")
    for name, what in (("ex5", "`python exercises/ex5_ablations.py` (6 runs)"),
                       ("ex6", "`python exercises/ex6_mlm_vs_taco.py` from scratch (2 runs, and the pictures)"),
                       ("ex7", "`python exercises/ex7_embeddings.py` after exercise 5 (4 new runs)")):
        took = r["time"][name]
        t[f"{name}-time"] = (f"**Time:** {what} took {took['wall_s']:.0f} s wall and {took['cpu_s']:.0f} CPU-s, with "
                             f"{info['jobs']} run(s) side by side on {info['cores']} cores of {cpu_of(info)} (load "
                             f"average at the start {info['load_at_start']}), commit {info['commit']}; {per_run}. "
                             f"On a laptop with more free cores more runs go side by side.")
    t["teachers-time"] = "\n".join(
        f"| {n} | " + f"{r['time'][k]['wall_s'] / 60:.1f} min wall, {r['time'][k]['cpu_s']:.0f} CPU-s |"
        for n, k in (("5 ablations (6 runs)", "ex5"), ("6 MLM vs TACO from scratch (2 runs)", "ex6"),
                     ("7 embeddings after 5 (4 runs)", "ex7")))
    t["teachers-time"] = (f"Measured by `python exercises/measure.py` at commit {info['commit']} on {info['cores']} "
                          f"cores of {cpu_of(info)}, {info['jobs']} run(s) side by side, one thread each (load at the start "
                          f"{info['load_at_start']}); {per_run}.\n\n| exercise | computer time |\n| --- | --- |\n"
                          + t["teachers-time"])
    return t


CLAIMS = [  # (what a page says in words, a test on the results of every seed)
    ("τ=0.5 brings the contextual score down to MLM's level (within 0.03) in every seed",
     lambda e5, e6, e7, s: abs(e5[s]["tau=0.5"]["ctx"] - e5[s]["lambda=0 (MLM)"]["ctx"]) <= 0.03),
    ("K=4 lowers the contextual score (by more than 0.03) in every seed",
     lambda e5, e6, e7, s: e5[s]["K=4"]["ctx"] < e5[s]["baseline"]["ctx"] - 0.03),
    ("λ=0.1 lowers the contextual score in every seed but stays above MLM's by more than 0.05",
     lambda e5, e6, e7, s: e5[s]["lambda=0.1"]["ctx"] < e5[s]["baseline"]["ctx"]
     and e5[s]["lambda=0.1"]["ctx"] > e5[s]["lambda=0 (MLM)"]["ctx"] + 0.05),
    ("W=15 raises the contextual score in every seed",
     lambda e5, e6, e7, s: e5[s]["W=15"]["ctx"] > e5[s]["baseline"]["ctx"]),
    ("every setting's held-out MLM loss is within 0.15 of the same seed's baseline",
     lambda e5, e6, e7, s: all(abs(x["eval_mlm_loss"] - e5[s]["baseline"]["eval_mlm_loss"]) <= 0.15
                               for x in e5[s].values())),
    ("TACO's contextual score reaches 0.2 by step 100 in every seed; MLM's never does",
     lambda e5, e6, e7, s: any(step <= 100 and v >= 0.2 for step, v in e6[s]["taco"]["ctx_curve"])
     and all(v < 0.2 for _, v in e6[s]["mlm"]["ctx_curve"])),
    ("frozen embeddings raise the held-out MLM loss of both MLM and TACO by more than 0.3",
     lambda e5, e6, e7, s: e7[s]["mlm_frozen"]["eval_mlm_loss"] > e7[s]["mlm"]["eval_mlm_loss"] + 0.3
     and e7[s]["taco_frozen"]["eval_mlm_loss"] > e7[s]["taco"]["eval_mlm_loss"] + 0.3),
    ("with frozen embeddings TACO keeps a contextual score (> 0.05) and MLM has none (within 0.03 of 0)",
     lambda e5, e6, e7, s: e7[s]["taco_frozen"]["ctx"] > 0.05 and abs(e7[s]["mlm_frozen"]["ctx"]) <= 0.03),
    ("frozen word similarity is the same for mlm_frozen and taco_frozen (the embeddings do not move)",
     lambda e5, e6, e7, s: abs(e7[s]["mlm_frozen"]["wordsim"] - e7[s]["taco_frozen"]["wordsim"]) < 1e-9),
    ("untying leaves MLM's contextual score within 0.03 of its tied value and does not lower TACO's",
     lambda e5, e6, e7, s: abs(e7[s]["mlm_untied"]["ctx"] - e7[s]["mlm"]["ctx"]) < 0.03
     and e7[s]["taco_untied"]["ctx"] >= e7[s]["taco"]["ctx"]),
]


def check_claims(r, seeds):
    out = []
    for claim, test in CLAIMS:
        held = [bool(test(r["ex5"], r["ex6"], r["ex7"], s)) for s in seeds]
        out.append(("✓" if all(held) else "✗") + f" {claim}" + ("" if all(held) else
                                                               f" (fails for seed(s) {[s for s, h in zip(seeds, held) if not h]})"))
    return out


def update_pages(t):
    """Replace each `<!-- measure.py:NAME -->...<!-- /measure.py -->` block of the pages by table NAME."""
    changed = []
    for name, path in PAGES.items():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = re.sub(r"(<!-- measure\.py:([\w-]+) -->\n)(.*?)(<!-- /measure\.py -->)",  # .*? may be empty
                     lambda m: m.group(1) + (t[m.group(2)] + "\n" if t[m.group(2)] else "") + m.group(4)
                     if m.group(2) in t else m.group(0), text, flags=re.S)
        if new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            changed.append(name)
    return changed


def from_json(path, update):
    """The tables and claims of an earlier measurement (its --json file)."""
    from engine import cli
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError) as err:
        raise cli.UsageError(f"--tables_from {path}: {cli.reason(err)}") from None
    try:
        r = {k: ({int(s): v for s, v in x.items()} if k.startswith("ex") else x) for k, x in saved["results"].items()}
        for seed in r["ex6"]:  # JSON made the curves' (step, value) pairs lists
            for name in r["ex6"][seed].values():
                for key in ("ctx_curve", "mlm_curve"):
                    name[key] = [tuple(p) for p in name[key]]
        seeds = sorted(r["ex5"])
        t = tables(r, seeds, saved["machine"])
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        raise cli.UsageError(f"{path} is not a file that `measure.py --json` wrote (no {err} where its results "
                             f"should be); pass one of those to --tables_from") from None
    for name, text in t.items():
        print(f"<!-- measure.py:{name} -->\n{text}\n<!-- /measure.py -->\n")
    print("The pages' claims:\n" + "\n".join(check_claims(r, seeds)))
    if update:
        print("updated: " + (", ".join(update_pages(t)) or "nothing (no markers found)"))
    return r, t


def main(argv=None):
    from engine import cli
    from engine import checkpoints
    p = argparse.ArgumentParser(description="Re-measure every table of exercises 5-7 over several seeds.")
    p.add_argument("--seeds", type=cli.list_of(cli.int_range(0)), default=[0, 1, 2], help="pre-training seeds, e.g. 0,1,2")
    p.add_argument("--out", default="runs/measure", help="where the runs go (finished ones are reused: use a fresh "
                   "folder to measure the times)")
    p.add_argument("--steps", type=cli.int_range(1), default=None, help="pre-training steps (default: the miniature's; "
                   "fewer only to try this script)")
    p.add_argument("--jobs", type=cli.int_range(0), default=0, help="runs side by side (0: the machine's free cores)")
    p.add_argument("--update_pages", action="store_true", help="write the tables into the pages between their markers")
    p.add_argument("--json", default=None, help="also write every number to this file")
    p.add_argument("--tables_from", default=None, help="no runs: the tables of an earlier --json file (e.g. to write "
                   "them into the pages with --update_pages)")
    args = p.parse_args(argv)
    with cli.errors():
        cli.output_path(args.out, "--out", folder=True)
        if args.json:  # checked before ~10 CPU-minutes of runs, not after them
            cli.output_path(args.json, "--json", folder=False)
        os.makedirs(args.out, exist_ok=True)
        if args.update_pages and args.steps:
            raise cli.UsageError("--update_pages writes the pages' tables: measure them with the miniature's own "
                                 "--steps (leave --steps out)")
        if args.tables_from:
            return from_json(args.tables_from, args.update_pages)
        info = machine(args.jobs)
        print(f"commit {info['commit']} | {info['cpu']} | torch {info['torch']} | {info['cores']} cores, load "
              f"{info['load_at_start']} "
              f"| 1 thread per run, {info['jobs']} run(s) side by side | seeds {args.seeds}"
              + (f" | {args.steps} steps (a trial: the numbers are not the pages')" if args.steps else ""), flush=True)
        t0, c0 = time.time(), cpu_seconds()
        with open(os.path.join(args.out, "log.txt"), "w") as log:
            r = measure(args.seeds, args.out, args.steps, args.jobs, log)
        r["time"]["all"] = {"wall_s": time.time() - t0, "cpu_s": cpu_seconds() - c0}
        t = tables(r, args.seeds, info)
        print()
        for name, text in t.items():
            print(f"<!-- measure.py:{name} -->\n{text}\n<!-- /measure.py -->\n")
        print("exercise 6 from scratch gave " + ("the very numbers of exercise 5's runs (reproducible)"
                                                 if r["reproducible"] else "OTHER numbers than exercise 5's runs: "
                                                 "one thread should make them equal; investigate"))
        print("The pages' claims:\n" + "\n".join(check_claims(r, args.seeds)))
        print(f"The whole measurement: {r['time']['all']['wall_s'] / 60:.1f} min wall, "
              f"{r['time']['all']['cpu_s']:.0f} CPU-s.")
        if args.update_pages:
            print("updated: " + (", ".join(update_pages(t)) or "nothing (no markers found)"))
        if args.json:
            checkpoints.write_json(args.json, {"machine": info, "results": {k: {str(s): v for s, v in x.items()}
                                                                    if k.startswith("ex") else x for k, x in r.items()}})
    return r, t


if __name__ == "__main__":
    main()
