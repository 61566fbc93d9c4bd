"""The ingest job end to end: real files in, a store version out, nothing lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from ticktensor.errors import SchemaError, ValidationError
from ticktensor.ingest import IngestOptions, SyntheticMarket, generate_day, ingest, validate_inputs
from ticktensor.ingest.readers import ReadOptions
from ticktensor.schemas import EventKind
from ticktensor.store import Store

TRADE_COLS = ["ts_event", "symbol", "price", "size", "side"]
QUOTE_COLS = ["ts_event", "symbol", "bid_px", "ask_px", "bid_sz", "ask_sz"]
MARKET = SyntheticMarket(
    symbols=("AAA", "BBB"), n_days=2, quotes_per_day=3000.0, trades_per_day=800.0, seed=3
)


def write_csv(table: pa.Table, cols: list[str], path: Path) -> Path:
    t = table.select(cols)
    t = t.set_column(0, "ts_event", t.column("ts_event").cast(pa.int64()))
    pacsv.write_csv(t, path, pacsv.WriteOptions(quoting_style="none"))
    return path


def market_files(tmp: Path, day: date) -> list[Path]:
    out = []
    for sym in MARKET.symbols:
        tables = generate_day(MARKET, sym, day)
        out.append(write_csv(tables[EventKind.TRADES], TRADE_COLS, tmp / f"{sym}-{day}-trades.csv"))
    return out


def opts(kind: str = "trades", **kw: object) -> IngestOptions:
    kw.setdefault("workers", 1)
    return IngestOptions(format="csv", read=ReadOptions(kind=EventKind(kind)), **kw)  # type: ignore[arg-type]


def test_csv_trades_to_store_counts_add_up(tmp_path: Path) -> None:
    files = market_files(tmp_path, MARKET.days[0])
    result = ingest([str(f) for f in files], str(tmp_path / "store"), opts(), progress=False)
    assert result.published
    assert result.rows_quarantined == 0
    for f in result.files:
        assert f.rows_read == f.rows_stored + f.rows_quarantined
        assert f.rows_read == Path(f.file).read_text().count("\n") - 1
    v = result.version
    assert v.segments == ()
    (pack,) = v.packs  # one session: one pack of both symbols
    assert v.pack_index(pack).symbols == ("AAA", "BBB")
    assert (result.packs, result.series) == (1, 2)
    (trades,) = v.tables_of("trades")  # one table of both symbols
    assert (trades.symbol, trades.session) == ("*", str(MARKET.days[0]))
    assert v.tables_of("quarantine") == ()
    assert trades.rows == result.rows_stored
    table = v.read_table(trades)
    assert set(table.column("symbol").to_pylist()) == {"AAA", "BBB"}
    Store.open(str(tmp_path / "store")).verify()


def test_rerun_is_idempotent_and_new_day_appends(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    day0 = [str(f) for f in market_files(tmp_path, MARKET.days[0])]
    first = ingest(day0, store, opts(), progress=False)
    again = ingest(day0, store, opts(), progress=False)
    assert not again.published
    assert again.version.version == first.version.version
    old_paths = {p.path for p in first.version.packs} | {t.path for t in first.version.tables}
    day1 = [str(f) for f in market_files(tmp_path, MARKET.days[1])]
    appended = ingest(day1, store, opts(), progress=False)
    assert appended.version.version == first.version.version + 1
    new = appended.version
    assert old_paths < {p.path for p in new.packs} | {t.path for t in new.tables}
    assert [p.session for p in new.packs] == [str(d) for d in MARKET.days[:2]]
    assert [(t.symbol, t.session) for t in new.tables_of("trades")] == [
        ("*", str(d)) for d in MARKET.days[:2]
    ]


def _bad_csv(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_bytes(body.encode() if isinstance(body, str) else body)
    return str(path)


HEADER = "ts_event,symbol,price,size,side\n"
T0 = 1_704_205_800_000_000_000


def row(i: int, price: str = "100.5", size: str = "10", sym: str = "AAA") -> str:
    return f"{T0 + i * 1000},{sym},{price},{size},1\n"


QUARANTINE_CASES = {
    "nan_price": (HEADER + row(0) + row(1, price="nan") + row(2), {"finite": 1}),
    "negative_size": (HEADER + row(0) + row(1, size="-5") + row(2), {"non_negative_size": 1}),
    "negative_price": (HEADER + row(0, price="-3.5") + row(1), {"positive_price": 1}),
    "zero_price": (HEADER + row(0, price="0") + row(1), {"positive_price": 1}),
    "huge_value": (HEADER + row(0, size="1e400") + row(1), {"finite": 1}),
    "duplicate_rows": (HEADER + row(0) + row(1) + row(1) + row(2), {"duplicate": 1}),
    "unparseable_price": (HEADER + row(0) + row(1, price="abc") + row(2), {"unparseable": 1}),
    "wrong_field_count": (HEADER + row(0) + "1,AAA,2\n" + row(2), {"field_count": 1}),
    "truncated_last_line": (HEADER + row(0) + row(1) + f"{T0 + 5000},AA", {"field_count": 1}),
}


@pytest.mark.parametrize("case", sorted(QUARANTINE_CASES))
def test_bad_rows_are_quarantined_and_counted(tmp_path: Path, case: str) -> None:
    body, expected_rules = QUARANTINE_CASES[case]
    path = _bad_csv(tmp_path, f"{case}.csv", body)
    result = ingest([path], str(tmp_path / "store"), opts(), progress=False)
    (report,) = result.files
    n_rows = body.count("\n") - 1 + (0 if body.endswith("\n") else 1)
    assert report.rows_read == n_rows
    assert report.rows_read == report.rows_stored + report.rows_quarantined
    assert report.rows_quarantined == sum(expected_rules.values())
    assert dict(report.rules) == expected_rules, report.rules
    (q,) = result.version.tables_of("quarantine")
    table = result.version.read_table(q)
    assert table.num_rows == sum(expected_rules.values())
    assert set(table.column("rule").to_pylist()) == set(expected_rules)
    assert all(s == path for s in table.column("source").to_pylist())
    assert all(r for r in table.column("raw").to_pylist())


@pytest.mark.parametrize("case", sorted(QUARANTINE_CASES))
def test_validate_inputs_counts_what_the_job_would_and_publishes_nothing(
    tmp_path: Path, case: str
) -> None:
    body, expected_rules = QUARANTINE_CASES[case]
    path = _bad_csv(tmp_path, f"{case}.csv", body)
    out = tmp_path / "store"
    (report,) = validate_inputs([path], str(out), opts(), progress=False)
    assert not [p for p in out.rglob("*") if p.is_file()]  # staging removed, no version
    (full,) = ingest([path], str(out), opts(), progress=False).files
    # Duplicates are found when the job assembles a (symbol, session): after validation.
    duplicates = expected_rules.get("duplicate", 0)
    assert report.rows_read == full.rows_read
    assert report.rows_stored == full.rows_stored + duplicates
    assert report.rows_quarantined == full.rows_quarantined - duplicates
    assert report.rules == {r: n for r, n in expected_rules.items() if r != "duplicate"}


def test_unsorted_timestamps_are_sorted_not_lost(tmp_path: Path) -> None:
    path = _bad_csv(tmp_path, "unsorted.csv", HEADER + row(5) + row(1) + row(3) + row(2))
    result = ingest([path], str(tmp_path / "store"), opts(), progress=False)
    assert result.rows_stored == 4
    (t,) = result.version.tables_of("trades")
    ts = result.version.read_table(t).column("ts_event").cast(pa.int64()).to_numpy()
    assert np.all(np.diff(ts) > 0)


def test_out_of_declared_range_quarantined(tmp_path: Path) -> None:
    path = _bad_csv(tmp_path, "range.csv", HEADER + row(0) + row(1) + f"{T0 * 2},AAA,1.0,1,1\n")
    result = ingest(
        [path], str(tmp_path / "store"), opts(ts_range=(T0 - 10**12, T0 + 10**12)), progress=False
    )
    assert result.files[0].rules == {"ts_range": 1}


@pytest.mark.parametrize(
    ("name", "body", "error", "match"),
    [
        ("missing_column.csv", "ts_event,symbol,size,side\n1,AAA,1,1\n", SchemaError, "price"),
        (
            "wrong_delimiter.csv",
            HEADER.replace(",", ";") + row(0).replace(",", ";"),
            SchemaError,
            "price",
        ),
    ],
)
def test_structural_problems_raise_clear_errors(
    tmp_path: Path, name: str, body: str, error: type[Exception], match: str
) -> None:
    path = _bad_csv(tmp_path, name, body)
    with pytest.raises(error, match=match):
        ingest([path], str(tmp_path / "store"), opts(), progress=False)
    assert Store.open(str(tmp_path / "store")).latest_version() == 0


def test_extra_column_empty_file_header_only(tmp_path: Path) -> None:
    extra = _bad_csv(
        tmp_path, "extra.csv", "ts_event,symbol,price,size,side,venue2\n" + row(0).strip() + ",X\n"
    )
    empty = _bad_csv(tmp_path, "empty.csv", "")
    header_only = _bad_csv(tmp_path, "header.csv", HEADER)
    result = ingest([extra, empty, header_only], str(tmp_path / "store"), opts(), progress=False)
    by_name = {os.path.basename(f.file): f for f in result.files}
    assert by_name["extra.csv"].rows_stored == 1
    assert by_name["empty.csv"].rows_read == 0
    assert by_name["header.csv"].rows_read == 0


def test_strict_mode_names_file_row_column_value_rule(tmp_path: Path) -> None:
    path = _bad_csv(tmp_path, "strict.csv", HEADER + row(0) + row(1, size="-5"))
    with pytest.raises(ValidationError) as info:
        ingest([path], str(tmp_path / "store"), opts(strict=True), progress=False)
    msg = str(info.value)
    for part in ("strict.csv", "row 2", "size", "-5", "non_negative_size"):
        assert part in msg, msg


@pytest.mark.parametrize("bad_row", [2, 29, 33, 37])
def test_strict_mode_fails_without_hanging_whichever_batch_is_bad(
    tmp_path: Path, bad_row: int
) -> None:
    # 40 rows in batches of 4: a bad row near the end stops the consumer while the
    # reader's thread is handing over its last batches; the error must come, not a hang.
    body = HEADER + "".join(row(i, size="-5" if i == bad_row else "10") for i in range(40))
    path = _bad_csv(tmp_path, "strict.csv", body)
    code = textwrap.dedent(
        f"""
        from ticktensor.errors import ValidationError
        from ticktensor.ingest._job import IngestOptions, ingest
        from ticktensor.ingest.readers._base import ReadOptions
        from ticktensor.schemas import EventKind
        read = ReadOptions(kind=EventKind.TRADES, batch_rows=4)
        options = IngestOptions(format="csv", read=read, workers=1, strict=True)
        try:
            ingest([{path!r}], {str(tmp_path / "store")!r}, options, progress=False)
        except ValidationError as exc:
            print("raised:", exc)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"row {bad_row + 1}," in proc.stdout, proc.stdout


