"""Appending one session of a wide market per commit, as the store ages (W1's append rows).

Every session of every symbol is written through the public ``Store`` API: one
``write_pack`` and one ``commit`` per session. Right after it the same session is written
as one zstd Parquet file with polars, so both see the same machine load. Each session
records the seconds of both, the objects the commit added under the data areas and the
bytes of version files it wrote. A second, shorter run writes one segment per symbol,
the legacy format-1 layout (:mod:`ticktensor.store.testing`), as a reference.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ticktensor.store import PackRecord, SegmentRecord, Store
from ticktensor.store.testing import write_segment

__all__ = ["SessionData", "append_packs", "append_segments", "session_data", "store_files"]

SESSION_NS = 86_400 * 10**9
MINUTE_NS = 60 * 10**9
T0 = 1_704_205_800_000_000_000  # 2024-01-02 14:30 UTC
DATA_AREAS = ("packs", "segments", "events")
"""Top-level folders of a store that hold data objects (not version metadata)."""
VERSION_AREA = "versions"


@dataclass(frozen=True)
class SessionData:
    """One session of every symbol, sorted by (symbol, ts): the arguments of ``write_pack``."""

    session: str
    symbols: list[str]
    offsets: npt.NDArray[np.int64]
    ts: npt.NDArray[np.int64]
    values: npt.NDArray[np.float32]
    labels: npt.NDArray[np.float32]
    feature_names: list[str]
    label_names: list[str]

    @property
    def nbytes(self) -> int:
        """Bytes of ``ts``, ``values`` and ``labels``."""
        return self.ts.nbytes + self.values.nbytes + self.labels.nbytes


def session_data(symbols: int, rows: int, features: int, labels: int, day: int) -> SessionData:
    """Session ``day``: ``rows`` one-minute bars of ``features`` random float32 per symbol."""
    rng = np.random.default_rng(day)
    bars = T0 + day * SESSION_NS + np.arange(rows, dtype=np.int64) * MINUTE_NS
    return SessionData(
        session=f"s{day:04d}",
        symbols=[f"S{k:05d}" for k in range(symbols)],
        offsets=np.arange(symbols + 1, dtype=np.int64) * rows,
        ts=np.tile(bars, symbols),
        values=rng.standard_normal((symbols * rows, features), np.float32),
        labels=rng.standard_normal((symbols * rows, labels), np.float32),
        feature_names=[f"f{i}" for i in range(features)],
        label_names=[f"y{i}" for i in range(labels)],
    )


def store_files(root: Path, areas: tuple[str, ...]) -> dict[str, int]:
    """Relative path -> size of every file under ``root``'s top-level folders ``areas``."""
    out = {}
    for area in areas:
        for base, _dirs, files in os.walk(root / area):
            for name in files:
                full = Path(base, name)
                out[full.relative_to(root).as_posix()] = full.stat().st_size
    return out


def _polars_seconds(path: Path, data: SessionData) -> float:
    """Seconds of ``write_parquet`` (zstd) of the session as one frame, then fsync untimed.

    The fsync keeps the file's dirty pages out of the next commit's flush of the store's
    filesystem; the clock covers what a user's ``write_parquet`` call costs.
    """
    import polars as pl

    rows = data.ts.shape[0] // len(data.symbols)
    columns: dict[str, Any] = {
        "symbol": np.repeat(np.array(data.symbols), rows),
        "ts": data.ts,
        **{name: data.values[:, i] for i, name in enumerate(data.feature_names)},
        **{name: data.labels[:, i] for i, name in enumerate(data.label_names)},
    }
    frame = pl.DataFrame(columns)
    start = time.perf_counter()
    frame.write_parquet(path, compression="zstd")
    seconds = time.perf_counter() - start
    with path.open("rb") as f:
        os.fsync(f.fileno())
    path.unlink()
    return seconds


