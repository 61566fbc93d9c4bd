"""Binance: the real websocket capture against independent decodes, a dict-based reference
book, sequence gaps, and dump files written in Binance's documented layouts."""

from __future__ import annotations

import csv
import gzip
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from ticktensor.errors import ConfigError
from ticktensor.ingest._job import IngestOptions, ingest
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import EventBatch, ReadOptions, detect
from ticktensor.ingest.readers.binance import BinanceReader

DATA = Path(__file__).parents[4] / "shared" / "data"
if not DATA.exists():
    DATA = Path(__file__).resolve().parents[3].parent.joinpath("shared/data")
CAPTURE = DATA / "binance" / "spot_btcusdt_20240808.gz"


def read(path: Path, **options: Any) -> list[EventBatch]:
    return list(BinanceReader().read(expand_inputs([str(path)])[0], ReadOptions(**options)))


def by_kind(batches: list[EventBatch]) -> dict[str, tuple[pa.Table, np.ndarray]]:
    out: dict[str, tuple[pa.Table, np.ndarray]] = {}
    for kind in {b.kind.value for b in batches}:
        mine = [b for b in batches if b.kind.value == kind]
        out[kind] = (
            pa.concat_tables([b.table for b in mine]),
            np.concatenate([b.rows for b in mine]),
        )
    return out


def rejects_of(batches: list[EventBatch]) -> pa.Table:
    return pa.concat_tables([b.rejects for b in batches])


def capture_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    with gzip.open(path, "rt") as f:
        return [(int(a), json.loads(b)) for a, _, b in (line.partition(" ") for line in f)]


class ReferenceBook:
    """The obvious book: two dicts, sorted on every read, Binance's spot rules spelled out."""

    def __init__(self) -> None:
        self.bids: dict[float, float] = {}
        self.asks: dict[float, float] = {}
        self.snapshot: int | None = None
        self.last: int | None = None
        self.good = False

    def load(self, message: dict[str, Any]) -> None:
        self.bids = {float(p): float(q) for p, q in message["bids"] if float(q) > 0}
        self.asks = {float(p): float(q) for p, q in message["asks"] if float(q) > 0}
        self.snapshot, self.last, self.good = message["lastUpdateId"], None, True

    def diff(self, d: dict[str, Any]) -> bool:
        if self.snapshot is None or not self.good:
            return False
        if self.last is None:
            if d["u"] <= self.snapshot:
                return False
            if not d["U"] <= self.snapshot + 1 <= d["u"]:
                self.good = False
                return False
        elif d["U"] != self.last + 1:
            self.good = False
            return False
        for side, levels in ((self.bids, d["b"]), (self.asks, d["a"])):
            for p, q in levels:
                if float(q) == 0:
                    side.pop(float(p), None)
                else:
                    side[float(p)] = float(q)
        self.last = d["u"]
        return True

    def top(self) -> list[float | None]:
        bids = sorted(self.bids.items(), reverse=True)[:10]
        asks = sorted(self.asks.items())[:10]
        cells: list[float | None] = []
        for side in (bids, asks):
            pad: list[float | None] = [None] * (10 - len(side))
            cells += [p for p, _ in side] + pad + [q for _, q in side] + pad
        return cells


LEVELS = [f"{s}_{w}_{i:02d}" for s in ("bid", "ask") for w in ("px", "sz") for i in range(10)]


