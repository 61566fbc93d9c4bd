"""This checkout's ``ticktensor.DataLoader`` against another revision's, taking turns, one process.

The other revision's ``loaders/dataloader.py`` is loaded as a module of this package (it
must import only modules that still exist here), so both loaders gather with the same
native code and differ only in their Python: the comparison a change of the loader's
facade needs. Fresh loaders per repetition, uniform order, batches of 256, samples/s
after each loader's first batch; medians and their ratio::

    git show f4daa64:loaders/dataloader.py > /tmp/dataloader_before.py
    python benchmarks/dataloader_ab.py /tmp/dataloader_before.py --store STORE
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from ticktensor.kernels import ThreadPool
from ticktensor.loaders import FastOptions, UniformOrder, WindowDataset
from ticktensor.loaders.dataloader import DataLoader
from ticktensor.store import Store


def _other_loader(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("ticktensor.loaders._dataloader_ab", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.DataLoader


def _rate(make: Callable[[], Any], seconds: float) -> float:
    loader = make()
    batches = iter(loader)
    next(batches)
    samples, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        try:
            x, _ = next(batches)
        except StopIteration:
            batches = iter(loader)
            continue
        samples += int(x.shape[0])
    return samples / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", help="another revision's loaders/dataloader.py")
    parser.add_argument("--store", required=True, help="a store (e.g. bench loader's store-none)")
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    other = _other_loader(args.other)
    version = Store.open(args.store).version()
    ds = WindowDataset(version, 128, pool=ThreadPool(2), threads=2)
    makers: dict[str, Callable[[], Any]] = {
        "other": lambda: other(ds, batch_size=256, order=UniformOrder(0)),
        "this": lambda: DataLoader(ds, batch_size=256, fast=FastOptions(order=UniformOrder(0))),
    }
    for make in makers.values():
        _rate(make, args.seconds / 2)  # every chunk mapped before the clock runs
    runs: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(args.repeats):
        for name, make in makers.items():
            runs[name].append(_rate(make, args.seconds))
    for name, rates in runs.items():
        print(
            f"{name:6s} median {statistics.median(rates):12,.0f} samples/s  "
            f"runs {', '.join(f'{r:,.0f}' for r in rates)}"
        )
    ratio = statistics.median(runs["this"]) / statistics.median(runs["other"])
    print(f"this / other: {ratio:.3f}")


if __name__ == "__main__":
    main()
