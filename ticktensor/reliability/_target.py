"""A fuzz target: one parser of untrusted bytes, wrapped as ``bytes -> outcome``, and the
error that says an input broke what must hold for every input."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ticktensor.errors import TickTensorError

__all__ = ["JSON_TOKENS", "FuzzTarget", "InvariantError"]


class InvariantError(AssertionError):
    """An input broke an invariant that must hold for every input (a finding)."""


@dataclass(frozen=True)
class FuzzTarget:
    """One parser under test: ``run(data)`` returns normally or raises a documented error.

    ``seeds`` are valid inputs the mutator starts from (random bytes are tried too);
    ``tokens`` are byte strings the mutator likes to insert (delimiters, magic numbers);
    ``share`` is the fraction of a run's time per target that this target gets.
    """

    name: str
    run: Callable[[bytes], object]
    seeds: tuple[bytes, ...]
    tokens: tuple[bytes, ...] = field(default=())
    expected: tuple[type[BaseException], ...] = (TickTensorError,)
    share: float = 1.0


#: Byte strings the mutator likes to insert into JSON documents.
JSON_TOKENS: tuple[bytes, ...] = (b"null", b"[]", b"{}", b'"../../etc"', b'"/abs"', b"1e999")
JSON_TOKENS += (b"NaN", b"-1", b'"', b",", b"[[[[[[[[[[", b"true", b"9223372036854775808")