def _added(root: Path, act: Callable[[], None]) -> tuple[float, dict[str, int], dict[str, int]]:
    """Seconds of ``act()``; the data objects it added and the version files it wrote."""
    data_before, meta_before = store_files(root, DATA_AREAS), store_files(root, (VERSION_AREA,))
    start = time.perf_counter()
    act()
    seconds = time.perf_counter() - start
    data = {k: v for k, v in store_files(root, DATA_AREAS).items() if k not in data_before}
    meta = {k: v for k, v in store_files(root, (VERSION_AREA,)).items() if meta_before.get(k) != v}
    return seconds, data, meta


def _session_row(
    day: int, seconds: float, data: dict[str, int], meta: dict[str, int]
) -> dict[str, Any]:
    return {
        "session": day,
        "append_s": seconds,
        "objects": len(data),
        "data_bytes": sum(data.values()),
        "version_files": len(meta),
        "metadata_bytes": sum(meta.values()),
        "checkpoint": any(k.endswith(".checkpoint.json") for k in meta),
    }


def warm_up(root: Path, features: int, labels: int) -> None:
    """One small, untimed session through every path measured (imports, first calls)."""
    store = Store.create(str(root))
    data = session_data(2, 8, features, labels, 0)
    store.commit(packs=[_write_pack(store, data)])
    store.commit(segments=_write_segments(store, session_data(2, 8, features, labels, 1)))
    _polars_seconds(root / "warm-up.parquet", data)


def _write_pack(store: Store, data: SessionData) -> PackRecord:
    return store.write_pack(
        session=data.session,
        symbols=data.symbols,
        offsets=data.offsets,
        ts=data.ts,
        values=data.values,
        feature_names=data.feature_names,
        labels=data.labels,
        label_names=data.label_names,
    )


def _write_segments(store: Store, data: SessionData) -> list[SegmentRecord]:
    return [
        write_segment(
            store,
            symbol=symbol,
            session=data.session,
            ts=data.ts[a:b],
            values=data.values[a:b],
            feature_names=data.feature_names,
            labels=data.labels[a:b],
            label_names=data.label_names,
        )
        for symbol, a, b in zip(data.symbols, data.offsets[:-1], data.offsets[1:], strict=True)
    ]


def append_packs(
    root: Path,
    sessions: int,
    make: Callable[[int], SessionData],
    scratch: Path,
    say: Callable[[dict[str, Any]], None],
) -> list[dict[str, Any]]:
    """Create a store at ``root`` and append sessions ``1..sessions``, one pack each.

    Each row also has ``write_s`` and ``commit_s`` (the two calls of ``append_s``) and
    ``polars_parquet_s``, the same session written as one Parquet file in ``scratch``.
    """
    store = Store.create(str(root))
    rows: list[dict[str, Any]] = []
    for day in range(1, sessions + 1):
        data = make(day)
        split: dict[str, float] = {}

        def append(data: SessionData = data, split: dict[str, float] = split) -> None:
            record = _write_pack(store, data)
            split["written"] = time.perf_counter()
            store.commit(packs=[record], message=f"session {data.session}")
            split["committed"] = time.perf_counter()

        seconds, added, meta = _added(root, append)
        row = _session_row(day, seconds, added, meta)
        row["commit_s"] = split["committed"] - split["written"]
        row["write_s"] = seconds - row["commit_s"]
        row["polars_parquet_s"] = _polars_seconds(scratch / f"{data.session}.parquet", data)
        rows.append(row)
        say(row)
    return rows


def append_segments(
    root: Path, sessions: int, make: Callable[[int], SessionData]
) -> list[dict[str, Any]]:
    """Create a store at ``root`` and append ``sessions`` sessions, one legacy format-1
    segment per symbol."""
    store = Store.create(str(root))
    rows = []
    for day in range(1, sessions + 1):
        data = make(day)

        def append(data: SessionData = data) -> None:
            records = _write_segments(store, data)
            store.commit(segments=records, message=f"session {data.session}")

        rows.append(_session_row(day, *_added(root, append)))
    return rows
