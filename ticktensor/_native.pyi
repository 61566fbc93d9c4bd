"""ticktensor's C++ core (private; use the Python facades)."""

from collections.abc import Sequence
from typing import Annotated, Any

import numpy
import numpy.typing
from numpy.typing import NDArray

class ThreadPool:
    """
    A fixed pool of worker threads shared by native kernels.

    ``size`` threads work on each call: ``size - 1`` workers started
    once, plus the calling thread. Several Python threads may use one
    pool at the same time.
    """

    def __init__(self, n_threads: int) -> None:
        """Start ``n_threads - 1`` worker threads (``n_threads >= 1``)."""

    @property
    def size(self) -> int:
        """Threads that work on one call, the calling thread included."""

class WindowGather:
    """
    Copies windows of consecutive rows out of fixed float32 source arrays.

    Holds a reference to every source array and to the pool.
    """

    def __init__(
        self, sources: Sequence[numpy.typing.NDArray[numpy.float32]], pool: ThreadPool
    ) -> None:
        """
        Borrow C-contiguous 2-D float32 arrays with one common number of features.
        """

    @property
    def n_sources(self) -> int:
        """Number of source arrays."""

    @property
    def n_features(self) -> int:
        """Features (columns) per row."""

    def rows(self, array_id: int) -> int:
        """Rows of source ``array_id``."""

    def gather(
        self,
        array_ids: numpy.typing.NDArray[numpy.int64],
        starts: numpy.typing.NDArray[numpy.int64],
        window: int,
        out: numpy.typing.NDArray[numpy.float32],
    ) -> None:
        """
        Write ``sources[array_ids[b]][starts[b]:starts[b] + window]`` into ``out[b]``.

        Checks every sample before writing; releases the GIL while copying.
        """

class ChunkGather:
    """
    Copies row windows out of sources split into chunks that are loaded and dropped.

    Holds a reference to each loaded chunk's array and to the pool.
    """

    def __init__(
        self,
        chunk_starts: Sequence[numpy.typing.NDArray[numpy.int64]],
        source_rows: numpy.typing.NDArray[numpy.int64],
        n_features: int,
        pool: ThreadPool,
    ) -> None:
        """Chunk k of source s starts at row ``chunk_starts[s][k]``."""

    @property
    def n_sources(self) -> int:
        """Sources."""

    @property
    def n_chunks(self) -> int:
        """Chunks over all sources."""

    @property
    def n_features(self) -> int:
        """Features (columns) per row."""

    @property
    def loaded_count(self) -> int:
        """Chunks whose rows are loaded now."""

    def first_chunk(self, source: int) -> int:
        """Global number of source ``source``'s first chunk."""

    def chunk_rows(self, chunk: int) -> int:
        """Rows of chunk ``chunk``."""

    def loaded(self, chunk: int) -> bool:
        """Whether chunk ``chunk``'s rows are loaded."""

    def set(self, chunk: int, data: numpy.typing.NDArray[numpy.float32]) -> None:
        """
        Load chunk ``chunk`` from ``data`` (kept referenced until cleared or replaced).
        """

    def clear(self, chunk: int) -> None:
        """Drop chunk ``chunk``; returns once no running gather reads it."""

    def gather_samples(
        self,
        indices: numpy.typing.NDArray[numpy.int64],
        sample_source: numpy.typing.NDArray[numpy.int32],
        sample_start: numpy.typing.NDArray[numpy.int64],
        window: int,
        out: numpy.typing.NDArray[numpy.float32],
        labels: numpy.typing.NDArray[numpy.float32],
        label_offset: numpy.typing.NDArray[numpy.int64],
        labels_out: numpy.typing.NDArray[numpy.float32],
    ) -> None:
        """
        Gather samples ``indices`` of a dataset's index and their labels in one call.

        Checks every sample first; releases the GIL.
        """

    def gather(
        self,
        source_ids: numpy.typing.NDArray[numpy.int64],
        starts: numpy.typing.NDArray[numpy.int64],
        window: int,
        out: numpy.typing.NDArray[numpy.float32],
    ) -> None:
        """
        Write rows ``[starts[b], starts[b] + window)`` of source ``source_ids[b]`` into ``out[b]``.

        Checks every sample and its chunks before writing; releases the GIL while copying.
        """

