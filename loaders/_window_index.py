"""The window index: a dataset's windows, labels and chunks as data, apart from what reads them."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ticktensor._memory import fresh_buffer
from ticktensor.errors import ConfigError
from ticktensor.store import ChunkReader, FeatureBlock, StoreVersion, Verify

from ._chunks import ChunkIndex, SourcePart, Sources
from ._index import select_sources, source_symbols, symbol_table, window_starts

__all__ = ["WindowIndex", "WindowSpec"]

Int32s = npt.NDArray[np.int32]
Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class WindowSpec:
    """What an index's windows are, and how its labels and timestamps are read.

    Attributes
    ----------
    version
        The pinned store version the windows are cut from.
    window
        Rows per window.
    stride
        Distance between consecutive valid starts.
    feature_names
        The features of a window's rows, in order.
    label_names
        The labels of a sample, in order.
    cross_gaps
        Whether a source joins the consecutive sessions of one symbol.
    normalize
        Whether the features are normalized with the version's statistics.
    verify
        How stored labels and timestamps are checked as they are read
        (:data:`~ticktensor.store.Verify`).
    threads
        Threads that read labels and timestamps.
    """

    version: StoreVersion
    window: int
    stride: int
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...]
    cross_gaps: bool = False
    normalize: bool = False
    verify: Verify = False
    threads: int = 1


class WindowIndex:
    """Every valid window of a store version's sources and their labels: the data of a
    :class:`~ticktensor.loaders.WindowDataset`, without what reads its chunks.

    Sample ``i`` is rows ``[sample_start[i], sample_start[i] + window)`` of source
    ``sample_segment[i]``; its label is the labels row of the window's last row. An index
    holds no thread, cache or pool: it pickles as its arrays (timestamps read on first use
    are left out and read again where needed), and its subsets and concatenations are
    indexes too. Only ``sample_segment`` and ``sample_start`` are stored per sample; the
    other per-sample arrays are derived from them on first use (D1's 16 M samples would
    otherwise hold 640 MB of index). :meth:`build` makes an index from a store version.

    Parameters
    ----------
    spec
        What the windows are.
    sources
        The sources the samples are cut from.
    symbols
        The symbols the sources hold rows of, sorted.
    chunks
        The sources' feature chunks.
    needed
        Which loads of ``chunks`` some sample reads.
    labels
        Every source's label rows laid end to end: ``float32 [rows, L]``.
    sample_segment, sample_start
        Source and first row of each sample.

    Attributes
    ----------
    sample_segment, sample_start
        ``int32[N]`` source index and ``int64[N]`` first row of each sample, a row of its
        source (of a pack source: a row of the pack).
    labels_flat, label_offset
        Every source's label rows laid end to end (``float32 [rows, L]``), and the row
        where each source's begin (``int64 [S]``).
    chunks
        The :class:`~ticktensor.loaders._chunks.ChunkIndex` of the sources' feature chunks.
    needed
        ``bool[loads]``: which of ``chunks.loads`` some sample reads.
    """

    sample_segment: Int32s
    sample_start: Int64s

    def __init__(
        self,
        spec: WindowSpec,
        sources: Sources,
        symbols: tuple[str, ...],
        chunks: ChunkIndex,
        needed: Bools,
        labels: Floats,
        sample_segment: npt.ArrayLike,
        sample_start: npt.ArrayLike,
    ) -> None:
        self.spec = spec
        self.sources = sources
        self.symbols = symbols
        self.chunks = chunks
        self.needed = needed
        self.labels_flat = labels
        self.label_offset = _offsets(sources.rows)
        # The tables sample_symbol is derived from.
        self._source_symbol, self._symbol_rows, self._symbol_ids = symbol_table(
            spec.version, sources, symbols, self.label_offset
        )
        self.sample_segment = _frozen(np.asarray(sample_segment, dtype=np.int32))
        self.sample_start = _frozen(np.asarray(sample_start, dtype=np.int64))

    @classmethod
    def build(
        cls,
        spec: WindowSpec,
        symbols: Sequence[str] | None = None,
        start: int | None = None,
        end: int | None = None,
    ) -> WindowIndex:
        """The index of every valid window of ``spec``'s version over ``symbols`` (default:
        all) whose last timestamp is in ``[start, end)``.

        The sources' labels (and timestamps, for a time range) are read, then their windows
        are cut, every source at once (no Python per symbol or session). Sources without a
        window are left out.

        Raises
        ------
        ConfigError
            If a symbol is unknown or no window is left.
        """
        version = spec.version
        sources = select_sources(version, symbols, start, end, spec.window, spec.cross_gaps)
        if not len(sources):
            raise ConfigError(
                f"no samples left: no segment or pack of the selected symbols overlaps the "
                f"time range [{start}, {end})"
            )
        names = source_symbols(version, sources, symbols)
        rows = sources.rows
        offset = _offsets(rows)
        timed = start is not None or end is not None
        reader = version.reader(spec.verify)
        labels = _read_rows(spec, sources, offset, "labels", reader)
        ts = _read_rows(spec, sources, offset, "ts", reader) if timed else None
        found = window_starts(
            version, sources, names, offset, labels, ts, spec.window, spec.stride, start, end
        )
        if found.source.size == 0:
            raise ConfigError(
                f"no samples left: {len(sources)} source(s) selected, window {spec.window}, "
                f"stride {spec.stride}, time range [{start}, {end}); windows need enough rows "
                "and a non-NaN label at their last row"
            )
        sample_source, span_source = found.source, found.span_source
        kept = np.flatnonzero(found.counts)
        if kept.size < len(sources):  # sources without a sample are left out
            renumber = np.full(len(sources), -1, dtype=np.int32)
            renumber[kept] = np.arange(kept.size, dtype=np.int32)
            sample_source, span_source = renumber[sample_source], renumber[span_source]
            labels = np.concatenate([labels[offset[s] : offset[s] + rows[s]] for s in kept])
            sources = sources.take(kept)
            ts = None
        chunks = ChunkIndex(version, sources)
        needed = chunks.loads_reading(span_source, found.span_lo, found.span_hi)
        index = cls(spec, sources, names, chunks, needed, labels, sample_source, found.start)
        if ts is not None:
            index.__dict__["_ts_flat"] = ts
        return index

    # -- what the windows are ----------------------------------------------------------

    @property
    def version(self) -> StoreVersion:
        """The pinned store version the windows are cut from."""
        return self.spec.version

    @property
    def window(self) -> int:
        """Rows per window."""
        return self.spec.window

    @property
    def stride(self) -> int:
        """Distance between consecutive valid starts."""
        return self.spec.stride

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The features of a window's rows, in order."""
        return self.spec.feature_names

    @property
    def label_names(self) -> tuple[str, ...]:
        """The labels of a sample, in order."""
        return self.spec.label_names

    @property
    def n_features(self) -> int:
        """Features per row of a window."""
        return len(self.spec.feature_names)

    @property
    def n_labels(self) -> int:
        """Labels per sample."""
        return len(self.spec.label_names)

    @property
    def n_sources(self) -> int:
        """Sources (segments, packs, or joined sessions of one symbol) the samples come from."""
        return len(self.sources)

    def __len__(self) -> int:
        return int(self.sample_start.shape[0])

    def __repr__(self) -> str:
        return (
            f"WindowIndex(version={self.version.version}, samples={len(self)}, "
            f"window={self.window}, sources={self.n_sources}, chunks={len(self.chunks)})"
        )

    # -- per source --------------------------------------------------------------------

    @property
    def labels(self) -> Floats:
        """Every source's label rows, source after source: ``float32 [rows, L]``, read-only."""
        view = self.labels_flat.view()
        view.setflags(write=False)
        return view

    @property
    def labels_sources(self) -> list[Floats]:
        """Per source, its labels ``float32 [rows, L]`` (views of one array in RAM)."""
        return _per_source(self.labels_flat, self.label_offset)

    @functools.cached_property
    def ts_sources(self) -> list[Int64s]:
        """Per source, its timestamps ``int64 [rows]`` (read again from the store on first use)."""
        return _per_source(self._ts_flat, self.label_offset)

    @functools.cached_property
    def _ts_flat(self) -> Int64s:
        """Every source's timestamps, laid end to end as the labels are."""
        reader = self.version.reader(self.spec.verify)
        return _read_rows(self.spec, self.sources, self.label_offset, "ts", reader)

    @functools.cached_property
    def source_parts(self) -> list[tuple[SourcePart, ...]]:
        """Per source, which rows of each block it reads (made on first use)."""
        return [self.sources.parts(s) for s in range(len(self.sources))]

    @functools.cached_property
    def records(self) -> list[tuple[FeatureBlock, ...]]:
        """Per source, the blocks (segments or packs) it reads, in time order (made on
        first use)."""
        return [tuple(part.record for part in parts) for parts in self.source_parts]

    # -- per sample --------------------------------------------------------------------

    @functools.cached_property
    def sample_ts(self) -> Int64s:
        """``int64[N]`` timestamp of each window's last row."""
        return self._sample_timestamps(self.window - 1)

    @functools.cached_property
    def sample_first_ts(self) -> Int64s:
        """``int64[N]`` timestamp of each window's first row."""
        return self._sample_timestamps(0)

    @functools.cached_property
    def sample_symbol(self) -> Int32s:
        """``int32[N]`` index into :attr:`symbols` of each sample."""
        ids = self._source_symbol[self.sample_segment]
        packed = ids < 0  # samples of pack sources: the symbol of the first row's rows
        if packed.any():
            rows = self.label_offset[self.sample_segment[packed]] + self.sample_start[packed]
            at = np.searchsorted(self._symbol_rows, rows, side="right") - 1
            ids[packed] = self._symbol_ids[at]
        return _frozen(ids)

    @functools.cached_property
    def sample_chunk(self) -> Int64s:
        """``int64[N]`` id (in :attr:`chunks`) of the chunk holding each window's first row."""
        return _frozen(self.chunks.chunk_of(self.sample_segment, self.sample_start))

    def _sample_timestamps(self, row: int) -> Int64s:
        rows = self.label_offset[self.sample_segment] + self.sample_start + row
        return _frozen(self._ts_flat[rows])

    def check_indices(self, indices: npt.ArrayLike) -> Int64s:
        """``indices`` as a 1-D int64 array of valid sample indices, or an error."""
        idx = np.asarray(indices)
        if idx.ndim != 1 or not (idx.size == 0 or np.issubdtype(idx.dtype, np.integer)):
            raise ConfigError(f"indices: expected a 1-D integer array, got {idx.dtype}{idx.shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            bad = idx[(idx < 0) | (idx >= len(self))][0]
            raise IndexError(f"sample {bad} out of range for a dataset of {len(self)} samples")
        return idx.astype(np.int64, copy=False)

    def chunks_of(self, indices: Int64s) -> Int64s:
        """The distinct chunks (ids of :attr:`chunks`) the samples ``indices`` read."""
        return self.chunks.chunks_of(
            self.sample_segment[indices], self.sample_start[indices], self.window
        )

    # -- other indexes of these windows -----------------------------------------------

    def subset(self, indices: npt.ArrayLike) -> WindowIndex:
        """The index of the samples ``indices`` (in that order), over the same sources.

        Nothing is copied but the per-sample arrays; sample ``j`` of the subset is sample
        ``indices[j]`` of this index.
        """
        idx = np.asarray(indices, dtype=np.int64)
        if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= len(self))):
            raise ConfigError(f"subset indices must be 1-D in [0, {len(self)})")
        sub = self._resampled(self.sample_segment[idx], self.sample_start[idx])
        for name in _DERIVED:
            if name in self.__dict__:  # already computed here: slice rather than derive
                sub.__dict__[name] = _frozen(self.__dict__[name][idx])
        return sub

    @classmethod
    def concat(cls, parts: Sequence[WindowIndex]) -> WindowIndex:
        """One index of the samples of ``parts``, one part after the other.

        Sample ``j`` of part ``p`` is sample ``sum(len(parts[:p])) + j`` of the result. The
        parts must cut the same store version with the same window, features, labels and
        normalization. Parts over the same sources (subsets of one index) share them;
        otherwise their sources are joined, each distinct source once, with new chunks.

        Raises
        ------
        ConfigError
            If there are no parts, or a part differs from the first in what it cuts.
        """
        if not parts:
            raise ConfigError("concat: expected at least one WindowIndex, got none")
        first = parts[0]
        for i, part in enumerate(parts[1:], start=1):
            differs = _concat_mismatch(first, part)
            if differs:
                raise ConfigError(f"concat: part {i} differs from part 0 in {differs}")
        if all(part.sources is first.sources for part in parts):
            return first._resampled(
                np.concatenate([p.sample_segment for p in parts]),
                np.concatenate([p.sample_start for p in parts]),
            )
        numbers: dict[tuple[tuple[str, int, int], ...], int] = {}  # a source's rows -> number
        runs: list[tuple[SourcePart, ...]] = []
        labels: list[Floats] = []
        segments: list[Int32s] = []
        for part in parts:
            part_labels = part.labels_sources
            local = np.empty(len(part.source_parts), dtype=np.int32)
            for s, source in enumerate(part.source_parts):
                key = tuple((p.record.path, p.lo, p.hi) for p in source)
                if key not in numbers:
                    numbers[key] = len(numbers)
                    runs.append(source)
                    labels.append(part_labels[s])
                local[s] = numbers[key]
            segments.append(local[part.sample_segment])
        sources = Sources.of(runs)
        chunks = ChunkIndex(first.version, sources)
        segment = np.concatenate(segments).astype(np.int32)
        start = np.concatenate([p.sample_start for p in parts])
        needed = np.zeros(len(chunks.loads), dtype=np.bool_)
        needed[chunks.loads_of(chunks.chunks_of(segment, start, first.window))] = True
        symbols = tuple(sorted({name for part in parts for name in part.symbols}))
        return cls(
            first.spec, sources, symbols, chunks, needed, np.concatenate(labels), segment, start
        )

    def _resampled(self, segments: Int32s, starts: Int64s) -> WindowIndex:
        """An index of the samples ``(segments, starts)`` of this index's sources, sharing
        them, their chunks and what was read or made of them."""
        sub = object.__new__(type(self))  # not copy.copy: that would pickle and rebuild
        sub.__dict__.update(self.__dict__)
        for name in _DERIVED:
            sub.__dict__.pop(name, None)
        sub.sample_segment = _frozen(np.asarray(segments, dtype=np.int32))
        sub.sample_start = _frozen(np.asarray(starts, dtype=np.int64))
        return sub

    def __getstate__(self) -> dict[str, Any]:
        # What is read again on use is left out.
        state = self.__dict__.copy()
        for name in ("ts_sources", "_ts_flat"):
            state.pop(name, None)
        return state


