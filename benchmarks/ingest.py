"""Ingest throughput: CSV trades -> store, against pyarrow and pandas baselines, one run.

    python benchmarks/ingest.py                  # 10,000,000 trade rows (about 0.5 GB CSV)
    python benchmarks/ingest.py --rows 1000000 --json out.json

Each method runs in its own process so that its peak RSS is its own. Prints rows/s,
MB/s (CSV bytes per second), peak RSS and the ratios of ticktensor to each baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

T0 = 1_704_205_800_000_000_000  # 2024-01-02 14:30 UTC


def generate(path: Path, rows: int, symbols: int, days: int, seed: int = 0) -> None:
    """A trades CSV: ts_event (ns), symbol, price, size, side; in time order, as vendors ship."""
    rng = np.random.default_rng(seed)
    per_day = rows // days
    with pacsv.CSVWriter(
        path,
        pa.schema(
            [
                ("ts_event", pa.int64()),
                ("symbol", pa.string()),
                ("price", pa.float64()),
                ("size", pa.int64()),
                ("side", pa.int8()),
            ]
        ),
        write_options=pacsv.WriteOptions(quoting_style="none"),
    ) as writer:
        written = 0
        for day in range(days):
            n_day = per_day if day < days - 1 else rows - written
            start = T0 + day * 86_400 * 10**9
            day_ts = start + np.sort(rng.integers(0, 6 * 3600 * 10**9, n_day))  # time order
            for lo in range(0, n_day, 1_000_000):
                n = min(1_000_000, n_day - lo)
                ts = day_ts[lo : lo + n]
                sym = rng.integers(0, symbols, n)
                price = np.round(100 + np.cumsum(rng.normal(0, 0.01, n)), 2) + sym
                writer.write_table(
                    pa.table(
                        {
                            "ts_event": ts,
                            "symbol": pa.array([f"SYM{i:03d}" for i in range(symbols)]).take(sym),
                            "price": price,
                            "size": rng.integers(1, 500, n),
                            "side": np.where(rng.random(n) < 0.5, 1, -1).astype(np.int8),
                        }
                    )
                )
            written += n_day


def run_ticktensor(csv: Path, out: Path, workers: int) -> int:
    from ticktensor.ingest._job import IngestOptions, ingest
    from ticktensor.ingest.readers._base import ReadOptions
    from ticktensor.schemas import EventKind

    opts = IngestOptions(format="csv", read=ReadOptions(kind=EventKind.TRADES), workers=workers)
    result = ingest([str(csv)], str(out), opts, progress=False)
    return result.rows_stored


def run_pyarrow(csv: Path, out: Path) -> int:
    import pyarrow.parquet as pq

    table = pacsv.read_csv(csv)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out / "trades.parquet", compression="zstd")
    return table.num_rows


def run_pandas(csv: Path, out: Path) -> int:
    import pandas as pd
    import zarr

    df = pd.read_csv(csv)
    group = zarr.open_group(str(out), mode="w")
    for col in ("ts_event", "price", "size", "side"):
        values = df[col].to_numpy()
        group.create_array(
            col, shape=values.shape, dtype=values.dtype, chunks=(min(len(values), 1 << 20),)
        )[...] = values
    return len(df)


def child(method: str, csv: Path, out: Path, workers: int) -> None:
    t0 = time.perf_counter()
    rows = {
        "ticktensor_csv": lambda: run_ticktensor(csv, out, workers),
        "pyarrow_csv_parquet": lambda: run_pyarrow(csv, out),
        "pandas_zarr": lambda: run_pandas(csv, out),
    }[method]()
    print(json.dumps({"rows": rows, "seconds": time.perf_counter() - t0}))


def measure(method: str, csv: Path, work: Path, workers: int) -> dict[str, float | str]:
    out = work / method
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--child",
            method,
            "--csv",
            str(csv),
            "--out",
            str(out),
            "--workers",
            str(workers),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{method} failed with exit code {proc.returncode}")
    # wait4's ru_maxrss is the largest resident set of the child and of the workers it
    # reaped (the ingest pool's processes), not their sum.
    res = json.loads(output.strip().splitlines()[-1])
    mb = csv.stat().st_size / 1e6
    return {
        "name": method,
        "rows": res["rows"],
        "seconds": res["seconds"],
        "rows_per_s": res["rows"] / res["seconds"],
        "mb_per_s": mb / res["seconds"],
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--symbols", type=int, default=8)
    ap.add_argument("--days", type=int, default=2)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--work", type=Path, default=Path("build/bench-ingest"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--skip-pandas", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--csv", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.csv, args.out, args.workers)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    csv = args.work / f"trades-{args.rows}-v2.csv"
    if not csv.exists():
        t0 = time.perf_counter()
        generate(csv, args.rows, args.symbols, args.days)
        mb = csv.stat().st_size / 1e6
        print(f"generated {csv} ({mb:,.0f} MB) in {time.perf_counter() - t0:.1f} s")
    methods = ["ticktensor_csv", "pyarrow_csv_parquet"] + (
        [] if args.skip_pandas else ["pandas_zarr"]
    )
    rows = [measure(m, csv, args.work, args.workers) for m in methods]
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{args.rows:,} rows, {csv.stat().st_size / 1e6:,.0f} MB CSV, workers={args.workers}"
    )
    print(f"{'method':<22}{'rows/s':>14}{'MB/s':>10}{'seconds':>10}{'peak RSS MB':>14}")
    for r in rows:
        print(
            f"{r['name']:<22}{r['rows_per_s']:>14,.0f}{r['mb_per_s']:>10,.1f}"
            f"{r['seconds']:>10.2f}{r['peak_rss_mb']:>14,.0f}"
        )
    ours = rows[0]
    for r in rows[1:]:
        print(f"ticktensor / {r['name']}: {ours['rows_per_s'] / r['rows_per_s']:.2f}x")
    print(
        f"ticktensor peak RSS / CSV size: {ours['peak_rss_mb'] / (csv.stat().st_size / 1e6):.2f}x"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
