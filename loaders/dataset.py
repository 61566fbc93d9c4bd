"""The window dataset: an index of valid windows over a pinned store version, cut at read time."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset

from ticktensor.errors import ConfigError
from ticktensor.kernels import ThreadPool
from ticktensor.loaders._cache import ChunkCache
from ticktensor.loaders._chunks import ChunkIndex, ChunkLoader, SourcePart
from ticktensor.loaders._index import feature_columns, normalization
from ticktensor.loaders._runtime import ReaderRuntime
from ticktensor.loaders._window_index import WindowIndex, WindowSpec
from ticktensor.store import FeatureBlock, StoreVersion, Verify, open_store

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

    A dataset is its :attr:`index` (a :class:`~ticktensor.loaders._window_index.WindowIndex`:
    the windows, labels and chunks, as data) and its :attr:`runtime` (a
    :class:`~ticktensor.loaders._runtime.ReaderRuntime`: the loader, cache, gather and
    threads that read the chunks); the per-sample and per-source attributes below are the
    index's. A dataset built before ``os.fork()`` works in the child: the child starts with
    an empty cache and new threads (the parent's are not inherited by a forked process).

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
    index
        The :class:`~ticktensor.loaders._window_index.WindowIndex` of the samples.
    runtime
        The :class:`~ticktensor.loaders._runtime.ReaderRuntime` reading their chunks
        (shared by the dataset's subsets).
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
        feature_names, columns = feature_columns(version, features)
        scale = normalization(version, feature_names) if normalize else None
        spec = WindowSpec(
            version,
            int(window),
            int(stride),
            feature_names,
            tuple(version.label_names),
            cross_gaps=bool(cross_gaps),
            normalize=bool(normalize),
            verify=_verify(verify),
            threads=int(threads or os.cpu_count() or 1),
        )
        self.index = WindowIndex.build(spec, symbols, start, end)
        loader = ChunkLoader(version, columns, scale, verify=spec.verify)
        chunks = self.index.chunks
        total = sum(loader.nbytes(f) for f in chunks.loads)
        budget = int(cache_bytes or min(total, max(_MIN_CACHE_BYTES, _ram() // 4)))
        self.runtime = ReaderRuntime(
            chunks, loader, len(feature_names), budget, spec.threads, self.index.needed, pool
        )

    # -- what the windows are (the index's) --------------------------------------------

    @property
    def version(self) -> StoreVersion:
        """The pinned store version the samples are cut from."""
        return self.index.version

    @property
    def window(self) -> int:
        """Rows per window."""
        return self.index.window

    @property
    def stride(self) -> int:
        """Distance between consecutive valid starts."""
        return self.index.stride

    @property
    def cross_gaps(self) -> bool:
        """Whether windows may span the session gaps of one symbol."""
        return self.index.spec.cross_gaps

    @property
    def normalize(self) -> bool:
        """Whether the version's feature statistics are applied."""
        return self.index.spec.normalize

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The features of a window's rows, in order."""
        return self.index.feature_names

    @property
    def label_names(self) -> tuple[str, ...]:
        """The labels of a sample, in order."""
        return self.index.label_names

    @property
    def n_features(self) -> int:
        """Features per row of a window."""
        return self.index.n_features

    @property
    def n_labels(self) -> int:
        """Labels per sample."""
        return self.index.n_labels

    @property
    def symbols(self) -> tuple[str, ...]:
        """The symbols the samples' sources hold rows of, sorted."""
        return self.index.symbols

    @property
    def n_sources(self) -> int:
        """Sources (segments, packs, or joined sessions of one symbol) the samples come from."""
        return self.index.n_sources

    @property
    def chunks(self) -> ChunkIndex:
        """The :class:`~ticktensor.loaders._chunks.ChunkIndex` of the sources' feature chunks."""
        return self.index.chunks

    @property
    def needed(self) -> npt.NDArray[np.bool_]:
        """Which loads (:attr:`chunks`' ``loads``) some sample of the dataset reads."""
        return self.index.needed

    # -- per sample and per source (the index's) ---------------------------------------

    @property
    def sample_segment(self) -> Int32s:
        """``int32[N]`` source index of each sample."""
        return self.index.sample_segment

    @property
    def sample_start(self) -> Int64s:
        """``int64[N]`` first row of each sample, a row of its source."""
        return self.index.sample_start

    @property
    def sample_ts(self) -> Int64s:
        """``int64[N]`` timestamp of each window's last row (derived on first use)."""
        return self.index.sample_ts

    @property
    def sample_first_ts(self) -> Int64s:
        """``int64[N]`` timestamp of each window's first row (derived on first use)."""
        return self.index.sample_first_ts

    @property
    def sample_symbol(self) -> Int32s:
        """``int32[N]`` index into :attr:`symbols` of each sample (derived on first use)."""
        return self.index.sample_symbol

    @property
    def sample_chunk(self) -> Int64s:
        """``int64[N]`` id (in :attr:`chunks`) of the chunk holding each window's first row
        (derived on first use)."""
        return self.index.sample_chunk

    @property
    def labels(self) -> Floats:
        """Every source's label rows, source after source: ``float32 [rows, L]``, read-only."""
        return self.index.labels

    @property
    def labels_sources(self) -> list[Floats]:
        """Per source, its labels ``float32 [rows, L]`` (views of one array in RAM)."""
        return self.index.labels_sources

    @property
    def ts_sources(self) -> list[Int64s]:
        """Per source, its timestamps ``int64 [rows]`` (read again from the store on first use)."""
        return self.index.ts_sources

    @property
    def source_parts(self) -> list[tuple[SourcePart, ...]]:
        """Per source, which rows of each block it reads (made on first use)."""
        return self.index.source_parts

    @property
    def records(self) -> list[tuple[FeatureBlock, ...]]:
        """Per source, the blocks (segments or packs) it reads, in time order."""
        return self.index.records

    def check_indices(self, indices: npt.ArrayLike) -> Int64s:
        """``indices`` as a 1-D int64 array of valid sample indices, or an error."""
        return self.index.check_indices(indices)

    def chunks_of(self, indices: Int64s) -> Int64s:
        """The distinct chunks (ids of :attr:`chunks`) the samples ``indices`` read."""
        return self.index.chunks_of(indices)

    # -- what reads them (the runtime's) -----------------------------------------------

    @property
    def threads(self) -> int:
        """Threads that load chunks."""
        return self.runtime.threads

    @property
    def cache_bytes(self) -> int:
        """Bytes of loaded chunks the cache keeps."""
        return self.runtime.budget

    @property
    def pool(self) -> ThreadPool:
        """The thread pool of the gather."""
        return self.runtime.pool

    @property
    def cache(self) -> ChunkCache:
        """The cache of loaded feature chunks."""
        return self.runtime.cache

    def __len__(self) -> int:
        return len(self.index)

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

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Samples ``indices`` as ``(window, label)`` pairs, gathered in one native call.

        torch's ``DataLoader`` calls this instead of ``__getitem__`` once per sample when
        it builds a batch, so torch's own loader (a ``collate_fn``, a custom sampler) reads
        a batch at a time too.
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        idx = self.check_indices(np.where(idx < 0, idx + len(self), idx))  # as ds[-1]
        x, y = self.runtime.gather_batch(self.index, idx)
        xs, ys = torch.from_numpy(x), torch.from_numpy(y)
        return [(xs[i], ys[i]) for i in range(idx.size)]

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
        idx = self.check_indices(indices)
        return self.runtime.gather_batch(self.index, idx, out, labels_out)

    def load_chunk(self, chunk: int) -> Floats:
        """Chunk ``chunk`` of :attr:`chunks` as ``float32 [stored_rows, F]``, outside the cache.

        Feature subset and normalization are applied; the first row is the chunk's first
        (a chunk that starts inside its stored chunk skips the rows before), and rows past
        the chunk's own (``chunks.files[chunk].rows``) are padding or other symbols' rows.
        For engines that keep chunks elsewhere (a device, another process).
        """
        return self.runtime.load_chunk(chunk)

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
        return self.runtime.stats()

    def close(self) -> None:
        """Drop every loaded chunk and stop the loading threads (a later batch restarts them)."""
        self.runtime.close()

    # -- other datasets of these windows ----------------------------------------------

    def subset(self, indices: npt.ArrayLike) -> WindowDataset:
        """A dataset of the samples ``indices`` (in that order), sharing chunks and gather.

        Nothing is copied but the small per-sample index arrays; sample ``j`` of the
        subset is sample ``indices[j]`` of this dataset (see :meth:`WindowIndex.subset`).
        """
        return self._with_index(self.index.subset(indices))

    @classmethod
    def concat(cls, parts: Sequence[WindowDataset]) -> WindowDataset:
        """One dataset of the samples of ``parts``, one part after the other.

        Sample ``j`` of part ``p`` is sample ``sum(len(parts[:p])) + j`` of the result, as
        in ``torch.utils.data.ConcatDataset``. The parts must read the same store version
        with the same window, features, labels and normalization. Parts that are subsets
        of one dataset share its chunks and gather; otherwise their sources are joined
        (each distinct source once) under a new chunk cache (see :meth:`WindowIndex.concat`).
        """
        if not parts:
            raise ConfigError("concat: expected at least one WindowDataset, got none")
        first = parts[0]
        index = WindowIndex.concat([part.index for part in parts])
        if index.chunks is first.chunks:  # over the first part's sources
            return first._with_index(index)
        runtime = first.runtime
        total = sum(runtime.loader.nbytes(f) for f in index.chunks.loads)
        budget = int(min(total, sum(p.cache_bytes for p in parts)))
        merged = object.__new__(cls)
        merged.__dict__.update({k: v for k, v in first.__dict__.items() if k != "sources"})
        merged.index = index
        merged.runtime = ReaderRuntime(
            index.chunks,
            runtime.loader,
            index.n_features,
            budget,
            runtime.threads,
            index.needed,
            runtime.pool,
        )
        return merged

    def _with_index(self, index: WindowIndex) -> WindowDataset:
        """A dataset of ``index`` (over this dataset's chunks), sharing the runtime."""
        other = object.__new__(type(self))  # not copy.copy: that would pickle and rebuild
        other.__dict__.update(self.__dict__)
        other.index = index
        return other

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for DataLoader workers under spawn: the runtime makes its engine again
        # where it is unpickled; the feature rows read into RAM are left out.
        state = self.__dict__.copy()
        state.pop("sources", None)
        return state


def _ram() -> int:
    """Bytes of physical memory (0 when unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def _verify(verify: bool | Literal["none"]) -> Verify:
    """``verify`` as the store's reader takes it (``"none"``, or a truth value)."""
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
