"""Ingest throughput: CSV trades -> store, against pyarrow and pandas, in one run.

The same as ``ticktensor bench ingest`` (code in ``ticktensor.bench.ingest``)::

    python benchmarks/ingest.py                        # 10,000,000 trade rows (about 0.5 GB CSV)
    python benchmarks/ingest.py --ingest-rows 1000000 --json out.json
"""

from __future__ import annotations

import sys

from ticktensor.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", "ingest", *sys.argv[1:]]))
