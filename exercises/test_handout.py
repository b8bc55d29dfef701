"""exercises/handout.py: the student copy is built from the committed files, hides the answers of
exercises 1-4, 6 and 7 wherever the code holds them, leaves out the solutions, the teacher's material
and exercises 5-7's results, fails the empty stubs with the checks' own sentence (one line per
exercise), passes a correct student solution, still trains (exercises 5-7, the walkthrough), and
keeps the error promise (one line, exit 2, nothing half-built left behind)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from engine.cli import UsageError
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
                 "exercises/TEACHERS.md", "exercises/measure.py", "exercises/handout.py", "test_taco.py", "tests",
                 "exercises/test_wrong_solutions.py"):
        assert not (copy / gone).exists(), gone
    taco_py, data_py = (copy / "taco.py").read_text(), (copy / "data.py").read_text()
    for source, name in ((taco_py, "tc_loss"), (taco_py, "sample_negatives"), (taco_py, "contextual_score"),
                         (taco_py, "make_model"), (data_py, "mask_tokens")):
        assert f"def {name}(" in source and f'module("{source is data_py and "data" or "taco"}").{name}(**locals())' in source
    # the code it ships, and the notebook's saved outputs (_hidden.py is encoded); the pages may hint
    code = [p.read_text() for p in copy.rglob("*") if p.suffix in (".py", ".ipynb")]
    for answer in ("F.cross_entropy(cos / temperature", "k + n * (k >= start)", "per_group.pow(2).sum() - self_dot",
                   "embeddings.requires_grad_(False)"):  # exercises 1, 2, 3 and 7 (how --freeze_embeddings freezes)
        assert not any(answer in text for text in code), answer
    assert "action < 0.8" not in data_py
    model_py = (copy / "model.py").read_text()  # exercise 7: the untied decoder
    assert 'class MLMHead(__import__("_hidden").module("model").MLMHead):' in model_py
    assert "nn.Embedding(config.vocab_size, config.hidden_size)" not in model_py.split("class MLMHead")[1].split("class ")[0]
    study_py, analyze_py = (copy / "tools" / "study.py").read_text(), (copy / "tools" / "analyze.py").read_text()
    assert 'module("tools.study").first_match(**locals())' in study_py and ">= better * goal" not in study_py  # ex. 6
    for name in ("distance_score", "self_similarity"):  # exercise 3: the pairwise form, the closed form
        assert f'module("tools.analyze").{name}(**locals())' in analyze_py
    assert "torch.cdist" not in analyze_py and ".pow(2).sum(-1) - n" not in analyze_py
    assert (copy / "exercises" / "requirements.txt").exists() and (copy / "exercises" / "smoke.py").exists()


def answer_strings():
    """The lines of answers/ long enough to be an answer (not a heading, a marker or a table's frame)."""
    for folder, _, names in os.walk(os.path.join(HERE, "answers")):
        for name in names:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if len(line) >= 40 and not line.startswith(("#", "<!--", "| ---")):
                        yield line


def test_no_answer_and_no_pointer_to_what_is_left_out(copy):
    """No line of answers/ (the answer key, exercises 5-7's tables and conclusions) is in any file the
    hand-out ships, and no page of it names what it leaves out (TEACHERS.md, solutions/, ...)."""
    shipped = {p: p.read_text(errors="replace") for p in copy.rglob("*") if p.is_file()}
    answers = set(answer_strings())
    assert len(answers) > 50
    found = [(str(p.relative_to(copy)), a[:60]) for a in answers for p, text in shipped.items() if a in text]
    assert not found, found[:5]
    for page in ("ex5_ablations.md", "ex6_mlm_vs_taco.md", "ex7_embeddings.md"):
        text = (copy / "exercises" / page).read_text()
        assert "Expected results" not in text and "in every seed" not in text and "| baseline" not in text, page
        assert "**Time:**" in text  # how long the runs take stays: it gives nothing away
    pointers = [(str(p.relative_to(copy)), m.group(0)) for p, text in shipped.items() if p.suffix == ".md"
                for m in handout.NAMES_LEFT_OUT.finditer(text)]
    assert not pointers, pointers


def test_built_from_the_committed_files(tmp_path):
    """A working copy whose stub holds a solution (and a new file) ships the committed stub, and says so."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", handout.ROOT, str(clone)], check=True)
    stub = clone / "exercises" / "ex1_tc_loss.py"
    committed = stub.read_text()
    shutil.copy(os.path.join(HERE, "correct", "ex1_tc_loss_vectorised.py"), stub)
    (clone / "exercises" / "notes.md").write_text("tried out\n")
    sha, files, _, changed = handout.build(str(tmp_path / "out"), root=str(clone))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    assert sha == head and f"from commit {head}" in (tmp_path / "out" / "HANDOUT.md").read_text()
    assert (tmp_path / "out" / "exercises" / "ex1_tc_loss.py").read_text() == committed
    assert "raise NotImplementedError" in committed and not (tmp_path / "out" / "exercises" / "notes.md").exists()
    assert {"exercises/ex1_tc_loss.py", "exercises/notes.md"} <= set(changed)
    r = subprocess.run([sys.executable, os.path.join(str(clone), "exercises", "handout.py"), str(tmp_path / "o2")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and f"from commit {head[:12]}" in r.stdout and "exercises/ex1_tc_loss.py" in r.stdout, r.stderr


def test_refuses_a_commit_whose_stub_holds_a_solution(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", handout.ROOT, str(clone)], check=True)
    shutil.copy(os.path.join(HERE, "correct", "ex6_mlm_vs_taco_loop.py"), clone / "exercises" / "ex6_mlm_vs_taco.py")
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-qam", "a solution committed by mistake"], check=True)
    with pytest.raises(UsageError, match="ex6_mlm_vs_taco.py has first_step_reaching written"):
        handout.build(str(tmp_path / "out"), root=str(clone))
    assert not (tmp_path / "out").exists()


def test_with_results_adds_exercises_5_to_7s_results_only(tmp_path):
    handout.build(str(tmp_path / "out"), with_results=True)
    results = tmp_path / "out" / "exercises" / "answers" / "results"
    assert sorted(p.name for p in results.iterdir()) == ["ex5_ablations.md", "ex6_mlm_vs_taco.md", "ex7_embeddings.md"]
    assert "in every seed" in (results / "ex5_ablations.md").read_text()
    assert not (tmp_path / "out" / "exercises" / "answers" / "ANSWERS.md").exists()


def test_empty_stubs_fail_with_the_checks_sentence(copy):
    r = run(copy, "-m", "pytest", "-p", "no:cacheprovider", "--student", "exercises/test_ex1_tc_loss.py",
            "exercises/test_ex2_samplers.py", "exercises/test_ex3_contextual_score.py", "exercises/test_ex4_masking.py")
    assert r.returncode == 1, r.stdout[-2000:]
    lines = r.stdout.splitlines()
    summary = [line for line in lines if re.match(r"ex\d_\w+: ", line)]  # one line per exercise, its first failure
    assert [s.split(":")[0] for s in summary] == ["ex1_tc_loss", "ex2_samplers", "ex3_contextual_score", "ex4_masking"]
    assert all(" checks pass; first: " in s and "is not written yet" in s for s in summary), summary
    assert len(lines) < 25 and "Traceback" not in r.stdout and "raise NotImplementedError" not in r.stdout, r.stdout


def test_student_summary_names_the_students_line(copy):
    """An error in the student's own code (not a check's sentence) is named with the stub's line."""
    stub = copy / "exercises" / "ex6_mlm_vs_taco.py"
    saved = stub.read_text()
    try:
        stub.write_text(saved.replace("    raise NotImplementedError", "    return points[0] + 1", 1))
        r = run(copy, "-m", "pytest", "-p", "no:cacheprovider", "--student", "exercises/test_ex6_mlm_vs_taco.py",
                "-k", "first_step")
    finally:
        stub.write_text(saved)
    line = next(line for line in r.stdout.splitlines() if line.startswith("ex6_mlm_vs_taco: "))
    assert "TypeError: can only concatenate tuple" in line and "(raised in your ex6_mlm_vs_taco.py, line" in line, line


