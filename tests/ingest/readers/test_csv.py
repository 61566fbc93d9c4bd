"""The generic CSV reader against real files, independent decodes and edge cases."""

from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import io
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import ConfigError, InputError, SchemaError
from ticktensor.ingest._sources import MappedFile, expand_inputs
from ticktensor.ingest.readers import CsvFormat, CsvReader, EventBatch, ReadOptions
from ticktensor.ingest.readers.csv import MAX_LINE_BYTES, _blocks, _mapped_blocks

DATA = Path(__file__).parents[4] / "shared" / "data"
if not DATA.exists():
    DATA = Path(__file__).resolve().parents[3].parent.joinpath("shared/data")

TRADES = CsvFormat(columns={"ts_event": "ts", "price": "px", "size": "qty", "side": "side"})


def read(path: Path | str, **options: object) -> list[EventBatch]:
    return list(CsvReader().read(expand_inputs([str(path)])[0], ReadOptions(**options)))  # type: ignore[arg-type]


def concat(batches: list[EventBatch]) -> tuple[pa.Table, np.ndarray, pa.Table]:
    table = pa.concat_tables([b.table for b in batches]) if batches else None
    rows = np.concatenate([b.rows for b in batches]) if batches else np.array([], np.int64)
    rejects = pa.concat_tables([b.rejects for b in batches]) if batches else None
    return table, rows, rejects  # type: ignore[return-value]


def ns(dt: datetime) -> int:
    return int(dt.timestamp()) * 10**9 + dt.microsecond * 1000


def ts_ns(table: pa.Table) -> list[int]:
    return table.column("ts_event").cast(pa.int64()).to_pylist()


def test_usdjpy_quotes_match_python_csv() -> None:
    path = DATA / "fx" / "usdjpy-ticks.csv"
    fmt = CsvFormat(columns={"ts_event": "timestamp", "bid_px": "bid", "ask_px": "ask"})
    table, rows, rejects = concat(read(path, kind="quotes", symbol="USD/JPY", csv=fmt))
    with path.open() as f:
        expected = list(csv.DictReader(f))
    assert table.num_rows == len(expected) == 1000
    assert rejects.num_rows == 0
    assert rows.tolist() == list(range(1, 1001))
    assert ts_ns(table) == [ns(datetime.fromisoformat(r["timestamp"])) for r in expected]
    assert table.column("bid_px").to_pylist() == [float(r["bid"]) for r in expected]
    assert table.column("ask_px").to_pylist() == [float(r["ask"]) for r in expected]
    assert set(table.column("symbol").to_pylist()) == {"USD/JPY"}


def test_histdata_eastern_time_without_header() -> None:
    path = DATA / "fx" / "quote_tick_data.csv"
    fmt = CsvFormat(
        header=False,
        columns={"ts_event": "0", "bid_px": "1", "ask_px": "2"},
        ts_format="%Y%m%d %H%M%S%f",
        timezone="America/New_York",
    )
    table, rows, _ = concat(read(path, kind="quotes", symbol="EUR/USD", batch_rows=1000, csv=fmt))
    with path.open() as f:
        expected = list(csv.reader(f))
    zone = ZoneInfo("America/New_York")
    want = [ns(datetime.strptime(r[0], "%Y%m%d %H%M%S%f").replace(tzinfo=zone)) for r in expected]
    assert ts_ns(table) == want
    assert table.column("bid_px").to_pylist() == [float(r[1]) for r in expected]
    assert rows.tolist() == list(range(1, len(expected) + 1))


def test_bars_match_pyarrow_in_several_batches() -> None:
    path = DATA / "bars" / "btc-perp-20211231-20220201_1m.csv"
    fmt = CsvFormat(columns={"ts_event": "timestamp"})
    batches = read(path, kind="ohlcv", symbol="BTC-PERP", batch_rows=10_000, csv=fmt)
    assert len(batches) > 4
    assert all(b.table.num_rows <= 10_000 for b in batches)
    table, rows, _ = concat(batches)
    direct = pacsv.read_csv(path)
    assert table.num_rows == direct.num_rows == 45_031
    want = direct.column("timestamp").cast(pa.timestamp("ns")).cast(pa.int64())
    assert ts_ns(table) == want.to_pylist()
    for name in ("open", "high", "low", "close", "volume"):
        assert table.column(name).to_pylist() == direct.column(name).to_pylist()
    assert set(table.column("interval_ns").to_pylist()) == {60 * 10**9}
    assert rows[-1] == 45_031


