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

