"""Loader benchmark (workload D1): ticktensor.DataLoader vs torch over mmap, numpy, memcpy."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.utils.data

from ticktensor.errors import ConfigError
from ticktensor.store import Codec, Layout, Store

from .dataloader import DataLoader
from .dataset import WindowDataset
from .samplers import UniformOrder

__all__ = ["BenchRow", "LoaderBench", "config_from_args", "execute", "report", "run"]

Floats = npt.NDArray[np.float32]
Measure = Callable[[int], tuple[int, float, float | None]]
"""``measure(rep) -> (samples, seconds, first_batch_s)`` for one timed repetition."""


@dataclass(frozen=True)
class LoaderBench:
    """One benchmark run; the defaults are workload D1 of ``DESIGN.md``."""

    symbols: int = 16
    rows: int = 1_000_000
    features: int = 32
    window: int = 128
    batch: int = 256
    seconds: float = 2.0
    repeats: int = 5
    cache_dir: Path = Path("build/bench-d1")
    seed: int = 0
    memcpy_mib: int = 256

    def __post_init__(self) -> None:
        for name in ("symbols", "rows", "features", "window", "batch", "repeats", "memcpy_mib"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}: expected an integer >= 1, got {value!r}")
        if self.rows < self.window:
            raise ConfigError(f"rows {self.rows} is shorter than the window {self.window}")
        if not self.seconds > 0:
            raise ConfigError(f"seconds: expected > 0, got {self.seconds}")

    @property
    def sample_bytes(self) -> int:
        """Bytes one sample delivers: the window and its one label."""
        return 4 * (self.window * self.features + 1)

    @property
    def data_dir(self) -> Path:
        """Where this shape's store and ``.npy`` files are cached."""
        return Path(self.cache_dir) / f"{self.symbols}x{self.rows}x{self.features}-seed{self.seed}"


@dataclass(frozen=True)
class BenchRow:
    """One method's medians; ``first_batch_s`` is ``None`` where there is no first batch."""

    name: str
    samples_per_s: float
    gb_per_s: float
    first_batch_s: float | None
    peak_rss_mb: float


_OPTIONS = (
    "symbols",
    "rows",
    "features",
    "window",
    "batch",
    "seconds",
    "repeats",
    "cache_dir",
    "seed",
)


def config_from_args(args: argparse.Namespace) -> LoaderBench:
    """The configuration the parsed options describe; options left ``None`` keep D1's."""
    given = {
        name: getattr(args, name) for name in _OPTIONS if getattr(args, name, None) is not None
    }
    return LoaderBench(**given)


# -- data ----------------------------------------------------------------------------------


def prepare(config: LoaderBench, say: Callable[[str], None]) -> Path:
    """Write the store (codec none) and one ``.npy`` per symbol once; reuse them later."""
    root = config.data_dir
    if (root / "READY").exists():
        return root
    say(f"# writing the benchmark data once to {root} ...")
    root.mkdir(parents=True, exist_ok=True)
    store = Store.create(str(root / "store"), layout=Layout(codec=Codec.NONE), exist_ok=True)
    rng = np.random.default_rng(config.seed)
    names = [f"f{i}" for i in range(config.features)]
    segments = []
    for s in range(config.symbols):
        values = rng.standard_normal((config.rows, config.features), dtype=np.float32)
        labels = rng.standard_normal((config.rows, 1), dtype=np.float32)
        ts = np.arange(config.rows, dtype=np.int64) * 1_000_000
        segments.append(
            store.write_segment(
                symbol=f"S{s:03d}",
                session="2024-01-02",
                ts=ts,
                values=values,
                feature_names=names,
                labels=labels,
                label_names=["y"],
            )
        )
        np.save(root / f"values-{s:03d}.npy", values)
        np.save(root / f"labels-{s:03d}.npy", labels)
    store.commit(segments=segments, message="loader benchmark data")
    (root / "READY").write_text(json.dumps(asdict(config), default=str))
    return root


def warm_page_cache(paths: Sequence[Path]) -> None:
    """Read files once so that the mmap baseline reads from RAM, not from disk."""
    for path in paths:
        with path.open("rb") as f:
            while f.read(64 << 20):
                pass


