"""One switch between the reference solutions (the default, what CI runs) and a student's stubs.

    python -m pytest exercises/                                # the reference and the correct variants
    python -m pytest exercises/ --student                      # your stubs exercises/exN_*.py
    TACO_STUDENT=1 python -m pytest exercises/                 # the same
    python -m pytest exercises/test_ex1_tc_loss.py --student   # one exercise

Without --student every check runs on exercises/solutions/<exercise>.py and on each correct
student-style solution in exercises/correct/<exercise>_*.py, so a check that rejects a right answer
fails CI. A hand-out copy (exercises/handout.py) has neither folder: there only --student makes sense.
"""
import importlib
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


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


def pytest_generate_tests(metafunc):
    if "impl" in metafunc.fixturenames:
        names = implementations(metafunc.module.EXERCISE, metafunc.config)
        if not names:  # a hand-out copy run without --student: the reference is not there
            names = [pytest.param(None, marks=pytest.mark.skip(reason="no reference here: run with --student"))]
        metafunc.parametrize("impl", names, indirect=True, ids=lambda n: n and n.split(".", 1)[1])


@pytest.fixture
def impl(request):
    """The module under test (see implementations)."""
    return importlib.import_module(request.param)
