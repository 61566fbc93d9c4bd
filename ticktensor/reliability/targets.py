"""Fuzz targets: every parser that reads untrusted bytes, wrapped as ``bytes -> outcome``.

A target runs one input through the real code path (a reader inside the ingest job's
first phase, :func:`ticktensor.ingest.validate_inputs`; the whole job on CSV; the
manifest parser, the store's pointer and header, the Zarr metadata and chunks of a
segment; a pack's JSON documents and shards, read by the store's own reader) and checks
what must hold for *any* input:

- the call ends in a result or in one of ticktensor's documented errors
  (:class:`~ticktensor.errors.TickTensorError` and its subclasses);
- for readers, nothing is lost: rows read = rows kept + rows quarantined;
- a manifest that parses serializes again, to bytes that parse to the same manifest;
- a pack read gives a well-formed symbol index and the committed rows, unless the input
  rewrote what vouches for them (a read with ``verify=True`` gives the committed ones still).

Anything else (another exception type, a broken invariant, a hang) is a finding.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

import fsspec
import numpy as np
import pyarrow as pa

from ticktensor.errors import ConfigError, TickTensorError
from ticktensor.ingest import IngestOptions, ingest, validate_inputs
from ticktensor.ingest.readers import CsvFormat, Input, ReadOptions, detect
from ticktensor.store import (
    FileEntry,
    Layout,
    LogEntry,
    Manifest,
    Store,
    StoreVersion,
)
from ticktensor.store.testing import write_segment

from ._pack_targets import pack_targets
from ._seeds import arrow_file, read_seed, synthetic_trades_csv
from ._target import JSON_TOKENS, FuzzTarget, InvariantError

__all__ = ["FuzzTarget", "InvariantError", "make_targets"]


_TEXT_TOKENS: tuple[bytes, ...] = (b",", b"\n", b"\r\n", b'"', b"-", b"NaN", b"1e309", b"-0")
_TEXT_TOKENS += (b"\xef\xbb\xbf", b"9999999999", b"18446744073709551615", b"\x00", b"\xff\xfe")
_JSON_TOKENS: Final = JSON_TOKENS


# -- readers: the ingest job's first phase on one in-memory file --------------------


def _reader_target(
    name: str,
    reader: str,
    filename: str,
    options: ReadOptions,
    seeds: list[bytes | None],
    companion: tuple[str, bytes] | None = None,
    tokens: tuple[bytes, ...] = _TEXT_TOKENS,
    *,
    fuzz_companion: bool = False,
) -> FuzzTarget | None:
    """A target reading ``filename``; with ``fuzz_companion`` the input is the companion."""
    kept = tuple(s for s in seeds if s)
    if not kept or (companion is not None and not companion[1]):
        return None

    def run(data: bytes) -> int:
        main = data
        if companion is not None and fuzz_companion:
            main = companion[1]  # the fixed message file; the fuzzed bytes are its twin
        fs = fsspec.filesystem("memory")
        root = f"/ticktensor-fuzz/{uuid.uuid4().hex}"
        try:
            path = f"{root}/in/{filename}"
            fs.pipe_file(path, main)
            if companion is not None:
                other = data if fuzz_companion else companion[1]
                fs.pipe_file(f"{root}/in/{companion[0]}", other)
            source = Input(url=f"memory://{path}", fs=fs, path=path, size=len(main))
            with contextlib.suppress(TickTensorError):  # detection must not crash either
                detect(source)
            job = IngestOptions(format=reader, read=options, workers=1)
            (res,) = validate_inputs([source.url], f"memory://{root}/store", job, progress=False)
            if res.rows_read != res.rows_stored + res.rows_quarantined:
                raise InvariantError(
                    f"{name}: {res.rows_read} rows read but {res.rows_stored} kept and "
                    f"{res.rows_quarantined} quarantined"
                )
            return res.rows_read
        finally:
            if fs.exists(root):
                fs.rm(root, recursive=True)

    return FuzzTarget(name, run, kept, tokens)


def _ingest_target(seed: bytes) -> FuzzTarget:
    """The whole job (read, validate, duplicates, features, publish) on one CSV file."""

    def run(data: bytes) -> int:
        fs = fsspec.filesystem("memory")
        root = f"/ticktensor-fuzz/{uuid.uuid4().hex}"
        try:
            fs.pipe_file(f"{root}/in/trades.csv", data)
            options = IngestOptions(workers=1, read=ReadOptions(kind="trades"))  # type: ignore[arg-type]
            try:
                res = ingest([f"memory://{root}/in/trades.csv"], f"memory://{root}/store", options,
                             progress=False)  # fmt: skip
            except TickTensorError as exc:
                if "this is a bug" in str(exc):  # the job's own nothing-lost check failed
                    raise InvariantError(str(exc)) from exc
                raise
            if res.rows_read != res.rows_stored + res.rows_quarantined:
                raise InvariantError(f"ingest: {res.rows_read} read, {res.rows_stored} stored, "
                                     f"{res.rows_quarantined} quarantined")  # fmt: skip
            Store.open(f"memory://{root}/store").verify()  # what was published is whole
            return res.rows_read
        finally:
            if fs.exists(root):
                fs.rm(root, recursive=True)

    return FuzzTarget("ingest-csv", run, (seed,), _TEXT_TOKENS)


def _reader_targets(data: Path | None) -> list[FuzzTarget | None]:
    trades_csv = synthetic_trades_csv()
    fx = CsvFormat(columns={"ts_event": "timestamp", "bid_px": "bid", "ask_px": "ask"})
    hist = CsvFormat(
        header=False,
        columns={"ts_event": "0", "bid_px": "1", "ask_px": "2"},
        ts_format="%Y%m%d %H%M%S%f",
        timezone="America/New_York",
    )
    bars = CsvFormat(columns={"ts_event": "timestamp"})
    pq_trades = CsvFormat(
        columns={"ts_event": "timestamp", "size": "quantity", "side": "buyer_maker"},
        side_map={"True": -1, "False": 1},
    )
    quote_cols = {"ts_event": "timestamp", "bid_px": "bid", "ask_px": "ask"}
    pq_quotes = CsvFormat(columns={**quote_cols, "bid_sz": "bid_size", "ask_sz": "ask_size"})
    glbx = [f"dbn/GLBX.MDP3/test_data.{s}.dbn.zst" for s in ("mbo", "mbp-1", "mbp-10", "tbbo")]
    glbx += [f"dbn/GLBX.MDP3/test_data.{s}.dbn.zst" for s in ("trades", "ohlcv-1s", "bbo-1s")]
    versions = sorted(p.name for p in (data / "dbn/versions").iterdir()) if data else []
    raw_versions = [f"dbn/versions/{v}" for v in versions if not v.endswith(".zst")]
    dbn_seeds = [read_seed(data, p) for p in glbx + raw_versions]
    zst = [f"dbn/GLBX.MDP3/test_data.{s}.dbn.zst" for s in ("trades", "mbp-1")]
    zst_seeds = [(data / p).read_bytes() if data and (data / p).is_file() else None for p in zst]
    lob = "lobster/AMZN_2012-06-21_34200000_57600000_{}_1.csv"
    message, book = read_seed(data, lob.format("message"), lines=150), None
    book = read_seed(data, lob.format("orderbook"), lines=150)
    trades_pq = read_seed(data, "binance/btcusdt-trades.parquet", lines=200)
    tardis = sorted(p.name for p in (data / "tardis").iterdir()) if data else []
    dbn_tokens = (b"DBN\x01", b"DBN\x02", b"DBN\x03", b"\xff" * 8, b"\x00" * 8, b"\x0e\xa0")
    pq_tokens = (b"PAR1", b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\x15\x04")
    name = lob.format("message").split("/")[1]
    return [
        _ingest_target(trades_csv),
        _reader_target(
            "csv-trades",
            "csv",
            "trades.csv",
            ReadOptions(kind="trades", batch_rows=16),  # type: ignore[arg-type]
            [trades_csv],
        ),
        _reader_target(
            "csv-gzip",
            "csv",
            "trades.csv.gz",
            ReadOptions(kind="trades"),  # type: ignore[arg-type]
            [gzip.compress(trades_csv, mtime=0)],
            tokens=(b"\x1f\x8b\x08", b"\x00" * 4, b"\xff" * 4),
        ),
        _reader_target(
            "csv-quotes",
            "csv",
            "usdjpy.csv",
            ReadOptions(kind="quotes", symbol="USD/JPY", csv=fx),  # type: ignore[arg-type]
            [read_seed(data, "fx/usdjpy-ticks.csv", lines=120)],
        ),
        _reader_target(
            "csv-histdata",
            "csv",
            "eurusd.csv",
            ReadOptions(kind="quotes", symbol="EUR/USD", csv=hist),  # type: ignore[arg-type]
            [read_seed(data, "fx/quote_tick_data.csv", lines=120)],
        ),
        _reader_target(
            "csv-ohlcv",
            "csv",
            "btc-perp_1m.csv",
            ReadOptions(kind="ohlcv", symbol="BTC-PERP", csv=bars),  # type: ignore[arg-type]
            [read_seed(data, "bars/btc-perp-20211231-20220201_1m.csv", lines=120)],
        ),
        _reader_target("dbn", "dbn", "data.dbn", ReadOptions(), dbn_seeds, tokens=dbn_tokens),
        _reader_target(
            "dbn-zst",
            "dbn",
            "data.dbn.zst",
            ReadOptions(),
            list(zst_seeds),
            tokens=(b"\x28\xb5\x2f\xfd", b"\xff" * 8, b"\x00" * 4),
        ),
        _reader_target(
            "lobster-message",
            "lobster",
            name,
            ReadOptions(kind="quotes", batch_rows=64),  # type: ignore[arg-type]
            [message],
            companion=(name.replace("_message_", "_orderbook_"), book or b""),
        ),
        _reader_target(
            "lobster-orderbook",
            "lobster",
            name,
            ReadOptions(kind="mbp10", batch_rows=64),  # type: ignore[arg-type]
            [book],
            companion=(name.replace("_message_", "_orderbook_"), message or b""),
            fuzz_companion=True,
        ),
        _reader_target(
            "tardis",
            "tardis",
            "tardis.csv",
            ReadOptions(batch_rows=8),
            [read_seed(data, f"tardis/{t}") for t in tardis],
        ),
        _reader_target(
            "parquet",
            "parquet",
            "trades.parquet",
            ReadOptions(kind="trades", symbol="BTCUSDT", csv=pq_trades),  # type: ignore[arg-type]
            [trades_pq],
            tokens=pq_tokens,
        ),
        _reader_target(
            "parquet-quotes",
            "parquet",
            "quotes.parquet",
            ReadOptions(kind="quotes", csv=pq_quotes),  # type: ignore[arg-type]
            [read_seed(data, "binance/btcusdt-quotes.parquet", lines=200)],
            tokens=pq_tokens,
        ),
        _reader_target(
            "arrow",
            "arrow",
            "trades.arrow",
            ReadOptions(kind="trades", symbol="BTCUSDT", csv=pq_trades),  # type: ignore[arg-type]
            [arrow_file(trades_pq), arrow_file(trades_pq, stream=True)] if trades_pq else [],
            tokens=(b"ARROW1", b"\xff\xff\xff\xff", b"\x00" * 8),
        ),
    ]


# -- the store: manifests, pointer, header, Zarr metadata, chunks, event tables ------


@dataclass
class _TinyStore:
    """A small published store in memory whose files the store targets replace.

    Its feature rows are one format-1 segment, whose Zarr group, array metadata and
    chunk files are each a file of their own for the targets to rewrite.
    """

    store: Store
    pinned: StoreVersion

    @classmethod
    def build(cls, codec: str) -> _TinyStore:
        url = f"memory://ticktensor-fuzz-store/{uuid.uuid4().hex}"
        store = Store.create(url, layout=Layout(codec=codec, chunk_rows=16))  # type: ignore[arg-type]
        rng = np.random.default_rng(0)
        ts = 1_704_186_000 * 10**9 + np.arange(40, dtype=np.int64) * 1000
        seg = write_segment(
            store,
            symbol="AAPL",
            session="2024-01-02",
            ts=ts,
            values=rng.standard_normal((40, 3)).astype(np.float32),
            feature_names=("ret", "spread", "imbalance"),
            labels=rng.standard_normal((40, 1)).astype(np.float32),
            label_names=("fwd_ret",),
        )
        events = pa.table(
            {"ts_event": pa.array(ts[:5], pa.timestamp("ns", "UTC")), "price": np.ones(5)}
        )
        table = store.write_table(kind="trades", symbol="AAPL", session="2024-01-02", table=events)
        pinned = store.commit(segments=[seg], tables=[table], attributes={"note": "fuzz"})
        return cls(store, pinned)

    def file(self, rel: str) -> bytes:
        return self.store.location.read_bytes(rel)

    def swap(self, rel: str, data: bytes) -> Callable[[], None]:
        """Replace ``rel`` by ``data``; returns the function that puts the original back."""
        original = self.file(rel)
        self.store.location.fs.pipe_file(self.store.location.path(rel), data)
        return lambda: self.store.location.fs.pipe_file(self.store.location.path(rel), original)

    def trusting(self, rel: str, data: bytes) -> StoreVersion:
        """The pinned version with ``rel``'s recorded hash updated to ``data``.

        Models a store whose manifest was rewritten together with the file, so the
        parsers behind the hash check are exercised.
        """
        entry = FileEntry(hashlib.sha256(data).hexdigest(), len(data))
        m = self.pinned.manifest
        segs = []
        for seg in m.segments:
            name = rel.removeprefix(seg.path + "/")
            segs.append(
                replace(seg, files={**seg.files, name: entry}) if name in seg.files else seg
            )
        tabs = [replace(t, file=entry) if t.path == rel else t for t in m.tables]
        return StoreVersion(self.store.location, m.evolve(segments=tuple(segs), tables=tuple(tabs)))


def _store_targets() -> list[FuzzTarget | None]:
    raw, zstd, lz4 = _TinyStore.build("none"), _TinyStore.build("zstd"), _TinyStore.build("lz4")
    seg, tab = raw.pinned.segments[0], raw.pinned.tables[0]

    def manifest(data: bytes) -> None:
        parsed = Manifest.from_json(data, "fuzz/versions/00000001.checkpoint.json")
        again = Manifest.from_json(parsed.to_json(), "fuzz/again.json")
        if again != parsed:
            raise InvariantError("a parsed manifest does not survive to_json/from_json")

    def log_entry(data: bytes) -> None:
        parsed = LogEntry.from_json(data, "fuzz/versions/00000001.json")
        again = LogEntry.from_json(parsed.to_json(), "fuzz/again.json")
        if again != parsed:
            raise InvariantError("a parsed log entry does not survive to_json/from_json")

    def on_file(
        tiny: _TinyStore, rel: str, check: Callable[[StoreVersion], object]
    ) -> Callable[[bytes], None]:
        def run(data: bytes) -> None:
            restore = tiny.swap(rel, data)
            try:
                check(tiny.trusting(rel, data))
            finally:
                restore()

        return run

    def pointer(data: bytes) -> None:
        restore = raw.swap("latest.json", data)
        try:
            store = Store.open(raw.store.url)
            store.version()
            store.verify()
        finally:
            restore()

    def header(data: bytes) -> None:
        restore = raw.swap("ticktensor.json", data)
        try:
            Store.open(raw.store.url).version()
        finally:
            restore()

    def read_all(pinned: StoreVersion) -> None:
        for record in pinned.segments:
            pinned.read_segment(record, verify=True)

    def read_decoded(pinned: StoreVersion) -> None:  # decoded garbage is a result here
        for record in pinned.segments:
            pinned.read_segment(record)

    def read_tables(pinned: StoreVersion) -> None:
        for record in pinned.tables:
            pinned.read_table(record)

    meta = [f"{seg.path}/{n}" for n in ("zarr.json", "ts/zarr.json", "values/zarr.json")]
    meta += [f"{seg.path}/labels/zarr.json"]
    chunk = "values/c/0/0"
    zseg, lseg = zstd.pinned.segments[0], lz4.pinned.segments[0]
    return [
        FuzzTarget(
            "manifest",
            manifest,
            (raw.pinned.manifest.to_json(), raw.store.version(0).manifest.to_json()),
            _JSON_TOKENS,
        ),
        FuzzTarget(
            "log-entry",
            log_entry,
            tuple(raw.file(f"versions/{v:08d}.json") for v in (0, 1)),
            _JSON_TOKENS,
        ),
        FuzzTarget("store-pointer", pointer, (raw.file("latest.json"),), _JSON_TOKENS),
        FuzzTarget("store-header", header, (raw.file("ticktensor.json"),), _JSON_TOKENS),
        FuzzTarget(
            "zarr-group-json", on_file(raw, meta[0], read_all), (raw.file(meta[0]),), _JSON_TOKENS
        ),
        FuzzTarget(
            "zarr-array-json",
            on_file(raw, meta[2], read_all),
            (raw.file(meta[2]),),
            (*_JSON_TOKENS, raw.file(meta[1]), raw.file(meta[3])),
        ),
        FuzzTarget(
            "zarr-chunk-zstd",
            on_file(zstd, f"{zseg.path}/{chunk}", read_decoded),
            (zstd.file(f"{zseg.path}/{chunk}"),),
            (
                zstd.file(f"{zseg.path}/values/c/1/0"),
                b"\x28\xb5\x2f\xfd",
                b"\xff" * 8,
                b"\x00" * 8,
                zstd.file(f"{zseg.path}/ts/c/0"),
            ),
        ),
        FuzzTarget(
            "zarr-chunk-lz4",
            on_file(lz4, f"{lseg.path}/{chunk}", read_decoded),
            (lz4.file(f"{lseg.path}/{chunk}"),),
            (
                lz4.file(f"{lseg.path}/values/c/1/0"),
                b"\x02\x01",
                b"\xff" * 8,
                b"\x00" * 8,
                lz4.file(f"{lseg.path}/ts/c/0"),
            ),
        ),
        FuzzTarget(
            "store-table",
            on_file(raw, tab.path, read_tables),
            (raw.file(tab.path),),
            (b"PAR1", b"\xff\xff\xff\x7f", b"\x00" * 4),
        ),
    ]


def make_targets(
    data_dir: Path | None = None, names: Sequence[str] | None = None
) -> list[FuzzTarget]:
    """Every fuzz target (readers seeded from ``data_dir`` when given), optionally by name."""
    targets = [*_reader_targets(data_dir), *_store_targets(), *pack_targets()]
    found = [t for t in targets if t is not None]
    if names is None:
        return found
    by_name = {t.name: t for t in found}
    missing = sorted(set(names) - set(by_name))
    if missing:
        raise ConfigError(
            f"unknown fuzz target(s) {', '.join(missing)}; known: {', '.join(by_name)}"
        )
    return [by_name[n] for n in names]
