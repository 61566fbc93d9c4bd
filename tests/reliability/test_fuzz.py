"""Fuzzing: random and mutated inputs through every reader and store parser end cleanly.

Each input must end in a result or a documented ``TickTensorError``: never another
exception, a broken invariant (rows read = kept + quarantined; manifests round-trip)
or a hang. A small fixed budget runs here; `ticktensor reliability` runs longer ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ticktensor.reliability.fuzz import fuzz, mutate, run_one
from ticktensor.reliability.targets import FuzzTarget

from .conftest import DATA

READERS = [
    "ingest-csv",
    "csv-trades",
    "csv-gzip",
    "csv-quotes",
    "csv-histdata",
    "csv-ohlcv",
    "dbn",
    "dbn-zst",
]
READERS += ["lobster-message", "lobster-orderbook", "tardis", "parquet", "parquet-quotes", "arrow"]
STORE = ["manifest", "log-entry", "store-pointer", "store-header", "zarr-group-json"]
STORE += ["zarr-array-json", "zarr-chunk-zstd", "zarr-chunk-lz4", "store-table"]
STORE += ["pack-json", "pack-shard-none", "pack-shard-zstd", "pack-shard-lz4"]
SETTINGS = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _target(targets: dict[str, FuzzTarget], name: str) -> FuzzTarget:
    if name not in targets:
        assert not DATA.is_dir(), f"target {name} missing although {DATA} exists"
        pytest.skip(f"{name} needs the sample data in {DATA}")
    return targets[name]


def _check(target: FuzzTarget, data: bytes) -> None:
    outcome = run_one(target, data, timeout_s=20.0)
    assert not isinstance(outcome, BaseException), f"{target.name}: {outcome!r}"


def test_every_reader_and_parser_has_a_target(targets: dict[str, FuzzTarget]) -> None:
    expected = set(STORE) | (
        {*READERS} if DATA.is_dir() else {"ingest-csv", "csv-trades", "csv-gzip"}
    )
    assert expected <= set(targets)


@pytest.mark.parametrize("name", READERS + STORE)
def test_seeds_are_accepted(targets: dict[str, FuzzTarget], name: str) -> None:
    target = _target(targets, name)
    for seed in target.seeds:
        assert run_one(target, seed, timeout_s=20.0) is None, f"{name}: a valid seed failed"


@pytest.mark.slow
@pytest.mark.parametrize("name", READERS + STORE)
def test_fixed_budget_fuzz_finds_nothing(targets: dict[str, FuzzTarget], name: str) -> None:
    result = fuzz(_target(targets, name), budget_s=None, max_inputs=30, seed=1)
    assert result.inputs == 30
    assert result.findings == [], result.findings[0].trace
    assert result.accepted + result.rejected == 30


@pytest.mark.parametrize("name", READERS + STORE)
@SETTINGS
@given(data=st.binary(max_size=1024))
def test_random_bytes(targets: dict[str, FuzzTarget], name: str, data: bytes) -> None:
    _check(_target(targets, name), data)


@pytest.mark.parametrize("name", READERS + STORE)
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), which=st.integers(0, 64))
def test_mutated_real_inputs(
    targets: dict[str, FuzzTarget], name: str, seed: int, which: int
) -> None:
    target = _target(targets, name)
    base = target.seeds[which % len(target.seeds)]
    _check(target, mutate(base, np.random.default_rng(seed), target.seeds, target.tokens))


def test_a_finding_is_reported_not_raised() -> None:
    def crash(data: bytes) -> None:
        if data.startswith(b"x"):
            raise KeyError("boom")

    target = FuzzTarget("toy", crash, (b"ok", b"x1"))
    result = fuzz(target, budget_s=None, max_inputs=2)
    assert result.accepted == 1
    assert [f.error for f in result.findings] == ["KeyError: 'boom'"]


def test_a_hang_is_a_finding() -> None:
    def spin(data: bytes) -> None:
        while data:
            pass

    result = fuzz(FuzzTarget("spin", spin, (b"1",)), budget_s=None, max_inputs=1, timeout_s=0.2)
    assert [f.error.split(":")[0] for f in result.findings] == ["HangError"]
