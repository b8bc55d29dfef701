"""One switch between the reference solutions (the default, what CI runs) and a student's stubs.

    python -m pytest exercises/                                # the reference and the correct variants
    python -m pytest exercises/ --student                      # your stubs exercises/exN_*.py
    TACO_STUDENT=1 python -m pytest exercises/                 # the same
    python -m pytest exercises/test_ex1_tc_loss.py --student   # one exercise

Without --student every check runs on exercises/solutions/<exercise>.py and on each correct
student-style solution in exercises/correct/<exercise>_*.py, so a check that rejects a right answer
fails CI. A hand-out copy (exercises/handout.py) has neither folder: there only --student makes sense.

With --student the output is short: no tracebacks, and at the end one line per exercise with its
first failure's sentence (`--tb=short -rf` brings every failure's details back).
"""
import importlib
import os
import re

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# Idle OpenMP threads sleep rather than spin (libgomp reads this once, when torch loads, which is after
# this file): on a busy machine spinning threads stall each other, and the checks' many small tensor
# operations after an in-process training ran 2-20x slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_addoption(parser):
    parser.addoption("--student", action="store_true",
                     help="run the exercise checks on the stubs exercises/exN_*.py instead of the reference")


def student_mode(config):
    # getoption's default: when pytest is started at the repository root this conftest is not an
    # initial one and the option is not registered; the environment variable still works there.
    return bool(config.getoption("--student", default=False)) or os.environ.get("TACO_STUDENT", "0") not in ("", "0")


def implementations(exercise, config):
    """The modules the checks of `exercise` run on: the student's stub, or the reference and the correct variants."""
    if student_mode(config):
        return [f"exercises.{exercise}"]
    found = [f"exercises.solutions.{exercise}"] if os.path.isfile(os.path.join(HERE, "solutions", exercise + ".py")) else []
    folder = os.path.join(HERE, "correct")
    if os.path.isdir(folder):
        found += [f"exercises.correct.{name[:-3]}" for name in sorted(os.listdir(folder))
                  if name.startswith(exercise + "_") and name.endswith(".py")]
    return found


NO_REFERENCE = []  # the exercises whose checks found no reference to run on (a hand-out copy without --student)


def pytest_generate_tests(metafunc):
    if "impl" in metafunc.fixturenames:
        names = implementations(metafunc.module.EXERCISE, metafunc.config)
        if not names:  # a hand-out copy run without --student: the reference is not there
            NO_REFERENCE.append(metafunc.module.EXERCISE)
            names = [pytest.param(None, marks=pytest.mark.skip(reason="no reference here: run with --student"))]
        metafunc.parametrize("impl", names, indirect=True, ids=lambda n: n and n.split(".", 1)[1])


@pytest.fixture
def impl(request):
    """The module under test (see implementations)."""
    return importlib.import_module(request.param)


# ----------------------------------------------------------------------------- a student's summary

RESULTS = {}  # exercise -> {"passed": n, "failed": n, "first": the first failure's sentence}


def pytest_configure(config):
    if student_mode(config):  # the sentences say it all: no tracebacks, no list of failed ids (unless asked)
        if config.option.tbstyle == "auto":
            config.option.tbstyle = "no"
        if config.option.reportchars == "fE":
            config.option.reportchars = ""


def sentence(excinfo):
    """What a failure says to a student: a check's sentence, or the error and the student's line that raised it."""
    from exercises._check import Mistake
    if excinfo.errisinstance(Mistake):
        return " ".join(str(excinfo.value).split())
    text = f"{excinfo.typename}: {' '.join(str(excinfo.value).split())}"
    own = [e for e in excinfo.traceback if re.search(r"exercises[/\\]ex\d_\w+\.py$", str(e.path))]
    return text + (f" (raised in your {os.path.basename(str(own[-1].path))}, line {own[-1].lineno + 1})" if own else "")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if not student_mode(item.config) or report.when != "call" and not report.failed:
        return
    exercise = os.path.basename(str(item.path))[len("test_"):-len(".py")]
    counts = RESULTS.setdefault(exercise, {"passed": 0, "failed": 0, "first": None})
    if report.failed:
        counts["failed"] += 1
        if counts["first"] is None and call.excinfo is not None:
            counts["first"] = sentence(call.excinfo)
    elif report.passed:
        counts["passed"] += 1


def pytest_terminal_summary(terminalreporter, config):
    if NO_REFERENCE and not student_mode(config):
        terminalreporter.section("your exercises")
        terminalreporter.write_line("Your stubs were NOT checked: this copy has no reference solutions, so the checks "
                                    "of " + ", ".join(sorted(set(NO_REFERENCE))) + " were skipped. Add --student:",
                                    yellow=True, bold=True)
        terminalreporter.write_line("    python -m pytest exercises/ --student")
    if not student_mode(config) or not RESULTS:
        return
    terminalreporter.section("your exercises")
    for exercise, c in sorted(RESULTS.items()):
        n = c["passed"] + c["failed"]
        terminalreporter.write_line(f"{exercise}: all {n} checks pass" if not c["failed"] else
                                    f"{exercise}: {c['passed']} of {n} checks pass; first: {c['first']}")
    if any(c["failed"] for c in RESULTS.values()):
        terminalreporter.write_line("(every failure in full: add --tb=short -rf)")
