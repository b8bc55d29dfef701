"""exercises/handout.py: the student copy hides the answers of exercises 1-4, leaves out the
solutions and the teacher's material, fails the empty stubs with the checks' own sentence, passes a
correct student solution, and still trains (exercises 5-7, the walkthrough)."""
import os
import shutil
import subprocess
import sys

import pytest

from exercises import handout

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    out = tmp_path_factory.mktemp("handout") / "taco-student"
    handout.build(str(out))
    return out


def run(copy, *args, timeout=300):
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "1000"}  # pytest's summary lines not cut
    return subprocess.run([sys.executable, *args], cwd=copy, capture_output=True, text=True, timeout=timeout, env=env)


def test_answers_are_not_readable(copy):
    for gone in ("exercises/solutions", "exercises/correct", "exercises/wrong", "exercises/answers",
                 "exercises/TEACHERS.md", "exercises/measure.py", "exercises/handout.py", "test_taco.py",
                 "exercises/test_wrong_solutions.py"):
        assert not (copy / gone).exists(), gone
    taco_py, data_py = (copy / "taco.py").read_text(), (copy / "data.py").read_text()
    for source, name in ((taco_py, "tc_loss"), (taco_py, "sample_negatives"), (taco_py, "contextual_score"),
                         (data_py, "mask_tokens")):
        assert f"def {name}(" in source and f'module("{source is data_py and "data" or "taco"}").{name}(**locals())' in source
    for answer in ("F.cross_entropy(cos / temperature", "k + n * (k >= start)", "per_group.pow(2).sum() - self_dot"):
        assert answer not in taco_py and answer not in (copy / "_hidden.py").read_text()
    assert "action < 0.8" not in data_py
    assert (copy / "exercises" / "requirements.txt").exists() and (copy / "exercises" / "smoke.py").exists()


def test_empty_stubs_fail_with_the_checks_sentence(copy):
    r = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--student", "exercises/test_ex1_tc_loss.py",
            "exercises/test_ex2_samplers.py", "exercises/test_ex3_contextual_score.py", "exercises/test_ex4_masking.py")
    assert r.returncode == 1, r.stdout[-2000:]
    failed = [line for line in r.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) >= 20 and all("is not written yet" in line for line in failed), failed[:3]


def test_reference_mode_says_to_use_student(copy):
    r = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "exercises/test_ex1_tc_loss.py")
    assert r.returncode == 0 and "skipped" in r.stdout  # no reference in the copy: nothing to check without --student


def test_a_correct_solution_passes_in_the_copy(copy):
    shutil.copy(os.path.join(HERE, "correct", "ex1_tc_loss_vectorised.py"), copy / "exercises" / "ex1_tc_loss.py")
    r = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--student", "exercises/test_ex1_tc_loss.py")
    assert r.returncode == 0, r.stdout[-2000:]


def test_smoke_test_says_ready_in_the_copy(copy):
    r = run(copy, "exercises/smoke.py")
    assert r.returncode == 0 and "ready (" in r.stdout and "exercise 1's checks run" in r.stdout, r.stdout + r.stderr


def test_the_copy_still_trains(copy, tmp_path):
    r = run(copy, "exercises/ex5_ablations.py", "--settings", "baseline,K=4", "--steps", "2", "--jobs", "1",
            "--out", str(tmp_path / "mini"))
    assert r.returncode == 0 and "| K=4 |" in r.stdout, r.stderr[-2000:]
    r = run(copy, "exercises/walkthrough.py", "--steps", "2", "--out", str(tmp_path / "mini"))
    assert r.returncode == 0 and "Reusing a miniature TACO" in r.stdout and "== 3. After 2 steps" in r.stdout, r.stderr


def test_refuses_to_overwrite(copy, capsys):
    from engine.cli import UsageError
    with pytest.raises(UsageError, match="holds an earlier output of handout.py; pass --force"):
        handout.build(str(copy))
