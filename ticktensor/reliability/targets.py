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
import json
import shutil
import tempfile
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

import fsspec
import numpy as np
import pyarrow as pa
import zarr

from ticktensor.errors import ConfigError, TickTensorError
from ticktensor.ingest import IngestOptions, ingest, validate_inputs
from ticktensor.ingest.readers import CsvFormat, Input, ReadOptions, detect
from ticktensor.kernels import crc32c
from ticktensor.store import (
    FileEntry,
    Layout,
    LogEntry,
    Manifest,
    PackData,
    PackRecord,
    Store,
    StoreVersion,
)
from ticktensor.store.testing import write_segment

from ._seeds import arrow_file, read_seed, synthetic_trades_csv

__all__ = ["FuzzTarget", "InvariantError", "make_targets"]


class InvariantError(AssertionError):
    """An input broke an invariant that must hold for every input (a finding)."""


@dataclass(frozen=True)
class FuzzTarget:
    """One parser under test: ``run(data)`` returns normally or raises a documented error.

    ``seeds`` are valid inputs the mutator starts from (random bytes are tried too);
    ``tokens`` are byte strings the mutator likes to insert (delimiters, magic numbers);
    ``share`` is the fraction of a run's time per target that this target gets.
    """

    name: str
    run: Callable[[bytes], object]
    seeds: tuple[bytes, ...]
    tokens: tuple[bytes, ...] = field(default=())
    expected: tuple[type[BaseException], ...] = (TickTensorError,)
    share: float = 1.0


_TEXT_TOKENS: tuple[bytes, ...] = (b",", b"\n", b"\r\n", b'"', b"-", b"NaN", b"1e309", b"-0")
_TEXT_TOKENS += (b"\xef\xbb\xbf", b"9999999999", b"18446744073709551615", b"\x00", b"\xff\xfe")
_JSON_TOKENS: tuple[bytes, ...] = (b"null", b"[]", b"{}", b'"../../etc"', b'"/abs"', b"1e999")
_JSON_TOKENS += (b"NaN", b"-1", b'"', b",", b"[[[[[[[[[[", b"true", b"9223372036854775808")


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


# -- packs: a format-2 pack's JSON documents and shards, read by the store's own reader -


#: The pack's JSON documents that ``pack-json`` replaces: an input's first byte picks one
#: (modulo their number) and the rest of the input is the document. ``chunk_sha256``'s
#: ``zarr.json`` is not among them: its parser lets malformed documents through as
#: ``JSONDecodeError``, ``AttributeError``, ``ValueError`` or ``IndexError`` (a strict
#: xfail in tests/reliability/test_pack_targets.py says when it no longer does).
_PACK_DOCUMENTS: Final = (
    "zarr.json",
    "values/zarr.json",
    "ts/zarr.json",
    "labels/zarr.json",
    "chunk_sha256/zarr.json",
)
#: The shard the ``pack-shard-*`` targets replace: every inner chunk of ``values``.
_VALUES_SHARD: Final = "values/c/0/0"
#: Each pack target's share of a run's time per target: the four take two targets' time
#: (a small pack reads in a few milliseconds, so half the time still tries hundreds).
_PACK_SHARE: Final = 0.5


