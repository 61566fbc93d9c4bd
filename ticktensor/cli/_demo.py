"""``ticktensor demo``: generate vendor files, ingest them, read the store back, summarize.

Runs with no input files: a synthetic market (random-walk prices with a bid/ask spread
and microstructure noise, Poisson-like arrivals, integer sizes) for several symbols and
days is written as vendor files (trades as Databento DBN, quotes as CSV), then converted
by the same job as ``ticktensor ingest``: one store version per day, the way a daily
conversion job appends. Rerunning with the same options is a no-op.
"""

from __future__ import annotations

import argparse
import gzip
import io
import itertools
import os
import shutil
import tempfile
import time
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import zarr
import zstandard

from ticktensor.errors import ValidationError
from ticktensor.ingest import (
    IngestOptions,
    SyntheticMarket,
    demo_feature_spec,
    generate_day,
    ingest,
)
from ticktensor.ingest.dbn_writer import encode_dbn
from ticktensor.kernels import ThreadPool, WindowGather
from ticktensor.schemas import EventKind
from ticktensor.store import Codec, Layout, Store, StoreVersion

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
    p.add_argument("--raw", help="folder for the generated vendor files (OUT-raw)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes")
    p.add_argument(
        "--overwrite", action="store_true", help="delete --out (and its raw files) first"
    )
    p.add_argument("--epochs", type=int, default=2, help="loader epochs at the end (2; 0 skips)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def _write_raw(market: SyntheticMarket, day: date, folder: Path) -> list[str]:
    """One day of the market as vendor files: quotes as CSV per symbol (gzip-compressed
    for every other symbol), all trades as one zstd-compressed Databento DBN file."""
    folder.mkdir(parents=True, exist_ok=True)
    paths, trades = [], []
    for i, symbol in enumerate(market.symbols):
        tables = generate_day(market, symbol, day)
        trades.append(tables[EventKind.TRADES])
        quotes = tables[EventKind.QUOTES]
        quotes = quotes.set_column(0, "ts_event", quotes.column("ts_event").cast(pa.int64()))
        quotes = quotes.drop_columns([c for c in ("ts_recv",) if c in quotes.column_names])
        name = f"{symbol}-{day.isoformat()}-quotes.csv" + (".gz" if i % 2 else "")
        path = folder / name
        if not path.exists():
            data = io.BytesIO()
            pacsv.write_csv(quotes, data, pacsv.WriteOptions(quoting_style="needed"))
            raw = data.getvalue()
            path.write_bytes(gzip.compress(raw, 1) if name.endswith(".gz") else raw)
        paths.append(str(path))
    path = folder / f"trades-{day.isoformat()}.dbn.zst"
    if not path.exists():
        merged = pa.concat_tables(trades).sort_by([("ts_event", "ascending")])
        path.write_bytes(
            zstandard.ZstdCompressor(level=3).compress(encode_dbn(merged, EventKind.TRADES))
        )
    paths.append(str(path))
    return paths


def _train_shape(version: StoreVersion, epochs: int, seed: int) -> dict[str, Any]:
    """A few loader epochs over the store, next to torch's DataLoader on the same windows."""
    import torch

    from ticktensor.loaders import DataLoader, FastOptions, UniformOrder, WindowDataset

    ds = WindowDataset(version, window=64, normalize=True)
    loader = DataLoader(
        ds, batch_size=256, shuffle=True, fast=FastOptions(order=UniformOrder(seed))
    )
    t0 = time.perf_counter()
    samples = 0
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for x, _ in loader:
            samples += x.shape[0]
    ours = samples / (time.perf_counter() - t0)
    # torch's loader, per-sample __getitem__ + default collate, on the epoch-0 order.
    order = UniformOrder(seed).order(ds, 0)[: 256 * 40]
    baseline = torch.utils.data.DataLoader(ds, batch_size=256, sampler=order.tolist())
    t0 = time.perf_counter()
    first = None
    for i, (x, _) in enumerate(baseline):
        first = x if i == 0 else first
    theirs = len(order) / (time.perf_counter() - t0)
    check = DataLoader(ds, batch_size=256, shuffle=True, fast=FastOptions(order=UniformOrder(seed)))
    same = first is not None and torch.equal(next(iter(check))[0], first)
    return {
        "epochs": epochs,
        "samples": samples,
        "ours": ours,
        "torch": theirs,
        "same": same,
        "windows": len(ds),
        "features": ds.n_features,
        "stall": loader.stats()["stall_fraction"],
    }


def _read_back(version: StoreVersion, rng: np.random.Generator) -> dict[str, Any]:
    """Read every series back (the caller verified every file's hash), check one with
    plain zarr-python, then cut a batch of windows."""
    t0 = time.perf_counter()
    sources, nbytes = [], 0
    for seg in version.segments:
        data = version.read_segment(seg, verify=True)  # raises unless bit-identical
        sources.append(data.values)
        nbytes += data.values.nbytes + data.ts.nbytes
    for pack in version.packs:
        rows = version.read_pack(pack)
        bounds = rows.offsets.tolist()
        sources += [rows.values[lo:hi] for lo, hi in itertools.pairwise(bounds)]
        nbytes += rows.values.nbytes + rows.ts.nbytes
    read_s = time.perf_counter() - t0
    first = version.packs[0] if version.packs else version.segments[0]
    plain = zarr.open_array(version.file_url(f"{first.path}/values"), mode="r")
    if not np.array_equal(plain[: sources[0].shape[0]], sources[0], equal_nan=True):
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
        shutil.rmtree(f"{args.out}-raw", ignore_errors=True)
    market = SyntheticMarket(
        symbols=tuple(f"SYN{chr(ord('A') + i)}" for i in range(args.symbols))
        if args.symbols <= 26
        else tuple(f"SYN{i:03d}" for i in range(args.symbols)),
        n_days=args.days,
        quotes_per_day=float(args.quotes_per_day),
        trades_per_day=float(args.quotes_per_day) / 5,
        seed=args.seed,
    )
    raw = (
        Path(args.raw)
        if args.raw
        else Path(
            f"{args.out}-raw"
            if "://" not in args.out
            else tempfile.mkdtemp(prefix="ticktensor-demo-raw-")
        )
    )
    spec = replace(demo_feature_spec(), stats_period=market.session_ns(market.days[0]))
    layout = Layout(codec=Codec(args.codec), chunk_rows=args.chunk_rows)
    before = Store.create(args.out, layout=layout, exist_ok=True).latest_version()
    t0 = time.perf_counter()
    results = []
    for day in market.days:
        files = _write_raw(market, day, raw / day.isoformat())
        options = IngestOptions(
            spec=spec, layout=layout, workers=args.workers, message=f"demo day {day}"
        )
        results.append(ingest(files, args.out, options, progress=not args.quiet))
    write_s = time.perf_counter() - t0
    store = Store.open(args.out)
    version = store.version()
    store.verify()
    figures = _read_back(version, np.random.default_rng(args.seed))
    figures["train"] = _train_shape(version, args.epochs, args.seed) if args.epochs else None
    figures.update(
        unchanged=version.version == before,
        ingest=results,
        raw=str(raw),
        events=sum(r.rows_read for r in results),
        quarantined=sum(r.rows_quarantined for r in results),
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
    print(f"raw files {figures['raw']}  (per day: DBN trades .dbn.zst, CSV quotes, some .gz)")
    print(
        f"ingested  {figures['events']:,} events ({figures['quarantined']:,} quarantined) "
        f"-> {figures['rows']:,} feature rows in "
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
    train = figures["train"]
    if train is not None:
        print(
            f"loaded    {train['epochs']} epochs of {train['windows']:,} windows [64 rows x "
            f"{train['features']} features]: ticktensor.DataLoader {train['ours']:,.0f} "
            f"samples/s vs torch.utils.data.DataLoader {train['torch']:,.0f} samples/s "
            f"({train['ours'] / train['torch']:.1f}x; same first batch: {train['same']})"
        )
    return 0
