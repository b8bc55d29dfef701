"""exercises/collect.py: the class's exercise 5 in one table (made-up laptops), the reasons, files that
are not a laptop's skipped with a note, a file handed in twice counted once, other step counts apart."""
import json

import pytest

from exercises import collect

HEADER = "| setting | quantity |"


def laptop(folder, name, ctx_k4, guess, why="", steps=300):
    results = {s: {"ctx": 0.2, "wordsim": 0.0, "eval_mlm_loss": 5.0} for s in collect.SETTINGS}
    results["K=4"]["ctx"] = ctx_k4
    predictions = {s: {"ctx": None, "wordsim": None, "why": ""} for s in collect.SETTINGS if s != "baseline"}
    predictions["K=4"].update(ctx=guess, why=why)
    text = json.dumps({"exercise": "ex5_ablations", "seed": 0, "steps": steps, "predictions": predictions,
                       "results": results})
    (folder / f"{name}.json").write_text(text)
    return text


def test_one_table_of_the_class(tmp_path, capsys):
    laptop(tmp_path, "ana", 0.10, "lower", "fewer negatives push less")
    laptop(tmp_path, "ben", 0.12, "higher")
    laptop(tmp_path, "eva", 0.30, "lower")
    collect.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "Exercise 5 of 3 laptop(s), 300 pre-training steps" in out and HEADER in out
    row = next(line for line in out.splitlines() if line.startswith("| K=4 | contextual score"))
    assert row == "| K=4 | contextual score | 0.120 (0.100 – 0.300) | 1 / 2 / 0 | 1 / 2 / 0 | 1 of 3 |", row
    assert "| W=15 | contextual score | 0.200 (0.200 – 0.200) | 0 / 0 / 3 | 0 / 0 / 0 | – |" in out
    assert "  - ana: lower ✓ / –: fewer negatives push less" in out and "  - ben: higher ✗ / –: (no reason given)" in out
    assert "  - eva: lower ✗ / –" in out  # eva measured "higher"


def test_bad_files_skipped_twins_once_other_steps_apart(tmp_path, capsys):
    text = laptop(tmp_path, "ana", 0.10, "lower")
    (tmp_path / "ana-again.json").write_text(text)  # the same file handed in twice
    laptop(tmp_path, "ben", 0.12, "lower")
    laptop(tmp_path, "quick", 0.25, "lower", steps=30)
    (tmp_path / "cut.json").write_text(text[:100])  # a copy cut short
    (tmp_path / "other.json").write_text(json.dumps({"machine": {}, "results": {"ex5": {}}}))
    collect.main([str(tmp_path)])
    out, err = capsys.readouterr()
    assert "Exercise 5 of 2 laptop(s), 300 pre-training steps" in out and "Exercise 5 of 1 laptop(s), 30 " in out
    assert out.index("300 pre-training") < out.index("30 pre-training") and "quick (30)" in out
    assert "holds the same as" in err and "ana.json" in err and "counted once" in err  # (handed in twice)
    assert "skipped" in err and "cut.json: not readable JSON" in err
    assert "other.json: not a file that `exercises/ex5_ablations.py --json` wrote" in err


@pytest.mark.parametrize("case", ["no laptop's file", "missing", "a missing one among files"])
def test_nothing_to_show_is_one_line(tmp_path, capsys, case):
    (tmp_path / "other.json").write_text(json.dumps({"machine": {}}))
    laptop(tmp_path / "..", "ana", 0.1, "lower")
    args = {"no laptop's file": [str(tmp_path)], "missing": [str(tmp_path / "missing.json")],
            "a missing one among files": [str(tmp_path / ".." / "ana.json"), str(tmp_path / "x")]}[case]
    with pytest.raises(SystemExit) as stop:
        collect.main(args)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1, err
