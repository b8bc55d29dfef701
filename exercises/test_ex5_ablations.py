"""Checks of exercise 5: every prediction is made (before measuring), and the measurement runs."""
from exercises._check import expect

EXERCISE = "ex5_ablations"


def check_predictions(impl):
    from exercises.ex5_ablations import CHOICES, SETTINGS
    made = getattr(impl, "PREDICTIONS", None) or {}
    for name in SETTINGS:
        if name == "baseline":
            continue
        guess = made.get(name) or {}
        for key in ("ctx", "wordsim"):
            expect(guess.get(key) in CHOICES, f"PREDICTIONS[{name!r}][{key!r}] is {guess.get(key)!r}: predict "
                                              f"{' / '.join(map(repr, CHOICES))} before you measure")
        expect(len(str(guess.get("why", "")).split()) >= 3, f"PREDICTIONS[{name!r}]['why'] is empty: give your "
                                                            f"reason in a sentence, then measure")


def test_predictions(impl):
    check_predictions(impl)


def test_measurement_runs(tmp_path, capsys):
    """One setting, two steps: the table comes out (fine-tuning: test_finetune_score)."""
    from exercises import ex5_ablations
    results = ex5_ablations.main(["--settings", "K=4", "--steps", "2", "--out", str(tmp_path)])
    assert set(results) == {"K=4"} and -1 <= results["K=4"]["ctx"] <= 1 and -1 <= results["K=4"]["wordsim"] <= 1
    assert "| K=4 |" in capsys.readouterr().out


def test_finetune_score(tmp_path):
    """The miniature's fine-tuning on the toy pair task, on a handful of pairs: a score in [0, 1]."""
    from exercises.miniature import finetune_score, pretrain
    run_dir, _ = pretrain(str(tmp_path), steps=2)
    assert 0 <= finetune_score(run_dir, train_pairs=16, epochs=1, dev_pairs=64) <= 1


def test_unknown_setting_is_one_line(tmp_path, capsys):
    import pytest
    from exercises import ex5_ablations
    with pytest.raises(SystemExit) as err:
        ex5_ablations.main(["--settings", "W=4", "--out", str(tmp_path)])
    assert err.value.code == 2 and capsys.readouterr().err.startswith("error: unknown setting W=4")


def test_runs_side_by_side_give_the_numbers_of_one_process(tmp_path):
    """pretrain_all with 2 worker processes (one thread each) and in this process: the same numbers,
    to the last digit, and each run's CPU seconds recorded."""
    from exercises.miniature import pretrain_all
    runs = [([], 0), (["--objective", "mlm"], 0)]
    pooled = pretrain_all(str(tmp_path / "pool"), runs, steps=2, jobs=2, log=lambda *a: None)
    alone = pretrain_all(str(tmp_path / "alone"), runs, steps=2, jobs=1, log=lambda *a: None)
    for (_, a), (_, b) in zip(pooled, alone):
        assert a["ctx_score"] == b["ctx_score"] and a["eval_mlm_loss"] == b["eval_mlm_loss"]
        assert a["threads"] == b["threads"] == 1 and a["cpu_s"] > 0
    again = pretrain_all(str(tmp_path / "pool"), runs, steps=2, jobs=2, log=lambda *a: None)
    assert all(r["reused"] for _, r in again)


def test_measure_tables_from_results(tmp_path, monkeypatch):
    """exercises/measure.py's tables and claims, on made-up results (its runs are the drivers' own, tested above)."""
    from exercises import measure
    curve = [(50, 0.0), (100, 0.25), (300, 0.25)]
    loss = [(50, 5.0), (100, 4.9), (300, 4.8)]
    ex5 = {s: {name: {"ctx": 0.25 - 0.1 * (name == "K=4"), "wordsim": 0.0, "eval_mlm_loss": 4.9, "cpu_s": 15.0}
               for name in measure.LABEL5} for s in (0, 1)}
    ex6 = {s: {n: {"ctx": c, "eval_mlm_loss": 4.9, "wordsim": 0.0, "ctx_curve": k, "mlm_curve": loss}
               for n, c, k in (("mlm", 0.0, [(50, 0.0), (100, 0.0), (300, 0.0)]), ("taco", 0.25, curve))} for s in (0, 1)}
    ex7 = {s: {n: {"ctx": 0.1, "eval_mlm_loss": 5.5, "wordsim": 0.0, "cpu_s": 15.0} for n in ("mlm", "taco")} for s in (0, 1)}
    r = {"ex5": ex5, "ex6": ex6, "ex7": ex7, "time": {k: {"wall_s": 60.0, "cpu_s": 90.0} for k in ("ex5", "ex6", "ex7")}}
    info = {"commit": "abc1234", "date": "2026-01-01", "jobs": 2, "cores": 2, "load_at_start": "0.1, 0.1, 0.1"}
    t = measure.tables(r, [0, 1], info)
    assert "| K=4 | 0.150 (0.150 – 0.150) |" in t["ex5-table"] and "abc1234" in t["ex5-table"]
    assert "| 100 | 0.000 / 0.000 | 0.250 / 0.250 |" in t["ex6-curves"]
    assert "one run takes 15 – 15 CPU-seconds" in t["ex5-time"]
    page = tmp_path / "page.md"
    page.write_text("a\n<!-- measure.py:preliminary -->\n<!-- /measure.py -->\nkept\n<!-- measure.py:ex5-table -->\n"
                    "old\n<!-- /measure.py -->\n<!-- measure.py:ex5-seeds -->\n<!-- /measure.py -->\nb\n")
    monkeypatch.setattr(measure, "PAGES", {"page.md": str(page)})
    assert measure.update_pages(t) == ["page.md"]
    text = page.read_text()
    assert "| K=4 | 0.150" in text and "old" not in text and "kept" in text and "Per seed (0 / 1)" in text
    assert "PRELIMINARY" in text  # 2 seeds: not the final tables
    assert text.count("<!-- /measure.py -->") == 3 and measure.update_pages(t) == []  # the same again: no change
