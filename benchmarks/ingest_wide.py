"""Ingest of a wide universe: many small (symbol, day) segments, against pyarrow and pandas.

A day of trades over hundreds of symbols makes hundreds of segments of a few hundred
rows each, so the cost per segment shows, where ``bench ingest`` (8 symbols, 2 days)
measures the cost per row. Every figure comes from one run::

    python benchmarks/ingest_wide.py                   # 200,000 rows, 500 symbols, 1 day
    python benchmarks/ingest_wide.py --symbols 2000
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ticktensor.bench.ingest import run_ingest
from ticktensor.bench.results import Results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="CSV trade rows")
    parser.add_argument("--symbols", type=int, default=500, help="symbols (one segment each)")
    parser.add_argument("--repeats", type=int, default=3, help="turns; the median counts")
    parser.add_argument(
        "--work", type=Path, default=Path("build/bench-ingest-wide"), help="CSV and outputs"
    )
    args = parser.parse_args()
    # The generated CSV is named by its rows: a folder per universe keeps them apart.
    work = args.work / f"{args.symbols}-symbols"
    results = Results(meta={})
    run_ingest(args.rows, results, symbols=args.symbols, days=1, work=work, repeats=args.repeats)
    for row in results.ingest:
        print(
            f"{row['name']:<22} {row['rows_per_s']:>12,.0f} rows/s  median {row['seconds']:.2f} s"
            f"  runs {row['runs_seconds']}  peak RSS {row['peak_rss_mb']:.0f} MB"
            f"  ticktensor / it {row['ticktensor_over']:.3f}x"
        )


if __name__ == "__main__":
    main()
