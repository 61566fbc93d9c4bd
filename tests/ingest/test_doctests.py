"""The examples in the docstrings of ticktensor.ingest run and say what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["ticktensor.ingest.features", "ticktensor.ingest.synthetic"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0
    assert result.failed == 0
