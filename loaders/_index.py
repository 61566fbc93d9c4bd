"""Which windows a dataset holds: its sources, feature columns, normalization, valid starts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from ticktensor._memory import fresh_buffer
from ticktensor.errors import ConfigError
from ticktensor.store import FeatureBlock, StoreVersion

from ._chunks import SourcePart, Sources

__all__ = [
    "Windows",
    "block_of",
    "feature_columns",
    "normalization",
    "select_sources",
    "source_symbols",
    "symbol_table",
    "window_starts",
]

Int32s = npt.NDArray[np.int32]
Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]
Names = npt.NDArray[np.str_]


def feature_columns(
    version: StoreVersion, features: Sequence[str] | None
) -> tuple[tuple[str, ...], Int64s | None]:
    known = tuple(version.feature_names)
    if features is None:
        return known, None
    if isinstance(features, str):
        raise ConfigError(f"features: expected a sequence of names, got the string {features!r}")
    wanted = tuple(features)
    unknown = [f for f in wanted if f not in known]
    if unknown:
        raise ConfigError(f"unknown feature(s) {unknown}; the store has {list(known)}")
    if len(set(wanted)) != len(wanted) or not wanted:
        raise ConfigError(f"features must be distinct and non-empty, got {list(wanted)}")
    return wanted, np.array([known.index(f) for f in wanted], dtype=np.int64)


def normalization(version: StoreVersion, names: tuple[str, ...]) -> tuple[Floats, Floats]:
    stats = version.stats
    if stats is None:
        raise ConfigError(
            f"normalize=True but store version {version.version} has no feature statistics: "
            "they are computed over a declared training period only (point-in-time); "
            "declare one with `ticktensor ingest --stats-period START:END`, a feature "
            "spec's stats_period, or Store.commit(stats=...)"
        )
    return stats.scale(names)


def select_sources(
    version: StoreVersion,
    symbols: Sequence[str] | None,
    start: int | None,
    end: int | None,
    window: int,
    cross_gaps: bool,
) -> Sources:
    """The sources to read, in order: segments by symbol then time, then packs by time;
    with ``cross_gaps``, one source per symbol (its segments and pack rows by time).

    A source is one segment, one pack (every selected symbol of a session: windows are
    cut within each symbol's rows) or, with ``cross_gaps``, one symbol's rows of
    consecutive sessions (whole segments and its row ranges of packs). Packs are selected
    by their session's time range and, with a symbol filter, by holding one of the
    symbols; which rows of a pack a dataset reads is decided per symbol when windows are
    cut (:func:`window_starts`).
    """
    if symbols is not None:
        unknown = sorted(set(symbols) - set(version.symbols))
        if unknown:
            raise ConfigError(f"unknown symbol(s) {unknown}; the store has {list(version.symbols)}")
    wanted = sorted(set(version.symbols if symbols is None else symbols))
    wanted_names = np.asarray(wanted, dtype=np.str_)

    def in_range(block: FeatureBlock) -> bool:
        return (start is None or block.ts_end >= start) and (end is None or block.ts_start < end)

    chosen = set(wanted)
    segments = [b for b in version.blocks if b.symbol is not None and b.symbol in chosen]
    packs = sorted((b for b in version.blocks if b.symbol is None), key=_time_key)
    if cross_gaps:
        return _joined_sources(version, wanted_names, segments, packs, in_range, window)
    by_symbol: dict[str, list[FeatureBlock]] = {}
    for segment in segments:
        assert segment.symbol is not None
        by_symbol.setdefault(segment.symbol, []).append(segment)
    parts = [
        (SourcePart(segment, 0, segment.rows, symbol),)
        for symbol in wanted
        for segment in sorted(by_symbol.get(symbol, ()), key=_time_key)
        if in_range(segment)
    ]
    parts.extend(
        (SourcePart(pack, 0, pack.rows, None),)
        for pack in packs
        if in_range(pack)
        and (symbols is None or version.symbol_rows(pack).rows_of_many(wanted_names)[2].any())
    )
    return Sources.of(parts)


def _joined_sources(
    version: StoreVersion,
    wanted: Names,
    segments: Sequence[FeatureBlock],
    packs: Sequence[FeatureBlock],
    in_range: Callable[[FeatureBlock], bool],
    window: int,
) -> Sources:
    """One source per symbol of ``wanted`` (sorted) that some record in range holds: its
    segments and its rows of packs by time, from the earliest part that feeds the first
    in-range part's windows to the last in-range part. Every (symbol, record) pair at once.
    """
    records: list[FeatureBlock] = [*segments, *packs]
    symbol, record, lo, hi = _symbol_parts(version, wanted, segments, packs)
    ends = np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64)
    ranged = np.asarray([in_range(r) for r in records], dtype=np.bool_)
    hits = np.flatnonzero(ranged[record])
    held, at = np.unique(symbol[hits], return_index=True)
    first_hit = hits[at]
    last_hit = hits[np.searchsorted(symbol[hits], held, side="right") - 1]
    symbol_first = np.searchsorted(symbol, held)
    # Earlier parts feed the first windows' rows: back to the latest part from which at
    # least window - 1 rows precede the first hit (or the symbol's first part).
    first = first_hit
    if window > 1:
        back = np.searchsorted(ends, ends[first_hit] - (window - 1), side="right") - 1
        first = np.maximum(back, symbol_first)
    counts = last_hit + 1 - first
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    kept = np.repeat(first - bounds[:-1], counts) + np.arange(int(bounds[-1]), dtype=np.int64)
    return Sources(
        tuple(records),
        record[kept],
        lo[kept],
        hi[kept],
        bounds,
        tuple(wanted[held].tolist()),
        ends[first] - ends[symbol_first],
    )


def _symbol_parts(
    version: StoreVersion,
    wanted: Names,
    segments: Sequence[FeatureBlock],
    packs: Sequence[FeatureBlock],
) -> tuple[Int64s, Int64s, Int64s, Int64s]:
    """Every symbol's parts, by symbol then time: ``(symbol, record, lo, hi)`` each, the
    symbol an index into ``wanted`` and the record into ``[*segments, *packs]``.

    A part is a whole segment, or a symbol's rows of a pack (where it has some).
    """
    records: list[FeatureBlock] = [*segments, *packs]
    # A record's place in time; a stable sort keeps a symbol's segments before its packs.
    rank = np.empty(len(records), dtype=np.int64)
    rank[sorted(range(len(records)), key=lambda r: _time_key(records[r]))] = np.arange(len(records))
    symbol = [
        _ids(wanted, np.asarray([s.symbol for s in segments], dtype=np.str_)).astype(np.int64)
    ]
    record = [np.arange(len(segments), dtype=np.int64)]
    lo = [np.zeros(len(segments), dtype=np.int64)]
    hi = [np.asarray([s.rows for s in segments], dtype=np.int64)]
    if packs:
        ranges = zip(*(version.symbol_rows(p).rows_of_many(wanted) for p in packs), strict=True)
        pack_lo, pack_hi, held = (np.stack(a) for a in ranges)
        pack, held_symbol = np.nonzero(held & (pack_hi > pack_lo))
        symbol.append(held_symbol)
        record.append(len(segments) + pack)
        lo.append(pack_lo[pack, held_symbol])
        hi.append(pack_hi[pack, held_symbol])
    columns = [np.concatenate(c).astype(np.int64) for c in (symbol, record, lo, hi)]
    order = np.lexsort((rank[columns[1]], columns[0]))
    return columns[0][order], columns[1][order], columns[2][order], columns[3][order]


def source_symbols(
    version: StoreVersion, sources: Sources, wanted: Sequence[str] | None
) -> tuple[str, ...]:
    """The symbols the sources hold rows of (of ``wanted`` only, when given), sorted."""
    found = {symbol for symbol in sources.symbol if symbol is not None}
    packed = [
        np.asarray(version.symbol_rows(block_of(sources, s)).symbols, dtype=np.str_)
        for s, symbol in enumerate(sources.symbol)
        if symbol is None
    ]
    if packed:
        names = np.unique(np.concatenate(packed))
        if wanted is not None:
            names = names[np.isin(names, np.asarray(list(wanted), dtype=np.str_))]
        found.update(names.tolist())
    return tuple(sorted(found))


def block_of(sources: Sources, source: int) -> FeatureBlock:
    """The block of many symbols (a pack) that source ``source`` reads whole."""
    block = sources.records[int(sources.record[sources.first[source]])]
    if sources.symbol[source] is not None or block.symbol is not None:
        raise TypeError(f"source {source} reads no whole pack")
    return block


def _time_key(block: FeatureBlock) -> tuple[int, str]:
    return (block.ts_start, block.session)


@dataclass(frozen=True)
class Windows:
    """Valid windows of a dataset's sources: ``source[i]``, first row ``start[i]``; how
    many windows each source holds (``counts``); and per run of rows that holds windows
    (a source, or a symbol's rows of a pack), the rows they read: ``span_source``,
    ``span_lo``, ``span_hi``."""

    source: Int32s
    start: Int64s
    counts: Int64s
    span_source: Int32s
    span_lo: Int64s
    span_hi: Int64s


def window_starts(
    version: StoreVersion,
    sources: Sources,
    symbols: Sequence[str],
    row_offset: Int64s,
    labels: Floats,
    ts: Int64s | None,
    window: int,
    stride: int,
    start: int | None,
    end: int | None,
) -> Windows:
    """Every valid window of every source at once, in order (source by source, row by row).

    A window lies within one symbol's rows: a pack's rows are cut per symbol (those of
    ``symbols`` only), other sources whole. Candidates are every ``stride``-th row from
    the start of each symbol's rows (shifted by a joined source's phase); a candidate is
    kept when no label of its last row is NaN and, with a time range, the last row's
    timestamp is in ``[start, end)``. ``labels`` and ``ts`` hold every source's rows laid
    end to end, source ``s`` from row ``row_offset[s]``; ``ts`` is only needed (and read)
    for a time range.

    The work is a few passes over the rows and the windows: no Python per source or
    symbol, and few large temporaries (fresh memory costs a page fault per 4 KiB).
    """
    block_source, block_row, block_rows, block_phase = _blocks(version, sources, symbols)
    total_rows = labels.shape[0]
    block_first = row_offset[block_source] + block_row  # flat row of each block's row 0
    ends = _window_ends(labels, ts, start, end)[window - 1 :]  # ends[p]: a window at p ends well
    if stride == 1:
        flat = _every_start(block_first, np.maximum(block_rows - window + 1, 0), ends)
    else:
        first = -block_phase % stride
        span = block_rows - window - first
        count = np.where(span >= 0, span // stride + 1, 0)
        total = int(count.sum())
        # Per block a base, then every stride-th row.
        base = block_first + first - (np.cumsum(count) - count) * stride
        flat = np.repeat(base, count)
        flat += np.arange(0, total * stride, stride, dtype=np.int64)
        flat = flat[ends[flat]]
    # Flat starts are sorted, sources laid end to end: a searchsorted counts per source,
    # and per block finds the rows its windows read.
    first_window = np.searchsorted(flat, block_first)
    end_window = np.searchsorted(flat, block_first + block_rows)
    held = end_window > first_window
    span_source = block_source[held].astype(np.int32)
    span_lo = flat[first_window[held]] - row_offset[span_source]
    span_hi = flat[end_window[held] - 1] + window - row_offset[span_source]
    bounds = np.searchsorted(flat, np.append(row_offset, total_rows))
    counts = np.diff(bounds).astype(np.int64)
    source = fresh_buffer((flat.shape[0],), np.int32)
    for s in np.flatnonzero(counts).tolist():  # in place: no other array of every window
        lo, hi = int(bounds[s]), int(bounds[s + 1])
        source[lo:hi] = s
        flat[lo:hi] -= row_offset[s]
    return Windows(source, flat, counts, span_source, span_lo, span_hi)


_ROWS_AT_ONCE: Final = 1 << 20


def _every_start(block_first: Int64s, count: Int64s, ends: npt.NDArray[np.bool_]) -> Int64s:
    """Flat rows ``p`` in ``[block_first[b], block_first[b] + count[b])`` of some block
    with ``ends[p]``, sorted.

    The ranges are marked with +1/-1 edges and a running sum. The result (every window
    of the dataset) is written into memory whose pages are mapped at once, a slice of
    rows at a time: faulting in hundreds of MB page by page costs more than the rest.
    """
    rows = ends.shape[0]
    edges = np.zeros(rows + 1, dtype=np.int8)
    some = count > 0
    edges[block_first[some]] += 1
    edges[np.minimum(block_first + count, rows)[some]] -= 1
    candidate = fresh_buffer((rows,), np.int8)
    np.cumsum(edges[:-1], dtype=np.int8, out=candidate)
    mask = candidate.view(np.bool_)
    mask &= ends
    flat = fresh_buffer((int(np.count_nonzero(mask)),), np.int64)
    at = 0
    for lo in range(0, rows, _ROWS_AT_ONCE):
        found = np.flatnonzero(mask[lo : lo + _ROWS_AT_ONCE])
        found += lo
        flat[at : at + found.shape[0]] = found
        at += found.shape[0]
    return flat


def _window_ends(
    labels: Floats, ts: Int64s | None, start: int | None, end: int | None
) -> npt.NDArray[np.bool_]:
    """Whether a window may end at each row: its labels are all known (not NaN) and, with a
    time range, its timestamp is in ``[start, end)``."""
    ends = fresh_buffer((labels.shape[0],), np.bool_)
    if labels.shape[1] == 1:
        np.isnan(labels[:, 0], out=ends)
        np.logical_not(ends, out=ends)
    elif labels.shape[1]:
        np.any(np.isnan(labels), axis=1, out=ends)
        np.logical_not(ends, out=ends)
    else:
        ends.fill(True)
    if start is not None or end is not None:
        if ts is None:
            raise ValueError("window_starts: a time range needs the timestamps")
        if start is not None:
            ends &= ts >= start
        if end is not None:
            ends &= ts < end
    return ends


def _blocks(
    version: StoreVersion, sources: Sources, symbols: Sequence[str]
) -> tuple[Int64s, Int64s, Int64s, Int64s]:
    """Runs of rows that windows may not cross: ``(source, first row, rows, phase)`` each.

    One per source, or one per selected symbol of a pack (its rows in the pack).
    """
    names = np.asarray(symbols, dtype=np.str_)
    parts: list[Int64s] = []
    single: list[tuple[int, int, int, int]] = []
    rows, phase = sources.rows.tolist(), sources.phase.tolist()
    for s, symbol in enumerate(sources.symbol):
        if symbol is not None:
            single.append((s, 0, rows[s], phase[s]))
            continue
        if single:
            parts.append(np.asarray(single, dtype=np.int64))
            single = []
        index = version.symbol_rows(block_of(sources, s))
        held = np.isin(np.asarray(index.symbols, dtype=np.str_), names)
        lo = index.offsets[:-1][held]
        rows = np.diff(index.offsets)[held]
        parts.append(
            np.stack([np.full(lo.shape, s), lo, rows, np.zeros_like(lo)], axis=1).astype(np.int64)
        )
    if single:
        parts.append(np.asarray(single, dtype=np.int64))
    table = np.concatenate(parts) if parts else np.empty((0, 4), dtype=np.int64)
    return table[:, 0], table[:, 1], table[:, 2], table[:, 3]


def symbol_table(
    version: StoreVersion, sources: Sources, symbols: Sequence[str], row_offset: Int64s
) -> tuple[Int32s, Int64s, Int32s]:
    """Which symbol each row of the sources laid end to end belongs to.

    Returns ``(source_symbol, rows, ids)``: the index into ``symbols`` of each source's
    one symbol (``-1`` for a pack), and for the packs' rows the flat row where each
    symbol's rows begin (sorted) with its index (``-1``: not one of ``symbols``).
    """
    names = np.asarray(symbols, dtype=np.str_)
    source_symbol = np.full(len(sources), -1, dtype=np.int32)
    single = [(s, symbol) for s, symbol in enumerate(sources.symbol) if symbol is not None]
    if single:
        at, held = zip(*single, strict=True)
        source_symbol[list(at)] = _ids(names, np.asarray(held, dtype=np.str_))
    rows: list[Int64s] = []
    ids: list[Int32s] = []
    for s, symbol in enumerate(sources.symbol):
        if symbol is None:
            index = version.symbol_rows(block_of(sources, s))
            rows.append(row_offset[s] + index.offsets[:-1])
            ids.append(_ids(names, np.asarray(index.symbols, dtype=np.str_)))
    if not rows:
        return source_symbol, np.empty(0, np.int64), np.empty(0, np.int32)
    return source_symbol, np.concatenate(rows), np.concatenate(ids)


def _ids(names: Names, wanted: Names) -> Int32s:
    """Index of each of ``wanted`` in the sorted ``names``; ``-1`` where absent."""
    if names.shape[0] == 0:
        return np.full(wanted.shape, -1, dtype=np.int32)
    at = np.minimum(np.searchsorted(names, wanted), names.shape[0] - 1)
    return np.where(names[at] == wanted, at, -1).astype(np.int32)
