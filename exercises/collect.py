"""Gather a class's exercise 5 into one table for the projector: what the laptops predicted, what
they measured, how often the predictions were right, and why the students predicted what they did.

    python exercises/ex5_ablations.py --json ana.json      # on each laptop (after its predictions)
    python exercises/collect.py handed-in/                  # the lecturer: a folder of those files, or
    python exercises/collect.py ana.json ben.json ...       # the files themselves

A setting's measured direction is taken from each laptop's own baseline (the same "same" margins as
ex5_ablations.py: 0.03 for the contextual score, 0.05 for word similarity); the table gives the
median over the laptops and their spread. Laptops that ran another number of steps (`--steps`) get
a table of their own: their numbers are not comparable. A file that is not an ex5_ablations.py
--json file (cut short, from another exercise, edited) is skipped with a note naming it, and a file
handed in twice (the same content) counts once.
"""
import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from engine.cli import UsageError  # noqa: E402
from exercises.ex5_ablations import SAME, SETTINGS, direction  # noqa: E402

WHAT = {"ctx": "contextual score", "wordsim": "wordsim ρ"}


def files_of(paths):
    """The .json files named, and those inside the folders named (sorted)."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            found += sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".json"))
        elif os.path.isfile(path):
            found.append(path)
        else:
            raise UsageError(f"{path} does not exist: pass the folder of the handed-in files, or the files")
    if not found:
        raise UsageError(f"no .json file in {', '.join(paths)}: each laptop writes one with "
                         f"`python exercises/ex5_ablations.py --json NAME.json`")
    return found


def read(path):
    """-> (one laptop's {"predictions", "results", "steps", ...}, None), or (None, why it is not one)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return None, f"not readable JSON ({err}): cut short, or not a laptop's file"
    if not isinstance(data, dict) or data.get("exercise") != "ex5_ablations":
        return None, "not a file that `exercises/ex5_ablations.py --json` wrote"
    results = data.get("results")
    if not isinstance(results, dict) or not isinstance(results.get("baseline"), dict):
        return None, "no baseline in it (run with --settings without it?): no direction can be measured"
    try:
        for r in results.values():
            float(r["ctx"]), float(r["wordsim"])
    except (KeyError, TypeError, ValueError):
        return None, "a setting without a contextual score and word similarity (edited?)"
    return data, None


def steps_of(data):
    """The pre-training steps a laptop ran (files of older versions say None: the miniature's default)."""
    if data.get("steps"):
        return data["steps"]
    from exercises.miniature import MINI
    return MINI["steps"]


def measured(data, name, key):
    return direction(data["results"][name][key] - data["results"]["baseline"][key], SAME[key])


def table(laptops, steps):
    """The projector's table (markdown), one row per setting and quantity."""
    lines = [f"Exercise 5 of {len(laptops)} laptop(s), {steps} pre-training steps: the median over the laptops (min "
             f"– max), the measured direction against each laptop's own baseline, and the predictions.", "",
             "| setting | quantity | measured (median, min – max) | measured higher / lower / same | predicted "
             "higher / lower / same | predictions right |", "|---|---|---|---|---|---|"]
    for name in SETTINGS:
        if name == "baseline":
            continue
        for key in ("ctx", "wordsim"):
            seen, said, right, values = [], [], 0, []
            for data in laptops:
                if name not in data["results"]:
                    continue
                values.append(data["results"][name][key])
                seen.append(measured(data, name, key))
                guess = (data.get("predictions") or {}).get(name, {}).get(key)
                if guess:
                    said.append(guess)
                    right += guess == seen[-1]
            if not values:
                continue
            count = lambda xs: " / ".join(str(xs.count(d)) for d in ("higher", "lower", "same"))  # noqa: E731
            lines.append(f"| {name} | {WHAT[key]} | {statistics.median(values):.3f} ({min(values):.3f} – "
                         f"{max(values):.3f}) | {count(seen)} | {count(said)} | "
                         f"{f'{right} of {len(said)}' if said else '–'} |")
    return "\n".join(lines)


def reasons(laptops):
    """Each laptop's prediction and reason per setting, marked against what that laptop measured."""
    lines = ["", "Why (each laptop's prediction of the contextual score / word similarity, ✓ or ✗ against its own "
             "measurement, and its reason):"]
    for name in SETTINGS:
        said = []
        for data in laptops:
            guess = (data.get("predictions") or {}).get(name) or {}
            if name not in data["results"] or not (guess.get("ctx") or guess.get("wordsim") or guess.get("why")):
                continue
            marks = [guess.get(k) or "–" for k in ("ctx", "wordsim")]
            marks = [m if m == "–" else m + (" ✓" if m == measured(data, name, k) else " ✗")
                     for m, k in zip(marks, ("ctx", "wordsim"))]
            why = " ".join(str(guess.get("why") or "").split()) or "(no reason given)"
            said.append(f"  - {data['name']}: {' / '.join(marks)}: {why}")
        if said:
            lines += [f"- {name}"] + said
    return "\n".join(lines) if len(lines) > 2 else ""


def gather(paths):
    """-> (the laptops' files, each once, with a "name"; the notes on the files skipped)."""
    laptops, notes, seen = [], [], {}
    for path in files_of(paths):
        data, why = read(path)
        if why:
            notes.append(f"skipped {path}: {why}")
            continue
        content = json.dumps(data, sort_keys=True)
        if content in seen:
            notes.append(f"{path} holds the same as {seen[content]} (handed in twice?): counted once")
            continue
        seen[content] = path
        laptops.append({**data, "name": os.path.splitext(os.path.basename(path))[0]})
    if not laptops:
        raise UsageError(f"none of the files is one that `exercises/ex5_ablations.py --json` wrote: "
                         + "; ".join(notes[:3]) + ("; ..." if len(notes) > 3 else ""))
    return laptops, notes


def main(argv=None):
    from engine import cli
    p = argparse.ArgumentParser(description="One table of a class's exercise 5: predictions, results and reasons of "
                                            "every laptop's `ex5_ablations.py --json` file.")
    p.add_argument("paths", nargs="+", help="folders of handed-in .json files, or the files")
    args = p.parse_args(argv)
    with cli.errors():
        laptops, notes = gather(args.paths)
        groups = {}
        for data in laptops:
            groups.setdefault(steps_of(data), []).append(data)
        order = sorted(groups, key=lambda s: -len(groups[s]))  # the class's own step count first
        for steps in order:
            print(table(groups[steps], steps) + "\n")
        if len(order) > 1:
            print(f"(Laptops that ran another number of steps than {order[0]} are in tables of their own: "
                  + ", ".join(f"{d['name']} ({s})" for s in order[1:] for d in groups[s]) + ".)\n")
        print(reasons(laptops), flush=True)  # before the notes on stderr
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    return laptops


if __name__ == "__main__":
    main()
