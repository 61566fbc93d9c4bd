"""The loader's two batch engines side by side, under a consumer that holds the GIL.

Once every chunk is loaded, a pass runs on the native thread (``tt::SamplePrefetcher``);
``FastOptions(engine="python")`` keeps the Python thread. A training loop holds the GIL
for part of each step (Python, optimizer bookkeeping, logging): this script spins in pure
Python for a fixed time per batch and measures both engines, taking turns, in one run::

    python benchmarks/engines.py                 # D1: 16 x 1,000,000 rows x 32 features
    python benchmarks/engines.py --rows 250000   # smaller, for a quick look
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from ticktensor.bench.engine import open_dataset, order_of
from ticktensor.bench.machine import cpu_model
from ticktensor.bench.measure import endless
from ticktensor.bench.workload import Workload, prepare
from ticktensor.loaders import DataLoader, FastOptions
from ticktensor.loaders.dataset import WindowDataset
from ticktensor.store import Codec, Store


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per series")
    parser.add_argument("--threads", type=int, default=2, help="gather threads")
    parser.add_argument(
        "--cache-dir", type=Path, default=Path("build/bench-d1"), help="where the data is made"
    )
    parser.add_argument("--seconds", type=float, default=1.5, help="length of one repetition")
    parser.add_argument("--repeats", type=int, default=4, help="repetitions; the median counts")
    parser.add_argument(
        "--hold-ms",
        type=float,
        nargs="+",
        default=[0.0, 0.2, 0.5, 1.0],
        help="milliseconds the consumer holds the GIL per batch",
    )
    return parser.parse_args()


def hold_gil(ms: float) -> None:
    """Busy pure-Python work for ``ms`` milliseconds (the GIL stays taken)."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def rate(
    ds: WindowDataset, batch: int, native: bool, seed: int, seconds: float, ms: float
) -> float:
    """Samples/s of a fresh loader over ``ds`` (uniform order), after its first batch."""
    engine = "auto" if native else "python"
    loader = DataLoader(
        ds, batch_size=batch, fast=FastOptions(order=order_of("uniform", seed), engine=engine)
    )
    sizes = endless(lambda: loader)  # batch sizes, pass after pass
    next(sizes)
    samples, started = 0, time.perf_counter()
    while (now := time.perf_counter()) - started < seconds:
        samples += next(sizes)
        hold_gil(ms)
    return samples / (now - started)


def main() -> None:
    args = parse_args()
    w = Workload(rows=args.rows, cache_dir=args.cache_dir)
    prepare(w, [Codec.NONE], say=lambda line: None)
    ds = open_dataset(Store.open(str(w.store_dir(Codec.NONE))).version(), w.window, args.threads)
    for _ in iter(
        DataLoader(ds, batch_size=w.batch, fast=FastOptions(order=order_of("uniform", 0)))
    ):
        if ds.cache.complete:  # every chunk loaded: later passes start on the native thread
            break
    print(
        f"# {cpu_model()}; {w.symbols} x {w.rows:,} rows x {w.features} features, W={w.window}, "
        f"B={w.batch}, raw store, uniform order, {args.threads} threads; median of "
        f"{args.repeats} alternating repetitions of {args.seconds:g} s"
    )
    print(
        f"{'GIL held ms/batch':>18} {'python samples/s':>17} {'native samples/s':>17} {'ratio':>6}"
    )
    for ms in args.hold_ms:
        runs: dict[bool, list[float]] = {False: [], True: []}
        for rep in range(args.repeats):
            for native, rates in runs.items():
                rates.append(rate(ds, w.batch, native, rep, args.seconds, ms))
        python, native = (statistics.median(runs[k]) for k in (False, True))
        print(f"{ms:>18g} {python:>17,.0f} {native:>17,.0f} {native / python:>5.2f}x", flush=True)


if __name__ == "__main__":
    main()
