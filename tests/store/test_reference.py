"""definitions_asof: the definition in force at each sample, against a slow, obvious loop."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import databento_dbn as db
import numpy as np
import pyarrow as pa
import pytest

from ticktensor.errors import ConfigError
from ticktensor.ingest import IngestOptions, ingest
from ticktensor.schemas import conform
from ticktensor.store import Store, StoreVersion, definitions_asof, open_store

DAY_NS = 86_400 * 10**9
COLUMNS = ("expiration", "strike_price", "instrument_class")


def random_store(tmp_path: Path, rng: np.random.Generator) -> tuple[StoreVersion, list[dict]]:
    """Definitions of A, B and C at random times, with ties, deletes and unknown times."""
    store = Store.create(str(tmp_path / "store"))
    rows: list[dict[str, Any]] = []
    records = []
    for symbol in ("A", "B", "C"):
        n = 15
        recv = rng.integers(0, 50, n) * 10**9  # few distinct times: many ties
        table = pa.table(
            {
                "ts_event": pa.array(recv - rng.integers(0, 3, n) * 10**9, pa.int64()),
                "ts_recv": pa.array(recv, pa.int64(), mask=rng.random(n) < 0.1),
                "symbol": [symbol] * n,
                "update_action": rng.choice(["add", "modify", "modify", "delete"], n).tolist(),
                "instrument_class": rng.choice(["call", "put"], n).tolist(),
                "strike_price": rng.integers(90, 110, n).astype(float),
                "expiration": pa.array(
                    (60 + rng.integers(0, 30, n)) * 10**9 * 3600,
                    pa.int64(),
                    mask=rng.random(n) < 0.2,
                ),
            }
        )
        table = conform(table.cast(table.schema), "definitions")
        rows += table.to_pylist()
        records.append(
            store.write_table(kind="definitions", symbol=symbol, session="1970-01-01", table=table)
        )
    return store.commit(tables=records), rows


def slow_asof(rows: list[dict[str, Any]], symbol: str, ts: int) -> dict[str, Any] | None:
    """The latest row of ``symbol`` received at or before ``ts``; ties: later event, later row."""
    best: tuple[int, int, int] | None = None
    chosen = None
    for i, row in enumerate(rows):
        if row["symbol"] != symbol or row["ts_recv"] is None:
            continue
        recv = row["ts_recv"].value
        if recv > ts:
            continue
        key = (recv, row["ts_event"].value, i)
        if best is None or key > best:
            best, chosen = key, row
    if chosen is None or chosen["update_action"] == "delete":
        return None
    return chosen


@pytest.mark.parametrize("seed", range(4))
def test_matches_the_slow_loop(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    version, rows = random_store(tmp_path, rng)
    symbols = rng.choice(["A", "B", "C", "D"], 300)  # D has no definitions at all
    ts = rng.integers(-5, 55, 300) * 10**9 + rng.choice([0, 1, -1], 300)
    out = definitions_asof(version, symbols, ts, columns=COLUMNS).to_pylist()
    assert len(out) == 300
    for i, (symbol, t) in enumerate(zip(symbols.tolist(), ts.tolist(), strict=True)):
        want = slow_asof(rows, symbol, t)
        got = out[i]
        if want is None:
            assert set(got.values()) == {None}, (i, symbol, t, got)
            continue
        assert got["definition_ts_recv"] == want["ts_recv"], (i, symbol, t)
        for column in COLUMNS:
            assert got[column] == want[column], (i, column)
        expiration = want["expiration"]
        days = None if expiration is None else (expiration.value - t) / DAY_NS
        assert got["days_to_expiry"] == pytest.approx(days), (i, symbol, t)


def test_datetime64_times_and_errors(tmp_path: Path) -> None:
    version, _ = random_store(tmp_path, np.random.default_rng(7))
    ts = np.array([10, 40], dtype="datetime64[s]")
    out = definitions_asof(version, ["A", "B"], ts, columns=("strike_price",))
    assert out.column_names == ["definition_ts_recv", "strike_price", "days_to_expiry"]
    again = definitions_asof(version, ["A", "B"], ts.astype("datetime64[ns]").view(np.int64))
    assert out.column("days_to_expiry").equals(again.column("days_to_expiry"))
    with pytest.raises(ConfigError, match="2 symbols for 3 sample times"):
        definitions_asof(version, ["A", "B"], np.arange(3))
    with pytest.raises(ConfigError, match=r"no column\(s\) \['delta'\]"):
        definitions_asof(version, ["A"], [0], columns=("delta",))


def definition(ts_recv: int, expiration: int, action: Any) -> Any:
    return db.InstrumentDefMsg(
        publisher_id=1, instrument_id=9, ts_event=T0 - DAY_NS, ts_recv=ts_recv,
        min_price_increment=50_000_000, display_factor=1_000_000_000, raw_symbol="ESU4 C5600",
        asset="ES", security_type="OOF", instrument_class=db.InstrumentClass.CALL,
        security_update_action=action, expiration=expiration, strike_price=5_600_000_000_000,
    )  # fmt: skip


T0 = int(dt.datetime(2024, 8, 8, 14, tzinfo=dt.UTC).timestamp()) * 10**9
EXPIRY = int(dt.datetime(2024, 9, 20, 13, 30, tzinfo=dt.UTC).timestamp()) * 10**9


def test_a_definition_received_after_a_sample_is_not_used(tmp_path: Path) -> None:
    """Ingested from DBN: the exchange dated both definitions a day early (ts_event), but
    they became known at ts_recv; the second moves the expiry a week later."""
    meta = db.Metadata(
        dataset="GLBX.MDP3", start=T0, stype_in=db.SType.RAW_SYMBOL,
        stype_out=db.SType.INSTRUMENT_ID, schema=db.Schema.DEFINITION, symbols=[],
        partial=[], not_found=[], mappings=[],
    )  # fmt: skip
    first = definition(T0 + 100, EXPIRY, db.SecurityUpdateAction.ADD)
    later = definition(T0 + 200, EXPIRY + 7 * DAY_NS, db.SecurityUpdateAction.MODIFY)
    path = tmp_path / "opt.definition.dbn"
    path.write_bytes(bytes(meta.encode()) + bytes(first) + bytes(later))
    result = ingest([str(path)], str(tmp_path / "store"), IngestOptions(workers=1), progress=False)
    assert [(f.rows_read, f.rows_stored) for f in result.files] == [(2, 2)]
    version = open_store(str(tmp_path / "store"))
    ts = np.array([T0, T0 + 99, T0 + 100, T0 + 199, T0 + 200, T0 + DAY_NS])
    out = definitions_asof(version, ["9"] * 6, ts)  # no symbol mapping: the instrument id
    recv = [None if v is None else v.value for v in out.column("definition_ts_recv").to_pylist()]
    assert recv == [None, None, T0 + 100, T0 + 100, T0 + 200, T0 + 200]
    days = out.column("days_to_expiry").to_pylist()
    assert days[:2] == [None, None]
    assert days[2:4] == pytest.approx([(EXPIRY - t) / DAY_NS for t in ts[2:4]])
    assert days[4:] == pytest.approx([(EXPIRY + 7 * DAY_NS - t) / DAY_NS for t in ts[4:]])
    assert out.column("strike_price").to_pylist() == [None, None, 5600.0, 5600.0, 5600.0, 5600.0]
    assert out.column("instrument_class").to_pylist()[2:] == ["call"] * 4
