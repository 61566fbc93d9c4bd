"""Native compute kernels: a shared thread pool, the window gathers behind the loader, file
mappings, checksums and permutations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ticktensor import _native
from ticktensor._memory import fresh_buffer

SamplePrefetcher = _native.SamplePrefetcher
"""The native batch thread :meth:`ChunkGather.prefetcher` returns."""

__all__ = [
    "ChunkGather",
    "SamplePrefetcher",
    "ThreadPool",
    "TimeBars",
    "WindowGather",
    "crc32c",
    "gather_windows",
    "map_file",
    "order_by_key",
    "random_permutation",
    "read_checked",
    "stack_columns_f32",
    "take_rows",
    "time_bars",
]


class ThreadPool:
    """A fixed pool of native worker threads, shared by the kernels it is passed to.

    ``n_threads`` threads work on each call: ``n_threads - 1`` workers are started once and
    the calling thread joins in, so ``ThreadPool(1)`` starts no thread at all. Several Python
    threads may run kernels on one pool at the same time. Workers are joined when the pool
    and every kernel holding it have been garbage collected.

    Parameters
    ----------
    n_threads
        Threads per call, at least 1.

    Raises
    ------
    ValueError
        If ``n_threads`` is below 1.

    Examples
    --------
    >>> pool = ThreadPool(2)
    >>> pool.size
    2
    """

    __slots__ = ("_impl",)

    def __init__(self, n_threads: int) -> None:
        if isinstance(n_threads, bool) or not isinstance(n_threads, int | np.integer):
            raise TypeError(f"n_threads: expected an int, got {type(n_threads).__name__}")
        if n_threads < 1:
            raise ValueError(f"n_threads: expected >= 1, got {n_threads}")
        self._impl = _native.ThreadPool(int(n_threads))

    @property
    def size(self) -> int:
        """Threads that work on one call, the calling thread included."""
        return self._impl.size

    def __repr__(self) -> str:
        return f"ThreadPool({self.size})"


class WindowGather:
    """Copies windows of consecutive rows out of fixed 2-D float32 arrays into a batch.

    Sample ``b`` of a batch is ``sources[array_ids[b]][starts[b] : starts[b] + window]``.
    The sources are borrowed, not copied: they must be C-contiguous ``float32`` arrays of
    shape ``[rows_i, n_features]`` with one common ``n_features``, and the gather keeps a
    reference to each so they stay alive as long as it does. Writing into a source while a
    gather reads it gives undefined window contents (never a crash).

    Parameters
    ----------
    sources
        The arrays to cut windows from.
    pool
        Threads that copy large batches; small batches (under 256 KiB) are copied on the
        calling thread.

    Raises
    ------
    ValueError
        If a source is not a 2-D C-contiguous float32 array, or the feature counts differ.
    TypeError
        If ``pool`` is not a :class:`ThreadPool`.

    Examples
    --------
    >>> import numpy as np
    >>> prices = np.arange(20, dtype=np.float32).reshape(10, 2)
    >>> gather = WindowGather([prices], pool=ThreadPool(1))
    >>> gather.gather([0, 0], [0, 7], window=3)[1]
    array([[14., 15.],
           [16., 17.],
           [18., 19.]], dtype=float32)
    """

    __slots__ = ("_impl", "_pool")

    def __init__(self, sources: Sequence[npt.NDArray[np.float32]], pool: ThreadPool) -> None:
        if not isinstance(pool, ThreadPool):
            raise TypeError(f"pool: expected a ThreadPool, got {type(pool).__name__}")
        self._pool = pool
        self._impl = _native.WindowGather(list(sources), pool._impl)

    @property
    def n_sources(self) -> int:
        """Number of source arrays."""
        return self._impl.n_sources

    @property
    def n_features(self) -> int:
        """Features (columns) per row, common to every source."""
        return self._impl.n_features

    @property
    def pool(self) -> ThreadPool:
        """The pool that copies large batches."""
        return self._pool

    def rows(self, array_id: int) -> int:
        """Rows of source ``array_id``; raises ``IndexError`` if there is no such source."""
        return self._impl.rows(int(array_id))

    def gather(
        self,
        array_ids: npt.ArrayLike,
        starts: npt.ArrayLike,
        window: int,
        out: npt.NDArray[np.float32] | None = None,
    ) -> npt.NDArray[np.float32]:
        """Copy one window per sample into ``out`` (allocated when ``None``) and return it.

        Every sample is checked before anything is written, so on error ``out`` is untouched.
        The GIL is released while copying, and several threads may call this at once.

        Parameters
        ----------
        array_ids
            Integer source index of each sample, shape ``[B]``.
        starts
            Integer first row of each sample's window, shape ``[B]``.
        window
            Rows per window, at least 1.
        out
            A writable C-contiguous float32 array of shape ``[B, window, n_features]``. It
            must not share memory with any source.

        Returns
        -------
        numpy.ndarray
            ``out``, shape ``[B, window, n_features]``.

        Raises
        ------
        IndexError
            If a sample names a missing array or a window that does not fit in its array;
            the message and the ``batch_position`` attribute name the first such sample.
        ValueError
            If ``window < 1``, the index arrays are not 1-D of equal length, or ``out`` has
            the wrong shape, dtype or layout, is read-only, or overlaps a source.

        Examples
        --------
        >>> import numpy as np
        >>> a = np.zeros((4, 3), dtype=np.float32)
        >>> b = np.ones((6, 3), dtype=np.float32)
        >>> gather = WindowGather([a, b], pool=ThreadPool(1))
        >>> gather.gather(np.array([1, 0]), np.array([4, 0]), window=2).sum(axis=(1, 2))
        array([6., 0.], dtype=float32)
        """
        ids, first, rows, out = _window_batch(array_ids, "array_ids", starts, window, out, self)
        self._impl.gather(ids, first, rows, out)
        return out

    def __repr__(self) -> str:
        return (
            f"WindowGather(n_sources={self.n_sources}, n_features={self.n_features}, "
            f"pool={self._pool!r})"
        )


class ChunkGather:
    """Copies row windows out of sources whose rows are split into separately loaded chunks.

    Chunks are numbered globally, source by source: chunk ``first_chunk(s) + k`` holds rows
    ``[chunk_starts[s][k], chunk_starts[s][k + 1])`` of source ``s`` (the last one up to
    ``source_rows[s]``). A chunk's rows are published with :meth:`set` from any C-contiguous
    float32 array of at least that many rows (a memory-mapped chunk file or a decoded
    buffer), which the gather keeps referenced until :meth:`clear` or the next :meth:`set`.
    A window may span several chunks; every chunk it reads must be loaded.

    Parameters
    ----------
    chunk_starts
        Per source, the first row of each chunk: starting at 0, strictly increasing, below
        the source's rows.
    source_rows
        Rows of each source.
    n_features
        Columns per row, common to every chunk.
    pool
        Threads that copy large batches.

    Examples
    --------
    >>> import numpy as np
    >>> rows = np.arange(10, dtype=np.float32).reshape(10, 1)
    >>> gather = ChunkGather([[0, 4]], [10], n_features=1, pool=ThreadPool(1))
    >>> gather.set(0, rows[:4].copy())
    >>> gather.set(1, rows[4:].copy())
    >>> gather.gather([0], [2], window=4).ravel()  # rows 2-3 from chunk 0, 4-5 from chunk 1
    array([2., 3., 4., 5.], dtype=float32)
    """

    __slots__ = ("_impl", "_pool")

    def __init__(
        self,
        chunk_starts: Sequence[npt.ArrayLike],
        source_rows: npt.ArrayLike,
        n_features: int,
        pool: ThreadPool,
    ) -> None:
        if not isinstance(pool, ThreadPool):
            raise TypeError(f"pool: expected a ThreadPool, got {type(pool).__name__}")
        starts = [_as_index_array(s, f"chunk_starts[{i}]") for i, s in enumerate(chunk_starts)]
        rows = _as_index_array(source_rows, "source_rows")
        self._pool = pool
        self._impl = _native.ChunkGather(starts, rows, int(n_features), pool._impl)

    @property
    def n_sources(self) -> int:
        """Number of sources."""
        return self._impl.n_sources

    @property
    def n_chunks(self) -> int:
        """Number of chunks over all sources."""
        return self._impl.n_chunks

    @property
    def n_features(self) -> int:
        """Features (columns) per row."""
        return self._impl.n_features

    @property
    def loaded_count(self) -> int:
        """Chunks whose rows are loaded now."""
        return self._impl.loaded_count

    @property
    def pool(self) -> ThreadPool:
        """The pool that copies large batches."""
        return self._pool

    def first_chunk(self, source: int) -> int:
        """Global number of the first chunk of ``source``."""
        return self._impl.first_chunk(int(source))

    def chunk_rows(self, chunk: int) -> int:
        """Rows held by ``chunk``."""
        return self._impl.chunk_rows(int(chunk))

    def loaded(self, chunk: int) -> bool:
        """Whether ``chunk``'s rows are loaded."""
        return self._impl.loaded(int(chunk))

    def set(self, chunk: int, data: npt.NDArray[np.float32]) -> None:
        """Publish ``data`` (``[>= chunk_rows(chunk), n_features]`` float32) as ``chunk``'s rows.

        Raises
        ------
        IndexError
            If there is no such chunk.
        ValueError
            If ``data`` has the wrong dtype, shape or layout.
        """
        self._impl.set(int(chunk), data)

    def clear(self, chunk: int) -> None:
        """Drop ``chunk``'s rows; returns once no running gather can still read them."""
        self._impl.clear(int(chunk))

    def gather(
        self,
        source_ids: npt.ArrayLike,
        starts: npt.ArrayLike,
        window: int,
        out: npt.NDArray[np.float32] | None = None,
    ) -> npt.NDArray[np.float32]:
        """Write rows ``[starts[b], starts[b] + window)`` of ``source_ids[b]`` into ``out[b]``.

        Every sample is checked before anything is written. The GIL is released while
        copying, and several threads may call this at once.

        Raises
        ------
        IndexError
            If a sample names a missing source or a window that does not fit in it; the
            ``batch_position`` attribute names the first such sample.
        RuntimeError
            If a window reads a chunk that is not loaded; the ``chunk`` and
            ``batch_position`` attributes name it.
        ValueError
            If ``window < 1``, the index arrays differ in length or ``out`` has the wrong
            shape, dtype or layout.
        """
        ids, first, rows, out = _window_batch(source_ids, "source_ids", starts, window, out, self)
        self._impl.gather(ids, first, rows, out)
        return out

    def gather_samples(
        self,
        indices: npt.ArrayLike,
        sample_source: npt.NDArray[np.int32],
        sample_start: npt.NDArray[np.int64],
        window: int,
        labels: npt.NDArray[np.float32],
        label_offset: npt.NDArray[np.int64],
        out: npt.NDArray[np.float32] | None = None,
        labels_out: npt.NDArray[np.float32] | None = None,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """Windows and labels of samples ``indices`` of a per-sample index, in one call.

        Sample ``i`` is the window at row ``sample_start[i]`` of source ``sample_source[i]``;
        its labels are row ``label_offset[source] + start + window - 1`` of ``labels``. The
        same as looking those up in numpy and calling :meth:`gather`, without the per-batch
        temporary arrays (the loader's hot path).

        Raises
        ------
        IndexError
            If a sample index, window or label row is out of range.
        RuntimeError
            If a window reads a chunk that is not loaded.

        Examples
        --------
        >>> import numpy as np
        >>> rows = np.arange(10, dtype=np.float32).reshape(10, 1)
        >>> gather = ChunkGather([[0]], [10], n_features=1, pool=ThreadPool(1))
        >>> gather.set(0, rows)
        >>> source = np.zeros(3, np.int32)
        >>> start = np.array([0, 4, 7])
        >>> x, y = gather.gather_samples([2, 0], source, start, 3, rows * 10, np.array([0]))
        >>> x[:, :, 0], y[:, 0]
        (array([[7., 8., 9.],
               [0., 1., 2.]], dtype=float32), array([90., 20.], dtype=float32))
        """
        idx = _as_index_array(indices, "indices")
        if isinstance(window, bool) or not isinstance(window, int | np.integer) or window < 1:
            raise ValueError(f"window: expected an int >= 1, got {window!r}")
        if out is None:
            out = np.empty((idx.shape[0], int(window), self.n_features), dtype=np.float32)
        if labels_out is None:
            labels_out = np.empty((idx.shape[0], labels.shape[1]), dtype=np.float32)
        self._impl.gather_samples(
            idx, sample_source, sample_start, int(window), out, labels, label_offset, labels_out
        )
        return out, labels_out

    def prefetcher(
        self,
        sample_source: npt.NDArray[np.int32],
        sample_start: npt.NDArray[np.int64],
        window: int,
        labels: npt.NDArray[np.float32],
        label_offset: npt.NDArray[np.int64],
        order: npt.NDArray[np.int64],
        steps: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
        capacity: int,
        depth: int,
    ) -> SamplePrefetcher:
        """A native thread gathering the planned batches of a per-sample index into slots.

        Step ``s`` is the samples ``order[(first[s] + j) % len(order)]`` for
        ``j < count[s]``, where ``steps = (first, count)``; sample ``i`` is read as
        :meth:`gather_samples` reads it. The thread fills slots added with
        ``add_slot(features, labels)`` (arrays of ``capacity`` samples, kept alive by the
        caller until ``stop()``), in step order, at most ``depth`` batches ahead of
        ``next(timeout)``, which returns ``(kind, step, slot, samples)``; ``release(slot)``
        lets a slot be filled again. Every chunk the samples read must stay loaded.
        """
        first = _as_index_array(steps[0], "steps[0]")
        count = _as_index_array(steps[1], "steps[1]")
        return _native.SamplePrefetcher(
            self._impl,
            np.ascontiguousarray(sample_source, dtype=np.int32),
            _as_index_array(sample_start, "sample_start"),
            np.ascontiguousarray(labels, dtype=np.float32),
            _as_index_array(label_offset, "label_offset"),
            int(window),
            _as_index_array(order, "order"),
            first,
            count,
            int(capacity),
            int(depth),
        )

    def __repr__(self) -> str:
        return (
            f"ChunkGather(n_sources={self.n_sources}, n_chunks={self.n_chunks}, "
            f"loaded={self.loaded_count}, n_features={self.n_features})"
        )


def gather_windows(
    sources: Sequence[npt.NDArray[np.float32]],
    array_ids: npt.ArrayLike,
    starts: npt.ArrayLike,
    window: int,
    out: npt.NDArray[np.float32] | None = None,
    *,
    pool: ThreadPool,
) -> npt.NDArray[np.float32]:
    """Gather one batch of windows in a single call; see :meth:`WindowGather.gather`.

    Build a :class:`WindowGather` once instead when gathering many batches from the same
    sources: this function re-checks every source on each call.

    Examples
    --------
    >>> import numpy as np
    >>> series = np.arange(10, dtype=np.float32).reshape(10, 1)
    >>> gather_windows([series], [0], [6], window=4, pool=ThreadPool(1)).ravel()
    array([6., 7., 8., 9.], dtype=float32)
    """
    return WindowGather(sources, pool).gather(array_ids, starts, window, out)


def _window_batch(
    ids: npt.ArrayLike,
    ids_name: str,
    starts: npt.ArrayLike,
    window: int,
    out: npt.NDArray[np.float32] | None,
    gather: WindowGather | ChunkGather,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int, npt.NDArray[np.float32]]:
    """A gather's arguments checked and converted; ``out`` allocated when ``None``."""
    if isinstance(window, bool) or not isinstance(window, int | np.integer):
        raise TypeError(f"window: expected an int, got {type(window).__name__}")
    if window < 1:
        raise ValueError(f"window: expected >= 1, got {window}")
    index = _as_index_array(ids, ids_name)
    first_rows = _as_index_array(starts, "starts")
    if out is None:
        out = np.empty((index.shape[0], int(window), gather.n_features), dtype=np.float32)
    return index, first_rows, int(window), out


def _as_index_array(values: npt.ArrayLike, name: str) -> npt.NDArray[np.int64]:
    """Return ``values`` as a 1-D C-contiguous int64 array, converting only when needed."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {array.shape}")
    if array.size == 0:
        return np.empty(0, dtype=np.int64)
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{name}: expected integers, got dtype {array.dtype}")
    if array.dtype == np.uint64 and array.max() > np.iinfo(np.int64).max:
        position = int(np.argmax(array > np.iinfo(np.int64).max))
        raise IndexError(
            f"batch position {position}: {name} value {array[position]} is out of range"
        )
    return np.ascontiguousarray(array, dtype=np.int64)


def random_permutation(
    n: int, seed: int, stream: int = 0, *, pool: ThreadPool
) -> npt.NDArray[np.int64]:
    """A uniformly random permutation of ``range(n)``, determined by ``(seed, stream)``.

    A cache-friendly scatter shuffle in C++ (indices drawn into ~32 Ki-sized buckets, then
    a Fisher-Yates shuffle per bucket on ``pool``), several times faster than
    ``numpy.random.Generator.permutation`` for millions of items. The result does not
    depend on the pool's size.

    Examples
    --------
    >>> import numpy as np
    >>> p = random_permutation(10, seed=1, pool=ThreadPool(1))
    >>> sorted(p.tolist()) == list(range(10))
    True
    >>> bool(np.array_equal(p, random_permutation(10, seed=1, pool=ThreadPool(2))))
    True
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0 <= seed < 2**64 or not 0 <= stream < 2**64:
        raise ValueError(f"seed and stream must be in [0, 2**64), got {seed} and {stream}")
    # Pre-faulted: numpy's huge-page request for 128 MB made D1's first order twice as slow.
    out = fresh_buffer((n,), np.int64)
    _native.random_permutation(out, seed, stream, pool._impl)
    return out


def take_rows(
    chunks: Sequence[npt.NDArray[Any]], rows: npt.NDArray[np.int64], dtype: npt.DTypeLike
) -> npt.NDArray[Any]:
    """Rows ``rows`` of the concatenation of ``chunks``, without joining the chunks first.

    ``chunks`` are 1-D contiguous arrays whose items are as wide as ``dtype``'s (their
    own dtypes are not looked at: the bytes are copied); the result is a new array of
    ``dtype``. One pass in C++ with the GIL released: the chunk of each row is the
    previous row's when it holds it, else a binary search. (Arrow's take joins a chunked
    column into one copy first, on every call.)

    Raises ``IndexError`` for a row outside the chunks, before anything is copied.

    Examples
    --------
    >>> import numpy as np
    >>> take_rows([np.arange(3), np.arange(10, 12)], np.array([4, 0, 3]), np.int64).tolist()
    [11, 0, 10]
    """
    # From the heap, not populated: takes of a few MB reuse the memory of the last ones.
    out = np.empty(len(rows), dtype=dtype)
    # As unsigned integers of their width: the extension takes no datetimes, and only the
    # bytes matter. Chunks of another width are passed as they are, for its error.
    width = out.dtype.itemsize
    raw = np.dtype(f"u{width}") if width in (1, 2, 4, 8) else out.dtype
    views = [c.view(raw) if c.dtype.itemsize == width else c for c in chunks]
    _native.take_rows(views, np.ascontiguousarray(rows, dtype=np.int64), out.view(raw))
    return out


def order_by_key(
    chunks: Sequence[tuple[npt.NDArray[np.integer[Any]], npt.NDArray[np.uint32]]], n_keys: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The rows of ``chunks`` stably ordered by key, and the rows of each key.

    Each chunk is a pair ``(codes, keys)``: its row ``i`` has key ``keys[codes[i]]``, a
    number below ``n_keys`` (an Arrow dictionary column's indices and a table from its
    dictionary to the sorted names of several, say). Rows are numbered across the chunks
    one after the other; rows of one key keep that order. A counting sort in C++ with the
    GIL released: two passes over the codes, no joined copy of them, no comparison sort.

    Raises ``IndexError`` for a code outside its key table and ``ValueError`` for a key
    not below ``n_keys``.

    Examples
    --------
    >>> import numpy as np
    >>> keys = np.array([2, 0], dtype=np.uint32)  # code 0 is key 2, code 1 is key 0
    >>> order, counts = order_by_key([(np.array([0, 1, 0], np.int32), keys),
    ...                               (np.array([1], np.int8), keys)], 3)
    >>> order.tolist(), counts.tolist()
    ([1, 3, 0, 2], [2, 0, 2])
    """
    if n_keys < 0:
        raise ValueError(f"n_keys must be >= 0, got {n_keys}")
    rows = 0
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, tuple) or len(chunk) != 2:
            raise ValueError(
                f"chunk {i}: expected a (codes, keys) tuple, got {type(chunk).__name__}"
            )
        rows += len(chunk[0])
    # Pages in place: a session's order is tens of MB, written once in random order.
    order = fresh_buffer((rows,), np.int64)
    counts = np.empty(n_keys, dtype=np.int64)
    _native.order_by_key(chunks, counts, order)
    return order, counts


def stack_columns_f32(columns: Sequence[npt.ArrayLike], rows: int) -> npt.NDArray[np.float32]:
    """The ``rows``-long columns side by side as a new float32 ``[rows, len(columns)]``
    matrix, each value cast as numpy's ``astype(np.float32)`` casts it (beyond float32's
    range: +/-inf, silently).

    One pass in C++ with the GIL released, a block of rows at a time: each column is read
    and the matrix written in order, with no float32 copy of each column first.

    Examples
    --------
    >>> import numpy as np
    >>> stack_columns_f32([np.array([1.0, 2.0]), np.array([0.5, 1e300])], 2).tolist()
    [[1.0, 0.5], [2.0, inf]]
    """
    arrays = [np.ascontiguousarray(c, dtype=np.float64) for c in columns]
    out = np.empty((rows, len(arrays)), dtype=np.float32)
    _native.stack_columns_f32(arrays, out)
    return out


class TimeBars(NamedTuple):
    """One row per time bar (see :func:`time_bars`)."""

    series: npt.NDArray[np.uint32] | None
    bar: npt.NDArray[np.int64]
    """The bar's open time: ``ts - ts mod interval`` of its trades."""
    ts_first: npt.NDArray[np.int64]
    ts_last: npt.NDArray[np.int64]
    open: npt.NDArray[np.float64]
    high: npt.NDArray[np.float64]
    low: npt.NDArray[np.float64]
    close: npt.NDArray[np.float64]
    trades: npt.NDArray[np.uint64]
    volume: npt.NDArray[np.float64]
    dollar_volume: npt.NDArray[np.float64]
    signed_volume: npt.NDArray[np.float64]


def time_bars(
    series: npt.NDArray[np.uint32] | None,
    ts: npt.NDArray[np.int64],
    price: npt.NDArray[np.float64],
    size: npt.NDArray[np.float64],
    side: npt.NDArray[np.float64] | None,
    interval: int,
) -> TimeBars:
    """Time bars of trades sorted by (``series``, ``ts``): one row per run of trades with
    one series and one bar open (``ts - ts mod interval``, floored: the epoch's grid).

    A bar holds its series, open, first and last trade's time and price, greatest and
    least price (``numpy.fmax``/``fmin``: NaN only when every price is), trade count, and
    the sums of size (``volume``), price x size (``dollar_volume``) and side x size
    (``signed_volume``, 0 without sides). One pass in C++ with the GIL released, but for
    the sums of bars of several trades: those are numpy's ``add.reduceat`` of the bar's
    quantities, so a bar's sum is exactly what numpy gives for its trades alone.

    Examples
    --------
    >>> import numpy as np
    >>> bars = time_bars(None, np.array([0, 4, 10, 12]), np.array([1.0, 3.0, 2.0, 2.5]),
    ...                  np.array([1.0, 1.0, 2.0, 2.0]), None, 10)
    >>> bars.bar.tolist(), bars.high.tolist(), bars.trades.tolist(), bars.dollar_volume.tolist()
    ([0, 10], [3.0, 2.5], [2, 2], [4.0, 9.0])
    """
    runs, long_runs, long_rows = _native.count_time_bar_runs(series, ts, interval)
    f8, i8 = np.float64, np.int64
    out = TimeBars(
        series=None if series is None else np.empty(runs, np.uint32),
        bar=np.empty(runs, i8),
        ts_first=np.empty(runs, i8),
        ts_last=np.empty(runs, i8),
        open=np.empty(runs, f8),
        high=np.empty(runs, f8),
        low=np.empty(runs, f8),
        close=np.empty(runs, f8),
        trades=np.empty(runs, np.uint64),
        volume=np.empty(runs, f8),
        dollar_volume=np.empty(runs, f8),
        signed_volume=np.empty(runs, f8),
    )
    where, starts = np.empty(long_runs, i8), np.empty(long_runs, i8)
    quantities = [np.empty(long_rows, f8) for _ in range(3)]
    _native.time_bars(series, ts, price, size, side, interval, *out, where, starts, *quantities)
    for sums, each in zip(
        (out.volume, out.dollar_volume, out.signed_volume), quantities, strict=True
    ):
        if long_runs:
            sums[where] = np.add.reduceat(each, starts)
    return out


def crc32c(data: bytes | memoryview | npt.NDArray[Any], value: int = 0) -> int:
    """The CRC-32C (Castagnoli, as iSCSI and Google's ``crc32c``) of the bytes of ``data``,
    continuing from ``value`` (the CRC-32C of the bytes before them).

    Computed in C++ with the GIL released (about 12 GB/s per core with SSE 4.2), so that
    threads checking chunks run in parallel. ``data`` is any C-contiguous buffer; it is
    not copied.

    Examples
    --------
    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    >>> crc32c(b"56789", crc32c(b"1234")) == crc32c(b"123456789")
    True
    """
    view = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    if view.ndim != 1 or view.dtype != np.uint8:
        view = view.reshape(-1).view(np.uint8)
    return int(_native.crc32c(view, value))


def read_checked(
    fd: int, offset: int, out: npt.NDArray[np.uint8], *, checksum: bool = True
) -> tuple[int, int]:
    """Fill ``out`` (C-contiguous ``uint8``) from byte ``offset`` of the file open as ``fd``.

    Returns the bytes read (fewer than ``out`` holds when the file ends first: a file cut
    short, also while it is read, is never a signal) and, with ``checksum``, their
    CRC-32C (else 0), computed a block at a time while the block is in the CPU's cache.
    ``pread`` in C++, the GIL released. Raises ``OSError`` on a read error.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryFile() as f:
    ...     _ = f.write(b"123456789")
    ...     f.flush()
    ...     out = np.zeros(12, dtype=np.uint8)
    ...     n, crc = read_checked(f.fileno(), 0, out)
    >>> n, hex(crc), bytes(out[:n])
    (9, '0xe3069283', b'123456789')
    """
    if offset < 0:
        raise ValueError(f"offset: expected >= 0, got {offset}")
    n, crc = _native.read_checked(fd, offset, out, checksum)
    return int(n), int(crc)


def map_file(
    fd: int, size: int, *, populate: bool = False, willneed: bool = False
) -> npt.NDArray[np.uint8]:
    """A read-only ``uint8`` view of the first ``size`` bytes of the file open as ``fd``.

    The file is memory-mapped in C++ and the mapping holds no file descriptor: close
    ``fd`` right away. (Python's ``mmap`` keeps a duplicate descriptor per mapping, so a
    cache of thousands of mapped chunks would hit the open-file limit.) The mapping is
    unmapped when the last view of the array goes. ``populate`` maps every page at once;
    ``willneed`` asks the kernel to read the file ahead.

    Raises ``OSError`` (with ``errno``) when the file cannot be mapped, ``ValueError`` for
    ``size`` 0.

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryFile() as f:
    ...     _ = f.write(b"ticks")
    ...     f.flush()
    ...     view = map_file(f.fileno(), 5)
    >>> bytes(view)
    b'ticks'
    """
    if size < 0:
        raise ValueError(f"size: expected >= 0, got {size}")
    array: npt.NDArray[np.uint8] = _native.map_file(fd, size, populate, willneed)
    return array
