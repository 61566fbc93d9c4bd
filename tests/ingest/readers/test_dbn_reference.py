"""DBN instrument definitions and statistics, written with databento-dbn's encoder (v1-v3),
read into the ``definitions`` and ``statistics`` kinds and stored by ``ticktensor ingest``."""

from __future__ import annotations

import datetime as dt
import inspect
import json
from pathlib import Path
from typing import Any

import databento_dbn as db
import numpy as np
import pyarrow as pa
import pytest
import zstandard

from ticktensor.cli import main
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import EventBatch, ReadOptions
from ticktensor.ingest.readers.dbn import DbnReader
from ticktensor.store import open_store, table_dataset

from ._dbn_files import T0
from ._dbn_files import metadata as dbn_metadata

EXPIRY = int(dt.datetime(2024, 9, 20, 13, 30, tzinfo=dt.UTC).timestamp()) * 10**9
UNDEF_PX = 2**63 - 1
UNDEF_TS = 2**64 - 1
SAMPLES = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "dbn"
DEFINITION_CLASSES = {1: db.InstrumentDefMsgV1, 2: db.InstrumentDefMsgV2, 3: db.InstrumentDefMsg}
STAT_CLASSES = {1: db.StatMsgV1, 2: db.StatMsgV1, 3: db.StatMsg}


def metadata(schema: str | None, version: int = 3) -> bytes:
    return dbn_metadata(schema, {"ESU4": 5, "ESU4 C5600": 9}, version=version)


#: Every field of a definition undefined (v1 and v2 constructors take no defaults).
UNDEFINED: dict[str, Any] = {
    **dict.fromkeys(
        ("high_limit_price", "low_limit_price", "max_price_variation", "trading_reference_price",
         "unit_of_measure_qty", "min_price_increment_amount", "price_ratio", "strike_price"),
        UNDEF_PX,
    ),
    **dict.fromkeys(("expiration", "activation"), UNDEF_TS),
    **dict.fromkeys(
        ("inst_attrib_value", "market_depth_implied", "market_depth", "min_lot_size",
         "min_lot_size_block", "min_lot_size_round_lot", "contract_multiplier",
         "decay_quantity", "original_contract_size"),
        2**31 - 1,
    ),
    **dict.fromkeys(("market_segment_id", "max_trade_vol", "min_trade_vol"), 2**32 - 1),
    **dict.fromkeys(("underlying_id", "raw_instrument_id", "channel_id"), 0),
    **dict.fromkeys(("trading_reference_date", "maturity_year", "decay_start_date"), 2**16 - 1),
    "appl_id": 2**15 - 1,
    **dict.fromkeys(
        ("currency", "settl_currency", "secsubtype", "group", "exchange", "asset", "cfi",
         "security_type", "unit_of_measure", "underlying", "strike_price_currency"),
        "",
    ),
    "match_algorithm": db.MatchAlgorithm.FIFO,
    **dict.fromkeys(
        ("md_security_trading_status", "main_fraction", "price_display_format",
         "settl_price_type", "sub_fraction", "underlying_product", "maturity_month",
         "maturity_day", "maturity_week", "tick_rule"),
        255,
    ),
    "user_defined_instrument": db.UserDefinedInstrument.NO,
    **dict.fromkeys(("contract_multiplier_unit", "flow_schedule_type"), 127),
}  # fmt: skip


def definition(version: int, **fields: Any) -> Any:
    cls = DEFINITION_CLASSES[version]
    names = inspect.signature(cls).parameters
    return cls(**{k: v for k, v in (UNDEFINED | fields).items() if k in names})


def future(version: int, ts_recv: int = T0 + 5) -> Any:
    """ESU4: a future with tick size, contract size and limits; no strike, no multiplier."""
    return definition(
        version,
        publisher_id=1, instrument_id=5, ts_event=T0 - 10**9, ts_recv=ts_recv,
        min_price_increment=250_000_000, display_factor=1_000_000_000, raw_symbol="ESU4",
        asset="ES", security_type="FUT", instrument_class=db.InstrumentClass.FUTURE,
        security_update_action=db.SecurityUpdateAction.ADD, expiration=EXPIRY,
        activation=T0 - 86_400 * 10**9 * 90, high_limit_price=6_000_000_000_000,
        low_limit_price=4_000_000_000_000, unit_of_measure_qty=50_000_000_000,
        min_price_increment_amount=12_500_000_000, currency="USD", exchange="XCME",
        unit_of_measure="IPNT", maturity_year=2024, maturity_month=9,
    )  # fmt: skip


