"""Window gather throughput on workload D1: native kernel against memcpy and numpy baselines.

Every figure comes from one run, so the ratios at the end compare like with like. Run::

    python benchmarks/gather.py                 # D1: 16 x 1,000,000 rows x 32 features (2 GB)
    python benchmarks/gather.py --rows 100000   # smaller, for a quick look
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ticktensor.bench.machine import cpu_model
from ticktensor.kernels import ThreadPool, WindowGather

Batch = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrays", type=int, default=16, help="source arrays (symbols)")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per array")
    parser.add_argument("--features", type=int, default=32, help="float32 features per row")
    parser.add_argument("--window", type=int, default=128, help="rows per sample")
    parser.add_argument("--batch", type=int, default=256, help="samples per batch")
    parser.add_argument(
        "--threads", type=int, nargs="+", default=[1, 2], help="native pool sizes to measure"
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one repetition")
    parser.add_argument("--repeats", type=int, default=5, help="repetitions; the median counts")
    parser.add_argument("--memcpy-mib", type=int, default=256, help="memcpy buffer size")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.rows < args.window:
        parser.error(f"--rows {args.rows} is shorter than --window {args.window}")
    return args


def make_batches(args: argparse.Namespace, rng: np.random.Generator, count: int) -> list[Batch]:
    """Uniformly random arrays and valid starts; drawn ahead so drawing is not timed."""
    return [
        (
            rng.integers(0, args.arrays, size=args.batch, dtype=np.int64),
            rng.integers(0, args.rows - args.window + 1, size=args.batch, dtype=np.int64),
        )
        for _ in range(count)
    ]


def rate(run_batch: Callable[[Batch], object], batches: list[Batch], seconds: float) -> float:
    """Batches per second over one repetition of about ``seconds``."""
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for batch in batches:
            run_batch(batch)
        done += len(batches)
        now = time.perf_counter()
        if now >= deadline:
            return done / (now - start)


def median_rates(
    methods: dict[str, Callable[[Batch], object]], batches: list[Batch], args: argparse.Namespace
) -> dict[str, float]:
    """Median batches/s of each method; repetitions take turns so load spikes hit all alike."""
    for run_batch in methods.values():
        rate(run_batch, batches[:4], 0.2)  # warm up: caches, page tables, pool threads
    samples: dict[str, list[float]] = {label: [] for label in methods}
    for _ in range(args.repeats):
        for label, run_batch in methods.items():
            samples[label].append(rate(run_batch, batches, args.seconds))
    return {label: statistics.median(values) for label, values in samples.items()}


def memcpy_gbps(mib: int, repeats: int) -> float:
    """Best large-buffer copy rate (bytes copied per second), the bandwidth ceiling."""
    src = np.ones(mib * 2**20 // 4, dtype=np.float32)
    dst = np.zeros_like(src)
    best = float("inf")
    for _ in range(max(repeats, 5)):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return src.nbytes / best / 1e9


def main() -> None:
    args = parse_args()
    rng = np.random.default_rng(args.seed)
    window, n_features = args.window, args.features
    batch_bytes = args.batch * window * n_features * 4
    data_bytes = args.arrays * args.rows * n_features * 4

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"# {datetime.date.today().isoformat()}  cpu: {cpu_model()}  cores: {os.cpu_count()}"
        f"  load average before the run: {load}"
    )
    print(f"# command: {shlex.join([Path(sys.executable).name, *sys.argv])}")
    print(
        f"# data: {args.arrays} arrays x {args.rows:,} rows x {n_features} float32 features "
        f"({data_bytes / 2**30:.2f} GiB in RAM); W={window}, B={args.batch}, "
        f"{batch_bytes / 2**20:.1f} MiB delivered per batch"
    )
    print(
        f"# rates: median of {args.repeats} repetitions of ~{args.seconds:g} s per method after"
        f" warm-up, methods taking turns; memcpy: best of several {args.memcpy_mib} MiB copies"
    )

    # One stacked allocation: numpy's fancy-index gather needs it, the others use row views.
    stacked = np.empty((args.arrays, args.rows, n_features), dtype=np.float32)
    for i in range(args.arrays):
        stacked[i] = rng.standard_normal((args.rows, n_features), dtype=np.float32)
    sources = [stacked[i] for i in range(args.arrays)]
    batches = make_batches(args, rng, 64)
    out = np.empty((args.batch, window, n_features), dtype=np.float32)

    def numpy_loop(batch: Batch) -> None:
        ids, starts = batch
        for i in range(len(ids)):
            start = starts[i]
            out[i] = sources[ids[i]][start : start + window]

    flat = stacked.reshape(-1, n_features)
    offsets = np.arange(window, dtype=np.int64)
    flat_out = out.reshape(-1, n_features)

    def numpy_take(batch: Batch) -> None:
        ids, starts = batch
        rows = ((ids * args.rows + starts)[:, None] + offsets).ravel()
        np.take(flat, rows, axis=0, out=flat_out)

    methods: dict[str, Callable[[Batch], object]] = {
        "numpy loop": numpy_loop,
        "numpy take (fancy index)": numpy_take,
    }
    numpy_loop(batches[0])
    expected = out.copy()
    for n_threads in args.threads:
        gather = WindowGather(sources, ThreadPool(n_threads))
        if not np.array_equal(gather.gather(*batches[0], window), expected):
            sys.exit(f"native gather with {n_threads} threads disagrees with the numpy loop")

        def native(batch: Batch, gather: WindowGather = gather) -> None:
            gather.gather(batch[0], batch[1], window, out=out)

        methods[f"native, {n_threads} thread{'s' if n_threads > 1 else ''}"] = native

    results = {"memcpy (np.copyto)": memcpy_gbps(args.memcpy_mib, args.repeats)}
    for label, batches_per_s in median_rates(methods, batches, args).items():
        results[label] = batches_per_s * batch_bytes / 1e9

    print()
    print(f"{'method':<28}{'GB/s':>8}{'samples/s':>14}")
    samples_per_gb = 1e9 / (batch_bytes / args.batch)
    for label, gbps in results.items():
        samples = "" if label.startswith("memcpy") else f"{gbps * samples_per_gb:,.0f}"
        print(f"{label:<28}{gbps:>8.2f}{samples:>14}")

    print()
    loop, memcpy = results["numpy loop"], results["memcpy (np.copyto)"]
    take = results["numpy take (fancy index)"]
    for label, gbps in results.items():
        if label.startswith("native"):
            print(
                f"{label:<28}{gbps / loop:>6.2f}x numpy loop  {gbps / take:>6.2f}x numpy take"
                f"  {gbps / memcpy:>6.2f}x memcpy"
            )


if __name__ == "__main__":
    main()
