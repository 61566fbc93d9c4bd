"""The benchmark workload: one store per codec (D1 of ``DESIGN.md`` by default), .npy mirror."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ticktensor.errors import ConfigError
from ticktensor.store import Codec, Layout, SegmentRecord, Store, StoreVersion
from ticktensor.store.testing import write_segment

__all__ = ["Series", "Workload", "prepare", "store_files"]

Floats = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Series:
    """One series, as the workload writes it to every store and ``.npy`` file.

    Series ``s`` is written as symbol ``S{s:03d}`` and ``values-{s:03d}.npy``.
    """

    symbol: str
    ts: npt.NDArray[np.int64]
    values: Floats
    labels: Floats


@dataclass(frozen=True)
class Workload:
    """Shape of the benchmark data and its samples; the defaults are workload D1.

    Parameters
    ----------
    symbols, rows, features
        Series (one per symbol) of ``rows`` rows of ``features`` float32 features.
    window, batch
        Rows per sample and samples per batch.
    chunk_rows
        Rows per stored chunk.
    seed
        Seed of the generated data.
    cache_dir
        Where the generated stores and ``.npy`` files are written once and reused.
    source
        An existing store to take the series from instead of generating them (its
        segments become the series; ``symbols``, ``rows`` and ``features`` are then
        taken from it by :meth:`from_store`).
    """

    symbols: int = 16
    rows: int = 1_000_000
    features: int = 32
    window: int = 128
    batch: int = 256
    chunk_rows: int = 32_768
    seed: int = 0
    cache_dir: Path = Path("build/bench-d1")
    source: str | None = None

    def __post_init__(self) -> None:
        for name in ("symbols", "rows", "features", "window", "batch", "chunk_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}: expected an integer >= 1, got {value!r}")
        if self.rows < self.window:
            raise ConfigError(f"rows {self.rows} is shorter than the window {self.window}")
        object.__setattr__(self, "cache_dir", Path(self.cache_dir))

    @classmethod
    def from_store(cls, url: str, **options: object) -> Workload:
        """The workload of an existing store: its segments are the series."""
        version = Store.open(url).version()
        if not version.segments:
            raise ConfigError(f"{url}: the store has no feature segments to benchmark")
        rows = min(record.rows for record in version.segments)
        shape = {
            "symbols": len(version.segments),
            "rows": rows,
            "features": len(version.feature_names),
            "source": url,
        }
        return cls(**(options | shape))  # type: ignore[arg-type]

    @property
    def sample_bytes(self) -> int:
        """Bytes one sample delivers: the window and its one label."""
        return 4 * (self.window * self.features + 1)

    @property
    def row_bytes(self) -> int:
        """Bytes of one stored row of features."""
        return 4 * self.features

    @property
    def nbytes(self) -> int:
        """Bytes of every feature value of the workload."""
        return self.symbols * self.rows * self.row_bytes

    @property
    def data_dir(self) -> Path:
        """Where this workload's stores and ``.npy`` files live."""
        if self.source is not None:
            tag = hashlib.sha256(self.source.encode()).hexdigest()[:12]
            return self.cache_dir / f"store-{tag}-c{self.chunk_rows}"
        name = f"{self.symbols}x{self.rows}x{self.features}-c{self.chunk_rows}-seed{self.seed}"
        return self.cache_dir / name

    def store_dir(self, codec: Codec | str) -> Path:
        """The generated store of ``codec``."""
        return self.data_dir / f"store-{Codec(codec).value}"

    def npy_dir(self) -> Path:
        """The ``.npy`` mirror: ``values-NNN.npy`` and ``labels-NNN.npy`` per series."""
        return self.data_dir / "npy"

    def resized(self, rows: int) -> Workload:
        """The same workload with ``rows`` rows per series (for the size sweep)."""
        return dataclasses.replace(self, rows=rows)

    def series(self) -> Iterator[Series]:
        """The series, one at a time (generated from ``seed``, or read from ``source``)."""
        if self.source is not None:
            version = Store.open(self.source).version()
            for s, record in enumerate(version.segments[: self.symbols]):
                data = version.read_segment(record)
                labels = data.labels if data.labels is not None else data.values[:, :1]
                n = self.rows
                yield Series(
                    f"S{s:03d}",
                    data.ts[:n],
                    np.ascontiguousarray(data.values[:n]),
                    np.ascontiguousarray(labels[:n, :1], dtype=np.float32),
                )
            return
        for s in range(self.symbols):
            rng = np.random.default_rng([self.seed, s])
            values = rng.standard_normal((self.rows, self.features), dtype=np.float32)
            labels = rng.standard_normal((self.rows, 1), dtype=np.float32)
            ts = np.arange(self.rows, dtype=np.int64) * 1_000_000
            yield Series(f"S{s:03d}", ts, values, labels)


def prepare(
    workload: Workload, codecs: Sequence[Codec | str], say: Callable[[str], None] = print
) -> StoreVersion:
    """Write the ``.npy`` mirror and one store per codec, each once; later calls reuse them.

    Returns
    -------
    StoreVersion
        The first codec's store, pinned.
    """
    wanted = [Codec(c) for c in codecs] or [Codec.NONE]
    missing = [c for c in wanted if not (workload.store_dir(c) / "READY").exists()]
    npy = workload.npy_dir()
    if missing or not (npy / "READY").exists():
        gib = workload.nbytes / 2**30
        names = ", ".join(c.value for c in missing) or "npy"
        say(
            f"# writing the benchmark data ({gib:.2f} GiB per copy: {names}) "
            f"to {workload.data_dir} ..."
        )
        _write(workload, missing, write_npy=not (npy / "READY").exists())
    return Store.open(str(workload.store_dir(wanted[0]))).version()


def _write(workload: Workload, codecs: Sequence[Codec], *, write_npy: bool) -> None:
    """Each series as one legacy format-1 segment (:mod:`ticktensor.store.testing`), so that
    ``bench loader`` figures of any run are figures over the same D1 stores."""
    npy = workload.npy_dir()
    npy.mkdir(parents=True, exist_ok=True)
    stores: dict[Codec, tuple[Store, list[SegmentRecord]]] = {}
    for codec in codecs:
        root = workload.store_dir(codec)
        layout = Layout(codec=codec, chunk_rows=workload.chunk_rows)
        stores[codec] = (Store.create(str(root), layout=layout, exist_ok=True), [])
    names = [f"f{i}" for i in range(workload.features)]
    for s, series in enumerate(workload.series()):
        for store, segments in stores.values():
            segments.append(
                write_segment(
                    store,
                    symbol=series.symbol,
                    session="2024-01-02",
                    ts=series.ts,
                    values=series.values,
                    feature_names=names,
                    labels=series.labels,
                    label_names=["y"],
                )
            )
        if write_npy:
            np.save(npy / f"values-{s:03d}.npy", series.values)
            np.save(npy / f"labels-{s:03d}.npy", series.labels)
    for codec, (store, segments) in stores.items():
        store.commit(segments=segments, message=f"benchmark data, codec {codec.value}")
        (workload.store_dir(codec) / "READY").write_text(
            json.dumps(dataclasses.asdict(workload), default=str)
        )
    if write_npy:
        (npy / "READY").write_text(json.dumps(dataclasses.asdict(workload), default=str))


def store_files(version: StoreVersion) -> list[Path]:
    """Every local file of ``version``'s feature segments (chunks and metadata)."""
    location = version.location
    return sorted(
        Path(location.path(record.path)) / rel
        for record in version.segments
        for rel in record.files
    )
