"""The walkthrough runs, prints each step, and its init numbers obey the closed form it explains."""
import math

import pytest

from exercises import walkthrough


def test_walkthrough_traces_init_and_after(tmp_path, capsys):
    out = walkthrough.main(["--steps", "2", "--out", str(tmp_path)])
    text = capsys.readouterr().out
    for step in ("== 1. The batch", "g = h - e", "Positive (uniform within W=5", "Negatives: K=50", "Logits = cosines / tau",
                 "-log p =", "== 3. After 2 steps"):
        assert step in text, step
    log_k1 = math.log(51)
    init = out["init"]
    # at init the positive is no closer than the negatives: chance, plus the spread of the logits
    assert abs(init["gap"]) < 0.05 and log_k1 < init["loss"] < log_k1 + init["sigma"] ** 2
    assert abs(init["loss_tau_1"] - log_k1) < 0.05  # tau = 1: the spread nearly vanishes


def test_walkthrough_bad_run_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        walkthrough.main(["--run", str(tmp_path / "nothing")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and err[0].startswith("error: ")
