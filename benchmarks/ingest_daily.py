"""Daily bars: twenty years of one symbol's OHLCV, partitioned by day and by ``auto``.

Prints one row per partition, measured in the same run: the ingest's seconds (wall and
CPU of this process), the packs and files the store holds, the time a fresh process takes
to open the store and list its packs, and the append of one more day (a whole ingest job:
the first of ``--appends`` days appended one after the other, a day's job each, and the
best of them) and the rewrite of the partition it touches by the store alone (its table,
its pack, a commit), each against two references, the best of 5 each: a zstd Parquet
write of that partition's rows (events and features) to memory, and the same two Parquet
files written to a folder on the store's filesystem and made durable (each file fsynced,
then the folder once), what a Parquet-based store that survives a power loss pays::

    python benchmarks/ingest_daily.py                  # 2005-01-03 .. 2024-12-31
    python benchmarks/ingest_daily.py --years 5 --json out.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ticktensor.ingest import IngestOptions, ingest
from ticktensor.ingest.readers import ReadOptions
from ticktensor.schemas import EventKind
from ticktensor.store import Store

DAY_NS = 86_400 * 10**9
OPEN = (
    "import sys, time; from ticktensor.store import Store; t = time.perf_counter(); "
    "v = Store.open(sys.argv[1]).version(); n = len(v.packs); "
    "print(time.perf_counter() - t)"
)


def trading_days(first: date, last: date, seed: int = 7) -> list[date]:
    """Weekdays without about nine holidays a year (a stock's trading calendar)."""
    rng = np.random.default_rng(seed)
    days, d = [], first
    while d <= last:
        if d.weekday() < 5 and rng.random() > 9 / 261:
            days.append(d)
        d += timedelta(days=1)
    return days


def write_bars(path: Path, days: list[date], seed: int = 7) -> None:
    """One row a day: a random walk's OHLCV, timestamps in ns (a vendor's daily file)."""
    rng = np.random.default_rng(seed)
    close = 50.0 * np.exp(np.cumsum(rng.normal(0, 0.015, len(days))))
    lines = ["ts_event,symbol,open,high,low,close,volume\n"]
    for d, c in zip(days, close.tolist(), strict=True):
        ts = int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()) * 10**9
        lines.append(f"{ts},SPY,{c * 0.998:.4f},{c * 1.01:.4f},{c * 0.99:.4f},{c:.4f},1000000\n")
    path.write_text("".join(lines))


def files_in(root: Path) -> int:
    return sum(len(names) for _, _, names in os.walk(root))


def open_seconds(store: Path) -> float:
    """Opening the store and listing its packs in a fresh process (no warm caches)."""
    out = subprocess.run(
        [sys.executable, "-c", OPEN, str(store)], check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip())


def parquet_write_seconds(
    store: Path, session: str, scratch: Path, repeat: int = 5
) -> tuple[float, float]:
    """The best of ``repeat`` Parquet writes (zstd) of the partition's rows, its events
    table and its feature rows: to memory, and as two files in a folder of ``scratch``
    made durable (each file fsynced, then the folder once; a new folder per turn, made
    before the clock starts, as a store's partition folder is there already)."""
    v = Store.open(str(store)).version()
    events = v.read_table(next(t for t in v.tables if t.session == session))
    pack = v.read_pack(v.pack(session))
    features = pa.table(
        {"ts": pack.ts, **{f"f{i}": pack.values[:, i] for i in range(pack.values.shape[1])}}
    )
    memory = durable = float("inf")
    for turn in range(repeat):
        t0 = time.perf_counter()
        for table in (events, features):
            pq.write_table(table, io.BytesIO(), compression="zstd")
        memory = min(memory, time.perf_counter() - t0)
        folder = scratch / f"parquet-{session}-{turn}"
        folder.mkdir()
        t0 = time.perf_counter()
        for name, table in (("events", events), ("features", features)):
            with open(folder / f"{name}.parquet", "wb") as f:
                pq.write_table(table, f, compression="zstd")
                f.flush()
                os.fsync(f.fileno())
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        durable = min(durable, time.perf_counter() - t0)
    return memory, durable


def rewrite_seconds(store: Path, session: str, scratch: Path, repeat: int = 5) -> float:
    """The best of ``repeat`` rewrites of the partition by the store alone, as an append
    does it: its events table and its pack written again, and a commit (into a scratch
    store, so that each write is a new one)."""
    v = Store.open(str(store)).version()
    record = v.pack(session)
    events = v.read_table(next(t for t in v.tables if t.session == session))
    pack = v.read_pack(record)
    best = float("inf")
    for turn in range(repeat):
        target = Store.create(str(scratch / f"rewrite-{session}-{turn}"))
        t0 = time.perf_counter()
        table = target.write_table(kind="ohlcv", symbol="*", session=session, table=events)
        written = target.write_pack(
            session=session,
            symbols=pack.symbols,
            offsets=pack.offsets,
            ts=pack.ts,
            values=pack.values,
            feature_names=record.feature_names,
            labels=pack.labels,
            label_names=record.label_names,
        )
        target.commit(tables=[table], packs=[written], message="rewrite")
        best = min(best, time.perf_counter() - t0)
    return best


