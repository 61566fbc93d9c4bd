"""``bench ingest``: CSV trades -> store, against pyarrow and pandas baselines, in one run.

Each method runs in its own process so that its peak RSS is its own; the report gives
rows/s, MB/s (CSV bytes per second), peak RSS and the ratios of ticktensor to each
baseline.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ticktensor.errors import TickTensorError

from .results import Results

__all__ = ["generate", "run_ingest"]


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
    """``ticktensor ingest``'s job on the CSV: validated, sorted, features, one version."""
    from ticktensor.ingest import IngestOptions, ingest
    from ticktensor.ingest.readers import ReadOptions
    from ticktensor.schemas import EventKind

    opts = IngestOptions(format="csv", read=ReadOptions(kind=EventKind.TRADES), workers=workers)
    result = ingest([str(csv)], str(out), opts, progress=False)
    return result.rows_stored


def run_pyarrow(csv: Path, out: Path) -> int:
    """Baseline: ``pyarrow.csv.read_csv``, then one zstd Parquet file."""
    import pyarrow.parquet as pq

    table = pacsv.read_csv(csv)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out / "trades.parquet", compression="zstd")
    return int(table.num_rows)


def run_pandas(csv: Path, out: Path) -> int:
    """Baseline: ``pandas.read_csv``, then one zarr array per numeric column."""
    import pandas as pd  # type: ignore[import-untyped]
    import zarr

    df = pd.read_csv(csv)
    group = zarr.open_group(str(out), mode="w")
    for col in ("ts_event", "price", "size", "side"):
        values = df[col].to_numpy()
        group.create_array(
            col, shape=values.shape, dtype=values.dtype, chunks=(min(len(values), 1 << 20),)
        )[...] = values
    return len(df)


BASELINES = ("pyarrow_csv_parquet", "pandas_zarr")
"""The methods ticktensor's ingest is compared with."""

WARMUP_ROWS = 1_000
"""Rows of the untimed first run each method makes in its process."""


def child(method: str, csv: Path, out: Path, workers: int) -> None:
    """Run ``method`` in this (child) process; print its rows and seconds as JSON.

    Every method first runs once, untimed, on the CSV's first :data:`WARMUP_ROWS` rows:
    the clock then measures converting, not importing its libraries (polars, zarr and
    pandas take up to 0.8 s, while pyarrow is imported by this module before any clock)
    or their first-call set-up.
    """
    run: Callable[[Path, Path], int] = {
        "ticktensor_csv": lambda src, dst: run_ticktensor(src, dst, workers),
        "pyarrow_csv_parquet": run_pyarrow,
        "pandas_zarr": run_pandas,
    }[method]
    small, small_out = out.with_name(f"{out.name}-warmup.csv"), out.with_name(f"{out.name}-warmup")
    try:
        with csv.open("rb") as source, small.open("wb") as head:
            head.writelines(itertools.islice(source, WARMUP_ROWS + 1))  # and the header
        run(small, small_out)
    finally:
        small.unlink(missing_ok=True)
        shutil.rmtree(small_out, ignore_errors=True)
    t0 = time.perf_counter()
    rows = run(csv, out)
    print(json.dumps({"rows": rows, "seconds": time.perf_counter() - t0}))


def measure(method: str, csv: Path, work: Path, workers: int) -> dict[str, Any]:
    """Run ``method`` in a child process: rows/s, CSV MB/s and the child's peak RSS."""
    out = work / method
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ticktensor.bench.ingest",
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
    output = ""
    if proc.stdout is not None:
        with proc.stdout:
            output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise TickTensorError(f"ingest benchmark: {method} failed with exit code {proc.returncode}")
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


def run_ingest(
    rows: int,
    results: Results,
    *,
    symbols: int = 8,
    days: int = 2,
    workers: int | None = None,
    work: Path = Path("build/bench-ingest"),
    baselines: Sequence[str] = BASELINES,
    repeats: int = 3,
    say: Callable[[str], None] = print,
) -> None:
    """Generate (once) a CSV of ``rows`` trades, ingest it three ways; fill ``results.ingest``.

    The methods take turns ``repeats`` times; each one's row is its median run (by
    seconds), with the largest peak RSS of its runs: on a shared machine a single run of
    each swung the ratios by 30%.
    """
    workers = workers or os.cpu_count() or 1
    work.mkdir(parents=True, exist_ok=True)
    csv = work / f"trades-{rows}-v2.csv"
    if not csv.exists():
        t0 = time.perf_counter()
        generate(csv, rows, symbols, days)
        say(
            f"# generated {csv} ({csv.stat().st_size / 1e6:,.0f} MB) "
            f"in {time.perf_counter() - t0:.1f} s"
        )
    unknown = sorted(set(baselines) - set(BASELINES))
    if unknown:
        raise TickTensorError(f"ingest baselines: unknown {unknown}, expected some of {BASELINES}")
    methods = ["ticktensor_csv", *(b for b in BASELINES if b in baselines)]
    say(
        f"# ingest: {rows:,} CSV trade rows ({csv.stat().st_size / 1e6:,.0f} MB), "
        f"{workers} workers: {', '.join(methods)}; {max(1, repeats)} turns, median run"
    )
    # Outputs go to a folder of this run: two runs at once (a bench all and a bench
    # ingest) would otherwise delete each other's stores mid-write. The CSV is shared.
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    try:
        for _ in range(max(1, repeats)):
            for m in methods:
                runs[m].append(measure(m, csv, scratch, workers))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    measured = []
    for m in methods:
        by_time = sorted(runs[m], key=lambda r: float(r["seconds"]))
        row = dict(by_time[len(by_time) // 2])
        row["peak_rss_mb"] = max(float(r["peak_rss_mb"]) for r in runs[m])
        row["runs_seconds"] = [round(float(r["seconds"]), 3) for r in runs[m]]
        measured.append(row)
    ours = measured[0]
    for r in measured:
        r["ticktensor_over"] = float(ours["rows_per_s"]) / float(r["rows_per_s"])
    results.ingest.extend(measured)


def main(argv: list[str] | None = None) -> int:
    """The child side: run one method and print its rows and seconds as JSON."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--child", required=True)
    ap.add_argument("--csv", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workers", type=int, required=True)
    args = ap.parse_args(argv)
    child(args.child, args.csv, args.out, args.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
