"""Replaying a session's events gives the stored feature rows, bit for bit, on both clocks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute
import pytest

from ticktensor.errors import ConfigError
from ticktensor.live import LiveEngine, Quote, Trade, Verdict, batch_of_tables
from ticktensor.schemas import EventKind, FeatureSpec

from .conftest import (
    assert_bits_equal,
    bars,
    batch_reference,
    books,
    by_symbol,
    live_spec,
    market,
)


@pytest.mark.parametrize("clock", ["quotes", "trades"])
def test_replay_equals_stored_rows_of_a_generated_session(
    clock: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = market()
    spec = live_spec(clock)
    ref, ref64 = batch_reference(events, spec, monkeypatch)
    engine = LiveEngine(spec)
    rows = engine.replay(events)
    order = by_symbol(rows, ref.symbols)
    np.testing.assert_array_equal(rows.ts[order], ref.features.ts)
    assert_bits_equal(rows.values[order], ref.features.values, spec.features)
    assert_bits_equal(rows.values64[order], ref64, spec.features)
    counts = engine.counts()
    assert counts["row"] == ref.features.ts.size
    assert counts["row"] + counts["joined"] == len(rows.verdicts)


def test_one_push_at_a_time_equals_the_batch() -> None:
    events = market(("A", "B"), quotes=400, trades=150)
    spec = live_spec("quotes")
    batch = batch_of_tables(events, "quotes")
    whole = LiveEngine(spec).push_batch(batch)
    engine = LiveEngine(spec)
    rows = []
    for k in range(len(batch)):
        name = batch.symbols[batch.symbol[k]]
        v = batch.values[k]
        ts = int(batch.ts[k])
        key = int(batch.key[k])
        if batch.kind[k] == 0:
            none = [None if np.isnan(x) else float(x) for x in v]
            event = Quote(name, ts, none[0], none[1], none[2], none[3], key=key)
        else:
            event = Trade(name, ts, float(v[0]), float(v[1]), int(v[2]), key=key)
        row = engine.push(event)
        assert (row is not None) == (whole.verdicts[k] == Verdict.ROW)
        if row is not None:
            rows.append(row)
    assert_bits_equal(np.stack(rows), whole.values, spec.features)


@pytest.mark.parametrize("clock", ["quotes", "trades"])
def test_version_1_specs_without_volatility_replay_too(
    clock: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stores of spec version 1 hold the live values of every feature but volatility."""
    features = tuple(f for f in live_spec(clock).features if not f.startswith("volatility"))
    spec = FeatureSpec(features, clock=clock)  # type: ignore[arg-type]
    events = market()
    ref, _ = batch_reference(events, spec, monkeypatch)
    rows = LiveEngine(spec).replay(events)
    assert_bits_equal(rows.values[by_symbol(rows, ref.symbols)], ref.features.values, features)
    with pytest.raises(ConfigError, match="version >= 2"):
        LiveEngine(FeatureSpec(("volatility_20",), clock=clock))  # type: ignore[arg-type]


def test_replay_of_bars_equals_stored_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    events = bars()
    spec = live_spec("ohlcv")
    ref, ref64 = batch_reference(events, spec, monkeypatch)
    rows = LiveEngine(spec).replay(events)
    order = by_symbol(rows, ref.symbols)
    np.testing.assert_array_equal(rows.ts[order], ref.features.ts)
    assert_bits_equal(rows.values[order], ref.features.values, spec.features)
    assert_bits_equal(rows.values64[order], ref64, spec.features)


def test_bars_without_volume_or_trade_count_give_the_stored_nans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = bars()[EventKind.OHLCV]
    n = table.num_rows
    nulls = pa.array(np.where(np.arange(n) % 7 == 3, None, 1.0).tolist(), pa.float64())
    volume = pa.compute.multiply(table.column("volume"), nulls)
    table = table.set_column(table.schema.get_field_index("volume"), "volume", volume)
    counts = pa.nulls(n, pa.uint64())
    table = table.set_column(table.schema.get_field_index("trade_count"), "trade_count", counts)
    events = {EventKind.OHLCV: table}
    spec = live_spec("ohlcv")
    ref, _ = batch_reference(events, spec, monkeypatch)
    rows = LiveEngine(spec).replay(events)
    assert np.isnan(ref.features.values).any()
    assert_bits_equal(rows.values[by_symbol(rows, ref.symbols)], ref.features.values, spec.features)


def test_replay_of_mbp10_events_equals_stored_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    events = books()
    spec = live_spec("mbp10")
    ref, ref64 = batch_reference(events, spec, monkeypatch)
    engine = LiveEngine(spec)
    rows = engine.replay(events | market(("A", "B"), quotes=2000, trades=500))  # quotes unread
    order = by_symbol(rows, ref.symbols)
    np.testing.assert_array_equal(rows.ts[order], ref.features.ts)
    assert_bits_equal(rows.values[order], ref.features.values, spec.features)
    assert_bits_equal(rows.values64[order], ref64, spec.features)
    assert engine.counts()["row"] == ref.features.ts.size


@pytest.mark.parametrize(
    ("bar", "trades"),
    [
        ("1s", 800), ("100ms", 800), ("1m", 800), ("1h", 3000), ("6h", 3000),
        ("volume:50", 800), ("volume:2000", 3000), ("dollar:5000", 800), ("dollar:1e6", 3000),
    ],
)  # fmt: skip
def test_time_bars_built_live_equal_stored_rows(
    bar: str, trades: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Time, volume and dollar bars of one trade to hundreds (numpy's pairwise sums,
    blocks and halves)."""
    events = market(quotes=3000 if trades == 800 else 200, trades=trades)
    spec = live_spec("bars", bar)
    ref, ref64 = batch_reference(events, spec, monkeypatch)
    rows = LiveEngine(spec).replay(events)
    order = by_symbol(rows, ref.symbols)
    np.testing.assert_array_equal(rows.ts[order], ref.features.ts)
    assert_bits_equal(rows.values[order], ref.features.values, spec.features)
    assert_bits_equal(rows.values64[order], ref64, spec.features)
