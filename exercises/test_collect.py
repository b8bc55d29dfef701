"""exercises/collect.py: the class's exercise 5 in one table (made-up laptops), and one error line for
what is not an ex5_ablations.py --json file."""
import json
import subprocess
import sys

from exercises import collect

HEADER = "| setting | quantity |"


def laptop(folder, name, ctx_k4, guess):
    results = {s: {"ctx": 0.2, "wordsim": 0.0, "eval_mlm_loss": 5.0} for s in collect.SETTINGS}
    results["K=4"]["ctx"] = ctx_k4
    predictions = {s: {"ctx": None, "wordsim": None, "why": ""} for s in collect.SETTINGS if s != "baseline"}
    predictions["K=4"]["ctx"] = guess
    (folder / f"{name}.json").write_text(json.dumps({"exercise": "ex5_ablations", "seed": 0, "steps": None,
                                                     "predictions": predictions, "results": results}))


def test_one_table_of_the_class(tmp_path, capsys):
    laptop(tmp_path, "ana", 0.10, "lower")
    laptop(tmp_path, "ben", 0.12, "higher")
    laptop(tmp_path, "eva", 0.30, "lower")
    collect.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "Exercise 5 of 3 laptop(s)" in out and HEADER in out
    row = next(line for line in out.splitlines() if line.startswith("| K=4 | contextual score"))
    assert row == "| K=4 | contextual score | 0.120 (0.100 – 0.300) | 1 / 2 / 0 | 1 / 2 / 0 | 1 of 3 |", row
    assert "| W=15 | contextual score | 0.200 (0.200 – 0.200) | 0 / 0 / 3 | 0 / 0 / 0 | – |" in out


def test_what_is_not_a_laptops_file_is_one_line(tmp_path):
    laptop(tmp_path, "ana", 0.1, "lower")
    (tmp_path / "other.json").write_text(json.dumps({"machine": {}, "results": {"ex5": {}}}))
    for args in ([str(tmp_path)], [str(tmp_path / "missing.json")], [str(tmp_path / "ana.json"), str(tmp_path / "x")]):
        r = subprocess.run([sys.executable, "exercises/collect.py", *args], capture_output=True, text=True,
                           cwd=collect.ROOT)
        assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1, r.stderr
    r = subprocess.run([sys.executable, "exercises/collect.py", str(tmp_path)], capture_output=True, text=True,
                       cwd=collect.ROOT)
    assert "other.json is not a file that `exercises/ex5_ablations.py --json` wrote" in r.stderr
