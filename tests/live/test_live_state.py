"""A saved state continues exactly: mid-session starts and restarts give the stored rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ticktensor.errors import ConfigError
from ticktensor.live import EventBatch, LiveEngine, batch_of_tables
from ticktensor.schemas import FeatureSpec

from .conftest import assert_bits_equal, bars, books, live_spec, market


def _part(batch: EventBatch, lo: int, hi: int) -> EventBatch:
    return EventBatch(
        batch.kind[lo:hi],
        batch.symbol[lo:hi],
        batch.ts[lo:hi],
        batch.values[lo:hi],
        batch.key[lo:hi],
        batch.symbols,
        None if batch.levels is None else batch.levels[lo:hi],
    )


def _saved_and_loaded(engine: LiveEngine, path: Path) -> LiveEngine:
    np.savez(path, **engine.state())
    with np.load(path, allow_pickle=False) as state:
        return LiveEngine.from_state(dict(state))


@pytest.mark.parametrize("clock", ["quotes", "trades"])
@pytest.mark.parametrize("fraction", [0.0, 0.013, 0.5, 0.97])
def test_a_mid_session_start_from_state_gives_the_same_rows(
    clock: str, fraction: float, tmp_path: Path
) -> None:
    spec = live_spec(clock)
    batch = batch_of_tables(market(), clock)
    whole = LiveEngine(spec, history=16).push_batch(batch)
    cut = int(len(batch) * fraction)
    first = LiveEngine(spec, history=16)
    head = first.push_batch(_part(batch, 0, cut))
    second = _saved_and_loaded(first, tmp_path / "state.npz")
    tail = second.push_batch(_part(batch, cut, len(batch)))
    assert_bits_equal(np.concatenate([head.values, tail.values]), whole.values, spec.features)
    assert_bits_equal(np.concatenate([head.values64, tail.values64]), whole.values64, spec.features)
    for symbol in batch.symbols:
        mine = whole.values[whole.symbol == whole.symbols.index(symbol)][-16:]
        assert_bits_equal(second.window(symbol, 16), mine, spec.features)


def test_counts_survive_a_restart(tmp_path: Path) -> None:
    spec = live_spec("quotes")
    batch = batch_of_tables(market(("A",), quotes=200, trades=50), "quotes")
    engine = LiveEngine(spec)
    engine.push_batch(batch)
    engine.push_batch(_part(batch, 0, 10))  # every one of them is late or a duplicate now
    again = _saved_and_loaded(engine, tmp_path / "state.npz")
    assert again.counts() == engine.counts()
    assert engine.counts()["late"] + engine.counts()["duplicate"] == 10


def test_a_state_of_another_spec_is_refused() -> None:
    engine = LiveEngine(live_spec("quotes"), ["A"])
    state = engine.state()
    meta = json.loads(str(state["meta"][()]))
    meta["spec"] = FeatureSpec(("mid", "volume_1s")).to_dict()
    with pytest.raises(ValueError, match="another spec"):
        LiveEngine.from_state(state | {"meta": np.array(json.dumps(meta))})
    with pytest.raises(ConfigError, match="not a live engine state"):
        LiveEngine.from_state(state | {"meta": np.array('{"format": "something else"}')})


def test_warm_up_replays_the_session_from_its_start() -> None:
    """A restart without a state warms up by replaying the session's events so far: the
    rows after it are the ones an engine running since the start gives."""
    spec = live_spec("trades")
    batch = batch_of_tables(market(("A", "B")), "trades")
    whole = LiveEngine(spec).push_batch(batch)
    cut = len(batch) // 3
    restarted = LiveEngine(spec)
    restarted.push_batch(_part(batch, 0, cut))  # warm-up: the history, rows thrown away
    tail = restarted.push_batch(_part(batch, cut, len(batch)))
    assert_bits_equal(tail.values, whole.values[whole.event >= cut], spec.features)


@pytest.mark.parametrize(
    ("clock", "bar"), [("mbp10", ""), ("ohlcv", ""), ("bars", "1s"), ("bars", "volume:40")]
)
def test_mid_session_starts_on_the_other_clocks(clock: str, bar: str, tmp_path: Path) -> None:
    """The book levels' clock, given bars and bars being built (an open bar in the state)."""
    events = {"mbp10": books(), "ohlcv": bars()}.get(clock) or market()
    spec = live_spec(clock, bar)
    batch = batch_of_tables(events, clock)
    whole = LiveEngine(spec, history=8).replay(events)
    for cut in (len(batch) // 3, len(batch) - 5):
        first = LiveEngine(spec, history=8)
        head = first.push_batch(_part(batch, 0, cut))
        second = _saved_and_loaded(first, tmp_path / "state.npz")
        tail = second.push_batch(_part(batch, cut, len(batch)))
        last = second.flush()
        got = np.concatenate([head.values64, tail.values64, last.values64])
        assert_bits_equal(got, whole.values64, spec.features)
