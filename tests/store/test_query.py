"""One version's tables through duckdb, pyarrow and polars, against what a glob reads.

The store is built as users build it, with ``ticktensor ingest``: a first ingest, a
``--replace`` of one session and a refused ingest of it, each leaving a Parquet file
under ``events/`` that the latest version does not list.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ticktensor.cli import main
from ticktensor.errors import ConfigError
from ticktensor.store import (
    Store,
    StoreVersion,
    duckdb_relation,
    open_store,
    table_dataset,
    table_files,
)

if TYPE_CHECKING:
    from tests.conftest import S3Bucket

T0 = 1_704_205_800_000_000_000  # 2024-01-02 14:30 UTC
ROWS = 30


def write_trades(path: Path, symbol: str, first_price: float, *, bad_row: bool) -> Path:
    """``ROWS`` trades one second apart; ``bad_row`` adds a negative price (quarantined)."""
    lines = ["ts_event,symbol,price,size,side"]
    lines += [f"{T0 + i * 10**9},{symbol},{first_price + i / 100:.2f},10,1" for i in range(ROWS)]
    if bad_row:
        lines.append(f"{T0 + ROWS * 10**9},{symbol},-1,10,1")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """v1: AAA (price 100..) and BBB; v2: AAA replaced (price 101..); AAA 102.. refused."""
    tmp = tmp_path_factory.mktemp("query")
    out = tmp / "store"
    a1 = write_trades(tmp / "a1.csv", "AAA", 100.0, bad_row=True)
    b1 = write_trades(tmp / "b1.csv", "BBB", 200.0, bad_row=False)
    a2 = write_trades(tmp / "a2.csv", "AAA", 101.0, bad_row=True)
    a3 = write_trades(tmp / "a3.csv", "AAA", 102.0, bad_row=False)
    codes = [
        main(
            ["ingest", *args, "--out", str(out), "--schema", "trades", "--workers", "1", "--quiet"]
        )
        for args in ([str(a1), str(b1)], [str(a2), "--replace"], [str(a3)])
    ]
    assert codes == [0, 0, 1]  # the third is refused: AAA's session exists with other data
    return out


def prices(version: StoreVersion, symbol: str) -> list[float]:
    """The prices of ``symbol`` the version publishes, read and hash-checked by the store."""
    table = pa.concat_tables([version.read_table(t) for t in version.tables_of("trades")])
    return sorted(table.filter(pc.field("symbol") == symbol).column("price").to_pylist())


def expected_prices(first_price: float) -> list[float]:
    return [round(first_price + i / 100, 2) for i in range(ROWS)]


def test_the_glob_reads_superseded_and_unpublished_tables(store: Path) -> None:
    glob_count = duckdb.sql(f"SELECT count(*) FROM '{store}/events/trades/**/*.parquet'")
    latest = duckdb_relation(open_store(str(store)), "trades")
    # 2 files of one session on disk (AAA and BBB in v1; AAA replaced, BBB kept, in v2;
    # the refused ingest wrote nothing) against 1 published: 4 x ROWS rows against 2.
    assert glob_count.fetchall() == [(4 * ROWS,)]
    assert latest.count("*").fetchall() == [(2 * ROWS,)]
    with pytest.raises(duckdb.Error, match="schema mismatch"):  # trades beside quarantine
        duckdb.sql(f"SELECT * FROM '{store}/events/**/*.parquet'").fetchall()


@pytest.mark.parametrize(("version", "aaa_price"), [(1, 100.0), (2, 101.0)])
def test_duckdb_counts_exactly_the_published_rows(
    store: Path, version: int, aaa_price: float
) -> None:
    v = open_store(str(store), version)
    trades = duckdb_relation(v, "trades")
    rows = duckdb.sql(
        "SELECT symbol, count(*), min(price), max(price) FROM trades GROUP BY symbol ORDER BY 1"
    ).fetchall()
    assert rows == [
        ("AAA", ROWS, aaa_price, expected_prices(aaa_price)[-1]),
        ("BBB", ROWS, 200.0, expected_prices(200.0)[-1]),
    ]
    got = sorted(r[0] for r in trades.filter("symbol = 'AAA'").select("price").fetchall())
    assert got == prices(v, "AAA") == expected_prices(aaa_price)


def test_a_connection_of_ones_own(store: Path) -> None:
    con = duckdb.connect()
    try:
        duckdb_relation(open_store(str(store)), "trades", con).create_view("published_trades")
        assert con.sql("SELECT count(*) FROM published_trades").fetchall() == [(2 * ROWS,)]
    finally:
        con.close()


@pytest.mark.parametrize(("version", "aaa_price"), [(1, 100.0), (2, 101.0)])
def test_pyarrow_dataset_holds_exactly_the_published_rows(
    store: Path, version: int, aaa_price: float
) -> None:
    v = open_store(str(store), version)
    dataset = table_dataset(v, "trades")
    assert dataset.count_rows() == 2 * ROWS == sum(t.rows for t in v.tables_of("trades"))
    table = dataset.to_table(filter=pa.compute.field("symbol") == "AAA")
    assert sorted(table.column("price").to_pylist()) == expected_prices(aaa_price)


def test_quarantine_tables_are_their_own_kind(store: Path) -> None:
    v1, v2 = (open_store(str(store), n) for n in (1, 2))
    # One rejected row per ingest of an AAA file: a1 in v1, a1 and a2 in v2.
    assert table_dataset(v1, "quarantine").count_rows() == 1
    quarantine = duckdb_relation(v2, "quarantine")
    rows = duckdb.sql("SELECT rule, value FROM quarantine ORDER BY source").fetchall()
    assert rows == [("positive_price", "-1"), ("positive_price", "-1")]
    assert "price" in duckdb_relation(v2, "trades").columns
    assert "price" not in quarantine.columns


def test_polars_recipe_reads_the_version_files(store: Path) -> None:
    v = open_store(str(store), 1)
    frame = pl.scan_parquet(list(table_files(v, "trades"))).collect()
    assert frame.height == 2 * ROWS
    assert sorted(frame.filter(pl.col("symbol") == "AAA")["price"]) == expected_prices(100.0)


def test_info_json_lists_the_files_of_each_kind(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["info", str(store), "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)["tables"]
    v = open_store(str(store))
    assert sorted(tables) == ["quarantine", "trades"]
    for kind, entry in tables.items():
        assert entry["paths"] == [t.path for t in v.tables_of(kind)]
        assert entry["urls"] == [str(store / p) for p in entry["paths"]]
        assert entry["files"] == len(entry["urls"])
    on_disk = {str(p) for p in (store / "events" / "trades").rglob("*.parquet")}
    assert set(tables["trades"]["urls"]) < on_disk
    assert len(on_disk) == 2
    listed = duckdb.sql(f"SELECT count(*) FROM read_parquet({tables['trades']['urls']})")
    assert listed.fetchall() == [(2 * ROWS,)]


def test_a_missing_kind_names_the_kinds_there_are(store: Path) -> None:
    v = open_store(str(store))
    with pytest.raises(
        ConfigError, match=r"no tables of kind 'trade'; it has 'quarantine', 'trades'"
    ):
        table_dataset(v, "trade")
    with pytest.raises(ConfigError, match="no tables of kind 'quotes'"):
        duckdb_relation(v, "quotes")


def test_without_duckdb_the_error_says_how_to_install_it(store: Path) -> None:
    script = (
        "import sys; sys.modules['duckdb'] = None  # an interpreter where duckdb cannot import\n"
        "from ticktensor.store import duckdb_relation, open_store, table_dataset\n"
        f"v = open_store({str(store)!r})\n"
        "assert table_dataset(v, 'trades').count_rows() > 0\n"
        "duckdb_relation(v, 'trades')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 1
    assert "ImportError: duckdb_relation needs duckdb" in proc.stderr
    assert "pip install duckdb" in proc.stderr


def _two_versions(url: str, storage_options: dict[str, object] | None = None) -> Store:
    """v1 with one AAA table, v2 replacing it; both tables stay in the store."""
    store = Store.create(url, storage_options=storage_options)
    for first in (1.0, 2.0):
        table = pa.table({"ts_event": [T0, T0 + 1, T0 + 2], "price": [first, first, first]})
        rec = store.write_table(kind="trades", symbol="AAA", session="2024-01-02", table=table)
        store.commit(tables=[rec], replace=True)
    return store


def test_a_store_path_with_glob_characters(tmp_path: Path) -> None:
    store = _two_versions(str(tmp_path / "runs[1]" / "store"))
    trades = duckdb_relation(store.version(), "trades")
    assert trades.query("t", "SELECT count(*), min(price) FROM t").fetchall() == [(3, 2.0)]


def test_an_object_store_goes_through_fsspec() -> None:
    store = _two_versions("memory://ttquery/store")
    for n, price in ((1, 1.0), (2, 2.0)):
        trades = duckdb_relation(store.version(n), "trades")
        assert trades.query("t", "SELECT count(*), max(price) FROM t").fetchall() == [(3, price)]
        assert table_dataset(store.version(n), "trades").count_rows() == 3
    (file,) = table_files(store.version(), "trades")
    assert file.startswith("memory:///ttquery/store/events/trades/AAA/")


def test_an_s3_store(s3_bucket: S3Bucket) -> None:
    store = _two_versions(s3_bucket.url("store"), s3_bucket.storage_options)
    version = open_store(s3_bucket.url("store"), storage_options=s3_bucket.storage_options)
    trades = duckdb_relation(version, "trades")
    assert trades.query("t", "SELECT count(*), max(price) FROM t").fetchall() == [(3, 2.0)]
    assert table_files(store.version(1), "trades")[0].startswith(s3_bucket.url("store/events/"))
