"""FeatureSpec and LabelSpec: validation and dict round trips."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticktensor.errors import ConfigError
from ticktensor.schemas import (
    BarRule,
    FeatureSpec,
    LabelSpec,
    parse_bar_rule,
    parse_duration_ns,
)


def _label(**kwargs: Any) -> LabelSpec:
    return LabelSpec(**{"name": "y", "source": "mid", "horizon_rows": 10, **kwargs})


def test_label_spec_defaults_and_horizon() -> None:
    label = _label()
    assert label.kind == "forward_log_return"
    assert label.horizon == ("rows", 10)
    assert _label(horizon_rows=None, horizon_ns=5).horizon == ("ns", 5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": ""}, "label name must be a non-empty string"),
        ({"source": " "}, "label 'y': source must be a non-empty column name"),
        ({"kind": "backward"}, "label 'y': kind 'backward' is not one of"),
        ({"horizon_ns": 5}, "give exactly one of horizon_rows and horizon_ns"),
        ({"horizon_rows": None}, "give exactly one of horizon_rows and horizon_ns"),
        ({"horizon_rows": 0}, "horizon must be an integer > 0, got 0"),
        ({"horizon_rows": -3}, "horizon must be an integer > 0, got -3"),
        ({"horizon_rows": 2.5}, "horizon must be an integer > 0, got 2.5"),
        ({"horizon_rows": True}, "horizon must be an integer > 0, got True"),
    ],
)
def test_label_spec_rejects(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _label(**kwargs)


def test_feature_spec_basics() -> None:
    spec = FeatureSpec(["a", "b"], [_label(), _label(name="z", horizon_rows=None, horizon_ns=7)])
    assert spec.features == ("a", "b")
    assert isinstance(spec.labels, tuple)
    assert spec.label_names == ("y", "z")
    assert spec.max_horizon_rows == 10
    assert spec.max_horizon_ns == 7
    assert spec.version == 1
    hash(spec)  # frozen and hashable


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"features": ()}, "needs at least one feature, got none"),
        ({"features": ("a", "")}, "feature names must be non-empty strings, got ''"),
        ({"features": ("a", "a")}, r"unique across features and labels; repeated: \['a'\]"),
        ({"features": ("y",)}, r"repeated: \['y'\]"),
        ({"stats_period": (5, 5)}, "stats_period start 5 must be before end 5"),
        ({"stats_period": (1, 2, 3)}, r"stats_period must be \(start_ns, end_ns\)"),
        ({"version": 0}, "version must be an integer >= 1, got 0"),
        ({"labels": ("y",)}, "labels must be LabelSpec, got str"),
    ],
)
def test_feature_spec_rejects(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FeatureSpec(**{"features": ("a",), "labels": (_label(),), **kwargs})


def test_to_dict_is_plain_json() -> None:
    spec = FeatureSpec(("a",), (_label(),), stats_period=(1, 2), version=3)
    data = spec.to_dict()
    assert data == {
        "features": ["a"],
        "labels": [
            {"name": "y", "source": "mid", "kind": "forward_log_return", "horizon_rows": 10}
        ],
        "stats_period": [1, 2],
        "version": 3,
    }
    assert FeatureSpec.from_dict(json.loads(json.dumps(data))) == spec


def test_from_dict_rejects_unknown_and_missing_keys() -> None:
    with pytest.raises(ConfigError, match=r"feature spec: unknown key\(s\) \['colour'\]"):
        FeatureSpec.from_dict({"features": ["a"], "colour": 1})
    with pytest.raises(ConfigError, match=r"label 'y': unknown key\(s\) \['lag'\]"):
        FeatureSpec.from_dict(
            {"features": ["a"], "labels": [{"name": "y", "source": "m", "lag": 1}]}
        )
    with pytest.raises(ConfigError, match=r"missing required key\(s\) \['features'\]"):
        FeatureSpec.from_dict({})


names = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)
labels = st.builds(
    LabelSpec,
    name=names.map(lambda n: "label_" + n),
    source=names,
    kind=st.sampled_from(["forward_return", "forward_log_return", "forward_value"]),
    horizon_rows=st.integers(1, 10**6),
) | st.builds(
    LabelSpec,
    name=names.map(lambda n: "label_" + n),
    source=names,
    horizon_ns=st.integers(1, 10**15),
)
periods = st.none() | st.tuples(st.integers(0, 10**18), st.integers(1, 10**18)).map(
    lambda p: (p[0], p[0] + p[1])
)


@st.composite
def specs(draw: st.DrawFn) -> FeatureSpec:
    features = draw(st.lists(names, min_size=1, max_size=8, unique=True))
    label_list = draw(st.lists(labels, max_size=4, unique_by=lambda lb: lb.name))
    return FeatureSpec(
        features=tuple(features),
        labels=tuple(label_list),
        stats_period=draw(periods),
        version=draw(st.integers(1, 100)),
    )


@given(spec=specs())
def test_dict_round_trip(spec: FeatureSpec) -> None:
    data = json.loads(json.dumps(spec.to_dict()))
    assert FeatureSpec.from_dict(data) == spec


def test_clock_and_bar_rule() -> None:
    spec = FeatureSpec(("volume",), clock="bars", bar="volume:1000")
    assert spec.bar_rule == BarRule("volume", 1000.0)
    assert spec.to_dict()["clock"] == "bars"
    assert FeatureSpec.from_dict(spec.to_dict()) == spec
    assert "clock" not in FeatureSpec(("a",)).to_dict()  # default left out: old specs read equal
    assert parse_bar_rule("time:5m") == BarRule("time", 300 * 10**9)
    assert parse_bar_rule("dollar:1e6").size == 1e6
    assert parse_duration_ns("250us") == 250_000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"clock": "ticks"}, "clock 'ticks' is not one of"),
        ({"clock": "bars"}, "clock 'bars' needs a bar rule"),
        ({"bar": "1s"}, "bar '1s' is only allowed with clock 'bars', not 'quotes'"),
        ({"clock": "bars", "bar": "0s"}, "duration '0s' is not a positive integer"),
        ({"clock": "bars", "bar": "volume:x"}, "volume threshold must be a number > 0"),
        ({"clock": "bars", "bar": "tick:5"}, "expected a duration"),
    ],
)
def test_clock_rejects(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FeatureSpec(("a",), **kwargs)


@given(
    spec=specs(),
    clock=st.sampled_from(["quotes", "trades", "bars", "mbp10", "ohlcv"]),
    bar=st.sampled_from(["1s", "500ms", "volume:10", "dollar:1e6"]),
)
def test_dict_round_trip_with_clock(spec: FeatureSpec, clock: str, bar: str) -> None:
    with_clock = FeatureSpec(
        spec.features,
        spec.labels,
        spec.stats_period,
        spec.version,
        clock=clock,  # type: ignore[arg-type]
        bar=bar if clock == "bars" else None,
    )
    assert FeatureSpec.from_dict(json.loads(json.dumps(with_clock.to_dict()))) == with_clock