def test_real_capture_against_independent_decodes_and_a_reference_book() -> None:
    batches = read(CAPTURE)
    kinds = by_kind(batches)
    rejects = rejects_of(batches)
    lines = capture_lines(CAPTURE)
    assert len(lines) == 41_249
    trades, trade_rows = kinds["trades"]
    quotes, quote_rows = kinds["quotes"]
    book, book_rows = kinds["mbp10"]
    assert (trades.num_rows, quotes.num_rows, book.num_rows) == (9_757, 28_040, 3_450)
    assert rejects.column("rule").to_pylist() == ["superseded", "superseded"]
    every = sorted([*trade_rows, *quote_rows, *book_rows, *rejects.column("row").to_pylist()])
    assert every == list(range(1, 41_250))  # each line is one row or one reject

    expected_trades = [(n, m.get("data", {})) for n, m in enumerate((m for _, m in lines), 1)]
    expected_trades = [(n, d) for n, d in expected_trades if d.get("e") == "trade"]
    assert trade_rows.tolist() == [n for n, _ in expected_trades]
    assert trades.column("price").to_pylist() == [float(d["p"]) for _, d in expected_trades]
    assert trades.column("size").to_pylist() == [float(d["q"]) for _, d in expected_trades]
    assert trades.column("side").to_pylist() == [-1 if d["m"] else 1 for _, d in expected_trades]
    assert trades.column("trade_id").to_pylist() == [str(d["t"]) for _, d in expected_trades]
    ts = trades.column("ts_event").cast(pa.int64()).to_pylist()
    assert ts == [d["T"] * 10**6 for _, d in expected_trades]

    tickers = [(recv, m["data"]) for recv, m in lines if m.get("stream", "").endswith("bookTicker")]
    assert quotes.column("bid_px").to_pylist() == [float(d["b"]) for _, d in tickers]
    assert quotes.column("ask_sz").to_pylist() == [float(d["A"]) for _, d in tickers]
    assert quotes.column("sequence").to_pylist() == [d["u"] for _, d in tickers]
    assert quotes.column("ts_recv").cast(pa.int64()).to_pylist() == [r for r, _ in tickers]

    # The reference book: buffer diffs until the snapshot, then replay them, as Binance says.
    reference = ReferenceBook()
    expected: dict[int, list[float | None]] = {}
    waiting: list[tuple[int, dict[str, Any]]] = []
    for number, (_, message) in enumerate(lines, 1):
        if "lastUpdateId" in message:
            reference.load(message)
            expected[number] = reference.top()
            for n, d in waiting:
                if reference.diff(d):
                    expected[n] = reference.top()
            waiting = []
        elif message.get("data", {}).get("e") == "depthUpdate":
            if reference.snapshot is None:
                waiting.append((number, message["data"]))
            elif reference.diff(message["data"]):
                expected[number] = reference.top()
    assert sorted(expected) == sorted(book_rows.tolist())
    got = dict(
        zip(
            book_rows.tolist(),
            zip(*(book.column(c).to_pylist() for c in LEVELS), strict=True),
            strict=True,
        )
    )
    for number, cells in expected.items():
        assert list(got[number]) == cells, f"line {number}"
    assert book.column("action").to_pylist().count("R") == 1


def write_capture(path: Path, messages: list[dict[str, Any]]) -> Path:
    with gzip.open(path, "wt") as f:
        for i, message in enumerate(messages):
            f.write(f"{1_723_161_253_000_000_000 + i * 1_000_000} {json.dumps(message)}\n")
    return path


def snapshot(last: int, bid: float = 100.0, ask: float = 101.0) -> dict[str, Any]:
    return {"lastUpdateId": last, "bids": [[str(bid), "1"]], "asks": [[str(ask), "2"]]}


def diff(
    first: int, last: int, bids: list[list[str]], asks: list[list[str]], **extra: Any
) -> dict[str, Any]:
    data = {"e": "depthUpdate", "E": 1_723_161_255_000 + last, "s": "XUSDT", "U": first, "u": last}
    return {"stream": "xusdt@depth@100ms", "data": data | {"b": bids, "a": asks} | extra}


def test_a_gap_is_quarantined_until_the_next_snapshot(tmp_path: Path) -> None:
    messages = [
        diff(90, 95, [["99", "5"]], []),  # 1: waits for the snapshot, then superseded
        snapshot(100),  # 2
        diff(98, 104, [["99.5", "3"]], []),  # 3: straddles 101: applied
        diff(105, 110, [], [["101", "0"], ["102", "4"]]),  # 4: applied
        diff(115, 120, [["100", "0"]], []),  # 5: gap (111..114 missing)
        diff(121, 125, [["99", "1"]], []),  # 6: the book is unknown
        snapshot(130, 99.0, 100.5),  # 7
        diff(126, 129, [], []),  # 8: superseded by the new snapshot
        diff(129, 133, [["99.9", "1"]], []),  # 9: straddles 131: applied
        diff(133, 134, [], []),  # 10: overlaps the last diff (U=133, not 134): a gap
    ]
    batches = read(write_capture(tmp_path / "gap.gz", messages))
    book, rows = by_kind(batches)["mbp10"]
    rejects = rejects_of(batches)
    assert rows.tolist() == [2, 3, 4, 7, 9]
    assert rejects.column("row").to_pylist() == [1, 5, 6, 8, 10]
    assert rejects.column("rule").to_pylist() == [
        "superseded", "sequence_gap", "sequence_gap", "superseded", "sequence_gap",
    ]  # fmt: skip
    assert "U=115 where 111 was next" in rejects.column("message")[1].as_py()
    assert "the book is unknown since a gap: U=115" in rejects.column("message")[2].as_py()
    assert book.column("bid_px_00").to_pylist() == [100.0, 100.0, 100.0, 99.0, 99.9]
    assert book.column("ask_px_00").to_pylist() == [101.0, 101.0, 102.0, 100.5, 100.5]
    assert book.column("bid_px_01").to_pylist()[1:3] == [99.5, 99.5]


