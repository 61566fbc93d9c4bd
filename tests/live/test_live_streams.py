"""Generated event streams: the live rows equal ingest's (validate, quarantine, sort, features).

Streams have random gaps, bursts of equal timestamps, null and NaN prices, invalid rows,
exact duplicates and symbols that appear mid-session.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.ingest.features import compute_session_features
from ticktensor.live import REFUSALS, LiveEngine, Verdict
from ticktensor.schemas import EventKind, conform, schema_for, validate

from .conftest import assert_bits_equal, by_symbol, live_spec

_GAPS = st.sampled_from([0, 0, 1, 7, 1_000, 250_000_000, 900_000_000, 3_000_000_000])
_PRICE = st.one_of(
    st.floats(99.0, 101.0),
    st.sampled_from([None, float("nan"), -1.0, float("inf")]),
)
_SIZE = st.one_of(st.floats(0.0, 50.0), st.sampled_from([0.0, None, -2.0]))


@st.composite
def streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Events in time order: each symbol starts at its own moment (mid-session)."""
    n = draw(st.integers(1, 120))
    start = {s: draw(st.integers(0, n)) for s in ("A", "B", "C")}
    ts = 34_200 * 10**9
    events: list[dict[str, Any]] = []
    for k in range(n):
        ts += draw(_GAPS)
        symbols = [s for s, at in start.items() if at <= k] or ["A"]
        symbol = draw(st.sampled_from(symbols))
        if events and draw(st.integers(0, 9)) == 0:  # an exact duplicate, when it can be one
            last = events[-1]
            if last["ts_event"] == ts:
                events.append(dict(last))
                continue
        if draw(st.booleans()):
            bid = draw(_PRICE)
            spread = draw(st.sampled_from([0.0, 0.01, 0.5, -0.2]))
            ask = None if bid is None or draw(st.integers(0, 9)) == 0 else bid + spread
            events.append(
                {"kind": "quotes", "ts_event": ts, "symbol": symbol, "bid_px": bid,
                 "ask_px": ask, "bid_sz": draw(_SIZE), "ask_sz": draw(_SIZE)}
            )  # fmt: skip
        else:
            price = draw(_PRICE)
            events.append(
                {"kind": "trades", "ts_event": ts, "symbol": symbol,
                 "price": 100.0 if price is None else price,
                 "size": draw(st.floats(0.0, 20.0)), "side": draw(st.sampled_from([-1, 0, 1, 2]))}
            )  # fmt: skip
    return events


def _tables(events: list[dict[str, Any]]) -> dict[EventKind, pa.Table]:
    out = {}
    for kind in (EventKind.QUOTES, EventKind.TRADES):
        rows = [{k: v for k, v in e.items() if k != "kind"} for e in events if e["kind"] == kind]
        # Both kinds always, an empty table where none came: the batch side then knows
        # that the book features of the trades clock are null before any quote.
        table = pa.Table.from_pylist(rows) if rows else schema_for(kind).empty_table()
        out[kind] = conform(table, kind.value)
    return out


def _ingested(raw: dict[EventKind, pa.Table]) -> dict[EventKind, pa.Table]:
    """What ingest keeps: rows passing every rule, sorted by (symbol, time), stably."""
    kept = {}
    for kind, table in raw.items():
        valid = table.filter(pa.array(validate(table, kind).valid_mask()))
        order = np.lexsort((valid.column("ts_event").cast(pa.int64()).to_numpy(),
                            np.asarray(valid.column("symbol").to_pylist())))  # fmt: skip
        kept[kind] = valid.take(pa.array(order))
    return kept


@pytest.mark.parametrize(
    ("clock", "bar"), [("quotes", ""), ("trades", ""), ("bars", "1s"), ("bars", "volume:30")]
)
@settings(max_examples=60, deadline=None)
@given(events=streams())
def test_generated_streams_give_ingest_rows(
    clock: str, bar: str, events: list[dict[str, Any]]
) -> None:
    raw = _tables(events)
    spec = live_spec(clock, bar)
    engine = LiveEngine(spec)
    rows = engine.replay(raw)
    kept = _ingested(raw)
    refused = int(np.isin(rows.verdicts, [int(v) for v in REFUSALS]).sum())
    assert refused == sum(raw[k].num_rows - kept[k].num_rows for k in raw)
    primary = EventKind.QUOTES if clock == "quotes" else EventKind.TRADES  # bars: of trades
    if primary not in kept or kept[primary].num_rows == 0:
        assert not (rows.verdicts == Verdict.ROW).any()
        return
    ref = compute_session_features(kept, spec)
    order = by_symbol(rows, ref.symbols)
    np.testing.assert_array_equal(rows.ts[order], ref.features.ts)
    assert_bits_equal(rows.values[order], ref.features.values, spec.features)