def option(version: int, ts_recv: int = T0 + 7) -> Any:
    """A call on ESU4 with a strike; its limits, activation and contract size undefined."""
    return definition(
        version,
        publisher_id=1, instrument_id=9, ts_event=T0 - 10**9, ts_recv=ts_recv,
        min_price_increment=50_000_000, display_factor=1_000_000_000, raw_symbol="ESU4 C5600",
        asset="ES", security_type="OOF", instrument_class=db.InstrumentClass.CALL,
        security_update_action=db.SecurityUpdateAction.MODIFY, expiration=EXPIRY,
        strike_price=5_600_000_000_000, strike_price_currency="USD", underlying="ESU4",
        underlying_id=5, currency="USD", exchange="XCME", contract_multiplier=50,
    )  # fmt: skip


FUTURE_ROW = {
    "ts_event": T0 - 10**9, "ts_recv": T0 + 5, "symbol": "ESU4", "venue": "GLBX.MDP3",
    "instrument_id": 5, "raw_symbol": "ESU4", "update_action": "add",
    "instrument_class": "future", "security_type": "FUT", "asset": "ES", "exchange": "XCME",
    "expiration": EXPIRY, "activation": T0 - 86_400 * 10**9 * 90, "maturity_year": 2024,
    "maturity_month": 9, "strike_price": None, "strike_price_currency": None,
    "underlying": None, "underlying_id": None, "currency": "USD", "min_price_increment": 0.25,
    "min_price_increment_amount": 12.5, "display_factor": 1.0, "unit_of_measure": "IPNT",
    "unit_of_measure_qty": 50.0, "contract_multiplier": None, "high_limit_price": 6000.0,
    "low_limit_price": 4000.0,
}  # fmt: skip
OPTION_ROW = FUTURE_ROW | {
    "ts_recv": T0 + 7, "symbol": "ESU4 C5600", "instrument_id": 9, "raw_symbol": "ESU4 C5600",
    "update_action": "modify", "instrument_class": "call", "security_type": "OOF",
    "activation": None, "maturity_year": None, "maturity_month": None, "strike_price": 5600.0,
    "strike_price_currency": "USD", "underlying": "ESU4", "underlying_id": 5,
    "min_price_increment": 0.05, "min_price_increment_amount": None, "unit_of_measure": None,
    "unit_of_measure_qty": None, "contract_multiplier": 50, "high_limit_price": None,
    "low_limit_price": None,
}  # fmt: skip


def stat(version: int, i: int, stat_type: Any, price: int, quantity: int, **kw: Any) -> Any:
    return STAT_CLASSES[version](
        publisher_id=1, instrument_id=5, ts_event=T0 + i, ts_recv=T0 + i + 3, price=price,
        quantity=quantity, stat_type=stat_type, sequence=300 + i,
        update_action=kw.get("action", db.StatUpdateAction.NEW), stat_flags=kw.get("flags", 0),
        ts_ref=kw.get("ts_ref", UNDEF_TS),
    )  # fmt: skip


def stats(version: int) -> list[Any]:
    undef_qty = 2**63 - 1 if version == 3 else 2**31 - 1
    day = int(dt.datetime(2024, 8, 7, tzinfo=dt.UTC).timestamp()) * 10**9
    return [
        stat(version, 0, db.StatType.SETTLEMENT_PRICE, 5_550_250_000_000, undef_qty, ts_ref=day),
        stat(version, 1, db.StatType.OPEN_INTEREST, UNDEF_PX, 2_150_000, flags=1),
        stat(version, 2, db.StatType.CLEARED_VOLUME, UNDEF_PX, 1_234_567),
        stat(version, 3, db.StatType.TRADING_SESSION_HIGH_PRICE, 5_600_000_000_000, undef_qty),
        stat(version, 4, db.StatType.OPEN_INTEREST, UNDEF_PX, 0, action=db.StatUpdateAction.DELETE),
    ]


STAT_ROWS = [
    ("settlement_price", 3, 5550.25, None, "new", 0),
    ("open_interest", 9, None, 2_150_000.0, "new", 1),
    ("cleared_volume", 6, None, 1_234_567.0, "new", 0),
    ("session_high_price", 5, 5600.0, None, "new", 0),
    ("open_interest", 9, None, 0.0, "delete", 0),
]


def read(path: Path, **options: Any) -> list[EventBatch]:
    return list(DbnReader().read(expand_inputs([str(path)])[0], ReadOptions(**options)))


def rows(table: pa.Table) -> list[dict[str, Any]]:
    out = []
    for row in table.to_pylist():
        for key in ("ts_event", "ts_recv", "expiration", "activation", "ts_ref"):
            if row.get(key) is not None:
                row[key] = row[key].value
        out.append(row)
    return out