def test_futures_diffs_chain_by_pu(tmp_path: Path) -> None:
    messages = [
        snapshot(100),
        diff(95, 103, [["99", "1"]], [], pu=94),  # U <= 100 <= u: applied
        diff(104, 108, [], [["101.5", "1"]], pu=103),  # pu == last u: applied
        diff(111, 112, [], [], pu=109),  # pu 109 != 108: a gap
    ]
    batches = read(write_capture(tmp_path / "f.gz", messages))
    _, rows = by_kind(batches)["mbp10"]
    assert rows.tolist() == [1, 2, 3]
    rejects = rejects_of(batches)
    assert rejects.column("rule").to_pylist() == ["sequence_gap"]
    assert "pu=109 where the last diff applied had u=108" in rejects.column("message")[0].as_py()


def test_a_capture_without_snapshot_quarantines_its_diffs(tmp_path: Path) -> None:
    trade = {
        "e": "trade",
        "E": 1,
        "s": "XUSDT",
        "t": 7,
        "p": "10",
        "q": "2",
        "T": 1_723_161_255_000,
        "m": False,
    }
    messages = [
        diff(1, 2, [["9", "1"]], []),
        {"stream": "xusdt@trade", "data": trade},
        diff(3, 4, [], []),
    ]
    path = write_capture(tmp_path / "nosnap.gz", messages)
    batches = read(path)
    kinds = by_kind(batches)
    assert "mbp10" not in kinds
    assert kinds["trades"][0].column("side").to_pylist() == [1]
    rejects = rejects_of(batches)
    assert rejects.column("row").to_pylist() == [1, 3]
    assert set(rejects.column("rule").to_pylist()) == {"no_snapshot"}
    result = ingest([str(path)], str(tmp_path / "store"), IngestOptions(), progress=False)
    [report] = result.files
    assert (report.rows_read, report.rows_stored, report.rows_quarantined) == (3, 1, 2)


def test_other_streams_and_broken_lines_are_rejects(tmp_path: Path) -> None:
    path = tmp_path / "odd.gz"
    with gzip.open(path, "wt") as f:
        f.write('1723161253000000000 {"stream":"x@kline_1m","data":{"e":"kline","k":{}}}\n')
        f.write("1723161253000000001 {not json\n")
        f.write('1723161253000000002 {"stream":"x@trade","data":{"e":"trade","s":"X"}}\n')
    rejects = rejects_of(read(path))
    assert rejects.column("rule").to_pylist() == ["unsupported", "unparseable", "unparseable"]
    assert "'x@kline_1m' has no canonical schema" in rejects.column("message")[0].as_py()


def test_a_malformed_diff_leaves_the_book_unchanged(tmp_path: Path) -> None:
    messages = [
        snapshot(100),
        diff(101, 102, [["99.5", "2"], ["bad"]], []),  # 2: a malformed level: nothing applied
        diff(101, 102, [["99.7", "2"]], []),  # 3: the same ids, well formed: applied
        {"e": "depthUpdate", "E": 1e999, "s": "XUSDT", "U": 103, "u": 104, "b": [], "a": []},
        diff(105, 106, [], []),  # 5: follows 4, whose ids chained (its time did not parse)
    ]
    batches = read(write_capture(tmp_path / "bad.gz", messages))
    book, rows = by_kind(batches)["mbp10"]
    rejects = rejects_of(batches)
    assert rows.tolist() == [1, 3, 5]
    assert rejects.column("row").to_pylist() == [2, 4]
    assert "ValueError" in rejects.column("message")[0].as_py()
    assert book.column("bid_px_01").to_pylist() == [None, 99.7, 99.7]


