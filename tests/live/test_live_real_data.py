"""Real sample files, ingested into a store: replaying each stored session gives its pack's rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ticktensor.ingest import IngestOptions, ingest
from ticktensor.ingest.readers import ReadOptions
from ticktensor.live import DAY_NS, LiveEngine, read_events, session_events
from ticktensor.schemas import EventKind, FeatureSpec

from .conftest import COMMON, FEATURES, assert_bits_equal, by_symbol

DATA = Path(__file__).resolve().parents[2].parent.joinpath("shared/data")
DBN = ("futures_mbp-1_2024-07-01T23-58_2024-07-02T00-02.dbn.zst",
       "futures_trades_2024-07-01T23-58_2024-07-02T00-02.dbn.zst")  # fmt: skip
CASES = {
    "dbn mbp-1 + trades": ([f"dbn/{name}" for name in DBN], None),
    "binance capture": (["binance/spot_btcusdt_20240808.gz"], None),
    "fx quotes": (["fx/usdjpy-ticks.csv"], "USDJPY"),
    "tardis quotes + trades": (
        ["tardis/huobi-dm-swap_quotes_BTC-USD.csv", "tardis/bitmex_trades_XBTUSD.csv"],
        None,
    ),
    "1-minute bars": (["bars/btc-perp-20211231-20220201_1m.csv"], "BTC-PERP"),
}
SPECS = {
    "quotes": FeatureSpec(FEATURES["quotes"], version=2),
    "trades": FeatureSpec(("price", *COMMON), version=2, clock="trades"),
    "ohlcv": FeatureSpec(FEATURES["ohlcv"], version=2, clock="ohlcv"),
    "mbp10": FeatureSpec(FEATURES["mbp10"], version=2, clock="mbp10"),
    # Without book columns: some sessions of the samples hold trades but no quotes.
    "bars": FeatureSpec(
        (*FEATURES["ohlcv"], "signed_volume", "signed_volume_2m"), version=2, clock="bars", bar="1s"
    ),
    "dollar bars": FeatureSpec(
        (*FEATURES["ohlcv"], "signed_volume", "signed_volume_2m"),
        version=2,
        clock="bars",
        bar="dollar:50000",
    ),
}
RUNS = [
    *((case, clock) for case in sorted(CASES) if case != "1-minute bars" for clock in SPECS
      if clock in ("quotes", "trades") and (case, clock) != ("fx quotes", "trades")),
    ("1-minute bars", "ohlcv"),
    ("binance capture", "mbp10"),
    ("binance capture", "bars"),
    ("dbn mbp-1 + trades", "bars"),
    ("tardis quotes + trades", "bars"),
    ("binance capture", "dollar bars"),
    ("dbn mbp-1 + trades", "dollar bars"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "clock"), RUNS)
def test_replaying_stored_sessions_of_real_files(case: str, clock: str, tmp_path: Path) -> None:
    files, symbol = CASES[case]
    paths = [DATA / f for f in files]
    if not all(p.exists() for p in paths):
        pytest.skip(f"sample files of {case} are not here")
    spec = SPECS[clock]
    options = IngestOptions(spec=spec, workers=1, read=ReadOptions(symbol=symbol))
    v = ingest([str(p) for p in paths], str(tmp_path / "store"), options, progress=False).version
    assert v.packs, "the ingest stored no feature rows"
    compared = 0
    for pack in v.packs:
        engine = LiveEngine.for_version(v)
        rows = engine.replay(session_events(v, pack.session))
        stored = v.read_pack(pack)
        order = by_symbol(rows, stored.symbols)
        np.testing.assert_array_equal(rows.ts[order], stored.ts)
        assert_bits_equal(rows.values[order], stored.values, spec.features)
        compared += stored.ts.size
    assert compared > 0


FEEDS = {
    "dbn mbp-1 + trades": ("quotes", [f"dbn/{name}" for name in DBN]),
    "binance capture, quotes clock": ("quotes", ["binance/spot_btcusdt_20240808.gz"]),
    "binance capture, mbp10 clock": ("mbp10", ["binance/spot_btcusdt_20240808.gz"]),
    "binance capture, bars clock": ("bars", ["binance/spot_btcusdt_20240808.gz"]),
    "dbn mbp-1 + trades, bars clock": ("bars", [f"dbn/{name}" for name in DBN]),
}


@pytest.mark.parametrize("feed", sorted(FEEDS))
def test_vendor_files_read_as_a_feed_give_every_sessions_rows(feed: str, tmp_path: Path) -> None:
    """The files' events in file order, through ingest's readers: the engine starts each
    session (UTC day) afresh and refuses what ingest quarantines, so its rows are the
    store's rows of every session."""
    clock, files = FEEDS[feed]
    paths = [str(DATA / f) for f in files]
    if not all(Path(p).exists() for p in paths):
        pytest.skip(f"sample files of {feed} are not here")
    spec = SPECS[clock]
    v = ingest(paths, str(tmp_path / "store"), IngestOptions(spec=spec, workers=1), progress=False)
    version = v.version
    engine = LiveEngine.for_version(version)
    rows = engine.replay(read_events(paths))
    opens = 10**9 if clock == "bars" else 0  # a bar's row is stamped at its close
    day = (rows.ts - opens) // DAY_NS
    for pack in version.packs:
        stored = version.read_pack(pack)
        mine = np.flatnonzero(day == int((stored.ts[0] - opens) // DAY_NS))
        order = mine[by_symbol(rows._replace(symbol=rows.symbol[mine]), stored.symbols)]
        np.testing.assert_array_equal(rows.ts[order], stored.ts)
        assert_bits_equal(rows.values[order], stored.values, spec.features)
    assert sum(version.read_pack(p).ts.size for p in version.packs) == rows.ts.size


@pytest.mark.parametrize("partition", ["day", "month", "year"])
def test_a_feed_spanning_partitions_gives_each_partitions_rows(
    partition: str, tmp_path: Path
) -> None:
    """Sessions are the store's partition: a month of 1-minute bars stored by day, month
    or year, read back as a feed, restarts its state where the partition does."""
    path = DATA / "bars/btc-perp-20211231-20220201_1m.csv"
    if not path.exists():
        pytest.skip("the 1-minute bars sample is not here")
    spec = SPECS["ohlcv"]
    options = IngestOptions(
        spec=spec, workers=1, read=ReadOptions(symbol="BTC-PERP"), partition=partition
    )  # type: ignore[arg-type]
    version = ingest([str(path)], str(tmp_path / "store"), options, progress=False).version
    engine = LiveEngine.for_version(version)
    read = ReadOptions(kind=EventKind.OHLCV, symbol="BTC-PERP")
    rows = engine.replay(read_events([path], read))
    opened = np.datetime_as_string((rows.ts - 60 * 10**9).astype("datetime64[ns]"), unit="D")
    assert len(version.packs) == {"day": 33, "month": 3, "year": 2}[partition]
    for pack in version.packs:
        stored = version.read_pack(pack)
        mine = np.char.startswith(opened, pack.session)
        np.testing.assert_array_equal(rows.ts[mine], stored.ts)
        assert_bits_equal(rows.values[mine], stored.values, spec.features)
