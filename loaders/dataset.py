"""The window dataset: an index of valid windows over a pinned store version, cut at read time."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset

from ticktensor._memory import fresh_buffer
from ticktensor.errors import ConfigError
from ticktensor.kernels import SamplePrefetcher, ThreadPool
from ticktensor.loaders._cache import ChunkCache
from ticktensor.loaders._chunks import (
    ChunkIndex,
    ChunkLoader,
    SourcePart,
    Sources,
)
from ticktensor.loaders._index import (
    feature_columns,
    normalization,
    select_sources,
    source_symbols,
    symbol_table,
    window_starts,
)
from ticktensor.loaders._runtime import ReaderRuntime
from ticktensor.store import ChunkReader, FeatureBlock, StoreVersion, open_store

__all__ = ["WindowDataset"]

Int32s = npt.NDArray[np.int32]
Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]

_MIN_CACHE_BYTES: Final = 256 * 2**20


class WindowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Every valid window of ``window`` consecutive rows of a store version, as samples.

    Sample ``i`` is rows ``[s, s + window)`` of the selected features of one source: one
    segment, one pack (a session of every symbol, rows sorted by (symbol, ts)), or with
    ``cross_gaps=True`` one symbol's rows of consecutive sessions (its segments and its
    rows of packs, joined). A window never crosses symbols. Its label is the labels row
    of the window's *last* row ``s + window - 1``, so no feature comes after the time
    the label is attached to (point-in-time). Valid starts are every ``stride``-th row
    from the start of each symbol's rows of a source; a start is dropped when any label
    of its last row is NaN (no future available) or the last row's timestamp falls
    outside ``[start, end)``. Samples are in source order, then row order: segments by
    symbol then time, then packs by time (within a pack by symbol, then time); with
    ``cross_gaps``, by symbol, then time.

    Timestamps and labels are read when the dataset is built; feature rows stay in the
    store and are loaded chunk by chunk into a byte-budgeted cache when a batch needs
    them (read, checked and decoded on ``threads`` background threads), with the feature
    subset and normalization applied once per loaded chunk. Windows are cut at read time
    by a native gather that reads across chunk boundaries, never stored.
    :class:`~ticktensor.DataLoader` tells the cache which chunks the next batches need, so
    they are loaded ahead of time.

    A dataset built before ``os.fork()`` works in the child: the child starts with an
    empty cache and new threads (the parent's are not inherited by a forked process).

    Parameters
    ----------
    version
        The pinned store version to read, or a store's path or fsspec URL, opened at its
        latest version (``ticktensor.store.open_store(url)``; call it yourself to pin a
        version or pass ``storage_options``).
    window
        Rows per window, at least 1.
    features
        Feature names to keep, in this order (default: all of the version's).
    stride
        Distance between consecutive valid starts, at least 1.
    symbols
        Symbols to keep (default: all).
    start, end
        Keep samples whose window's last timestamp is in ``[start, end)`` (ns UTC).
    cross_gaps
        Join consecutive sessions of one symbol (segments, and its rows of packs) so
        windows may span session gaps.
    normalize
        Apply the version's feature statistics: ``(x - mean) / std`` per feature (a
        zero or non-finite ``std`` divides by 1).
    pool
        Threads for the gather (default: ``ThreadPool(os.cpu_count())``).
    threads
        Threads that load chunks (default: ``os.cpu_count()``).
    cache_bytes
        Bytes of loaded chunks to keep (default: all of the dataset's chunks, up to a
        quarter of physical memory and at least 256 MiB). A batch that needs more
        chunks than fit still gets them (counted in ``cache_stats()["over_budget"]``).
    verify
        Every chunk's stored bytes are checked once, when loaded, against what the store
        recorded for them: by default their CRC-32C (a pack's ``chunk_crc32c``; stores
        written without it, their sha256); with ``True`` their sha256 (a segment's
        manifest record, a pack's ``chunk_sha256``); with ``"none"`` not at all (to
        measure what the check costs). A mismatch is a ``StoreCorruptError`` naming the
        file and the chunk.

    Attributes
    ----------
    sample_segment, sample_start
        ``int32[N]`` source index and ``int64[N]`` first row of each sample, a row of its
        source (of a pack source: a row of the pack).
    sample_ts, sample_first_ts
        ``int64[N]`` timestamps of each window's last and first row (derived on first
        use, like the next two).
    sample_symbol
        ``int32[N]`` index into :attr:`symbols`.
    sample_chunk
        ``int64[N]`` global id of the storage chunk holding the window's first row
        (source by source, then chunk by chunk: the numbering of :attr:`chunks`).
    labels_sources, ts_sources
        Per-source ``float32 [rows, L]`` (in RAM) and ``int64 [rows]`` (read again on
        first use).
    chunks
        The :class:`~ticktensor.loaders._chunks.ChunkIndex` of the sources' feature chunks.
    records
        Per source, the records it reads, in time order: one segment, one pack, or with
        ``cross_gaps`` the segments and packs holding the symbol's sessions.
    source_parts
        Per source, which rows of each record it reads
        (:class:`~ticktensor.loaders._chunks.SourcePart`): a whole segment or pack, or one
        symbol's rows of a pack.
    """

    sample_segment: Int32s
    sample_start: Int64s

    def __init__(
        self,
        version: StoreVersion | str | os.PathLike[str],
        window: int,
        *,
        features: Sequence[str] | None = None,
        stride: int = 1,
        symbols: Sequence[str] | None = None,
        start: int | None = None,
        end: int | None = None,
        cross_gaps: bool = False,
        normalize: bool = False,
        pool: ThreadPool | None = None,
        threads: int | None = None,
        cache_bytes: int | None = None,
        verify: bool | Literal["none"] = False,
    ) -> None:
        _check_positive("window", window)
        _check_positive("stride", stride)
        if threads is not None:
            _check_positive("threads", threads)
        if cache_bytes is not None:
            _check_positive("cache_bytes", cache_bytes)
        if isinstance(symbols, str):
            raise ConfigError(f"symbols: expected a sequence of names, got the string {symbols!r}")
        version = _opened(version)
        self.version = version
        self.window = int(window)
        self.stride = int(stride)
        self.cross_gaps = bool(cross_gaps)
        self.normalize = bool(normalize)
        self.feature_names, columns = feature_columns(version, features)
        self.label_names = tuple(version.label_names)
        sources = select_sources(version, symbols, start, end, self.window, self.cross_gaps)
        scale = normalization(version, self.feature_names) if normalize else None
        self.threads = int(threads or os.cpu_count() or 1)
        # Labels (and timestamps) are read at open by the store's chunk reader.
        label_reader = version.reader(_verify(verify))
        self._build(sources, symbols, start, end, label_reader)
        loader = ChunkLoader(version, columns, scale, verify=_verify(verify))
        total = sum(loader.nbytes(f) for f in self.chunks.loads)
        self.cache_bytes = int(cache_bytes or min(total, max(_MIN_CACHE_BYTES, _ram() // 4)))
        self._runtime = ReaderRuntime(
            self.chunks,
            loader,
            self.n_features,
            self.cache_bytes,
            self.threads,
            self._needed,
            label_reader,
            pool,
        )

    # -- construction ------------------------------------------------------------------

    def _build(
        self,
        sources: Sources,
        wanted: Sequence[str] | None,
        start: int | None,
        end: int | None,
        reader: ChunkReader,
    ) -> None:
        """Read the sources' labels (and timestamps for a time range), then index their
        windows, every source at once (no Python per symbol or session).

        Only ``sample_segment`` and ``sample_start`` are stored per sample; the other
        per-sample arrays are derived from them on first use (D1's 16 M samples would
        otherwise hold 640 MB of index).
        """
        if not len(sources):
            raise ConfigError(
                f"no samples left: no segment or pack of the selected symbols overlaps the "
                f"time range [{start}, {end})"
            )
        symbols = source_symbols(self.version, sources, wanted)
        rows = sources.rows
        offset = _offsets(rows)
        timed = start is not None or end is not None
        labels = self._read_rows(sources, offset, "labels", reader)
        ts = self._read_rows(sources, offset, "ts", reader) if timed else None
        found = window_starts(
            self.version,
            sources,
            symbols,
            offset,
            labels,
            ts,
            self.window,
            self.stride,
            start,
            end,
        )
        if found.source.size == 0:
            raise ConfigError(
                f"no samples left: {len(sources)} source(s) selected, window {self.window}, "
                f"stride {self.stride}, time range [{start}, {end}); windows need enough rows "
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
            offset = _offsets(rows[kept])
        elif ts is not None:
            self.__dict__["_ts_flat"] = ts
        self.symbols = symbols
        self._sources = sources
        self.chunks = ChunkIndex(self.version, sources)
        self._needed = self.chunks.loads_reading(span_source, found.span_lo, found.span_hi)
        self._set_symbols(sources, offset)
        self.sample_segment = _frozen(sample_source)
        self.sample_start = _frozen(found.start)
        self._label_offset = offset
        self._labels_flat = labels

    def _set_symbols(self, sources: Sources, offset: Int64s) -> None:
        """The tables :attr:`sample_symbol` is derived from."""
        self._source_symbol, self._symbol_rows, self._symbol_ids = symbol_table(
            self.version, sources, self.symbols, offset
        )

    def _read_rows(
        self, sources: Sources, offset: Int64s, array: str, reader: ChunkReader
    ) -> npt.NDArray[Any]:
        """The ``labels`` or ``ts`` rows of every source, laid end to end (source ``s``
        from row ``offset[s]``); each segment or pack is read once, on the open threads,
        and its parts' rows copied at once. Labels of records stored without are NaN."""
        total = int(sources.rows.sum())
        # Hundreds of MB for wide stores: mapped at once rather than faulted page by page.
        if array == "ts":
            out: npt.NDArray[Any] = fresh_buffer((total,), np.int64)
        else:
            out = fresh_buffer((total, self.n_labels), np.float32)
            if not self.n_labels:
                return out
        at = np.repeat(offset, np.diff(sources.first)) + sources.part_offsets()
        records, of_part = sources.distinct_records()
        stored = [r for r in records if array != "labels" or r.label_names]
        maps = dict(zip(map(id, stored), self.version.chunk_maps(stored, array), strict=True))
        by_record = np.argsort(of_part, kind="stable")
        bounds = np.searchsorted(of_part[by_record], np.arange(len(records) + 1)).tolist()

        def read(k: int) -> None:
            record, parts = records[k], by_record[bounds[k] : bounds[k + 1]]
            lo, rows = sources.lo[parts], sources.hi[parts] - sources.lo[parts]
            if array == "labels" and not record.label_names:
                blank = np.full((int(rows.max()), self.n_labels), np.nan, dtype=np.float32)
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
            with ThreadPoolExecutor(self.threads, thread_name_prefix="ticktensor-open") as pool:
                list(pool.map(read, range(len(records))))
        finally:
            reader.stop()  # no request thread outlives the open
        return out

    @property
    def labels_sources(self) -> list[Floats]:
        """Per source, its labels ``float32 [rows, L]`` (views of one array in RAM)."""
        ends = [*self._label_offset[1:].tolist(), self._labels_flat.shape[0]]
        return [
            self._labels_flat[lo:hi]
            for lo, hi in zip(self._label_offset.tolist(), ends, strict=True)
        ]

    @functools.cached_property
    def source_parts(self) -> list[tuple[SourcePart, ...]]:
        """Per source, which rows of each record it reads (made on first use)."""
        return [self._sources.parts(s) for s in range(len(self._sources))]

    @functools.cached_property
    def records(self) -> list[tuple[FeatureBlock, ...]]:
        """Per source, the blocks (segments or packs) it reads, in time order (made on
        first use)."""
        return [tuple(part.record for part in parts) for parts in self.source_parts]

    @functools.cached_property
    def _ts_flat(self) -> Int64s:
        """Every source's timestamps, laid end to end as the labels are."""
        reader = self._runtime.label_reader
        return self._read_rows(self._sources, self._label_offset, "ts", reader)

    @functools.cached_property
    def ts_sources(self) -> list[Int64s]:
        """Per source, its timestamps ``int64 [rows]`` (read again from the store on first use)."""
        ends = [*self._label_offset[1:].tolist(), self._labels_flat.shape[0]]
        return [
            self._ts_flat[lo:hi] for lo, hi in zip(self._label_offset.tolist(), ends, strict=True)
        ]

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
            rows = self._label_offset[self.sample_segment[packed]] + self.sample_start[packed]
            at = np.searchsorted(self._symbol_rows, rows, side="right") - 1
            ids[packed] = self._symbol_ids[at]
        return _frozen(ids)

    @functools.cached_property
    def sample_chunk(self) -> Int64s:
        """``int64[N]`` id (in :attr:`chunks`) of the chunk holding each window's first row."""
        return _frozen(self.chunks.chunk_of(self.sample_segment, self.sample_start))

    def _sample_timestamps(self, row: int) -> Int64s:
        rows = self._label_offset[self.sample_segment] + self.sample_start + row
        return _frozen(self._ts_flat[rows])

    # -- sizes -------------------------------------------------------------------------

    @property
    def n_features(self) -> int:
        """Features per row of a window."""
        return len(self.feature_names)

    @property
    def n_labels(self) -> int:
        """Labels per sample."""
        return len(self.label_names)

    @property
    def n_sources(self) -> int:
        """Sources (segments, packs, or joined sessions of one symbol) the samples come from."""
        return len(self._sources)

    @property
    def pool(self) -> ThreadPool:
        """The thread pool of the gather."""
        return self._runtime.pool

    @property
    def cache(self) -> ChunkCache:
        """The cache of loaded feature chunks."""
        return self._runtime.cache

    @property
    def runtime(self) -> ReaderRuntime:
        """What reads the dataset's chunks: loader, cache, gather, thread pool (shared
        by its subsets)."""
        return self._runtime

    @property
    def needed(self) -> npt.NDArray[np.bool_]:
        """Which loads (:attr:`chunks`' ``loads``) some sample of the dataset reads."""
        return self._needed

    def __len__(self) -> int:
        return int(self.sample_start.shape[0])

    def __repr__(self) -> str:
        return (
            f"WindowDataset(version={self.version.version}, samples={len(self)}, "
            f"window={self.window}, features={self.n_features}, labels={self.n_labels}, "
            f"sources={self.n_sources}, symbols={len(self.symbols)}, "
            f"chunks={len(self.chunks)})"
        )

    # -- reading -----------------------------------------------------------------------

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``index`` as ``(window [W, F], label [L])`` float32 tensors (copies)."""
        n = len(self)
        i = int(index)
        if not -n <= i < n:
            raise IndexError(f"sample {index} out of range for a dataset of {n} samples")
        x, y = self.get_batch(np.array([i % n], dtype=np.int64))
        return torch.from_numpy(x[0]), torch.from_numpy(y[0])

    def get_batch(
        self,
        indices: npt.ArrayLike,
        out: Floats | None = None,
        labels_out: Floats | None = None,
    ) -> tuple[Floats, Floats]:
        """Gather the samples ``indices`` as one batch, without per-sample Python.

        The chunks the windows read are loaded first (or found in the cache).

        Parameters
        ----------
        indices
            1-D integer sample indices in ``[0, len(self))``.
        out, labels_out
            Optional preallocated C-contiguous float32 arrays of shape ``[B, W, F]`` and
            ``[B, L]`` to write into.

        Returns
        -------
        tuple of numpy.ndarray
            ``(windows [B, W, F], labels [B, L])``, both float32.
        """
        return self._get_batch(self.check_indices(indices), out, labels_out)

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

    def _get_batch(
        self,
        idx: Int64s,
        out: Floats | None,
        labels_out: Floats | None,
        chunks: Int64s | None = None,
        upcoming: Sequence[Int64s] = (),
    ) -> tuple[Floats, Floats]:
        """:meth:`get_batch` for checked indices. ``chunks`` are the chunks they read
        (computed when ``None``), ``upcoming`` those of the next batches (see
        :meth:`ChunkCache.require`). The DataLoader calls this method."""
        if labels_out is not None and (
            labels_out.shape != (idx.size, self.n_labels) or labels_out.dtype != np.float32
        ):
            raise ConfigError(
                f"labels_out: expected float32 {(idx.size, self.n_labels)}, got "
                f"{labels_out.dtype}{labels_out.shape}"
            )
        if out is None:
            out = np.empty((idx.size, self.window, self.n_features), dtype=np.float32)
        if labels_out is None:
            labels_out = np.empty((idx.size, self.n_labels), dtype=np.float32)
        runtime = self._runtime
        with runtime.cache.lock:
            if not runtime.cache.complete:
                if chunks is None:
                    chunks = self.chunks_of(idx)
                runtime.cache.require(chunks, upcoming)
            # One native call: index lookups, windows and labels, GIL released.
            runtime.gather.gather_samples(
                idx,
                self.sample_segment,
                self.sample_start,
                self.window,
                self._labels_flat,
                self._label_offset,
                out,
                labels_out,
            )
        return out, labels_out

    def _native_prefetcher(
        self,
        order: Int64s,
        steps: tuple[Int64s, Int64s],
        capacity: int,
        depth: int,
    ) -> SamplePrefetcher:
        """A native thread gathering the planned steps (see :meth:`ShardPlan.step_ranges`)
        into slots of ``capacity`` samples, as :meth:`_get_batch` would, once every chunk
        is loaded (:attr:`ChunkCache.complete`): nothing is loaded or evicted any more."""
        return self._runtime.gather.prefetcher(
            self.sample_segment,
            self.sample_start,
            self.window,
            self._labels_flat,
            self._label_offset,
            order,
            steps,
            capacity,
            depth,
        )

    def load_chunk(self, chunk: int) -> Floats:
        """Chunk ``chunk`` of :attr:`chunks` as ``float32 [stored_rows, F]``, outside the cache.

        Feature subset and normalization are applied; the first row is the chunk's first
        (a chunk that starts inside its stored chunk skips the rows before), and rows past
        the chunk's own (``chunks.files[chunk].rows``) are padding or other symbols' rows.
        For engines that keep chunks elsewhere (a device, another process).
        """
        return self._runtime.load_chunk(chunk)

    @property
    def labels(self) -> Floats:
        """Every source's label rows, source after source: ``float32 [rows, L]``, read-only."""
        view = self._labels_flat.view()
        view.setflags(write=False)
        return view

    def read_source(self, source: int) -> Floats:
        """All feature rows of source ``source`` as one ``float32 [rows, F]`` array.

        Read chunk by chunk, outside the cache: a slow, simple path for references and
        baselines, not for training.
        """
        index = self.chunks
        rows = int(index.source_rows[source])
        out = np.empty((rows, self.n_features), dtype=np.float32)
        lo, hi = int(index.first_chunk[source]), int(index.first_chunk[source + 1])
        for chunk, start in zip(range(lo, hi), index.chunk_starts[source].tolist(), strict=True):
            values = self.load_chunk(chunk)
            n = min(int(values.shape[0]), rows - start, index.files[chunk].rows)
            out[start : start + n] = values[:n]
        return out

    @functools.cached_property
    def sources(self) -> list[Floats]:
        """Every source's feature rows in RAM (``float32 [rows, F]``), read on first access.

        For tests and in-RAM baselines; the loader itself never needs it.
        """
        return [self.read_source(s) for s in range(self.n_sources)]

    def cache_stats(self) -> dict[str, Any]:
        """The chunk cache's counters: hits, misses, loads, evictions, bytes read, seconds
        per stage (fetch, decode, prepare, waiting), budget and bytes in use."""
        return self._runtime.stats()

    def subset(self, indices: npt.ArrayLike) -> WindowDataset:
        """A dataset of the samples ``indices`` (in that order), sharing chunks and gather.

        Nothing is copied but the small per-sample index arrays; sample ``j`` of the
        subset is sample ``indices[j]`` of this dataset.
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
    def concat(cls, parts: Sequence[WindowDataset]) -> WindowDataset:
        """One dataset of the samples of ``parts``, one part after the other.

        Sample ``j`` of part ``p`` is sample ``sum(len(parts[:p])) + j`` of the result, as
        in ``torch.utils.data.ConcatDataset``. The parts must read the same store version
        with the same window, features, labels and normalization. Parts that are subsets
        of one dataset share its chunks and gather; otherwise their sources are joined
        (each distinct source once) under a new chunk cache.
        """
        if not parts:
            raise ConfigError("concat: expected at least one WindowDataset, got none")
        first = parts[0]
        for i, part in enumerate(parts[1:], start=1):
            differs = _concat_mismatch(first, part)
            if differs:
                raise ConfigError(f"concat: part {i} differs from part 0 in {differs}")
        if all(part._runtime is first._runtime for part in parts):
            return first._resampled(
                np.concatenate([p.sample_segment for p in parts]),
                np.concatenate([p.sample_start for p in parts]),
            )
        sources: dict[tuple[tuple[str, int, int], ...], int] = {}  # a source's rows -> number
        runs: list[tuple[SourcePart, ...]] = []
        labels: list[Floats] = []
        segments: list[Int32s] = []
        for part in parts:
            rows = np.diff(np.append(part._label_offset, part._labels_flat.shape[0]))
            local = np.empty(len(part.source_parts), dtype=np.int32)
            for s, source in enumerate(part.source_parts):
                key = tuple((p.record.path, p.lo, p.hi) for p in source)
                if key not in sources:
                    sources[key] = len(sources)
                    runs.append(source)
                    lo = int(part._label_offset[s])
                    labels.append(part._labels_flat[lo : lo + int(rows[s])])
                local[s] = sources[key]
            segments.append(local[part.sample_segment])
        merged = object.__new__(cls)
        merged.__dict__.update({k: v for k, v in first.__dict__.items() if k not in _PER_SOURCE})
        merged._sources = Sources.of(runs)
        merged.symbols = tuple(sorted({name for part in parts for name in part.symbols}))
        merged.chunks = ChunkIndex(merged.version, merged._sources)
        merged._label_offset = _offsets(np.asarray([b.shape[0] for b in labels], dtype=np.int64))
        merged._labels_flat = np.concatenate(labels)
        merged._set_symbols(merged._sources, merged._label_offset)
        merged.sample_segment = _frozen(np.concatenate(segments).astype(np.int32))
        merged.sample_start = _frozen(np.concatenate([p.sample_start for p in parts]))
        every = merged.chunks.chunks_of(merged.sample_segment, merged.sample_start, merged.window)
        merged._needed = np.zeros(len(merged.chunks.loads), dtype=np.bool_)
        merged._needed[merged.chunks.loads_of(every)] = True
        runtime = first._runtime
        total = sum(runtime.loader.nbytes(f) for f in merged.chunks.loads)
        merged.cache_bytes = int(min(total, sum(p.cache_bytes for p in parts)))
        merged._runtime = ReaderRuntime(
            merged.chunks,
            runtime.loader,
            merged.n_features,
            merged.cache_bytes,
            merged.threads,
            merged._needed,
            runtime.label_reader,
            runtime.pool,
        )
        return merged

    def _resampled(self, segments: Int32s, starts: Int64s) -> WindowDataset:
        """A dataset of the samples ``(segments, starts)`` of this dataset's sources,
        sharing its chunks and gather."""
        sub = object.__new__(type(self))  # not copy.copy: that would pickle and rebuild
        sub.__dict__.update(self.__dict__)
        for name in _DERIVED:
            sub.__dict__.pop(name, None)
        sub.sample_segment = _frozen(np.asarray(segments, dtype=np.int32))
        sub.sample_start = _frozen(np.asarray(starts, dtype=np.int64))
        return sub

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Samples ``indices`` as ``(window, label)`` pairs, gathered in one native call.

        torch's ``DataLoader`` calls this instead of ``__getitem__`` once per sample when
        it builds a batch, so torch's own loader (a ``collate_fn``, a custom sampler) reads
        a batch at a time too.
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        idx = self.check_indices(np.where(idx < 0, idx + len(self), idx))  # as ds[-1]
        x, y = self._get_batch(idx, None, None)
        xs, ys = torch.from_numpy(x), torch.from_numpy(y)
        return [(xs[i], ys[i]) for i in range(idx.size)]

    def close(self) -> None:
        """Drop every loaded chunk and stop the loading threads (a later batch restarts them)."""
        self._runtime.close()

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for DataLoader workers under spawn: the runtime makes its engine again
        # where it is unpickled; what is read again on use is left out.
        state = self.__dict__.copy()
        for name in ("sources", "ts_sources", "_ts_flat"):
            state.pop(name, None)
        return state


def _ram() -> int:
    """Bytes of physical memory (0 when unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


_DERIVED = ("sample_ts", "sample_first_ts", "sample_symbol", "sample_chunk")
# What a concatenation of datasets over other sources computes anew.
_PER_SOURCE = (
    *_DERIVED,
    "ts_sources",
    "_ts_flat",
    "sources",
    "source_parts",
    "records",
    "_runtime",
)


def _concat_mismatch(a: WindowDataset, b: WindowDataset) -> str:
    """What keeps ``a`` and ``b`` from being one dataset ('' when nothing)."""
    checks = {
        "store version": (
            (a.version.url, a.version.version),
            (b.version.url, b.version.version),
        ),
        "window": (a.window, b.window),
        "features": (a.feature_names, b.feature_names),
        "labels": (a.label_names, b.label_names),
        "normalize": (a.normalize, b.normalize),
    }
    return ", ".join(
        f"{name} ({mine!r} vs {theirs!r})"
        for name, (mine, theirs) in checks.items()
        if mine != theirs
    )


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


def _verify(verify: bool | Literal["none"]) -> bool | Literal["none"]:
    """``verify`` as the chunk loader takes it (``"none"``, or a truth value)."""
    return "none" if verify == "none" else bool(verify)


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ConfigError(f"{name}: expected an integer >= 1, got {value!r}")


def _opened(version: object) -> StoreVersion:
    """``version`` as a :class:`StoreVersion`: a path or URL is opened at its latest version."""
    if isinstance(version, StoreVersion):
        return version
    if isinstance(version, str | os.PathLike):
        return open_store(os.fspath(version))
    raise ConfigError(
        f"version: expected a store version (ticktensor.store.open_store(url)) or a store's "
        f"path or URL, got {type(version).__name__}"
    )
