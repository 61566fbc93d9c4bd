"""Binance futures ``bookDepth`` dumps: cumulative depth in percentage bands around the
mid, one snapshot per timestamp, as mbp10 rows whose levels are the bands.

A dump line is ``timestamp,percentage,depth,notional``: within ``percentage`` % of the mid
(negative: bids, positive: asks) the book holds ``depth`` base units worth ``notional``.
The lines of one timestamp are one snapshot and become **one mbp10 row**: level ``i`` of
each side is the side's ``i``-th band by distance from the mid, its size the band's
cumulative depth and its price the band's average price, ``notional / depth`` (so the
notional is ``price * size``: nothing is lost). Action ``R`` (the state is replaced),
side 0. These levels are bands, not price levels: features that read level prices as
quotes (spread, mid) see band averages. Row numbers are each snapshot's first line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.ingest._sources import Input
from ticktensor.schemas import MBP_DEPTH, EventKind, cast_columns

from ._base import EventBatch, Inference, ReadOptions
from ._columns import safe_cast
from ._text import Lines, parse_numbers, reject, rejects_table, split_lines

__all__ = ["read_book_depth"]

_NAMES = ("timestamp", "percentage", "depth", "notional")
_NUMBERS = {"percentage": pa.float64(), "depth": pa.float64(), "notional": pa.float64()}
_LEVELS = tuple(
    f"{side}_{what}_{level:02d}"
    for side in ("bid", "ask")
    for what in ("px", "sz")
    for level in range(MBP_DEPTH)
)

_Snapshot = tuple[int, int, list[tuple[int, float, float, float, str]]]  # ts, row, lines


def read_book_depth(
    source: Input, options: ReadOptions, symbol: str, header: bool
) -> Iterator[EventBatch]:
    """The snapshots of a bookDepth dump, in batches of about ``batch_rows`` snapshots."""
    url = source.url
    pending: _Snapshot | None = None  # the last snapshot of a batch may go on in the next
    first = True
    with source.open() as stream:
        delimiter = options.csv.delimiter
        for lines in split_lines(
            stream, _NAMES, options.batch_rows, url, skip=int(header), delimiter=delimiter
        ):
            parsed = parse_numbers(lines, _NUMBERS, url)
            parsed, times = _times(parsed, url)
            snapshots: list[_Snapshot] = []
            rejects = list(parsed.rejects)
            for i, ts in enumerate(times.tolist()):
                line = (
                    int(parsed.rows[i]),
                    float(parsed.columns["percentage"][i].as_py()),
                    float(parsed.columns["depth"][i].as_py()),
                    float(parsed.columns["notional"][i].as_py()),
                    str(parsed.raw[i]),
                )
                if pending is not None and pending[0] == ts:
                    pending[2].append(line)
                    continue
                if pending is not None:
                    snapshots.append(pending)
                pending = (ts, line[0], [line])
            batch = _batch(snapshots, symbol, url, rejects)
            if first and (batch.table.num_rows or batch.rejects.num_rows):
                first = False
                batch = _announce(batch, header)
            if batch.table.num_rows or batch.rejects.num_rows:
                yield batch
    tail = _batch([pending] if pending is not None else [], symbol, url, [])
    yield _announce(tail, header) if first else tail


def _announce(batch: EventBatch, header: bool) -> EventBatch:
    what = "with a header" if header else "no header"
    note = (
        f"binance futures bookDepth dump (4 columns, {what}): one mbp10 row per snapshot; "
        "level i = the i-th percentage band of each side, size = cumulative depth, "
        "price = notional / depth (the band's average price)"
    )
    inference = Inference({"ts_event": "timestamp"}, (note,))
    return EventBatch(
        batch.kind, batch.table, batch.rows, rejects=batch.rejects, inference=inference
    )


def _times(lines: Lines, url: str) -> tuple[Lines, np.ndarray]:
    """UTC ns of each line's text timestamp; lines whose time does not parse are rejects."""
    text = pc.utf8_trim_whitespace(lines.columns["timestamp"])
    parsed, bad = safe_cast(text, pa.timestamp("ns"))
    for i in np.flatnonzero(bad).tolist():
        why = "is not a time"
        lines.rejects.append(
            reject(url, int(lines.rows[i]), "timestamp", str(text[i]), str(lines.raw[i]), why)
        )
    if bad.any():
        lines = lines.take(~bad)
        parsed = parsed.filter(pa.array(~bad))
    ints = np.asarray(parsed.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)
    return lines, ints


def _distance(line: tuple[int, float, float, float, str]) -> float:
    return abs(line[1])


def _overflow(url: str, line: tuple[int, float, float, float, str]) -> dict[str, Any]:
    row, percentage, _, _, raw = line
    why = f"band {percentage:g} % is past the {MBP_DEPTH} levels of the mbp10 schema"
    message = f"{url} row {row}: column percentage value {percentage:g}: {why} (rule: depth_levels)"
    return {
        "row": row,
        "column": "percentage",
        "value": f"{percentage:g}",
        "rule": "depth_levels",
    } | {
        "message": message,
        "raw": raw,
    }


def _batch(
    snapshots: list[_Snapshot], symbol: str, url: str, rejects: list[dict[str, Any]]
) -> EventBatch:
    cells: dict[str, list[float | None]] = {name: [] for name in _LEVELS}
    for _, _, lines in snapshots:
        for word, sign in (("bid", -1.0), ("ask", 1.0)):
            bands = sorted((abs(p), d, n) for _, p, d, n, _ in lines if p * sign > 0)
            for level in range(MBP_DEPTH):
                band = bands[level] if level < len(bands) else None
                depth = None if band is None else band[1]
                price = None if band is None or not band[1] else band[2] / band[1]
                cells[f"{word}_px_{level:02d}"].append(price)
                cells[f"{word}_sz_{level:02d}"].append(depth)
            if len(bands) > MBP_DEPTH:
                extra = sorted((line for line in lines if line[1] * sign > 0), key=_distance)
                rejects += [_overflow(url, line) for line in extra[MBP_DEPTH:]]
    n = len(snapshots)
    columns: dict[str, Any] = {
        "ts_event": pa.array([ts for ts, _, _ in snapshots], pa.int64()),
        "symbol": pa.array([symbol] * n, pa.string()),
        "venue": pa.array(["binance-futures"] * n, pa.string()),
        "action": pa.array(["R"] * n, pa.string()),
        "side": pa.array([0] * n, pa.int8()),
    }
    columns |= {name: pa.array(values, pa.float64()) for name, values in cells.items()}
    table = cast_columns(pa.table(columns), EventKind.MBP10)
    rows = np.asarray([row for _, row, _ in snapshots], dtype=np.int64)
    return EventBatch(EventKind.MBP10, table, rows, rejects=rejects_table(rejects))
