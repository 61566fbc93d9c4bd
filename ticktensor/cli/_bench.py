"""``ticktensor bench loader``: loader throughput against baselines and limits, in one run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["add_loader_arguments", "register"]


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="measure throughput against baselines", description=__doc__)
    benches = p.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    loader = benches.add_parser(
        "loader",
        help="ticktensor.DataLoader vs torch over mmap, a numpy gather and memcpy",
        description="Samples/s, GB/s, time to first batch and peak RSS of ticktensor.DataLoader "
        "and its baselines, with ratios from the same run. Workload D1 by default.",
    )
    add_loader_arguments(loader)
    loader.set_defaults(run=run_loader)


def add_loader_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the loader benchmark; ``None`` means the workload D1 default."""
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    parser.add_argument("--symbols", type=int, help="series, one per symbol (D1: 16)")
    parser.add_argument("--rows", type=int, help="rows per symbol (D1: 1,000,000)")
    parser.add_argument("--features", type=int, help="float32 features per row (D1: 32)")
    parser.add_argument("--window", type=int, help="rows per sample (D1: 128)")
    parser.add_argument("--batch", type=int, help="samples per batch (D1: 256)")
    parser.add_argument("--seconds", type=float, help="length of one repetition (2)")
    parser.add_argument("--repeats", type=int, help="repetitions, the median counts (5)")
    parser.add_argument(
        "--cache-dir", type=Path, help="where the data is written once (build/bench-d1)"
    )
    parser.add_argument("--seed", type=int, help="seed of the data and the orders (0)")


def run_loader(args: argparse.Namespace) -> int:
    # Imported here: the benchmark needs torch, which the other commands must not load.
    from ticktensor.loaders import _bench

    return _bench.execute(args)
