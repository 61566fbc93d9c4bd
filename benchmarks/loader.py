"""Loader throughput on workload D1: ticktensor.DataLoader vs torch over mmap, numpy and memcpy.

The same as ``ticktensor bench loader``; every figure comes from one run, so the ratios
compare like with like. Run::

    python benchmarks/loader.py                        # D1: 16 x 1,000,000 rows x 32 features
    python benchmarks/loader.py --rows 100000 --seconds 0.5   # a quick look
"""

from __future__ import annotations

import argparse

from ticktensor.cli._bench import add_loader_arguments
from ticktensor.loaders._bench import execute


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_loader_arguments(parser)
    return execute(parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
