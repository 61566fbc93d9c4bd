"""The window dataset: an index of valid windows over a pinned store version, cut at read time."""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset

from ticktensor.errors import ConfigError
from ticktensor.kernels import ThreadPool, WindowGather
from ticktensor.loaders._index import (
    feature_columns,
    normalization,
    select_runs,
    valid_starts,
)
from ticktensor.store import SegmentRecord, StoreVersion

__all__ = ["WindowDataset"]

Int32s = npt.NDArray[np.int32]
Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]


class WindowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Every valid window of ``window`` consecutive rows of a store version, as samples.

    Sample ``i`` is rows ``[s, s + window)`` of the selected features of one source
    (one segment, or with ``cross_gaps=True`` the joined segments of one symbol); its
    label is the labels row of the window's *last* row ``s + window - 1``, so no feature
    comes after the time the label is attached to (point-in-time). Valid starts are
    every ``stride``-th row from the start of each source; a start is dropped when any
    label of its last row is NaN (no future available) or the last row's timestamp falls
    outside ``[start, end)``.

    The selected segments are read into RAM once (float32, C-contiguous, features
    subset and optional normalization applied); windows are cut at read time by a
    native gather, never stored.

    Parameters
    ----------
    version
        The pinned store version to read.
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
        Join consecutive segments of one symbol so windows may span session gaps.
    normalize
        Apply the version's feature statistics: ``(x - mean) / std`` per feature (a
        zero or non-finite ``std`` divides by 1).
    pool
        Threads for the gather (default: ``ThreadPool(os.cpu_count())``).

    Attributes
    ----------
    sample_segment, sample_start
        ``int32[N]`` source index and ``int64[N]`` first row of each sample.
    sample_ts, sample_first_ts
        ``int64[N]`` timestamps of each window's last and first row.
    sample_symbol
        ``int32[N]`` index into :attr:`symbols`.
    sample_chunk
        ``int64[N]`` global id of the storage chunk holding the window's first row
        (segment-major over :attr:`records`, then ``row // chunk_rows``).
    sources, labels_sources, ts_sources
        Per-source ``float32 [rows, F]``, ``float32 [rows, L]`` and ``int64 [rows]``.
    records
        Per source, the segment records it was read from (one unless ``cross_gaps``).
    """

    sample_segment: Int32s
    sample_start: Int64s
    sample_ts: Int64s
    sample_first_ts: Int64s
    sample_symbol: Int32s
    sample_chunk: Int64s

    def __init__(
        self,
        version: StoreVersion,
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
    ) -> None:
        _check_positive("window", window)
        _check_positive("stride", stride)
        if isinstance(symbols, str):
            raise ConfigError(f"symbols: expected a sequence of names, got the string {symbols!r}")
        self.version = version
        self.window = int(window)
        self.stride = int(stride)
        self.cross_gaps = bool(cross_gaps)
        self.normalize = bool(normalize)
        self.feature_names, columns = feature_columns(version, features)
        self.label_names = tuple(version.label_names)
        runs, phases = select_runs(version, symbols, start, end, self.window, self.cross_gaps)
        scale = normalization(version, self.feature_names) if normalize else None
        self._build(runs, phases, columns, scale, start, end)
        self._pool = pool if pool is not None else ThreadPool(os.cpu_count() or 1)
        self._gather = WindowGather(self.sources, pool=self._pool)

    # -- construction ------------------------------------------------------------------

    def _build(
        self,
        runs: list[list[SegmentRecord]],
        phases: list[int],
        columns: Int64s | None,
        scale: tuple[Floats, Floats] | None,
        start: int | None,
        end: int | None,
    ) -> None:
        """Read each run, then index its valid windows (vectorized per source)."""
        symbols = sorted({run[0].symbol for run in runs})
        self.sources: list[Floats] = []
        self.labels_sources: list[Floats] = []
        self.ts_sources: list[Int64s] = []
        self.records: list[tuple[SegmentRecord, ...]] = []
        parts: dict[str, list[npt.NDArray[Any]]] = {k: [] for k in _SAMPLE_FIELDS}
        chunk_base = 0
        n_labels = len(self.label_names)
        kept_symbols: list[str] = []
        for run, phase in zip(runs, phases, strict=True):
            datas = [self.version.read_segment(rec) for rec in run]
            ts = np.concatenate([d.ts for d in datas]).astype(np.int64, copy=False)
            labels = np.concatenate(
                [
                    np.full((d.ts.shape[0], n_labels), np.nan, np.float32)
                    if d.labels is None
                    else d.labels
                    for d in datas
                ]
            ).astype(np.float32, copy=False)
            first, last = valid_starts(ts, labels, self.window, self.stride, phase, start, end)
            rows_per = np.array([rec.rows for rec in run], dtype=np.int64)
            chunk_rows = np.array([int(rec.layout["chunk_rows"]) for rec in run], np.int64)
            n_chunks = -(-rows_per // chunk_rows)
            chunk_off = chunk_base + np.concatenate([[0], np.cumsum(n_chunks)[:-1]])
            chunk_base += int(n_chunks.sum())
            if first.size == 0:
                continue
            values = (
                datas[0].values if len(datas) == 1 else np.concatenate([d.values for d in datas])
            )
            values = values if columns is None else values[:, columns]
            values = np.ascontiguousarray(values, dtype=np.float32)
            if scale is not None:
                if not values.flags.writeable:
                    values = values.copy()
                values -= scale[0]
                values /= scale[1]
            row_off = np.concatenate([[0], np.cumsum(rows_per)[:-1]])
            part = np.searchsorted(row_off, first, side="right") - 1
            source_id = len(self.sources)
            if run[0].symbol not in kept_symbols:
                kept_symbols.append(run[0].symbol)
            self.sources.append(values)
            self.labels_sources.append(np.ascontiguousarray(labels))
            self.ts_sources.append(ts)
            self.records.append(tuple(run))
            parts["sample_segment"].append(np.full(first.size, source_id, np.int32))
            parts["sample_start"].append(first)
            parts["sample_ts"].append(ts[last])
            parts["sample_first_ts"].append(ts[first])
            parts["sample_symbol"].append(
                np.full(first.size, symbols.index(run[0].symbol), np.int32)
            )
            parts["sample_chunk"].append(
                chunk_off[part] + (first - row_off[part]) // chunk_rows[part]
            )
        if not self.sources:
            raise ConfigError(
                f"no samples left: {len(runs)} segment run(s) selected, window {self.window}, "
                f"stride {self.stride}, time range [{start}, {end}); windows need enough rows "
                "and a non-NaN label at their last row"
            )
        self.symbols = tuple(symbols)
        for name, dtype in _SAMPLE_FIELDS.items():
            array = np.concatenate(parts[name]).astype(dtype, copy=False)
            array.setflags(write=False)
            setattr(self, name, array)
        self._label_offset = np.concatenate(
            [[0], np.cumsum([s.shape[0] for s in self.sources])[:-1]]
        ).astype(np.int64)
        self._labels_flat = np.concatenate(self.labels_sources)
        # The per-source label arrays become views of the flat one (no second copy).
        self.labels_sources = [
            self._labels_flat[o : o + s.shape[0]]
            for o, s in zip(self._label_offset, self.sources, strict=True)
        ]

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
    def pool(self) -> ThreadPool:
        """The thread pool of the gather."""
        return self._pool

    def __len__(self) -> int:
        return int(self.sample_start.shape[0])

    def __repr__(self) -> str:
        return (
            f"WindowDataset(version={self.version.version}, samples={len(self)}, "
            f"window={self.window}, features={self.n_features}, labels={self.n_labels}, "
            f"sources={len(self.sources)}, symbols={len(self.symbols)})"
        )

    # -- reading -----------------------------------------------------------------------

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``index`` as ``(window [W, F], label [L])`` float32 tensors (copies)."""
        n = len(self)
        i = int(index)
        if not -n <= i < n:
            raise IndexError(f"sample {index} out of range for a dataset of {n} samples")
        source, first = int(self.sample_segment[i]), int(self.sample_start[i])
        x = self.sources[source][first : first + self.window].copy()
        y = self.labels_sources[source][first + self.window - 1].copy()
        return torch.from_numpy(x), torch.from_numpy(y)

    def get_batch(
        self,
        indices: npt.ArrayLike,
        out: Floats | None = None,
        labels_out: Floats | None = None,
    ) -> tuple[Floats, Floats]:
        """Gather the samples ``indices`` as one batch, without per-sample Python.

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
        idx = np.asarray(indices)
        if idx.ndim != 1 or not (idx.size == 0 or np.issubdtype(idx.dtype, np.integer)):
            raise ConfigError(f"indices: expected a 1-D integer array, got {idx.dtype}{idx.shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            bad = idx[(idx < 0) | (idx >= len(self))][0]
            raise IndexError(f"sample {bad} out of range for a dataset of {len(self)} samples")
        segment = self.sample_segment[idx]
        first = self.sample_start[idx]
        windows = self._gather.gather(segment, first, self.window, out)
        rows = self._label_offset[segment] + first + (self.window - 1)
        if labels_out is None:
            labels = self._labels_flat[rows]
        else:
            if labels_out.shape != (idx.size, self.n_labels) or labels_out.dtype != np.float32:
                raise ConfigError(
                    f"labels_out: expected float32 {(idx.size, self.n_labels)}, got "
                    f"{labels_out.dtype}{labels_out.shape}"
                )
            labels = np.take(self._labels_flat, rows, axis=0, out=labels_out)
        return windows, labels

    def subset(self, indices: npt.ArrayLike) -> WindowDataset:
        """A dataset of the samples ``indices`` (in that order), sharing sources and gather.

        Nothing is copied but the small per-sample index arrays; sample ``j`` of the
        subset is sample ``indices[j]`` of this dataset.
        """
        idx = np.asarray(indices, dtype=np.int64)
        if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= len(self))):
            raise ConfigError(f"subset indices must be 1-D in [0, {len(self)})")
        sub = copy.copy(self)
        for name in _SAMPLE_FIELDS:
            array = getattr(self, name)[idx]
            array.setflags(write=False)
            setattr(sub, name, array)
        return sub

    # -- pickling (DataLoader workers under spawn): the native gather is rebuilt -------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"] = self._pool.size
        del state["_gather"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pool = ThreadPool(int(state["_pool"]))
        self._gather = WindowGather(self.sources, pool=self._pool)


_SAMPLE_FIELDS: dict[str, type[np.generic]] = {
    "sample_segment": np.int32,
    "sample_start": np.int64,
    "sample_ts": np.int64,
    "sample_first_ts": np.int64,
    "sample_symbol": np.int32,
    "sample_chunk": np.int64,
}


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ConfigError(f"{name}: expected an integer >= 1, got {value!r}")
