"""Fixtures shared by the test files (one per product module)."""
import pytest

import toy


@pytest.fixture(scope="session")
def toy_dir(tmp_path_factory):
    """The toy corpus folder (vocab.txt, train.txt, glue/, wordsim.txt), generated once for the session."""
    return toy.toy_corpus(tmp_path_factory.mktemp("cache"))