def random_permutation(
    out: Annotated[NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu")],
    seed: int,
    stream: int,
    pool: ThreadPool,
) -> None:
    """
    Fill `out` (int64, 1-D, C-contiguous) with a uniformly random permutation of
    range(len(out)), determined by (seed, stream) alone. The GIL is released.
    """

def take_rows(
    chunks: Sequence[numpy.typing.NDArray[Any]],
    rows: numpy.typing.NDArray[numpy.int64],
    out: numpy.typing.NDArray[Any],
) -> None:
    """
    Fill `out` (1-D, C-contiguous) with rows `rows` (int64) of the concatenation of
    `chunks` (1-D contiguous numpy arrays whose items are as wide as out's), without
    joining them. A row out of range raises IndexError before anything is copied.
    The GIL is released.
    """

def order_by_key(
    chunks: Sequence[tuple[numpy.typing.NDArray[Any], numpy.typing.NDArray[numpy.uint32]]],
    counts: numpy.typing.NDArray[numpy.int64],
    order: numpy.typing.NDArray[numpy.int64],
) -> None:
    """
    Fill `order` with the rows of the chunks (each a (codes, keys) pair: row i's key
    is keys[codes[i]]), one chunk after the other, stably ordered by key, and `counts`
    (one item per key) with the rows of each key. A counting sort; the GIL is released.
    A code outside its key table raises IndexError, a key not below len(counts)
    ArgumentError, before `order` is written.
    """

def stack_columns_f32(
    columns: Sequence[numpy.typing.NDArray[numpy.float64]], out: numpy.typing.NDArray[numpy.float32]
) -> None:
    """
    Fill `out` (float32, [rows, len(columns)], C-contiguous) with the float64 columns
    (contiguous, `rows` each) side by side, each value cast to float32 (beyond its
    range: +/-inf). The GIL is released.
    """

def count_time_bar_runs(
    series: Annotated[
        NDArray[numpy.uint32], dict(shape=(None,), order="C", device="cpu", writable=False)
    ]
    | None,
    ts: Annotated[
        NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu", writable=False)
    ],
    interval: int,
) -> tuple[int, int, int]:
    """
    (bars, bars of several trades, trades in those) of trades sorted by (series, ts):
    the runs of equal (series, ts - ts mod interval). The GIL is released.
    """

def time_bars(
    series: Annotated[
        NDArray[numpy.uint32], dict(shape=(None,), order="C", device="cpu", writable=False)
    ]
    | None,
    ts: Annotated[
        NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu", writable=False)
    ],
    price: Annotated[
        NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu", writable=False)
    ],
    size: Annotated[
        NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu", writable=False)
    ],
    side: Annotated[
        NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu", writable=False)
    ]
    | None,
    interval: int,
    series_out: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order="C", device="cpu")]
    | None,
    bar: Annotated[NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu")],
    ts_first: Annotated[NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu")],
    ts_last: Annotated[NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu")],
    open: Annotated[NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu")],
    high: Annotated[NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu")],
    low: Annotated[NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu")],
    close: Annotated[NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu")],
    count: Annotated[NDArray[numpy.uint64], dict(shape=(None,), order="C", device="cpu")],
    volume: Annotated[NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu")],
    dollar: Annotated[NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu")],
    signed_volume: Annotated[NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu")],
    long_runs: Annotated[NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu")],
    long_starts: Annotated[NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu")],
    long_volume: Annotated[NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu")],
    long_dollar: Annotated[NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu")],
    long_signed: Annotated[NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu")],
) -> None:
    """
    Fill one row per time bar of trades sorted by (series, ts), the arrays sized by
    count_time_bar_runs (see ticktensor.kernels.time_bars). The GIL is released.
    """

def map_file(
    fd: int, size: int, populate: bool, willneed: bool
) -> Annotated[NDArray[numpy.uint8], dict(shape=(None,), writable=False)]:
    """
    A read-only uint8 array over the first `size` bytes of the file open as `fd`,
    memory-mapped; it holds no descriptor (close `fd` at will) and is unmapped when
    the last view goes.
    """

def crc32c(
    data: Annotated[
        NDArray[numpy.uint8], dict(shape=(None,), order="C", device="cpu", writable=False)
    ],
    value: int = 0,
) -> int:
    """
    The CRC-32C (Castagnoli) of `data`, continuing from `value` (the CRC-32C of the
    bytes before them; 0 to start).
    """

def read_checked(
    fd: int,
    offset: int,
    out: Annotated[NDArray[numpy.uint8], dict(shape=(None,), order="C", device="cpu")],
    checksum: bool,
) -> tuple[int, int]:
    """
    Fill `out` from byte `offset` of the file open as `fd` with pread; returns the bytes
    read (fewer at the end of the file) and, with `checksum`, their CRC-32C (else 0).
    """

class SamplePrefetcher:
    """
    A native thread that gathers planned batches of a dataset's samples into slots.

    Step s is the samples at positions ``step_first[s] + j`` (modulo ``len(order)``) of
    ``order`` for ``j < step_count[s]``. Batches come out of :meth:`next` in step order.
    """

    def __init__(
        self,
        gather: ChunkGather,
        sample_source: numpy.typing.NDArray[numpy.int32],
        sample_start: numpy.typing.NDArray[numpy.int64],
        labels: numpy.typing.NDArray[numpy.float32],
        label_offset: numpy.typing.NDArray[numpy.int64],
        window: int,
        order: numpy.typing.NDArray[numpy.int64],
        step_first: numpy.typing.NDArray[numpy.int64],
        step_count: numpy.typing.NDArray[numpy.int64],
        capacity: int,
        depth: int,
    ) -> None:
        """Start the thread; it fills slots as they are added or released."""

    def add_slot(
        self,
        features: numpy.typing.NDArray[numpy.float32],
        labels: numpy.typing.NDArray[numpy.float32],
    ) -> int:
        """
        Add a free slot (``capacity`` samples of features and labels); returns its number.

        The caller keeps both arrays alive until :meth:`stop` has returned.
        """

    def release(self, slot: int) -> None:
        """Slot ``slot``'s batch is no longer read: it may be filled again."""

    def next(self, timeout: float) -> tuple[int, int, int, int]:
        """
        ``(kind, step, slot, samples)`` of the next batch, waiting up to ``timeout``
        seconds with the GIL released. kind 0 is a batch, 1 a timeout, 2 the end;
        an exception that ended the thread is raised (once).
        """

    def stop(self) -> None:
        """Stop and join the thread. Idempotent."""

    @property
    def running(self) -> bool:
        """Whether the thread is running (False in a forked child)."""

    @property
    def waiting(self) -> int:
        """Filled batches not taken yet."""

    @property
    def slots(self) -> int:
        """Slots added so far."""

    @property
    def fill_seconds(self) -> float:
        """Seconds the thread spent gathering."""

    @property
    def failed_step(self) -> int:
        """The step whose gather raised, or -1."""

class LiveEngine:
    """
    Per-symbol live feature state (see ticktensor.live); not for direct use.
    """

    def __init__(
        self,
        clock: int,
        ops: Annotated[
            NDArray[numpy.uint8], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        windows: Annotated[
            NDArray[numpy.uint8], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        sizes: Annotated[
            NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        history: int,
        session_ns: int,
        session_kind: int,
        bar_ns: int,
        bar_kind: int,
        bar_threshold: float,
        symbols: int,
    ) -> None: ...
    @property
    def features(self) -> int:
        """Number of features per row."""

    @property
    def symbols(self) -> int:
        """Number of symbols."""

    def add_symbol(self) -> int:
        """A new symbol; returns its number."""

    def push(
        self,
        kind: int,
        symbol: int,
        ts: int,
        values: Annotated[
            NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        key: int,
        row: Annotated[NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu")],
        levels: Annotated[
            NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu", writable=False)
        ]
        | None = None,
    ) -> int:
        """Take one event; returns its verdict (0: `row` holds a new row)."""

    def push_batch(
        self,
        kind: Annotated[
            NDArray[numpy.uint8], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        symbol: Annotated[
            NDArray[numpy.uint32], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        ts: Annotated[
            NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        values: Annotated[
            NDArray[numpy.float64],
            dict(shape=(None, None), order="C", device="cpu", writable=False),
        ],
        key: Annotated[
            NDArray[numpy.uint64], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        rows: Annotated[NDArray[numpy.float64], dict(shape=(None, None), order="C", device="cpu")],
        row_event: Annotated[NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu")],
        row_ts: Annotated[NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu")],
        verdicts: Annotated[NDArray[numpy.uint8], dict(shape=(None,), order="C", device="cpu")],
        levels: Annotated[
            NDArray[numpy.float64],
            dict(shape=(None, None), order="C", device="cpu", writable=False),
        ]
        | None = None,
    ) -> int:
        """
        Take events in order; returns the number of rows written. The GIL is released.
        """

    def push_timed(
        self,
        kind: Annotated[
            NDArray[numpy.uint8], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        symbol: Annotated[
            NDArray[numpy.uint32], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        ts: Annotated[
            NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        values: Annotated[
            NDArray[numpy.float64],
            dict(shape=(None, None), order="C", device="cpu", writable=False),
        ],
        key: Annotated[
            NDArray[numpy.uint64], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        ns: Annotated[NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu")],
        levels: Annotated[
            NDArray[numpy.float64],
            dict(shape=(None, None), order="C", device="cpu", writable=False),
        ]
        | None = None,
    ) -> None:
        """
        Take events one by one, writing each push's time in ns. The GIL is released.
        """

    def flush(
        self,
        rows: Annotated[NDArray[numpy.float64], dict(shape=(None, None), order="C", device="cpu")],
        row_symbol: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order="C", device="cpu")],
        row_ts: Annotated[NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu")],
    ) -> int:
        """The bars clock: close every open bar into rows[:m]; returns m."""

    def counts(self) -> list[int]:
        """Counts of verdicts so far, by verdict number."""

    def set_counts(self, counts: Sequence[int]) -> None:
        """Restore the verdict counts."""

    def rows(self, symbol: int) -> int:
        """Rows emitted for a symbol."""

    def window(
        self,
        symbol: int,
        out: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order="C", device="cpu")],
    ) -> None:
        """The symbol's last out.shape[0] rows, oldest first, into `out`."""

    def save(
        self, symbol: int
    ) -> tuple[
        Annotated[NDArray[numpy.int64], dict(shape=(None,))],
        Annotated[NDArray[numpy.float64], dict(shape=(None,))],
    ]:
        """A symbol's state as (int64, float64) words."""

    def load(
        self,
        symbol: int,
        ints: Annotated[
            NDArray[numpy.int64], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
        doubles: Annotated[
            NDArray[numpy.float64], dict(shape=(None,), order="C", device="cpu", writable=False)
        ],
    ) -> None:
        """Replace a symbol's state with words from save()."""
