"""The walkthrough runs, prints each step, reuses the TACO run of exercises 5 and 6, and its init
numbers obey the closed form it explains."""
import math

import pytest

from exercises import walkthrough
from exercises.miniature import pretrain, run_name


def test_walkthrough_traces_init_and_after(tmp_path, capsys):
    run_dir, _ = pretrain(str(tmp_path), steps=2)  # as exercise 5 or 6 would, before the walkthrough
    out = walkthrough.main(["--steps", "2", "--out", str(tmp_path)])
    text = capsys.readouterr().out
    assert f"Reusing a miniature TACO (2 steps, one thread): {run_dir}" in text  # not trained again
    for step in ("== 1. The batch", "g = h - e", "Positive (uniform within W=5", "Negatives: K=50", "Logits = cosines / tau",
                 "-log p =", "== 3. After 2 steps"):
        assert step in text, step
    log_k1 = math.log(51)
    init = out["init"]
    # at init the positive is no closer than the negatives: chance, plus the spread of the logits
    assert abs(init["gap"]) < 0.05 and log_k1 < init["loss"] < log_k1 + init["sigma"] ** 2
    assert abs(init["loss_tau_1"] - log_k1) < 0.05  # tau = 1: the spread nearly vanishes


def test_default_run_is_the_one_of_exercises_5_and_6():
    """walkthrough's default --steps names its run as exercises 5 and 6 name their TACO run."""
    assert run_name([], 0, None) == run_name([], 0, 300) == "taco-seed0"
    assert run_name(["--objective", "mlm"], 1, 20) == "objective_mlm-seed1-steps20"


def test_walkthrough_bad_run_is_one_line(tmp_path, capsys):
    from data import load_tokenizer
    from engine.corpus import tokenize_corpus
    tokenize_corpus("toy", load_tokenizer("toy"))  # the toy corpus's token cache, made before (its progress on stderr)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        walkthrough.main(["--run", str(tmp_path / "nothing")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and err[0].startswith("error: ")