@dataclass
class _TinyPack:
    """A small published store on local disk holding one pack, whose objects the pack
    targets replace (its folder goes with the object).

    Three symbols, the middle one without rows; 40 rows of 3 features and 1 label in
    inner chunks of 16 rows, so each array is one shard of 3 chunks, the last padded.
    ``committed`` is what was written.
    """

    store: Store
    pinned: StoreVersion
    committed: PackData

    @classmethod
    def build(cls, codec: str) -> _TinyPack:
        folder = tempfile.mkdtemp(prefix="ticktensor-fuzz-pack-")
        layout = Layout(codec=codec, chunk_rows=16)  # type: ignore[arg-type]
        store = Store.create(folder, layout=layout)
        rng = np.random.default_rng(0)
        rows = (15, 0, 25)
        ts = [1_704_186_000 * 10**9 + np.arange(n, dtype=np.int64) * 1000 for n in rows]
        committed = PackData(
            symbols=("AAPL", "MSFT", "SPY"),
            offsets=np.cumsum([0, *rows], dtype=np.int64),
            ts=np.concatenate(ts),
            values=rng.standard_normal((sum(rows), 3)).astype(np.float32),
            labels=rng.standard_normal((sum(rows), 1)).astype(np.float32),
        )
        record = store.write_pack(
            session="2024-01-02",
            symbols=committed.symbols,
            offsets=committed.offsets,
            ts=committed.ts,
            values=committed.values,
            feature_names=("ret", "spread", "imbalance"),
            labels=committed.labels,
            label_names=("fwd_ret",),
        )
        tiny = cls(store, store.commit(packs=[record], message="fuzz"), committed)
        weakref.finalize(tiny, shutil.rmtree, folder, ignore_errors=True)
        return tiny

    @property
    def record(self) -> PackRecord:
        return self.pinned.packs[0]

    def file(self, name: str) -> bytes:
        """The stored bytes of the pack's object ``name`` (``values/c/0/0``)."""
        return self.store.location.read_bytes(f"{self.record.path}/{name}")

    @contextlib.contextmanager
    def replaced(self, files: Mapping[str, bytes]) -> Iterator[None]:
        """The pack's objects ``files`` replaced by their new bytes, then put back."""
        fs, path = self.store.location.fs, self.store.location.path
        originals = {name: self.file(name) for name in files}
        try:
            for name, data in files.items():
                fs.pipe_file(path(f"{self.record.path}/{name}"), data)
            yield
        finally:
            for name, data in originals.items():
                fs.pipe_file(path(f"{self.record.path}/{name}"), data)

    def trusting(self, files: Mapping[str, bytes]) -> StoreVersion:
        """A new view of the pinned version whose pack record vouches for ``files``: the
        recorded hash and size of each is its new bytes'.

        Models a store whose version files were rewritten with the pack, so only the
        checks below the record's hashes stand between the bytes and a reader.
        """
        record = self.record
        entries = {n: FileEntry(hashlib.sha256(d).hexdigest(), len(d)) for n, d in files.items()}
        vouched = replace(record, files={**record.files, **entries})
        manifest = self.pinned.manifest.evolve(packs=(vouched,))
        return StoreVersion(self.store.location, manifest)

    def vouching(self, shard: bytes) -> dict[str, bytes]:
        """``shard`` as the ``values`` shard, with the chunk checksums of ``values`` (the
        CRC-32C list of its ``zarr.json``, its rows of ``chunk_sha256``) rewritten to
        match the chunks the shard's own index names, so the codec decodes them.

        The index is the shard's last 16 bytes per chunk slot (docs/store-format.md,
        "Arrays and sharding"); a chunk it places outside the shard's data keeps the
        committed checksums.
        """
        index = self.pinned.pack_index(self.record)
        slots = index.shard_rows // index.chunk_rows
        data_end = len(shard) - 16 * slots
        meta = json.loads(self.file("values/zarr.json"))
        crcs = list(meta["attributes"]["chunk_crc32c"])
        names = json.loads(self.file("chunk_sha256/zarr.json"))["attributes"]["arrays"]
        table = bytearray(self.file("chunk_sha256/c/0/0/0"))
        row = 32 * len(crcs) * names.index("values")
        for k in range(len(crcs) if data_end >= 0 else 0):
            at = data_end + 16 * k
            offset, nbytes = (int.from_bytes(shard[at + i : at + i + 8], "little") for i in (0, 8))
            if offset + nbytes <= data_end:
                chunk = shard[offset : offset + nbytes]
                crcs[k] = crc32c(chunk)
                table[row + 32 * k : row + 32 * (k + 1)] = hashlib.sha256(chunk).digest()
        meta["attributes"]["chunk_crc32c"] = crcs
        return {
            _VALUES_SHARD: shard,
            "values/zarr.json": json.dumps(meta).encode(),
            "chunk_sha256/c/0/0/0": bytes(table),
        }


def _check_pack(committed: PackData, data: PackData, may_differ: Set[str], what: str) -> None:
    """``data`` must have the pack's shape and structure (symbols sorted and distinct,
    offsets rising from 0 to its rows) and equal ``committed`` but in ``may_differ``."""
    rows = committed.ts.shape[0]
    symbols, offsets = data.symbols, data.offsets
    problems = []
    names_ok = all(isinstance(s, str) and s for s in symbols)
    if not (symbols and names_ok and list(symbols) == sorted(set(symbols))):
        problems.append(f"symbols {symbols!r:.80} are not non-empty, distinct and sorted")
    if (
        offsets.dtype != np.int64
        or offsets.shape != (len(symbols) + 1,)
        or offsets[0] != 0
        or offsets[-1] != rows
        or (np.diff(offsets) < 0).any()
    ):
        problems.append(f"offsets {offsets!r:.80} do not rise from 0 to the {rows} rows")
    arrays = (
        ("ts", data.ts, committed.ts),
        ("values", data.values, committed.values),
        ("labels", data.labels, committed.labels),
    )
    for name, array, expected in arrays:
        if array is None or expected is None:
            problems.append(f"{name} is {array}, committed {expected}")
        elif array.shape != expected.shape or array.dtype != expected.dtype:
            problems.append(f"{name} is {array.dtype} {array.shape}")
        elif name not in may_differ and not np.array_equal(array, expected):
            problems.append(f"{name} differs from the committed rows")
    if "symbols" not in may_differ and symbols != committed.symbols:
        problems.append(f"symbols {symbols!r:.80} differ from the committed ones")
    if "offsets" not in may_differ and not np.array_equal(offsets, committed.offsets):
        problems.append(f"offsets {offsets!r:.80} differ from the committed ones")
    if problems:
        raise InvariantError(f"{what}: {'; '.join(problems)}")


