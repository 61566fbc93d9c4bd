"""``bench wide``: workload W1, a store that holds a market, measured in one run.

W1 of DESIGN.md, scaled by :class:`WideOptions`: ``symbols`` x ``rows`` one-minute bars x
``features`` float32 per session, appended one session per commit for ``sessions``
sessions, then read back. One run measures, side by side with its baselines:

- ``append_session``: seconds to write and commit one session (one ``write_pack`` and one
  ``commit``), as the store ages, against ``polars_parquet_session`` (the same session as
  one zstd Parquet file); ``append_session_segments``: the per-segment API, for reference;
- ``objects_per_session`` and ``metadata_bytes_per_commit`` (checkpoint commits apart, as
  ``metadata_bytes_checkpoint``);
- ``ingest_wide``: ``ticktensor ingest`` of one all-symbol CSV, against ``pyarrow_csv_parquet``;
- ``open_dataset``: opening the store as a ``WindowDataset`` in a fresh process (and
  with ``cross_gaps=True``, in its note);
- ``loader_wide`` against ``loader_narrow``: the loader over the wide store and over the
  same bytes stored as one long series.

The rows, their goals and verdicts are built by :mod:`ticktensor.bench.wide_rows`.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ticktensor.errors import ConfigError, TickTensorError
from ticktensor.loaders import WindowDataset
from ticktensor.store import open_store

from .wide_append import SessionData, append_packs, append_segments, session_data, warm_up
from .wide_ingest import ingest_runs
from .wide_read import loader_rates, open_seconds, write_narrow
from .wide_rows import build_rows, format_rows, format_session

__all__ = ["WideOptions", "format_rows", "run_wide"]


@dataclass(frozen=True)
class WideOptions:
    """The shape and timing of one ``bench wide`` run (the defaults are W1).

    Parameters
    ----------
    symbols, sessions, rows, features, labels
        Symbols per session, sessions appended (one commit each), rows per symbol and
        session (390 one-minute bars), float32 features and labels per row.
    window, batch
        Rows per sample and samples per batch of the dataset and loader rows.
    ingest_rows
        Trades in the all-symbol CSV of ``ingest_wide``.
    segment_sessions
        Sessions of the per-segment reference (``append_session_segments``); 0 skips it.
    seconds, repeats
        Length of one loader repetition and repetitions per timed method (the median counts).
    """

    symbols: int = 5_000
    sessions: int = 20
    rows: int = 390
    features: int = 16
    labels: int = 1
    window: int = 32
    batch: int = 256
    ingest_rows: int = 2_000_000
    segment_sessions: int = 0
    seconds: float = 2.0
    repeats: int = 3

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            low = 0 if f.name in ("labels", "segment_sessions") else 1
            if f.name == "seconds":
                if not (isinstance(value, int | float) and value > 0):
                    raise ConfigError(f"bench wide: seconds must be > 0, got {value!r}")
            elif not isinstance(value, int) or isinstance(value, bool) or value < low:
                kind = "a positive" if low else "a non-negative"
                raise ConfigError(f"bench wide: {f.name} must be {kind} integer, got {value!r}")
        if self.window > self.rows:
            raise ConfigError(
                f"bench wide: window {self.window} is longer than a session's {self.rows} rows"
            )

    @classmethod
    def quick(cls) -> WideOptions:
        """``--quick``: 500 symbols x 10 sessions, 200,000 CSV rows, 3 per-segment sessions."""
        return cls(symbols=500, sessions=10, ingest_rows=200_000, segment_sessions=3, seconds=0.5)


def run_wide(
    options: WideOptions, *, workdir: Path | None = None, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run every part of W1 in a scratch folder under ``workdir`` (removed at the end).

    Returns ``{"options", "sessions", "segment_sessions", "ingest", "reads", "rows"}``: the
    figures of every appended session (pack store, then the per-segment reference), of the
    ingest runs and of the read parts, and the rows with their goals.
    """
    shape = (options.symbols, options.rows, options.features, options.labels)

    def make(day: int) -> SessionData:
        return session_data(*shape, day)

    with tempfile.TemporaryDirectory(prefix="tt-bench-wide-", dir=workdir) as tmp:
        root = Path(tmp)
        warm_up(root / "warm-up", options.features, options.labels)
        say(
            f"# W1: {options.symbols:,} symbols x {options.rows} rows x {options.features} "
            f"float32 features (+{options.labels} label) per session, {options.sessions} "
            "sessions, one commit each"
        )
        sessions = append_packs(
            root / "store", options.sessions, make, root, lambda row: say(format_session(row))
        )
        reference = append_segments(root / "store-segments", options.segment_sessions, make)
        ingest: dict[str, Any]
        try:
            ingest = ingest_runs(
                root / "ingest",
                options.ingest_rows,
                options.symbols,
                options.repeats,
                os.cpu_count() or 1,
                say,
            )
        except TickTensorError as exc:
            ingest = {"error": str(exc)}
        say("# open_dataset, loader_wide, loader_narrow")
        reads = _read_parts(root, options, make)
    doc = {
        "options": dataclasses.asdict(options),
        "sessions": sessions,
        "segment_sessions": reference,
        "ingest": ingest,
        "reads": reads,
    }
    return {**doc, "rows": build_rows(doc)}


def _read_parts(
    root: Path, options: WideOptions, make: Callable[[int], SessionData]
) -> dict[str, Any]:
    """``open_dataset`` and the two loader rows; a part that fails says why in ``errors``."""
    errors: dict[str, str] = {}
    url, window = str(root / "store"), options.window
    opened = joined = None
    try:
        opened = open_seconds(url, window, options.repeats)
        joined = open_seconds(url, window, options.repeats, cross_gaps=True)
    except RuntimeError as exc:
        errors["open_dataset"] = str(exc)
    narrow = write_narrow(root / "store-narrow", make, options.sessions)
    datasets = {"loader_narrow": WindowDataset(narrow, window)}
    try:
        datasets = {"loader_wide": WindowDataset(open_store(url), window), **datasets}
    except TickTensorError as exc:
        errors["loader_wide"] = f"WindowDataset over the store: {type(exc).__name__}: {exc}"
    reps = loader_rates(datasets, options.batch, options.seconds, options.repeats)
    loaders = {
        name: {
            "samples_per_s": statistics.median(r.rate for r in runs),
            "rates": [r.rate for r in runs],
            "windows": len(datasets[name]),
            "first_batch_s": statistics.median(r.first_batch_s or 0.0 for r in runs),
        }
        for name, runs in reps.items()
    }
    opens = {"open": opened, "open_cross_gaps": joined}
    return {
        "errors": errors,
        "loaders": loaders,
        **{name: figures for name, figures in opens.items() if figures is not None},
    }
