"""Gather a class's exercise 5 into one table for the projector: what the laptops predicted, what
they measured, and how often the predictions were right.

    python exercises/ex5_ablations.py --json ana.json      # on each laptop (after its predictions)
    python exercises/collect.py handed-in/                  # the lecturer: a folder of those files, or
    python exercises/collect.py ana.json ben.json ...       # the files themselves

A setting's measured direction is taken from each laptop's own baseline (the same "same" margins as
ex5_ablations.py: 0.03 for the contextual score, 0.05 for word similarity); the table gives the
median over the laptops and their spread. Files that are not ex5_ablations.py --json files are
named and refused (one line, exit 2).
"""
import argparse
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
    """One laptop's {"predictions", "results"}; anything else is a UsageError naming the file."""
    from engine import checkpoints
    data = checkpoints.read_json(path)
    results = data.get("results")
    if data.get("exercise") != "ex5_ablations" or not isinstance(results, dict) or not isinstance(
            results.get("baseline"), dict):
        raise UsageError(f"{path} is not a file that `exercises/ex5_ablations.py --json` wrote (with its baseline): "
                         f"take it out of the folder or run exercise 5 again on that laptop")
    try:
        for r in results.values():
            float(r["ctx"]), float(r["wordsim"])
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"{path}: a setting without a contextual score and word similarity (edited?)") from None
    return data


def table(laptops):
    """The projector's table (markdown), one row per setting and quantity."""
    lines = [f"Exercise 5 of {len(laptops)} laptop(s): the median over the laptops (min – max), the measured "
             f"direction against each laptop's own baseline, and the predictions.", "",
             "| setting | quantity | measured (median, min – max) | measured higher / lower / same | predicted "
             "higher / lower / same | predictions right |", "|---|---|---|---|---|---|"]
    for name in SETTINGS:
        if name == "baseline":
            continue
        for key in ("ctx", "wordsim"):
            seen, said, right, values = [], [], 0, []
            for data in laptops:
                r, base = data["results"].get(name), data["results"]["baseline"]
                if r is None:
                    continue
                values.append(r[key])
                seen.append(direction(r[key] - base[key], SAME[key]))
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


def main(argv=None):
    from engine import cli
    p = argparse.ArgumentParser(description="One table of a class's exercise 5: predictions and results of every "
                                            "laptop's `ex5_ablations.py --json` file.")
    p.add_argument("paths", nargs="+", help="folders of handed-in .json files, or the files")
    args = p.parse_args(argv)
    with cli.errors():
        laptops = [read(path) for path in files_of(args.paths)]
        print(table(laptops))
    return laptops


if __name__ == "__main__":
    main()