def run_one(work: Path, partition: str, history: Path, days: list[Path]) -> dict[str, Any]:
    """Ingest ``history`` into a new store, then each of ``days`` (one day's file each)."""
    store = work / f"store-{partition}"
    read = ReadOptions(kind=EventKind.OHLCV, interval_ns=DAY_NS)
    options = IngestOptions(read=read, partition=partition)  # type: ignore[arg-type]
    t0, cpu0 = time.perf_counter(), time.process_time()
    first = ingest([str(history)], str(store), options, progress=False)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    objects = files_in(store)
    opened = open_seconds(store)
    appends, appended = [], []
    for day in days:
        t0 = time.perf_counter()
        appended.append(ingest([str(day)], str(store), options, progress=False))
        appends.append(time.perf_counter() - t0)
    append = min(appends)
    session = max(p.session for p in Store.open(str(store)).version().packs)
    write, durable = parquet_write_seconds(store, session, work)
    rewrite = rewrite_seconds(store, session, work)
    return {
        "partition": partition,
        "chosen": first.partition,
        "rows": first.rows_stored,
        "ingest_s": seconds,
        "ingest_cpu_s": cpu,
        "packs": len(first.version.packs),
        "objects": objects,
        "open_s": opened,
        "append_first_s": appends[0],
        "append_s": append,
        "appends_s": appends,
        "append_rows": [a.rows_stored for a in appended],
        "append_partition": session,
        "parquet_write_s": write,
        "parquet_durable_s": durable,
        "append_first_vs_parquet": appends[0] / write,
        "append_vs_parquet": append / write,
        "append_vs_durable": append / durable,
        "rewrite_s": rewrite,
        "rewrite_vs_parquet": rewrite / write,
        "rewrite_vs_durable": rewrite / durable,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--years", type=int, default=20)
    p.add_argument(
        "--appends", type=int, default=5, help="days appended after the history, a job each (5)"
    )
    p.add_argument(
        "--partitions", default="day,auto", help="comma-separated partitions to run (day,auto)"
    )
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    days = trading_days(date(2025 - args.years, 1, 3), date(2024, 12, 31))
    with tempfile.TemporaryDirectory(prefix="tt-daily-") as tmp:
        work = Path(tmp)
        write_bars(work / "all.csv", days)
        text = (work / "all.csv").read_text().splitlines(keepends=True)
        last = len(text) - args.appends
        (work / "history.csv").write_text("".join(text[:last]))
        appended = [work / f"day-{i}.csv" for i in range(args.appends)]
        for path, line in zip(appended, text[last:], strict=True):
            path.write_text(text[0] + line)
        rows = [
            run_one(work, part, work / "history.csv", appended)
            for part in args.partitions.split(",")
        ]
    print(
        f"{'partition':<11} {'rows':>6} {'ingest s':>9} {'cpu s':>6} {'packs':>6} {'objects':>8} "
        f"{'open s':>7} {'append 1st s':>13} {'append s':>9} {'rewrite s':>10} {'parquet s':>10} "
        f"{'durable s':>10} {'1st/parquet':>12} {'append/parquet':>15} {'append/durable':>15} "
        f"{'rewrite/parquet':>16} {'rewrite/durable':>16}"
    )
    for r in rows:
        name = r["partition"] + (f" ({r['chosen']})" if r["partition"] == "auto" else "")
        print(
            f"{name:<11} {r['rows']:>6,} {r['ingest_s']:>9.2f} {r['ingest_cpu_s']:>6.2f} "
            f"{r['packs']:>6,} "
            f"{r['objects']:>8,} {r['open_s']:>7.3f} {r['append_first_s']:>13.3f} "
            f"{r['append_s']:>9.3f} {r['rewrite_s']:>10.4f} {r['parquet_write_s']:>10.4f} "
            f"{r['parquet_durable_s']:>10.4f} "
            f"{r['append_first_vs_parquet']:>11.1f}x {r['append_vs_parquet']:>14.1f}x "
            f"{r['append_vs_durable']:>14.1f}x "
            f"{r['rewrite_vs_parquet']:>15.1f}x {r['rewrite_vs_durable']:>15.1f}x"
        )
    print(
        f"(append s: the best of {args.appends} days appended one after the other, a job "
        "each; append 1st s: the first of them; parquet s: pyarrow.parquet.write_table of "
        "the last partition's events and feature rows to memory, zstd, the best of 5; "
        "durable s: the same two tables written as Parquet files to a folder on the same "
        "filesystem, each file fsynced, then the folder, the best of 5)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
