"""``bench wide``: appending one session of a wide market per commit, as the store ages.

Workload W1 of DESIGN.md, scaled by :class:`WideOptions`: every session, each symbol's
day (``rows`` x ``features`` float32) is written with ``Store.write_segment`` and the
session is published with one ``Store.commit``, through the public API only. Beside it
the same session is written as one zstd Parquet file with polars, the simplest thing a
user would do. Each session reports the seconds of both, the bytes of metadata the
commit wrote (version files and the pointer) and the objects the session added; the
ratio of session N to session 1 shows whether a commit's cost is flat with the store's
age.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ticktensor.errors import ConfigError

__all__ = ["WideOptions", "format_wide", "run_wide"]

SESSION_NS = 86_400 * 10**9
T0 = 1_704_205_800_000_000_000  # 2024-01-02 14:30 UTC
METADATA = ("versions", "latest.json")


@dataclass(frozen=True)
class WideOptions:
    """The shape of one ``bench wide`` run.

    Parameters
    ----------
    symbols
        Symbols per session (W1: 5,000; ``--quick``: 500).
    sessions
        Sessions appended, one commit each (W1: 20; ``--quick``: 10).
    rows
        Rows per symbol and session (390 one-minute bars).
    features
        float32 features per row.
    """

    symbols: int = 5_000
    sessions: int = 20
    rows: int = 390
    features: int = 16

    def __post_init__(self) -> None:
        for name in ("symbols", "sessions", "rows", "features"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"bench wide: {name} must be a positive integer, got {value!r}")

    @classmethod
    def quick(cls) -> WideOptions:
        """The scaled-down shape of ``--quick`` (500 symbols, 10 sessions)."""
        return cls(symbols=500, sessions=10)


def _session(
    options: WideOptions, day: int
) -> tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Symbols, ``ts [rows]`` and ``values [symbols, rows, features]`` of one session."""
    rng = np.random.default_rng(day)
    symbols = [f"S{k:05d}" for k in range(options.symbols)]
    ts = T0 + day * SESSION_NS + np.arange(options.rows, dtype=np.int64) * 60 * 10**9
    values = rng.standard_normal((options.symbols, options.rows, options.features), np.float32)
    return symbols, ts, values


def _files(root: Path, areas: tuple[str, ...] | None = None) -> dict[str, int]:
    """Relative path -> size of every file below ``root`` (or only below ``areas``)."""
    out = {}
    for base, _dirs, files in os.walk(root):
        for name in files:
            full = Path(base, name)
            rel = full.relative_to(root).as_posix()
            if areas is None or rel.split("/", 1)[0] in areas:
                out[rel] = full.stat().st_size
    return out


def _polars_seconds(
    path: Path, symbols: list[str], ts: npt.NDArray[np.int64], values: npt.NDArray[np.float32]
) -> float:
    import polars as pl

    n_sym, rows, features = values.shape
    columns: dict[str, Any] = {
        "symbol": np.repeat(np.array(symbols), rows),
        "ts": np.tile(ts, n_sym),
    }
    flat = values.reshape(n_sym * rows, features)
    columns |= {f"f{i}": flat[:, i] for i in range(features)}
    frame = pl.DataFrame(columns)
    start = time.perf_counter()
    frame.write_parquet(path, compression="zstd")
    return time.perf_counter() - start


def run_wide(
    options: WideOptions, *, workdir: Path | None = None, say: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """Append ``options.sessions`` sessions to a fresh store; one row of figures per session.

    Each row has ``session``, ``append_s`` (all ``write_segment`` calls plus the
    ``commit``), ``write_ms_per_segment``, ``commit_s``, ``polars_parquet_s``,
    ``metadata_bytes`` (version files and pointer written by the commit),
    ``objects`` (files the session added) and ``append_vs_session1``.
    """
    from ticktensor.store import Store

    with tempfile.TemporaryDirectory(prefix="tt-bench-wide-", dir=workdir) as tmp:
        root = Path(tmp, "store")
        store = Store.create(str(root))
        names = [f"f{i}" for i in range(options.features)]
        rows: list[dict[str, Any]] = []
        for day in range(1, options.sessions + 1):
            symbols, ts, values = _session(options, day)
            session = f"s{day:04d}"
            before, meta_before = _files(root), _files(root, METADATA)
            start = time.perf_counter()
            records = [
                store.write_segment(
                    symbol=sym,
                    session=session,
                    ts=ts,
                    values=values[k],
                    feature_names=names,
                )
                for k, sym in enumerate(symbols)
            ]
            written = time.perf_counter()
            store.commit(segments=records, message=f"session {day}")
            done = time.perf_counter()
            after = _files(root)
            meta = {
                rel: size
                for rel, size in _files(root, METADATA).items()
                if meta_before.get(rel) != size
            }
            parquet = _polars_seconds(Path(tmp, f"{session}.parquet"), symbols, ts, values)
            row = {
                "session": day,
                "append_s": done - start,
                "write_ms_per_segment": (written - start) / options.symbols * 1e3,
                "commit_s": done - written,
                "polars_parquet_s": parquet,
                "metadata_bytes": sum(meta.values()),
                "objects": len(set(after) - set(before)),
            }
            row["append_vs_session1"] = row["append_s"] / (rows[0] if rows else row)["append_s"]
            rows.append(row)
            say(format_wide([row], header=not rows[:-1]))
    return rows


def format_wide(rows: list[dict[str, Any]], *, header: bool = True) -> str:
    """The rows of :func:`run_wide` as a fixed-width text table."""
    cols = [
        ("session", "{:>7d}"),
        ("append_s", "{:>9.3f}"),
        ("write_ms_per_segment", "{:>8.3f}"),
        ("commit_s", "{:>8.3f}"),
        ("polars_parquet_s", "{:>10.3f}"),
        ("metadata_bytes", "{:>12,d}"),
        ("objects", "{:>8,d}"),
        ("append_vs_session1", "{:>6.2f}"),
    ]
    titles = ["session", "append s", "ms/seg", "commit s", "parquet s", "meta bytes", "objects"]
    titles.append("xS1")
    widths = [len(fmt.format(0)) for _, fmt in cols]
    lines = []
    if header:
        lines.append(" ".join(t.rjust(w) for t, w in zip(titles, widths, strict=True)))
    lines += [" ".join(fmt.format(r[name]) for name, fmt in cols) for r in rows]
    return "\n".join(lines)


def describe(options: WideOptions) -> dict[str, Any]:
    """The options as plain JSON (for ``--json``)."""
    return asdict(options)