def test_report_json_and_cli(tmp_path: Path) -> None:
    files = market_files(tmp_path, MARKET.days[0])
    report = tmp_path / "report.json"
    exe = Path(sys.executable).parent / "ticktensor"
    proc = subprocess.run(
        [
            str(exe),
            "ingest",
            *map(str, files),
            "--out",
            str(tmp_path / "store"),
            "--format",
            "csv",
            "--schema",
            "trades",
            "--workers",
            "2",
            "--report",
            str(report),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(report.read_text())
    required = {
        "file",
        "format",
        "schema",
        "rows_read",
        "rows_stored",
        "rows_quarantined",
        "seconds",
    }
    assert all(required <= set(r) for r in rows)
    assert len(rows) == len(files)
    assert all(r["rows_read"] == r["rows_stored"] + r["rows_quarantined"] for r in rows)
    assert "published" in proc.stdout


def test_memory_urls(tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/ttjob/in/trades.csv", (HEADER + row(0) + row(1)).encode())
    result = ingest(["memory://ttjob/in/*.csv"], "memory://ttjob/store", opts(), progress=False)
    assert result.rows_stored == 2


KILL_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from ticktensor.ingest import _assemble
    from ticktensor.ingest._job import IngestOptions, ingest
    from ticktensor.ingest.readers._base import ReadOptions
    from ticktensor.schemas import EventKind

    orig = _assemble.assemble
    def dying(task):
        res = orig(task)
        if sys.argv[3] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return res
    _assemble.assemble = dying
    import ticktensor.ingest._job as job
    job.assemble = dying
    opts = IngestOptions(format="csv", read=ReadOptions(kind=EventKind.TRADES), workers=1)
    r = ingest(sys.argv[4:], sys.argv[1], opts, progress=False)
    print("version", r.version.version)
    """
)


@pytest.mark.slow
def test_sigkill_mid_ingest_keeps_previous_version(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    day0 = [str(f) for f in market_files(tmp_path, MARKET.days[0])]
    ingest(day0, store, opts(), progress=False)
    before = Store.open(store).version()
    day1 = [str(f) for f in market_files(tmp_path, MARKET.days[1])]
    killed = subprocess.run(
        [sys.executable, "-c", KILL_CHILD, store, "x", "kill", *day1],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    after = Store.open(store)
    assert after.latest_version() == before.version
    assert after.version().manifest == before.manifest
    after.verify()
    rerun = subprocess.run(
        [sys.executable, "-c", KILL_CHILD, store, "x", "ok", *day1],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert f"version {before.version + 1}" in rerun.stdout
    Store.open(store).verify()


@pytest.mark.slow
def test_ray_engine_on_a_local_cluster(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    files = [str(f) for f in market_files(tmp_path, MARKET.days[0])]
    local = ingest(files, str(tmp_path / "a"), opts(), progress=False)
    ray = ingest(files, str(tmp_path / "b"), opts(engine="ray", workers=2), progress=False)
    assert [(f.rows_read, f.rows_stored) for f in ray.files] == [
        (f.rows_read, f.rows_stored) for f in local.files
    ]
    assert [p.content_hash for p in ray.version.packs] == [
        p.content_hash for p in local.version.packs
    ]
    assert len(local.version.packs) == 1


@pytest.mark.parametrize("engine", ["local", "processes"])
def test_pools_match_inline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    import ticktensor.ingest._job as job

    monkeypatch.setattr(job, "MIN_BYTES_PER_WORKER", 1)  # force the pool for small inputs
    files = [str(f) for f in market_files(tmp_path, MARKET.days[0])]
    inline = ingest(files, str(tmp_path / "a"), opts(), progress=False)
    pooled = ingest(files, str(tmp_path / "b"), opts(workers=2, engine=engine), progress=False)
    assert [p.content_hash for p in pooled.version.packs] == [
        p.content_hash for p in inline.version.packs
    ]
    assert len(inline.version.packs) == 1
    assert [t.path for t in pooled.version.tables] == [t.path for t in inline.version.tables]


SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"no real data at {SHARED}")


def test_non_utf8_bytes_are_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes((HEADER + row(0)).encode() + f"{T0 + 9},A\xe9A,1.0,1,1\n".encode("latin-1"))
    result = ingest([str(path)], str(tmp_path / "store"), opts(), progress=False)
    (report,) = result.files
    assert (report.rows_read, report.rows_stored, report.rows_quarantined) == (2, 1, 1)
    assert report.rules == {"encoding": 1}


def test_mixed_timezone_offsets_are_normalized_to_utc(tmp_path: Path) -> None:
    body = HEADER + "2024-01-02T14:30:00Z,AAA,1.0,1,1\n2024-01-02T09:30:01-05:00,AAA,1.0,2,1\n"
    path = _bad_csv(tmp_path, "tz.csv", body)
    result = ingest([path], str(tmp_path / "store"), opts(), progress=False)
    (t,) = result.version.tables_of("trades")
    ts = result.version.read_table(t).column("ts_event").cast(pa.int64()).to_pylist()
    assert ts == [1_704_205_800 * 10**9, 1_704_205_801 * 10**9]


@pytest.mark.parametrize("damage", ["flipped", "truncated"])
def test_corrupted_zst_raises_naming_the_file(tmp_path: Path, damage: str) -> None:
    import zstandard

    from ticktensor.errors import InputError

    body = (HEADER + "".join(row(i) for i in range(2000))).encode()
    data = zstandard.ZstdCompressor(write_checksum=True).compress(body)
    half = len(data) // 2
    broken = data[:half] + b"\x00garbage" + data[half + 8 :] if damage == "flipped" else data[:half]
    path = tmp_path / "broken.csv.zst"
    path.write_bytes(broken)
    with pytest.raises(InputError, match=r"broken\.csv\.zst: cannot decompress zstd.*corrupt or"):
        ingest([str(path)], str(tmp_path / "store"), opts(), progress=False)
    assert Store.open(str(tmp_path / "store")).latest_version() == 0


@needs_shared
def test_dbn_with_the_wrong_schema_requested(tmp_path: Path) -> None:
    from ticktensor.errors import ConfigError

    src = str(SHARED / "dbn" / "GLBX.MDP3" / "test_data.mbo.dbn.zst")
    with pytest.raises(ConfigError, match="mbo"):
        ingest(
            [src],
            str(tmp_path / "store"),
            IngestOptions(read=ReadOptions(kind=EventKind.TRADES), workers=1),
            progress=False,
        )


@needs_shared
def test_mbo_copies_across_files_are_duplicates_within_a_file_not(tmp_path: Path) -> None:
    import shutil

    src = SHARED / "dbn" / "esh4-glbx-mdp3-20231225.mbo.dbn.zst"
    copy = tmp_path / "copy-of-esh4.mbo.dbn.zst"
    shutil.copy(src, copy)
    one = ingest([str(src)], str(tmp_path / "one"), IngestOptions(workers=1), progress=False)
    # Identical fills of one order in one packet are real events: all rows are kept.
    assert one.files[0].rows_stored == one.files[0].rows_read == 68_792
    both = ingest(
        [str(src), str(copy)], str(tmp_path / "two"), IngestOptions(workers=1), progress=False
    )
    # Inputs are taken in URL order: the first copy is kept, the later one is duplicate.
    first, later = sorted(both.files, key=lambda f: f.file)
    assert later.rows_quarantined == 68_792
    assert later.rules == {"duplicate": 68_792}
    assert first.rows_stored == 68_792


@needs_shared
@pytest.mark.parametrize(
    ("inputs", "extra", "kinds"),
    [
        (
            [
                "lobster/AMZN_2012-06-21_34200000_57600000_message_1.csv",
                "lobster/AMZN_2012-06-21_34200000_57600000_orderbook_1.csv",
            ],
            {"read": ReadOptions(kind=EventKind.QUOTES)},
            {"quotes"},
        ),
        (["tardis"], {}, {"trades", "quotes", "mbp10"}),
        (
            [
                "dbn/futures_mbp-1_2024-07-01T23-58_2024-07-02T00-02.dbn.zst",
                "dbn/futures_trades_2024-07-01T23-58_2024-07-02T00-02.dbn.zst",
            ],
            {},
            {"quotes", "trades"},
        ),
    ],
)
def test_real_vendor_files_end_to_end(
    tmp_path: Path, inputs: list[str], extra: dict[str, object], kinds: set[str]
) -> None:
    result = ingest(
        [str(SHARED / i) for i in inputs],
        str(tmp_path / "store"),
        IngestOptions(workers=1, **extra),
        progress=False,
    )  # type: ignore[arg-type]
    assert all(f.rows_read == f.rows_stored + f.rows_quarantined for f in result.files)
    assert {t.kind for t in result.version.tables} - {"quarantine"} == kinds
    assert result.version.packs, result.notes
    Store.open(str(tmp_path / "store")).verify()


def test_a_feature_beyond_float32_is_stored_as_inf_and_reported(tmp_path: Path) -> None:
    # Found by the reader fuzzers: a valid but huge trade size made a bar's volume
    # overflow the float32 feature store with a RuntimeWarning per cast.
    src = tmp_path / "trades.csv"
    rows = ["ts_event,symbol,price,size"]
    for i in range(200):
        size = "1e39" if i == 100 else str(1 + i % 5)
        rows.append(f"{1_704_200_000_000_000_000 + i * 10**9},AAA,{100 + i / 100},{size}")
    src.write_text("\n".join(rows) + "\n")
    result = ingest([str(src)], str(tmp_path / "s"), IngestOptions(), progress=False)
    assert (result.rows_read, result.rows_stored, result.rows_quarantined) == (200, 200, 0)
    assert result.notes == [
        "AAA/2024-01-02: 1 feature or label value(s) beyond float32's range stored as +/-inf"
    ]
    version = Store.open(str(tmp_path / "s")).version()
    values = version.read_pack(version.packs[0]).values
    column = list(version.feature_names).index("volume")
    assert np.isposinf(values[:, column]).sum() == 1
    assert np.isfinite(np.delete(values[:, column], np.isinf(values[:, column]))).all()
