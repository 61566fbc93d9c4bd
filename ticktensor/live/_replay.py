"""Replay of a stored session: its quote and trade tables, as ingest kept them."""

from __future__ import annotations

import pyarrow as pa

from ticktensor.errors import ConfigError
from ticktensor.schemas import EventKind, FeatureSpec
from ticktensor.store import StoreVersion

__all__ = ["session_events", "spec_of"]


def spec_of(version: StoreVersion) -> FeatureSpec:
    """The feature spec ``version``'s features were computed with."""
    spec = version.manifest.attributes.get("feature_spec")
    if spec is None:
        raise ConfigError(f"store version {version.version} records no feature spec")
    return FeatureSpec.from_dict(spec)


def session_events(version: StoreVersion, session: str) -> dict[EventKind, pa.Table]:
    """The quote, trade, ohlcv and MBP-10 events ``version`` stores for ``session`` (every
    symbol), in the order ingest computed features from (by symbol, then time)."""
    events = {}
    for kind in (EventKind.QUOTES, EventKind.TRADES, EventKind.OHLCV, EventKind.MBP10):
        records = [t for t in version.tables_of(kind.value) if t.session == session]
        if records:
            events[kind] = pa.concat_tables(version.read_table(t) for t in records)
    if not events:
        raise ConfigError(
            f"store version {version.version} has no quotes, trades or bars of {session!r}"
        )
    return events
