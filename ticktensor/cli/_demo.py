"""``ticktensor demo``: generate a synthetic market, write a store, read it back, summarize.

Runs with no input files: the data is generated in-process (random-walk prices with a
bid/ask spread and microstructure noise, Poisson-like arrivals, integer sizes) for
several symbols and days. Each day is committed as a new store version, the way a
daily conversion job appends. Rerunning with the same options is a no-op.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import replace
from datetime import date
from typing import Any

import numpy as np
import zarr
from tqdm import tqdm

from ticktensor.errors import ValidationError
from ticktensor.ingest import (
    FeatureArrays,
    SyntheticMarket,
    build_features,
    demo_feature_spec,
    generate_day,
)
from ticktensor.kernels import ThreadPool, WindowGather
from ticktensor.schemas import EventKind, FeatureSpec, validate
from ticktensor.store import (
    Codec,
    FeatureStats,
    Layout,
    SegmentRecord,
    Store,
    StoreVersion,
    TableRecord,
)

from ._format import human_bytes
from ._info import format_info, store_info

__all__ = ["register", "run_demo"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="generate data, write a store, read it back", description=__doc__
    )
    p.add_argument("--out", default="build/demo-store", help="store path or fsspec URL")
    p.add_argument("--symbols", type=int, default=4, help="number of symbols (4)")
    p.add_argument("--days", type=int, default=3, help="number of trading days (3)")
    p.add_argument("--quotes-per-day", type=int, default=100_000, help="mean quotes (100000)")
    p.add_argument("--codec", choices=[c.value for c in Codec], default="none")
    p.add_argument("--chunk-rows", type=int, default=32_768)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overwrite", action="store_true", help="delete --out first")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def _stats(features: list[FeatureArrays], period: tuple[int, int]) -> FeatureStats:
    """Mean/std per feature over rows with ts in ``period`` only (the training period)."""
    rows = np.concatenate(
        [f.values[(f.ts >= period[0]) & (f.ts < period[1])] for f in features]
    ).astype(np.float64)
    return FeatureStats(
        features[0].feature_names,
        tuple(rows.mean(axis=0).tolist()),
        tuple(rows.std(axis=0).tolist()),
        rows.shape[0],
        period,
    )


def _write_day(
    store: Store, market: SyntheticMarket, spec: FeatureSpec, symbol: str, day: date
) -> tuple[SegmentRecord, list[TableRecord], FeatureArrays]:
    tables = generate_day(market, symbol, day)
    session = day.isoformat()
    records = []
    for kind, table in tables.items():
        result = validate(table, kind, ts_range=market.session_ns(day))
        if not result.ok:
            result.raise_first(f"synthetic {kind.value} {symbol} {session}")
        records.append(
            store.write_table(kind=kind.value, symbol=symbol, session=session, table=table)
        )
    feats = build_features(tables[EventKind.QUOTES], tables[EventKind.TRADES], spec)
    seg = store.write_segment(
        symbol=symbol,
        session=session,
        ts=feats.ts,
        values=feats.values,
        feature_names=feats.feature_names,
        labels=feats.labels,
        label_names=feats.label_names,
    )
    return seg, records, feats


def _read_back(version: StoreVersion, rng: np.random.Generator) -> dict[str, Any]:
    """Read every segment back, check it bit for bit, then cut a batch of windows."""
    t0 = time.perf_counter()
    sources, nbytes = [], 0
    for seg in version.segments:
        data = version.read_segment(seg, verify=True)  # raises unless bit-identical
        sources.append(data.values)
        nbytes += data.values.nbytes + data.ts.nbytes
    read_s = time.perf_counter() - t0
    first = version.segments[0]
    plain = zarr.open_array(version.file_url(f"{first.path}/values"), mode="r")
    if not np.array_equal(plain[:], sources[0], equal_nan=True):
        raise ValidationError("plain zarr-python read differs from the store reader")

    window, batch = 64, 256
    gather = WindowGather(sources, pool=ThreadPool(2))
    ids = rng.integers(0, len(sources), batch)
    starts = np.array([rng.integers(0, sources[i].shape[0] - window + 1) for i in ids])
    out = gather.gather(ids, starts, window)
    for b in range(batch):  # the native batch against a plain numpy slice
        if not np.array_equal(out[b], sources[ids[b]][starts[b] : starts[b] + window]):
            raise ValidationError(f"window {b} of the native gather differs from numpy")
    return {"read_s": read_s, "read_bytes": nbytes, "batch_shape": list(out.shape)}


def run_demo(args: argparse.Namespace) -> dict[str, Any]:
    """Run the demo job; returns the figures it printed (used by tests)."""
    if args.overwrite and "://" not in args.out:
        shutil.rmtree(args.out, ignore_errors=True)
    market = SyntheticMarket(
        symbols=tuple(f"SYN{chr(ord('A') + i)}" for i in range(args.symbols))
        if args.symbols <= 26
        else tuple(f"SYN{i:03d}" for i in range(args.symbols)),
        n_days=args.days,
        quotes_per_day=float(args.quotes_per_day),
        trades_per_day=float(args.quotes_per_day) / 5,
        seed=args.seed,
    )
    store = Store.create(
        args.out, layout=Layout(codec=args.codec, chunk_rows=args.chunk_rows), exist_ok=True
    )
    train_period = market.session_ns(market.days[0])
    spec = replace(demo_feature_spec(), stats_period=train_period)
    before = store.latest_version()
    t0 = time.perf_counter()
    events = 0
    tasks = [(day, sym) for day in market.days for sym in market.symbols]
    bar = tqdm(
        tasks,
        desc="demo: generate + write",
        unit="segment",
        disable=args.quiet or None,
        file=sys.stderr,
    )
    for i, day in enumerate(market.days):
        segs, tabs, feats = [], [], []
        for sym in market.symbols:
            seg, recs, f = _write_day(store, market, spec, sym, day)
            segs.append(seg)
            tabs += recs
            feats.append(f)
            events += sum(r.rows for r in recs)
            bar.update(1)
        store.commit(
            segments=segs,
            tables=tabs,
            attributes={"feature_spec": spec.to_dict()},
            stats=_stats(feats, train_period) if i == 0 else None,
            message=f"demo day {day.isoformat()}",
        )
    bar.close()
    write_s = time.perf_counter() - t0
    version = store.version()
    store.verify()
    figures = _read_back(version, np.random.default_rng(args.seed))
    figures.update(
        unchanged=version.version == before,
        events=events,
        write_s=write_s,
        version=version.version,
        rows=version.rows,
        bytes=version.nbytes,
    )
    return figures


def run(args: argparse.Namespace) -> int:
    figures = run_demo(args)
    store = Store.open(args.out)
    print(format_info(store_info(store)))
    print(
        f"converted {figures['events']:,} events -> {figures['rows']:,} feature rows in "
        f"{figures['write_s']:.1f} s ({figures['events'] / figures['write_s']:,.0f} events/s)"
        + (
            "; identical content was already published, nothing new written"
            if figures["unchanged"]
            else ""
        )
    )
    print(
        f"read back {human_bytes(figures['read_bytes'])} in {figures['read_s']:.2f} s, "
        "bit-identical to what was written (also via plain zarr-python)"
    )
    print(f"gathered  a native window batch {figures['batch_shape']} matching numpy")
    print(f"verified  version {figures['version']}: every chunk matches its content hash")
    return 0