class MmapWindows(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """The baseline users write: windows sliced from ``np.load(mmap_mode="r")`` arrays."""

    def __init__(self, root: Path, symbols: int, window: int) -> None:
        self.values = [np.load(root / f"values-{s:03d}.npy", mmap_mode="r") for s in range(symbols)]
        self.labels = [np.load(root / f"labels-{s:03d}.npy", mmap_mode="r") for s in range(symbols)]
        self.window = window
        self.per_symbol = int(self.values[0].shape[0]) - window + 1

    def __len__(self) -> int:
        return len(self.values) * self.per_symbol

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        s, start = divmod(i, self.per_symbol)
        x = np.array(self.values[s][start : start + self.window])
        y = np.array(self.labels[s][start + self.window - 1])
        return torch.from_numpy(x), torch.from_numpy(y)


# -- methods -------------------------------------------------------------------------------


def _timed(batches: Callable[[int], Iterator[int]], seconds: float) -> Measure:
    """Time ``batches(rep)`` (yielding batch sizes) for ``seconds`` after its first batch."""

    def measure(rep: int) -> tuple[int, float, float | None]:
        started = time.perf_counter()
        sizes = batches(rep)
        next(sizes)
        first = time.perf_counter() - started
        samples, t0 = 0, time.perf_counter()
        while (now := time.perf_counter()) - t0 < seconds:
            samples += next(sizes)
        return samples, now - t0, first

    return measure


def _endless(make: Callable[[], Any]) -> Iterator[int]:
    """Batch sizes of ``make()``'s iterator, starting a new pass at its end."""
    while True:
        iterator = iter(make())
        for batch in iterator:
            yield int(batch[0].shape[0])
        del iterator


def ticktensor_method(ds: WindowDataset, config: LoaderBench) -> Measure:
    def batches(rep: int) -> Iterator[int]:
        loader = DataLoader(ds, batch_size=config.batch, shuffle=True, seed=config.seed + rep)
        return _endless(lambda: loader)

    return _timed(batches, config.seconds)


def torch_method(ds: MmapWindows, config: LoaderBench, workers: int) -> Measure:
    def batches(rep: int) -> Iterator[int]:
        generator = torch.Generator().manual_seed(config.seed + rep)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=config.batch, shuffle=True, num_workers=workers, generator=generator
        )
        return _endless(lambda: loader)

    return _timed(batches, config.seconds)


def numpy_method(ds: WindowDataset, config: LoaderBench, order: npt.NDArray[np.int64]) -> Measure:
    """A per-window copy loop over in-RAM arrays, over the windows of ``order``."""
    x = np.empty((config.batch, ds.window, ds.n_features), dtype=np.float32)
    y = np.empty((config.batch, ds.n_labels), dtype=np.float32)
    sources, labels, window = ds.sources, ds.labels_sources, ds.window

    def batches(rep: int) -> Iterator[int]:
        for first in range(0, order.shape[0], config.batch):
            idx = order[first : first + config.batch]
            segments, starts = ds.sample_segment[idx].tolist(), ds.sample_start[idx].tolist()
            for b, (s, start) in enumerate(zip(segments, starts, strict=True)):
                x[b] = sources[s][start : start + window]
                y[b] = labels[s][start + window - 1]
            yield len(segments)

    def endless(rep: int) -> Iterator[int]:
        while True:
            yield from batches(rep)

    return _timed(endless, config.seconds)


def get_batch_method(
    ds: WindowDataset, config: LoaderBench, order: npt.NDArray[np.int64]
) -> Measure:
    """``WindowDataset.get_batch`` in a bare loop on this thread: the loader without a loader."""
    x = np.empty((config.batch, ds.window, ds.n_features), dtype=np.float32)
    y = np.empty((config.batch, ds.n_labels), dtype=np.float32)

    def endless(rep: int) -> Iterator[int]:
        while True:
            for first in range(0, order.shape[0] - config.batch + 1, config.batch):
                ds.get_batch(order[first : first + config.batch], out=x, labels_out=y)
                yield config.batch

    return _timed(endless, config.seconds)


def memcpy_gbps(mib: int) -> float:
    """Best of a few large ``np.copyto`` (bytes copied per second): the bandwidth ceiling."""
    src = np.ones(mib * 2**20 // 4, dtype=np.float32)
    dst = np.zeros_like(src)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - started)
    return src.nbytes / best / 1e9


# -- measurement ---------------------------------------------------------------------------


class RssMonitor:
    """Peak memory of this process tree while a method runs.

    This process's resident set (``/proc/self/statm``, every 20 ms) plus the private
    memory of its child processes (torch's workers; ``smaps_rollup``, every 200 ms since
    it walks their page tables), so pages a forked worker shares with its parent count
    once.
    """

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)

    def __enter__(self) -> RssMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        pid, children, tick = os.getpid(), 0, 0
        while True:
            if tick % 10 == 0:
                children = sum(_private_bytes(c) for c in _descendants(pid))
            self.peak = max(self.peak, _rss_bytes(pid) + children)
            tick += 1
            if self._stop.wait(0.02):
                return


def _rss_bytes(pid: int) -> int:
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except (OSError, ValueError):
        return found
    return found + [d for c in found for d in _descendants(c)]


def _private_bytes(pid: int) -> int:
    """Private (not shared) resident bytes of ``pid``."""
    total = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return total


@dataclass
class _Samples:
    rates: list[float] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)
    peak: int = 0


