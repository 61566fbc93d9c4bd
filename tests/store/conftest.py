"""Shared helpers for store tests: small deterministic segments and packs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from ticktensor.store import Layout, PackRecord, SegmentRecord, Store
from ticktensor.store.testing import write_segment

FEATURES = ("ret", "spread", "imbalance")
LABELS = ("fwd_ret",)
DAY_NS = 86_400 * 10**9


@dataclass(frozen=True)
class Series:
    symbol: str
    session: str
    ts: npt.NDArray[np.int64]
    values: npt.NDArray[np.float32]
    labels: npt.NDArray[np.float32]


def make_series(symbol: str, day: int, rows: int = 1000, seed: int = 0) -> Series:
    rng = np.random.default_rng([seed, day, sum(map(ord, symbol))])
    start = 1_704_153_600 * 10**9 + day * DAY_NS
    ts = start + np.cumsum(rng.integers(1, 10**6, rows)).astype(np.int64)
    values = rng.standard_normal((rows, len(FEATURES))).astype(np.float32)
    labels = rng.standard_normal((rows, len(LABELS))).astype(np.float32)
    return Series(symbol, f"2024-01-{2 + day:02d}", ts, values, labels)


def write_series(store: Store, s: Series, layout: Layout | None = None) -> SegmentRecord:
    """Write ``s`` (features and labels) as one segment of ``store``."""
    return write_segment(
        store,
        symbol=s.symbol,
        session=s.session,
        ts=s.ts,
        values=s.values,
        feature_names=FEATURES,
        labels=s.labels,
        label_names=LABELS,
        layout=layout,
    )


def write_pack_of(
    store: Store,
    day: int,
    symbols: Sequence[str] = ("A", "B"),
    *,
    rows: int = 100,
    seed: int = 0,
    layout: Layout | None = None,
) -> PackRecord:
    """Write session ``day`` of ``symbols`` (each :func:`make_series`) as one pack."""
    series = [make_series(symbol, day, rows=rows, seed=seed) for symbol in sorted(symbols)]
    return store.write_pack(
        session=series[0].session,
        symbols=[s.symbol for s in series],
        offsets=np.cumsum([0, *(s.ts.shape[0] for s in series)]),
        ts=np.concatenate([s.ts for s in series]),
        values=np.concatenate([s.values for s in series]),
        feature_names=FEATURES,
        labels=np.concatenate([s.labels for s in series]),
        label_names=LABELS,
        layout=layout,
    )


@pytest.fixture(params=["local", "memory"])
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh location: a local directory or an fsspec ``memory://`` URL."""
    if request.param == "local":
        return str(tmp_path_factory.mktemp("store") / "s")
    import uuid

    return f"memory://tt-{uuid.uuid4().hex}"