def test_reference_mode_says_to_use_student(copy):
    r = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "exercises/test_ex1_tc_loss.py",
            "exercises/test_ex6_mlm_vs_taco.py")
    assert r.returncode == 0 and "skipped" in r.stdout  # no reference in the copy: nothing to check without --student
    assert "Your stubs were NOT checked" in r.stdout and "python -m pytest exercises/ --student" in r.stdout, r.stdout


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


def test_refuses_to_overwrite(copy):
    with pytest.raises(UsageError, match="--force"):
        handout.build(str(copy))


def test_replaces_a_folder_only_with_force_and_never_the_repository(tmp_path):
    """A non-empty folder in the way is replaced only with --force; never the repository, a folder
    above it or one inside it."""
    mine = tmp_path / "mine"
    handout.build(str(mine))
    (mine / "notes.txt").write_text("a student's notes")
    with pytest.raises(UsageError):
        handout.build(str(mine))
    assert (mine / "notes.txt").read_text() == "a student's notes"
    (mine / "notes.txt").unlink()
    handout.build(str(mine), force=True)
    assert (mine / "HANDOUT.md").exists()
    for inside in (handout.ROOT, os.path.join(handout.ROOT, "exercises", "x")):
        with pytest.raises(UsageError, match="inside the repository"):
            handout.build(inside, force=True)
    with pytest.raises(UsageError, match="the repository"):
        handout.build(os.path.dirname(handout.ROOT), force=True)
    assert os.path.isfile(os.path.join(handout.ROOT, "taco.py"))


def test_an_interrupted_build_leaves_nothing(tmp_path, monkeypatch):
    """Ctrl-C while copying: no hand-out and no temporary folder left."""
    written = []

    def write(folder, rel, data, mode=0o644, _write=handout.write):
        _write(folder, rel, data, mode)
        written.append(rel)
        if len(written) == 20:
            raise KeyboardInterrupt
    monkeypatch.setattr(handout, "write", write)
    with pytest.raises(KeyboardInterrupt):
        handout.build(str(tmp_path / "out"))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("case", ["a file", "no folder", "inside", "a folder in the way"])
def test_user_mistakes_are_one_line(tmp_path, case):
    out = tmp_path / "out"
    if case == "a file":
        out.write_text("x")
    elif case == "no folder":
        out = tmp_path / "missing" / "out"
    elif case == "inside":
        out = os.path.join(handout.ROOT, "exercises", "copy")
    else:
        out.mkdir()
        (out / "keep.txt").write_text("a user's file")
    args = [sys.executable, os.path.join(handout.ROOT, "exercises", "handout.py"), str(out)]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1, r.stderr


def test_a_folder_it_cannot_write_is_one_line(tmp_path, monkeypatch, capsys):
    """A read-only parent folder (simulated: the tests may run as root, who writes anywhere)."""
    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", os.path.dirname(path))
    monkeypatch.setattr(os, "makedirs", refuse)
    with pytest.raises(SystemExit) as stop:
        handout.main([str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: Permission denied: ") and err.count("\n") == 1, err
