"""A seeded mutation fuzzer: random and mutated inputs through each target, on a budget.

The engine needs no third-party fuzzing library, so ``ticktensor reliability`` runs
anywhere; the test suite drives the same targets with hypothesis as well. Each input is
random bytes or a seed with one to four stacked mutations (bit flips, interesting
integers, inserted tokens, deleted, repeated or spliced ranges, truncation). An input
that raises anything but a documented error, breaks an invariant or runs longer than
``timeout_s`` is a finding; findings are saved under ``save_dir`` to be replayed.
"""

from __future__ import annotations

import hashlib
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import numpy as np

from .targets import FuzzTarget

__all__ = ["Finding", "FuzzResult", "HangError", "fuzz", "mutate"]

_INTERESTING: tuple[int, ...] = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF)
_INTERESTING += (2**63 - 1, 2**64 - 1, 2**31, 2**32)


class HangError(Exception):
    """An input ran past the per-input time limit."""


@dataclass(frozen=True)
class Finding:
    """One input that ended badly: what it raised, and where it was saved."""

    target: str
    sha256: str
    error: str
    trace: str
    path: str | None = None


@dataclass
class FuzzResult:
    """What one target's run did: inputs tried, clean rejections, findings."""

    target: str
    inputs: int = 0
    accepted: int = 0
    rejected: int = 0
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)


def mutate(
    data: bytes, rng: np.random.Generator, corpus: Sequence[bytes], tokens: Sequence[bytes]
) -> bytes:
    """``data`` with one to four random mutations stacked."""
    buf = bytearray(data)
    for _ in range(int(rng.integers(1, 5))):
        op = int(rng.integers(0, 9))
        n = len(buf)
        pos = int(rng.integers(0, n + 1))
        if op == 0 and n:  # flip a bit
            i = min(pos, n - 1)
            buf[i] ^= 1 << int(rng.integers(0, 8))
        elif op == 1 and n:  # random byte
            buf[min(pos, n - 1)] = int(rng.integers(0, 256))
        elif op == 2 and n:  # interesting integer, 1/2/4/8 bytes little endian
            width = int(rng.choice([1, 2, 4, 8]))
            value = int(rng.choice(_INTERESTING)) & ((1 << (8 * width)) - 1)
            buf[pos : pos + width] = value.to_bytes(width, "little")
        elif op == 3 and tokens:  # insert a token
            buf[pos:pos] = tokens[int(rng.integers(0, len(tokens)))]
        elif op == 4 and n:  # delete a range
            buf[pos : pos + int(rng.integers(1, 64))] = b""
        elif op == 5 and n:  # repeat a range
            end = min(n, pos + int(rng.integers(1, 256)))
            buf[pos:pos] = bytes(buf[pos:end]) * int(rng.integers(1, 8))
        elif op == 6:  # truncate
            del buf[pos:]
        elif op == 7 and corpus:  # splice with another seed
            other = corpus[int(rng.integers(0, len(corpus)))]
            cut = int(rng.integers(0, len(other) + 1))
            buf = buf[:pos] + bytearray(other[cut:])
        else:  # random bytes inserted
            buf[pos:pos] = rng.integers(0, 256, int(rng.integers(1, 32)), dtype=np.uint8).tobytes()
    return bytes(buf)


def _inputs(target: FuzzTarget, rng: np.random.Generator) -> Callable[[int], bytes]:
    def make(i: int) -> bytes:
        if i < len(target.seeds):  # the seeds themselves first: they must pass
            return target.seeds[i]
        if rng.random() < 0.1:
            size = int(rng.integers(0, 512))
            return rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        seed = target.seeds[int(rng.integers(0, len(target.seeds)))]
        return mutate(seed, rng, target.seeds, target.tokens)

    return make


def _raise_hang(signum: int, frame: FrameType | None) -> None:
    raise HangError("input ran past the time limit")


def fuzz(
    target: FuzzTarget,
    *,
    budget_s: float | None = 10.0,
    max_inputs: int | None = None,
    seed: int = 0,
    timeout_s: float = 10.0,
    save_dir: Path | None = None,
) -> FuzzResult:
    """Run ``target`` on inputs until its share of ``budget_s`` seconds
    (:attr:`FuzzTarget.share`) or ``max_inputs`` inputs.

    ``timeout_s`` bounds one input (enforced with ``SIGALRM`` when called from the main
    thread). Returns counts of accepted and cleanly rejected inputs and the findings.
    """
    rng = np.random.default_rng([seed, int.from_bytes(target.name.encode()[:8], "little")])
    if budget_s is not None:
        budget_s *= target.share
    make = _inputs(target, rng)
    result = FuzzResult(target.name)
    alarm = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGALRM, _raise_hang) if alarm else None
    # pyarrow's CSV invalid-row callback cannot decode a non-UTF-8 line and reports that
    # as "unraisable" before failing the parse (which the reader then handles): silence
    # those reports instead of printing thousands of them.
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda _info: None
    t0 = time.perf_counter()
    try:
        while (budget_s is None or time.perf_counter() - t0 < budget_s) and (
            max_inputs is None or result.inputs < max_inputs
        ):
            data = make(result.inputs)
            result.inputs += 1
            outcome = run_one(target, data, timeout_s if alarm else None)
            if outcome is None:
                result.accepted += 1
            elif isinstance(outcome, str):
                result.rejected += 1
                result.errors[outcome] = result.errors.get(outcome, 0) + 1
            else:
                result.findings.append(_save(target, data, outcome, save_dir))
    finally:
        sys.unraisablehook = old_hook
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    result.seconds = time.perf_counter() - t0
    return result


def run_one(target: FuzzTarget, data: bytes, timeout_s: float | None) -> str | BaseException | None:
    """``None`` when accepted, the error's type name when cleanly rejected, else the error."""
    try:
        if timeout_s is not None:
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            target.run(data)
        finally:
            if timeout_s is not None:
                signal.setitimer(signal.ITIMER_REAL, 0)
    except target.expected as exc:
        return type(exc).__name__
    except (Exception, RecursionError, MemoryError) as exc:  # anything else is a finding
        return exc
    return None


def _save(target: FuzzTarget, data: bytes, exc: BaseException, save_dir: Path | None) -> Finding:
    digest = hashlib.sha256(data).hexdigest()
    path = None
    if save_dir is not None:
        out = save_dir / target.name
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{digest[:16]}.bin").write_bytes(data)
        path = str(out / f"{digest[:16]}.bin")
    trace = "".join(traceback.format_exception(exc)[-6:])
    return Finding(target.name, digest, f"{type(exc).__name__}: {exc}"[:500], trace, path)