def _check_pack_reads(
    committed: PackData,
    pinned: StoreVersion,
    may_differ: Set[str],
    what: str,
    *,
    through_zarr: bool = False,
) -> TickTensorError | None:
    """Read the pack of ``pinned`` with the reader's default check and with
    ``verify=True`` (and with ``through_zarr`` by zarr-python behind the chunk guard,
    :meth:`StoreVersion.open_pack`).

    Each read ends in a ticktensor error or gives the pack as committed (see
    :func:`_check_pack`); a default read may differ in ``may_differ`` (what the input
    rewrote the checksums of), a read with ``verify=True`` in nothing (the record's
    content hash covers every part). Returns the first error.
    """
    record = pinned.packs[0]
    first: TickTensorError | None = None
    for verify in (False, True):
        try:
            data = pinned.read_pack(record, verify=verify)
        except TickTensorError as exc:
            first = first or exc
            continue
        _check_pack(committed, data, set() if verify else may_differ, f"{what}, verify={verify}")
    if not through_zarr:
        return first
    try:
        index = pinned.pack_index(record)
        group = pinned.open_pack(record)
        nodes = [group[name] for name in ("ts", "values", "labels")]
        arrays = [np.asarray(node[:]) for node in nodes if isinstance(node, zarr.Array)]
    except TickTensorError as exc:
        return first or exc
    if len(arrays) != len(nodes):
        raise InvariantError(f"{what}: zarr-python opens a group in place of an array")
    data = PackData(index.symbols, index.offsets, *arrays)
    _check_pack(committed, data, may_differ, f"{what}, through zarr-python")
    return first


def _pack_targets() -> list[FuzzTarget]:
    raw, zstd, lz4 = _TinyPack.build("none"), _TinyPack.build("zstd"), _TinyPack.build("lz4")

    def documents(data: bytes) -> None:
        """The first byte picks the document; the record vouches for its new bytes."""
        name = _PACK_DOCUMENTS[data[0] % len(_PACK_DOCUMENTS)] if data else "zarr.json"
        files = {name: data[1:]}
        with raw.replaced(files):
            # Only the group names symbols and offsets; the rows' checksums are intact.
            error = _check_pack_reads(
                raw.committed, raw.trusting(files), {"symbols", "offsets"}, f"pack {name}"
            )
        if error is not None:
            raise error

    def shard(tiny: _TinyPack) -> Callable[[bytes], None]:
        """The shard as stored, then vouched for by the record, then with its chunk
        checksums rewritten too: only then may the default read serve other values.

        zarr-python reads it behind the chunk guard while the chunk checksums are the
        committed ones (the guard must stop any change); chunks that forged checksums
        vouch for are zarr's own decoders' to refuse, in zarr's own errors.
        """

        def run(data: bytes) -> None:
            files = {_VALUES_SHARD: data}
            with tiny.replaced(files):
                errors = [
                    _check_pack_reads(
                        tiny.committed, tiny.trusting({}), set(), "shard", through_zarr=True
                    ),
                    _check_pack_reads(
                        tiny.committed,
                        tiny.trusting(files),
                        set(),
                        "shard, hash rewritten",
                        through_zarr=True,
                    ),
                ]
            vouched = tiny.vouching(data)
            with tiny.replaced(vouched):
                errors.append(
                    _check_pack_reads(
                        tiny.committed,
                        tiny.trusting(vouched),
                        {"values"},
                        "shard, hash and chunk checksums rewritten",
                    )
                )
            error = next((e for e in errors if e is not None), None)
            if error is not None:
                raise error

        return run

    def shard_tokens(tiny: _TinyPack, *magic: bytes) -> tuple[bytes, ...]:
        index = tiny.file(_VALUES_SHARD)[-48:]  # 3 slots of (offset, bytes), uint64 each
        entries = [index[i : i + 16] for i in (0, 16, 32)]
        others = (tiny.file("ts/c/0"), tiny.file("labels/c/0/0"))
        return (*magic, *entries, *others, b"\xff" * 8, b"\x00" * 8)

    def seed(name: str) -> bytes:
        return bytes([_PACK_DOCUMENTS.index(name)]) + raw.file(name)

    return [
        FuzzTarget(
            "pack-json",
            documents,
            tuple(seed(name) for name in _PACK_DOCUMENTS),
            (*_JSON_TOKENS, b'"zstd"', b'"blosc"', b'"crc32c"', b'"start"', b'"int32"'),
            share=_PACK_SHARE,
        ),
        FuzzTarget(
            "pack-shard-none",
            shard(raw),
            (raw.file(_VALUES_SHARD),),
            shard_tokens(raw),
            share=_PACK_SHARE,
        ),
        FuzzTarget(
            "pack-shard-zstd",
            shard(zstd),
            (zstd.file(_VALUES_SHARD),),
            shard_tokens(zstd, b"\x28\xb5\x2f\xfd"),
            share=_PACK_SHARE,
        ),
        FuzzTarget(
            "pack-shard-lz4",
            shard(lz4),
            (lz4.file(_VALUES_SHARD),),
            shard_tokens(lz4, b"\x02\x01"),
            share=_PACK_SHARE,
        ),
    ]


def make_targets(
    data_dir: Path | None = None, names: Sequence[str] | None = None
) -> list[FuzzTarget]:
    """Every fuzz target (readers seeded from ``data_dir`` when given), optionally by name."""
    targets = [*_reader_targets(data_dir), *_store_targets(), *_pack_targets()]
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
