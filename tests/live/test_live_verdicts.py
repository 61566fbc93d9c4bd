"""Events breaking ingest's rules are refused, counted by rule, and change no state."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ticktensor.errors import ConfigError
from ticktensor.live import LiveEngine, Quote, Trade, Verdict
from ticktensor.schemas import FeatureSpec

SPEC = FeatureSpec(("mid", "volume", "volume_1s", "trade_count_3", "last_trade_signed_size"))


def _engine() -> LiveEngine:
    engine = LiveEngine(SPEC)
    engine.push(Trade("X", 10, 100.0, 2.0, 1))
    engine.push(Quote("X", 20, 99.0, 101.0, 1.0, 1.0))
    return engine


@pytest.mark.parametrize(
    ("event", "rule"),
    [
        (Trade("X", 30, math.nan, 1.0, 1), "finite"),
        (Trade("X", 30, -1.0, 1.0, 1), "positive_price"),
        (Trade("X", 30, 100.0, -1.0, 1), "non_negative_size"),
        (Trade("X", 30, 100.0, 0.0, 1), "positive_trade_size"),
        (Trade("X", 30, 100.0, 1.0, 2), "side_domain"),
        (Quote("X", 30, math.nan, 101.0, 1.0, 1.0), "finite"),
        (Quote("X", 30, 99.0, math.inf, 1.0, 1.0), "finite"),
        (Quote("X", 30, 0.0, 101.0, 1.0, 1.0), "positive_price"),
        (Quote("X", 30, 99.0, 101.0, -1.0, 1.0), "non_negative_size"),
        (Quote("X", 30, 102.0, 101.0, 1.0, 1.0), "crossed_book"),
        (Trade("X", 15, 100.0, 1.0, 1), "late"),
        (Quote("X", 19, 99.0, 101.0, 1.0, 1.0), "late"),
        (Quote("X", 20, 99.0, 101.0, 1.0, 1.0), "duplicate"),
    ],
)
def test_a_refused_event_is_counted_and_changes_nothing(event: Quote | Trade, rule: str) -> None:
    refused, clean = _engine(), _engine()
    assert refused.push(event) is None
    assert refused.counts()[rule] == 1
    assert sum(v for k, v in refused.counts().items() if k not in ("row", "joined")) == 1
    after = [Trade("X", 40, 100.5, 3.0, -1), Quote("X", 50, 99.5, 100.5, 2.0, 1.0)]
    for e in after:
        np.testing.assert_array_equal(refused.push(e), clean.push(e))  # type: ignore[arg-type]
    for a, b in zip(refused.state()["floats"], clean.state()["floats"], strict=True):
        assert a == b or (math.isnan(a) and math.isnan(b))


def test_equal_events_with_other_keys_are_not_duplicates() -> None:
    engine = _engine()
    assert engine.push(Quote("X", 20, 99.0, 101.0, 1.0, 1.0, key=7)) is not None
    engine.push(Trade("X", 20, 100.0, 1.0, 1, key=1))
    engine.push(Trade("X", 20, 100.0, 1.0, 1, key=2))
    engine.push(Trade("X", 20, 100.0, 1.0, 1, key=2))
    assert engine.counts()["duplicate"] == 1
    assert engine.counts()["joined"] == 3  # the first trade, then two of the three


def test_null_quote_prices_are_allowed_and_give_nan() -> None:
    engine = LiveEngine(FeatureSpec(("mid", "return", "imbalance")))
    row = engine.push(Quote("X", 1, None, 101.0, None, 1.0))
    assert row is not None
    assert math.isnan(row[0])
    assert row[1] == 0.0  # a null price's return is filled with 0, as polars' fill_null
    assert math.isnan(row[2])
    assert engine.push(Quote("X", 2, 99.0, 101.0, 1.0, 1.0))[1] == 0.0  # type: ignore[index]


def test_verdicts_of_a_batch_and_unknown_features() -> None:
    assert [v.name for v in Verdict][:2] == ["ROW", "JOINED"]
    with pytest.raises(ConfigError, match="unknown feature"):
        LiveEngine(FeatureSpec(("vpin",), clock="bars", bar="volume:100"))
    with pytest.raises(ConfigError, match="history"):
        LiveEngine(SPEC, history=-1)