@pytest.mark.parametrize("version", [1, 2, 3])
def test_definition_file_into_definitions(tmp_path: Path, version: int) -> None:
    path = tmp_path / f"defs.v{version}.dbn"
    body = [bytes(future(version)), bytes(option(version))]
    path.write_bytes(metadata("definition", version) + b"".join(body))
    batches = read(path)
    assert {b.kind.value for b in batches} == {"definitions"}
    table = pa.concat_tables([b.table for b in batches])
    assert rows(table) == [FUTURE_ROW, OPTION_ROW]
    assert np.concatenate([b.rows for b in batches]).tolist() == [1, 2]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_statistics_file_into_statistics(tmp_path: Path, version: int) -> None:
    path = tmp_path / f"stats.v{version}.dbn"
    path.write_bytes(metadata("statistics", version) + b"".join(bytes(r) for r in stats(version)))
    table = pa.concat_tables([b.table for b in read(path, batch_rows=2)])
    got = list(
        zip(
            *(table.column(c).to_pylist() for c in ("stat_type", "stat_code", "price")),
            *(table.column(c).to_pylist() for c in ("quantity", "update_action", "flags")),
            strict=True,
        )
    )
    assert got == STAT_ROWS
    assert table.column("symbol").to_pylist() == ["ESU4"] * 5
    assert table.column("sequence").to_pylist() == [300, 301, 302, 303, 304]
    ts_ref = table.column("ts_ref").cast(pa.int64()).to_pylist()
    assert ts_ref == [int(dt.datetime(2024, 8, 7, tzinfo=dt.UTC).timestamp()) * 10**9] + [None] * 4
    assert table.column("ts_recv").cast(pa.int64()).to_pylist() == [T0 + i + 3 for i in range(5)]


def heartbeat(ts: int) -> Any:
    return db.SystemMsg(ts_event=ts, msg="Heartbeat")


def trade(i: int) -> Any:
    return db.TradeMsg(
        publisher_id=1, instrument_id=5, ts_event=T0 + 10 + i, price=5_500_000_000_000 + i,
        size=1 + i, action=db.Action.TRADE, side=db.Side.BID, depth=0,
        ts_recv=T0 + 12 + i, sequence=400 + i,
    )  # fmt: skip


def mixed_stream() -> bytes:
    records = [heartbeat(T0), future(3), option(3), *stats(3)[:2], trade(0), heartbeat(T0 + 9)]
    records += [trade(1), stats(3)[2], trade(2)]
    return metadata(None) + b"".join(bytes(r) for r in records)


@pytest.mark.parametrize("batch_rows", [1, 4, 1 << 20])
def test_mixed_stream_keeps_definitions_and_statistics(tmp_path: Path, batch_rows: int) -> None:
    path = tmp_path / "live.dbn"
    path.write_bytes(mixed_stream())
    batches = read(path, batch_rows=batch_rows)
    by_kind = {
        kind: (
            pa.concat_tables([b.table for b in batches if b.kind == kind]),
            np.concatenate([b.rows for b in batches if b.kind == kind]).tolist(),
        )
        for kind in ("definitions", "statistics", "trades")
    }
    definitions, definition_rows = by_kind["definitions"]
    assert rows(definitions) == [FUTURE_ROW, OPTION_ROW]
    assert definition_rows == [2, 3]
    statistics, statistic_rows = by_kind["statistics"]
    assert statistics.column("stat_type").to_pylist() == [r[0] for r in STAT_ROWS[:3]]
    assert statistic_rows == [4, 5, 9]
    trades, trade_rows = by_kind["trades"]
    assert trades.column("price").to_pylist() == [5500.0 + i * 1e-9 for i in range(3)]
    assert trade_rows == [6, 8, 10]
    notes = [n for b in batches if b.inference for n in b.inference.notes]
    assert notes == [
        "mixed DBN records: definition -> definitions 2, statistics -> statistics 3, "
        "system 2, trades -> trades 3"
    ]


def test_kind_filter_counts_reference_records_as_left_out(tmp_path: Path) -> None:
    path = tmp_path / "live.dbn"
    path.write_bytes(mixed_stream())
    batches = read(path, kind="trades")
    assert {b.kind.value for b in batches} == {"trades"}
    notes = [n for b in batches if b.inference for n in b.inference.notes]
    assert notes == [
        "mixed DBN records: definition (not --schema trades) 2, statistics (not --schema "
        "trades) 3, system 2, trades -> trades 3"
    ]


