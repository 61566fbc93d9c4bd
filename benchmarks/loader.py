"""Loader throughput on workload D1: the same as ``ticktensor bench loader`` (options alike).

Every figure comes from one run, so the ratios compare like with like. Run::

    python benchmarks/loader.py                          # D1: 16 x 1,000,000 rows x 32 features
    python benchmarks/loader.py --quick                  # 250,000 rows, 0.5 s x 3
    python benchmarks/loader.py --json out.json --markdown
"""

from __future__ import annotations

import sys

from ticktensor.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", "loader", *sys.argv[1:]]))
