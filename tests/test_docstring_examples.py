"""The examples in docstrings are true (they are the first thing a reader copies)."""

import doctest

import pytest

from hpcbundle import errors, knowledge, tune
from hpcbundle.launch import execute


@pytest.mark.parametrize("module", [errors, knowledge, tune, execute], ids=lambda m: m.__name__)
def test_docstring_examples_hold(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