# Dumps, in the layouts of github.com/binance/binance-public-data (README).
SPOT_TRADES = (
    "3735683259,61837.63,0.02,1236.7526,1723161255342,True,True\n"
    "3735683260,61837.64,0.01,618.3764,1723161255400,False,True\n"
)
FUTURES_TRADES = (
    "id,price,qty,quote_qty,time,is_buyer_maker\n100,61837.6,0.5,30918.8,1723161255342,true\n"
)
SPOT_AGG_2025 = "12,61837.63,0.02,3735683259,3735683260,1735689600010866,False,True\n"
FUTURES_AGG = (
    "agg_trade_id,price,quantity,first_trade_id,last_trade_id,transact_time,is_buyer_maker\n"
    "5,10.5,3,7,9,1689379200098,true\n"
)
KLINES = (
    "1723161240000,61800.0,61850.0,61790.0,61837.6,12.5,1723161299999,772970.0,300,6.0,370000.0,0\n"
    "1723161300000,61837.6,61900.0,61830.0,61890.0,0.0,1723161359999,0.0,0,0.0,0.0,0\n"
)
BOOK_TICKER = (
    "update_id,best_bid_price,best_bid_qty,best_ask_price,best_ask_qty,transaction_time,event_time\n"
    "3062820799546,26.67,172.0,26.671,582.0,1689379200098,1689379200104\n"
)


@pytest.mark.parametrize(
    ("name", "text", "kind", "column", "values"),
    [
        ("BTCUSDT-trades-2024-08-08.csv", SPOT_TRADES, "trades", "side", [-1, 1]),
        ("BTCUSDT-trades-2024-08-09.csv", FUTURES_TRADES, "trades", "trade_id", ["100"]),
        ("BTCUSDT-aggTrades-2025-01-01.csv", SPOT_AGG_2025, "trades", "trade_id", ["12"]),
        ("ETHUSDT-aggTrades-2023-07-15.csv", FUTURES_AGG, "trades", "side", [-1]),
        ("BTCUSDT-1m-2024-08-08.csv", KLINES, "ohlcv", "vwap", [772970.0 / 12.5, None]),
        ("SOLUSDT-bookTicker-2023-07-15.csv", BOOK_TICKER, "quotes", "sequence", [3062820799546]),
    ],
)
def test_dumps_in_the_documented_layouts(
    tmp_path: Path, name: str, text: str, kind: str, column: str, values: list[Any]
) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert detect(expand_inputs([str(path)])[0]).name == "binance"
    batches = read(path)
    [batch] = batches
    assert batch.kind == kind
    assert batch.table.column(column).to_pylist() == values
    assert set(batch.table.column("symbol").to_pylist()) == {name.split("-", 1)[0]}
    rows = list(csv.reader(text.splitlines()))
    data = rows[1:] if not rows[0][0].isdigit() else rows
    assert batch.table.num_rows == len(data)
    time_index = {"trades": 4, "ohlcv": 0, "quotes": 5}[kind] if "aggTrades" not in name else 5
    raw = int(data[0][time_index])
    scale = 10**3 if raw > 10**14 else 10**6  # µs for 2025 spot files, else ms
    assert batch.table.column("ts_event").cast(pa.int64())[0].as_py() == raw * scale
    assert batch.inference is not None
    assert any(note.startswith("binance ") and "dump" in note for note in batch.inference.notes)


def test_klines_take_the_interval_from_the_name(tmp_path: Path) -> None:
    path = tmp_path / "BTCUSDT-5m-2024-08-08.csv"
    path.write_text(KLINES.replace("1723161300000", "1723161540000"))
    [batch] = read(path)
    assert set(batch.table.column("interval_ns").to_pylist()) == {300 * 10**9}
    assert batch.table.column("trade_count").to_pylist() == [300, 0]


def test_dump_errors_name_the_file_and_layouts(tmp_path: Path) -> None:
    odd = tmp_path / "BTCUSDT-trades-2024-08-08.csv"
    odd.write_text("1,2,3\n")
    with pytest.raises(ConfigError, match="trades dump has 6 or 7 fields per line, this one 3"):
        read(odd)
    odd.write_text(SPOT_TRADES)
    with pytest.raises(ConfigError, match="requested kind 'quotes'"):
        read(odd, kind="quotes")


