"""One switch between the reference solutions (the default, what CI runs) and a student's stubs.

    python -m pytest exercises/                                # the reference
    python -m pytest exercises/ --student                      # your stubs exercises/exN_*.py
    TACO_STUDENT=1 python -m pytest exercises/                 # the same
    python -m pytest exercises/test_ex1_tc_loss.py --student   # one exercise
"""
import importlib
import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--student", action="store_true",
                     help="run the exercise checks on the stubs exercises/exN_*.py instead of the reference")


def student_mode(config):
    # getoption's default: when pytest is started at the repository root this conftest is not an
    # initial one and the option is not registered; the environment variable still works there.
    return bool(config.getoption("--student", default=False)) or os.environ.get("TACO_STUDENT", "0") not in ("", "0")


@pytest.fixture
def impl(request):
    """The module under test: exercises/<EXERCISE>.py (student) or exercises/solutions/<EXERCISE>.py."""
    name = request.module.EXERCISE
    package = "exercises" if student_mode(request.config) else "exercises.solutions"
    return importlib.import_module(f"{package}.{name}")