def test_ingest_stores_reference_tables_of_the_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    definitions = tmp_path / "esu4.definition.dbn"
    bad_tick = future(3, ts_recv=T0 + 6)
    bad_tick.min_price_increment = -250_000_000  # quarantined: a tick size must be > 0
    definitions.write_bytes(
        metadata("definition") + bytes(future(3)) + bytes(option(3)) + bytes(bad_tick)
    )
    statistics = tmp_path / "esu4.statistics.dbn.zst"
    raw = metadata("statistics") + b"".join(bytes(r) for r in stats(3))
    statistics.write_bytes(zstandard.ZstdCompressor().compress(raw))
    live = tmp_path / "live.dbn"
    live.write_bytes(mixed_stream())
    store, report = tmp_path / "store", tmp_path / "report.json"
    files = [str(p) for p in (definitions, statistics, live)]
    argv = ["ingest", *files, "--out", str(store), "--workers", "1", "--report", str(report)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    # The live capture repeats the historical files' first records: its copies are the
    # duplicates (quarantined, rule duplicate), so every row is stored once.
    for name, kind, read_, stored, quarantined in (
        ("esu4.definition.dbn", "definitions", 3, 2, 1),
        ("esu4.statistics.dbn.zst", "statistics", 5, 5, 0),
        ("live.dbn", "mixed", 8, 3, 5),
    ):
        line = next(line for line in printed.splitlines() if line.startswith(name + " "))
        assert line.split()[2:6] == [kind, str(read_), str(stored), str(quarantined)], line
    files_report = {Path(f["file"]).name: f for f in json.loads(report.read_text())}
    for entry in files_report.values():
        assert entry["rows_read"] == entry["rows_stored"] + entry["rows_quarantined"]
    assert files_report["esu4.definition.dbn"]["rules"] == {"positive_price": 1}
    assert files_report["live.dbn"]["rules"] == {"duplicate": 5}

    version = open_store(str(store))
    stored_defs = table_dataset(version, "definitions").to_table()
    assert rows(stored_defs.sort_by("symbol")) == [FUTURE_ROW, OPTION_ROW]
    stored_stats = table_dataset(version, "statistics").to_table().sort_by("sequence")
    assert stored_stats.column("stat_type").to_pylist() == [r[0] for r in STAT_ROWS]
    assert stored_stats.column("quantity").to_pylist() == [r[3] for r in STAT_ROWS]
    assert table_dataset(version, "trades").count_rows() == 3
    quarantine = table_dataset(version, "quarantine").to_table().to_pylist()
    assert sorted((Path(q["source"]).name, q["kind"], q["row"], q["rule"]) for q in quarantine) == [
        ("esu4.definition.dbn", "definitions", 3, "positive_price"),
        ("live.dbn", "definitions", 2, "duplicate"),
        ("live.dbn", "definitions", 3, "duplicate"),
        ("live.dbn", "statistics", 4, "duplicate"),
        ("live.dbn", "statistics", 5, "duplicate"),
        ("live.dbn", "statistics", 9, "duplicate"),
    ]
    # Reference kinds are tables only: the feature rows come from the trades.
    assert version.segments == ()
    assert [version.pack_index(p).symbols for p in version.packs] == [("ESU4",)]


@pytest.mark.skipif(not SAMPLES.is_dir(), reason=f"no DBN samples under {SAMPLES}")
@pytest.mark.parametrize(
    "name",
    [
        "GLBX.MDP3/test_data.definition.dbn.zst",
        "XNAS.ITCH/test_data.definition.dbn.zst",
        "GLBX.MDP3/test_data.statistics.dbn.zst",
    ],
)
def test_vendor_samples_match_databento_dbn(name: str) -> None:
    path = SAMPLES / name
    decoder = db.DBNDecoder(upgrade_policy=db.VersionUpgradePolicy.AS_IS)
    decoder.write(zstandard.ZstdDecompressor().stream_reader(path.read_bytes()).read())
    _, *records = decoder.decode()
    table = pa.concat_tables([b.table for b in read(path)])
    assert table.num_rows == len(records)
    for got, rec in zip(rows(table), records, strict=True):
        assert got["ts_event"] == rec.ts_event
        assert got["ts_recv"] == rec.ts_recv
        assert got["instrument_id"] == rec.instrument_id
        if "stat_type" in got:
            assert got["stat_code"] == int(rec.stat_type)
            assert got["price"] == (None if rec.price == UNDEF_PX else rec.price / 1e9)
            continue
        assert got["raw_symbol"] == rec.raw_symbol
        assert got["expiration"] == (None if rec.expiration == UNDEF_TS else rec.expiration)
        tick = rec.min_price_increment
        assert got["min_price_increment"] == (None if tick == UNDEF_PX else tick / 1e9)
        assert got["exchange"] == rec.exchange


def test_cli_schema_flag_keeps_one_reference_kind_of_a_mixed_file(tmp_path: Path) -> None:
    live = tmp_path / "live.dbn"
    live.write_bytes(mixed_stream())
    store = tmp_path / "store"
    argv = ["ingest", str(live), "--out", str(store), "--schema", "definitions", "--quiet"]
    assert main([*argv, "--workers", "1"]) == 0
    version = open_store(str(store))
    assert sorted({t.kind for t in version.tables}) == ["definitions"]
    assert rows(table_dataset(version, "definitions").to_table().sort_by("symbol")) == [
        FUTURE_ROW,
        OPTION_ROW,
    ]
    assert version.segments == ()
    assert version.packs == ()
