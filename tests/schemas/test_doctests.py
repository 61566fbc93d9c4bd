"""The examples in the docstrings of ticktensor.schemas run and say what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "ticktensor.schemas",
    "ticktensor.schemas._conform",
    "ticktensor.schemas._events",
    "ticktensor.schemas._features",
    "ticktensor.schemas._validate",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0
    assert result.failed == 0