def run(config: LoaderBench, say: Callable[[str], None] = print) -> list[BenchRow]:
    """Measure every method, alternating repetitions; print a report and return the rows."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    say(
        f"# {datetime.date.today().isoformat()}  cpu: {cpu_model()}  cores: {os.cpu_count()}"
        f"  load average before: {load}  python {platform.python_version()}  torch "
        f"{torch.__version__}"
    )
    root = prepare(config, say)
    warm_page_cache(sorted(root.glob("*.npy")))
    started = time.perf_counter()
    ds = WindowDataset(Store.open(str(root / "store")).version(), config.window)
    open_s = time.perf_counter() - started
    gib = config.symbols * config.rows * config.features * 4 / 2**30
    say(
        f"# data: {config.symbols} symbols x {config.rows:,} rows x {config.features} float32"
        f" features ({gib:.2f} GiB, store codec none in {root}); W={config.window}, "
        f"B={config.batch}, {config.sample_bytes:,} bytes per sample; {len(ds):,} samples"
    )
    say(
        f"# rates: median of {config.repeats} repetitions of {config.seconds:g} s after each"
        " method's first batch, methods taking turns; first batch: median time from iter()"
    )
    say(f"# WindowDataset opened (store read into RAM) in {open_s:.2f} s")
    mmap = MmapWindows(root, config.symbols, config.window)
    started = time.perf_counter()
    order = UniformOrder(config.seed).order(ds, 0)
    order_s = time.perf_counter() - started
    methods: dict[str, Measure] = {
        "ticktensor": ticktensor_method(ds, config),
        "torch_mmap_w0": torch_method(mmap, config, 0),
        "torch_mmap_w2": torch_method(mmap, config, 2),
        "numpy_gather": numpy_method(ds, config, order),
        "get_batch_loop": get_batch_method(ds, config, order),
    }
    samples: dict[str, _Samples] = {name: _Samples() for name in [*methods, "memcpy"]}
    for rep in range(config.repeats):
        for name, measure in methods.items():
            with RssMonitor() as rss:
                count, seconds, first = measure(rep)
            samples[name].rates.append(count / seconds)
            if first is not None:
                samples[name].firsts.append(first)
            samples[name].peak = max(samples[name].peak, rss.peak)
        with RssMonitor() as rss:
            gbps = memcpy_gbps(config.memcpy_mib)
        samples["memcpy"].rates.append(gbps * 1e9 / config.sample_bytes)
        samples["memcpy"].peak = max(samples["memcpy"].peak, rss.peak)
    rows = [
        BenchRow(
            name=name,
            samples_per_s=statistics.median(s.rates),
            gb_per_s=statistics.median(s.rates) * config.sample_bytes / 1e9,
            first_batch_s=statistics.median(s.firsts) if s.firsts else None,
            peak_rss_mb=s.peak / 2**20,
        )
        for name, s in samples.items()
    ]
    say("")
    say(report(rows))
    say(
        f"# of ticktensor's first batch, {order_s:.3f} s is computing the epoch's uniform order"
        f" over {len(ds):,} samples (measured alone; the loader starts it when built)"
    )
    say(f"# load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return rows


def report(rows: Sequence[BenchRow]) -> str:
    """The table and the ratios against each baseline, with the goals."""
    lines = [f"{'method':<16}{'samples/s':>14}{'GB/s':>8}{'first batch s':>15}{'peak RSS MB':>13}"]
    for r in rows:
        first = "" if r.first_batch_s is None else f"{r.first_batch_s:.3f}"
        shown = f"({r.samples_per_s:,.0f})" if r.name == "memcpy" else f"{r.samples_per_s:,.0f}"
        lines.append(f"{r.name:<16}{shown:>14}{r.gb_per_s:>8.2f}{first:>15}{r.peak_rss_mb:>13,.0f}")
    lines.append("(memcpy: np.copyto bandwidth, shown as the samples/s it would carry;")
    lines.append(" get_batch_loop: the dataset's native gather in a bare loop, no loader)")
    by = {r.name: r for r in rows}
    tt = by["ticktensor"]
    goals = {"torch_mmap_w0": 8.0, "torch_mmap_w2": 8.0, "numpy_gather": 0.8, "memcpy": None}
    goals |= {"get_batch_loop": None}
    lines.append("")
    for name, goal in goals.items():
        ratio = tt.samples_per_s / by[name].samples_per_s
        verdict = (
            ""
            if goal is None
            else f"  (goal >= {goal:g}x: {'met' if ratio >= goal else 'NOT met'})"
        )
        lines.append(f"ticktensor / {name:<14}{ratio:>8.2f}x{verdict}")
    if tt.first_batch_s is not None:
        met = "met" if tt.first_batch_s < 0.5 else "NOT met"
        lines.append(f"ticktensor first batch {tt.first_batch_s:.3f} s  (goal < 0.5 s: {met})")
    return "\n".join(lines)


def cpu_model() -> str:
    """The CPU's model name."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def write_json(rows: Sequence[BenchRow], path: Path) -> None:
    """The rows as a JSON list of objects."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")


def execute(args: argparse.Namespace) -> int:
    """Run the benchmark the parsed options describe (and write ``--json``)."""
    config = config_from_args(args)
    options = [f"--{name.replace('_', '-')}={getattr(config, name)}" for name in _OPTIONS]
    if args.json is not None:
        options.append(f"--json={args.json}")
    print(f"# command (every option spelled out): ticktensor bench loader {shlex.join(options)}")
    rows = run(config)
    if args.json is not None:
        write_json(rows, args.json)
        print(f"# rows written to {args.json}")
    return 0