def _trades_csv(path: Path, n: int, bad: dict[int, str] | None = None) -> Path:
    """Data line i (1-based) holds price i + 0.5, so values show which line a row is."""
    good = "{},{}.5,1,B,x"
    lines = ["ts,px,qty,side,extra"]
    lines += [
        (bad or {}).get(i, good.format(1_700_000_000_000_000_000 + i, i)) for i in range(1, n + 1)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("batch_rows", [1, 7, 64, 100_000])
def test_block_boundaries_do_not_change_output(tmp_path: Path, batch_rows: int) -> None:
    path = _trades_csv(tmp_path / "t.csv", 500)
    batches = read(path, kind="trades", symbol="X", batch_rows=batch_rows, csv=TRADES)
    assert all(b.table.num_rows <= batch_rows for b in batches)
    table, rows, _ = concat(batches)
    reference, ref_rows, _ = concat(read(path, kind="trades", symbol="X", csv=TRADES))
    assert table.equals(reference)
    assert rows.tolist() == ref_rows.tolist() == list(range(1, 501))
    assert table.column("side").to_pylist() == [1] * 500


BAD_LINES = {
    17: "1700000000000000017,abc,1,B,x",
    120: "1700000000000000120,120.5",
    200: "",
    333: "oops,333.5,1,B,x",
    334: "1700000000000000334,334.5,1,Q,x",
}


@pytest.mark.parametrize("batch_rows", [5, 64, 100_000])
def test_rejects_have_exact_rows_across_blocks(tmp_path: Path, batch_rows: int) -> None:
    path = _trades_csv(tmp_path / "bad.csv", 400, BAD_LINES)
    batches = read(path, kind="trades", symbol="X", batch_rows=batch_rows, csv=TRADES)
    table, rows, rejects = concat(batches)
    assert rejects.column("row").to_pylist() == [17, 120, 333, 334]
    assert rejects.column("rule").to_pylist() == [
        "unparseable",
        "field_count",
        "unparseable",
        "unparseable",
    ]
    assert rejects.column("column").to_pylist() == ["px", None, "ts", "side"]
    assert rejects.column("raw").to_pylist() == [BAD_LINES[r] for r in (17, 120, 333, 334)]
    first = rejects.column("message")[0].as_py()
    assert "bad.csv row 17" in first
    assert "'px'" in first
    assert "'abc'" in first
    assert "expected 5 fields, got 2" in rejects.column("message")[1].as_py()
    # every decoded row sits at its true line: price = line + 0.5; blank line 200 skipped
    assert table.column("price").to_pylist() == [r + 0.5 for r in rows.tolist()]
    assert table.num_rows == 400 - 5
    assert 200 not in rows.tolist()


def test_wrong_delimiter_and_missing_column_name_the_file_columns(tmp_path: Path) -> None:
    path = tmp_path / "semi.csv"
    path.write_text("ts;px;qty\n1;2;3\n")
    with pytest.raises(SchemaError, match=r"'ts'.*ts;px;qty"):
        read(path, kind="trades", symbol="X", csv=TRADES)
    path = tmp_path / "missing.csv"
    path.write_text("ts,px\n1,2\n")
    with pytest.raises(SchemaError, match=r"'qty'.*\['ts', 'px'\]"):
        read(path, kind="trades", symbol="X", csv=TRADES)


def test_required_column_without_source_and_kind_needed(tmp_path: Path) -> None:
    path = _trades_csv(tmp_path / "t.csv", 3)
    with pytest.raises(SchemaError, match="symbol"):
        read(path, kind="trades", csv=TRADES)
    with pytest.raises(ConfigError, match="trades, quotes, mbp10, mbo, ohlcv"):
        read(path, csv=TRADES)


def test_non_utf8_field_becomes_an_encoding_reject(tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    path.write_bytes(b"ts,px,qty,sym\n1,1.5,1,AB\n2,2.5,1,Z\xfcrich\n3,3.5,1,CD\n")
    fmt = CsvFormat(columns={"ts_event": "ts", "price": "px", "size": "qty", "symbol": "sym"})
    table, rows, rejects = concat(read(path, kind="trades", csv=fmt))
    assert rows.tolist() == [1, 3]
    assert table.column("symbol").to_pylist() == ["AB", "CD"]
    assert rejects.column("rule").to_pylist() == ["encoding"]
    assert rejects.column("value").to_pylist() == ["Z\\xfcrich"]
    assert rejects.column("raw").to_pylist() == ["2,2.5,1,Z\\xfcrich"]


def test_empty_and_header_only_files_give_no_rows(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    assert concat(read(empty, kind="trades", symbol="X", csv=TRADES))[1].size == 0
    header = tmp_path / "header.csv"
    header.write_text("ts,px,qty,side\n")
    table, rows, _ = concat(read(header, kind="trades", symbol="X", csv=TRADES))
    assert rows.size == 0
    assert table is None or table.num_rows == 0


@pytest.mark.parametrize(
    ("suffix", "pack"),
    [(".gz", gzip.compress), (".zst", zstandard.compress), (".bz2", bz2.compress)],
)
def test_compressed_inputs_decode_identically(tmp_path: Path, suffix: str, pack: object) -> None:
    plain = _trades_csv(tmp_path / "t.csv", 300, BAD_LINES)
    packed = tmp_path / f"t.csv{suffix}"
    packed.write_bytes(pack(plain.read_bytes()))  # type: ignore[operator]
    want = concat(read(plain, kind="trades", symbol="X", batch_rows=50, csv=TRADES))
    got = concat(read(packed, kind="trades", symbol="X", batch_rows=50, csv=TRADES))
    assert got[0].equals(want[0])
    assert got[1].tolist() == want[1].tolist()
    # messages name the file as given (t.csv.gz); everything else is identical
    assert got[2].drop_columns(["message"]).equals(want[2].drop_columns(["message"]))
    assert f"t.csv{suffix} row 17" in got[2].column("message")[0].as_py()


def test_memory_url_crlf_bom_and_numeric_seconds() -> None:
    import fsspec

    with fsspec.open("memory://csvtest/s.csv", "wb") as f:
        f.write(b"\xef\xbb\xbfts,px,qty\r\n1700000000.123456789,1.5,2\r\n1700000001,2.5,3\r\n")
    fmt = CsvFormat(columns={"ts_event": "ts", "price": "px", "size": "qty"}, ts_unit="s")
    table, rows, _ = concat(read("memory://csvtest/s.csv", kind="trades", symbol="X", csv=fmt))
    assert ts_ns(table) == [1_700_000_000_123_456_789, 1_700_000_001_000_000_000]
    assert rows.tolist() == [1, 2]
    assert table.column("side").to_pylist() == [0, 0]


def test_tsv_with_side_map_and_price_scale(tmp_path: Path) -> None:
    path = tmp_path / "t.tsv"
    path.write_text("t\tp\tq\tdir\n1\t105000\t1\tbuy\n2\t106000\t2\tsell\n")
    fmt = CsvFormat(
        delimiter="\t",
        columns={"ts_event": "t", "price": "p", "size": "q", "side": "dir"},
        price_scale=1e-4,
        side_map={"buy": 1, "sell": -1},
    )
    table, _, _ = concat(read(path, kind="trades", symbol="X", csv=fmt))
    assert table.column("price").to_pylist() == pytest.approx([10.5, 10.6])
    assert table.column("side").to_pylist() == [1, -1]
    assert datetime.fromtimestamp(0, UTC).year == 1970


def _texts(line_bytes: int, lines: int) -> st.SearchStrategy[bytes]:
    """Texts of up to ``lines`` lines of up to ``line_bytes`` bytes, the last line with
    a line break or not."""
    line = st.binary(max_size=line_bytes).map(lambda b: b.replace(b"\n", b""))
    return st.tuples(st.lists(line, max_size=lines), st.booleans()).map(
        lambda t: b"\n".join(t[0]) + (b"\n" if t[1] and t[0] else b"")
    )


def _check_whole_lines(blocks: list[bytes], text: bytes) -> None:
    """``blocks`` hold ``text`` whole, cut after line breaks, none empty."""
    assert b"".join(blocks) == text
    assert all(b.endswith(b"\n") for b in blocks[:-1])
    assert all(blocks)


@settings(max_examples=150, deadline=None)
@given(text=_texts(12, 30), head=st.integers(0, 20), size=st.integers(1, 40))
def test_blocks_are_whole_lines_and_lose_no_byte(text: bytes, head: int, size: int) -> None:
    # The first bytes come read already (the header's line), the rest from the stream.
    blocks = [bytes(b) for b in _blocks(io.BytesIO(text[head:]), text[:head], lambda: size, "x")]
    _check_whole_lines(blocks, text)


@settings(max_examples=100, deadline=None)
@given(text=_texts(900, 40), start=st.integers(0, 50), size=st.integers(1, 9_000))
def test_a_mapped_file_is_cut_into_whole_lines_and_loses_no_byte(
    tmp_path_factory: pytest.TempPathFactory, text: bytes, start: int, size: int
) -> None:
    path = tmp_path_factory.mktemp("mapped") / "t.csv"
    path.write_bytes(text)
    mapped = MappedFile(str(path))
    start = min(start, len(text))
    blocks = [bytes(b) for b in _mapped_blocks(mapped, start, lambda: size, "x")]
    _check_whole_lines(blocks, text[start:])
    # A block is at most its size (4 KiB at least), unless it is one line longer than that.
    limit = max(size, 1 << 12)
    assert all(len(b) <= limit or b.count(b"\n") <= 1 for b in blocks)
    assert mapped.hexdigest() == hashlib.sha256(text).hexdigest()
    mapped.close()


def test_a_mapped_line_longer_than_the_limit_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "one-line.csv"
    path.write_bytes(b"ts,px\n" + b"1" * (MAX_LINE_BYTES + 10))
    mapped = MappedFile(str(path))
    with pytest.raises(InputError, match="without a line break"):
        list(_mapped_blocks(mapped, 6, lambda: 1 << 20, "one-line.csv"))
    mapped.close()


def test_mapped_windows_start_anywhere_and_end_with_their_views(tmp_path: Path) -> None:
    data = bytes(range(256)) * 1_000  # 256 KB: windows across the mapping grid
    path = tmp_path / "bytes.bin"
    path.write_bytes(data)
    mapped = MappedFile(str(path))
    for start, end in [(0, 0), (1, 5), (4_095, 4_097), (65_537, 200_001), (255_000, 256_000)]:
        window = mapped.window(start, end)
        assert bytes(window.view(0, end - start)) == data[start:end]
        assert window.find(bytes([data[end - 1]]), end - start - 1) == (
            end - start - 1 if end > start else -1
        )
    mapped.close()
    view = MappedFile(str(path)).window(10, 20).view(0, 10)
    assert bytes(view) == data[10:20]  # a view outlives its window and the file's descriptor


@pytest.mark.parametrize("batch_rows", [7, 64, 100_000])
def test_a_local_file_reads_as_its_stream_does(tmp_path: Path, batch_rows: int) -> None:
    # Local uncompressed files are memory-mapped; other inputs are streamed.
    path = _trades_csv(tmp_path / "t.csv", 3_000, BAD_LINES)
    streamed = tmp_path / "t.csv.gz"
    streamed.write_bytes(gzip.compress(path.read_bytes()))
    options = {"kind": "trades", "symbol": "X", "batch_rows": batch_rows, "csv": TRADES}
    [local] = expand_inputs([str(path)])
    mapped_batches = list(CsvReader().read(local, ReadOptions(**options)))  # type: ignore[arg-type]
    table, rows, rejects = concat(mapped_batches)
    reference, ref_rows, ref_rejects = concat(read(streamed, **options))
    assert table.equals(reference)
    assert rows.tolist() == ref_rows.tolist()
    assert rejects.drop_columns(["message"]).equals(ref_rejects.drop_columns(["message"]))
    assert rejects.column("message").to_pylist() == [
        m.replace("t.csv.gz", "t.csv") for m in ref_rejects.column("message").to_pylist()
    ]
    assert local.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_mapped_file_reads_as_a_stream_and_hashes_every_byte(tmp_path: Path) -> None:
    for size in (0, 10, (4 << 20) + 5):  # the last is hashed on a thread of its own
        data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
        path = tmp_path / f"f{size}.bin"
        path.write_bytes(data)
        mapped = MappedFile(str(path))
        head = mapped.read(7)
        assert mapped.tell() == len(head)
        assert head + mapped.read() == data
        assert mapped.hexdigest() == hashlib.sha256(data).hexdigest()
        mapped.close()


@pytest.mark.parametrize(
    ("lines", "large", "mapped"), [(3, False, 0), (3_500, False, 3), (3_500, True, 4)]
)
def test_only_a_stream_larger_than_a_block_gets_populated_buffers(
    monkeypatch: pytest.MonkeyPatch, lines: int, large: bool, mapped: int
) -> None:
    # A populated buffer maps every page of a block (tens of MB) at once: for a small
    # file, that is nearly all waste, and ingesting many small files paid it per file.
    calls = []

    def counted(shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
        calls.append(shape)
        return np.empty(shape, dtype)

    monkeypatch.setattr("ticktensor.ingest.readers.csv.fresh_buffer", counted)
    text = b"".join(b"line %04d\n" % i for i in range(lines))  # 10 bytes a line
    # 1,000 lines a block; ``large``: the file's size says it holds more than a block.
    blocks = list(_blocks(io.BytesIO(text), b"", lambda: 10_000, "x", large))
    assert b"".join(bytes(b) for b in blocks) == text
    # 3,500 lines: 4 blocks, the 4th ending the stream; the first is populated when the
    # stream is known to be large, else only those after it.
    assert len(calls) == mapped