def book_depth_lines(snapshots: int, bands: tuple[float, ...]) -> list[str]:
    """Consistent bands: a book of one unit per 0.01 % step, price 100 at the mid."""
    lines = []
    for k in range(snapshots):
        stamp = f"2023-01-15 23:{k // 2:02d}:{(k % 2) * 30:02d}"
        for pct in bands:
            steps = np.arange(1, int(abs(pct) * 100) + 1) / 10_000
            prices = 100 * (1 + np.sign(pct) * steps) * (1 + k / 1000)
            lines.append(f"{stamp},{pct:g},{len(steps)},{prices.sum():.6f}")
    return lines


@pytest.mark.parametrize(("header", "batch_rows"), [(True, 1 << 20), (False, 5)])
def test_book_depth_snapshots_against_a_plain_grouping(
    tmp_path: Path, header: bool, batch_rows: int
) -> None:
    bands = (-5.0, -4.0, -3.0, -2.0, -1.0, -0.2, 0.2, 1.0, 2.0, 3.0, 4.0, 5.0)
    lines = book_depth_lines(4, bands)
    lines.insert(13, "not a time,1,2,3")  # line 14: a reject, inside the second snapshot
    path = tmp_path / "BTCUSDT-bookDepth-2023-01-15.csv"
    head = "timestamp,percentage,depth,notional\n" if header else ""
    path.write_text(head + "\n".join(lines) + "\n")
    batches = read(path, batch_rows=batch_rows)
    table = pa.concat_tables([b.table for b in batches])
    rows = np.concatenate([b.rows for b in batches]).tolist()
    rejects = rejects_of(batches)
    assert rows == [1, 13, 26, 38]  # each snapshot's first line
    assert rejects.column("row").to_pylist() == [14]
    grouped: dict[str, dict[float, tuple[float, float]]] = {}
    for stamp, pct, depth, notional in (line.split(",") for line in lines if line[0] == "2"):
        grouped.setdefault(stamp, {})[float(pct)] = (float(depth), float(notional))
    for i, (stamp, snapshot) in enumerate(grouped.items()):
        bids = sorted((p for p in snapshot if p < 0), reverse=True)
        asks = sorted(p for p in snapshot if p > 0)
        for side, pcts in (("bid", bids), ("ask", asks)):
            for level in range(10):
                px = table.column(f"{side}_px_{level:02d}")[i].as_py()
                sz = table.column(f"{side}_sz_{level:02d}")[i].as_py()
                if level >= len(pcts):
                    assert (px, sz) == (None, None)
                    continue
                depth, notional = snapshot[pcts[level]]
                assert sz == depth
                assert px == pytest.approx(notional / depth, rel=1e-12)
        ts = table.column("ts_event").cast(pa.int64())[i].as_py()
        assert ts == int(datetime.fromisoformat(stamp + "+00:00").timestamp()) * 10**9
    assert set(table.column("action").to_pylist()) == {"R"}
    result = ingest([str(path)], str(tmp_path / "store"), IngestOptions(), progress=False)
    [report] = result.files
    # a row is a snapshot; the validator finds the bands consistent (level order, no cross)
    assert (report.rows_read, report.rows_stored, report.rows_quarantined) == (5, 4, 1)


def test_book_depth_past_ten_bands_rejects_the_farthest(tmp_path: Path) -> None:
    bands = tuple(-float(k) for k in range(1, 13))
    path = tmp_path / "BTCUSDT-bookDepth-2023-01-16.csv"
    path.write_text("\n".join(book_depth_lines(1, bands)) + "\n")
    [batch] = read(path)
    assert batch.rejects.column("value").to_pylist() == ["-11", "-12"]
    assert set(batch.rejects.column("rule").to_pylist()) == {"depth_levels"}
    assert batch.table.column("bid_sz_09").to_pylist() == [1000.0]


def test_ingest_of_the_real_capture_adds_up(tmp_path: Path) -> None:
    result = ingest([str(CAPTURE)], str(tmp_path / "store"), IngestOptions(), progress=False)
    [report] = result.files
    assert report.format == "binance"
    assert report.rows_read == report.rows_stored + report.rows_quarantined == 41_249
    assert report.rules == {"superseded": 2}
    assert report.inference is not None
    assert any("trade 9,757" in note for note in report.inference["notes"])