# Per-sample arrays derived on first use.
_DERIVED: Final = ("sample_ts", "sample_first_ts", "sample_symbol", "sample_chunk")


def _concat_mismatch(a: WindowIndex, b: WindowIndex) -> str:
    """What keeps ``a`` and ``b`` from being one index ('' when nothing)."""
    checks = {
        "store version": (
            (a.version.url, a.version.version),
            (b.version.url, b.version.version),
        ),
        "window": (a.window, b.window),
        "features": (a.feature_names, b.feature_names),
        "labels": (a.label_names, b.label_names),
        "normalize": (a.spec.normalize, b.spec.normalize),
    }
    return ", ".join(
        f"{name} ({mine!r} vs {theirs!r})"
        for name, (mine, theirs) in checks.items()
        if mine != theirs
    )


def _per_source(rows: npt.NDArray[Any], offset: Int64s) -> list[npt.NDArray[Any]]:
    """Views of ``rows`` (sources laid end to end, source ``s`` from ``offset[s]``) per source."""
    ends = [*offset[1:].tolist(), rows.shape[0]]
    return [rows[lo:hi] for lo, hi in zip(offset.tolist(), ends, strict=True)]


def _read_rows(
    spec: WindowSpec, sources: Sources, offset: Int64s, array: str, reader: ChunkReader
) -> npt.NDArray[Any]:
    """The ``labels`` or ``ts`` rows of every source, laid end to end (source ``s`` from
    row ``offset[s]``); each segment or pack is read once, on ``spec.threads`` threads, and
    its parts' rows copied at once. Labels of blocks stored without are NaN."""
    n_labels = len(spec.label_names)
    total = int(sources.rows.sum())
    # Hundreds of MB for wide stores: mapped at once rather than faulted page by page.
    if array == "ts":
        out: npt.NDArray[Any] = fresh_buffer((total,), np.int64)
    else:
        out = fresh_buffer((total, n_labels), np.float32)
        if not n_labels:
            return out
    at = np.repeat(offset, np.diff(sources.first)) + sources.part_offsets()
    records, of_part = sources.distinct_records()
    stored = [r for r in records if array != "labels" or r.label_names]
    maps = dict(zip(map(id, stored), spec.version.chunk_maps(stored, array), strict=True))
    by_record = np.argsort(of_part, kind="stable")
    bounds = np.searchsorted(of_part[by_record], np.arange(len(records) + 1)).tolist()

    def read(k: int) -> None:
        record, parts = records[k], by_record[bounds[k] : bounds[k + 1]]
        lo, rows = sources.lo[parts], sources.hi[parts] - sources.lo[parts]
        if array == "labels" and not record.label_names:
            blank = np.full((int(rows.max()), n_labels), np.nan, dtype=np.float32)
            _copy_ranges(blank, np.zeros_like(lo), out, at[parts], rows)
            return
        if parts.shape[0] == 1 and lo[0] == 0 and rows[0] == record.rows:
            first = int(at[parts[0]])
            part = out[first : first + record.rows]
            reader.read_mapped(maps[id(record)], part)
            return
        whole = reader.read_mapped(maps[id(record)])
        _copy_ranges(whole, lo, out, at[parts], rows)

    try:
        with ThreadPoolExecutor(spec.threads, thread_name_prefix="ticktensor-open") as pool:
            list(pool.map(read, range(len(records))))
    finally:
        reader.stop()  # no request thread outlives the read
    return out


_BLOCK_ROWS: Final = 256


def _copy_ranges(
    src: npt.NDArray[Any], lo: Int64s, dst: npt.NDArray[Any], at: Int64s, rows: Int64s
) -> None:
    """Copy rows ``[lo[k], lo[k] + rows[k])`` of ``src`` to ``dst`` from row ``at[k]``, for
    every ``k`` at once.

    Each range is copied as blocks of one width, the largest power of two up to
    ``_BLOCK_ROWS`` that fits it, the last block ending where the range ends (overlapping
    the one before). Blocks are rows of a strided view whose row ``i`` is rows
    ``[i, i + width)``, so one fancy-indexed copy moves every block of a width.
    """
    width = np.minimum(_BLOCK_ROWS, 1 << np.log2(np.maximum(rows, 1)).astype(np.int64))
    width[rows == 0] = 0
    for w in np.unique(width[width > 0]).tolist():
        k = np.flatnonzero(width == w)
        blocks = -(-rows[k] // w)
        ends = np.cumsum(blocks)
        step = np.arange(int(ends[-1]), dtype=np.int64) - np.repeat(ends - blocks, blocks)
        offset = np.minimum(step * w, np.repeat(rows[k] - w, blocks))
        _blocks_of(dst, w)[np.repeat(at[k], blocks) + offset] = _blocks_of(src, w)[
            np.repeat(lo[k], blocks) + offset
        ]


def _blocks_of(array: npt.NDArray[Any], width: int) -> npt.NDArray[Any]:
    """A view of ``array`` whose row ``i`` is rows ``[i, i + width)`` of it."""
    shape = (array.shape[0] - width + 1, width, *array.shape[1:])
    strides = (array.strides[0], *array.strides)
    return np.lib.stride_tricks.as_strided(array, shape, strides, writeable=array.flags.writeable)


def _offsets(rows: Int64s) -> Int64s:
    """Where each of blocks of ``rows`` rows starts when they are laid end to end."""
    return np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)


def _frozen(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    array.setflags(write=False)
    return array
