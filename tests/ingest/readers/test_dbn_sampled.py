"""DBN sampled top of book (bbo-1s/1m, cbbo-1s/1m) on its sample time, OPRA records kept
per publisher, and legacy DBZ files named, on records written by databento-dbn's encoder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import databento_dbn as db
import pyarrow as pa
import pytest

from ticktensor.errors import ConfigError
from ticktensor.ingest._job import IngestOptions, ingest
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import ReadOptions, detect
from ticktensor.ingest.readers.dbn import DbnReader

from ._dbn_files import T0
from ._dbn_files import metadata as dbn_metadata

UNDEF_PX = 2**63 - 1
UNDEF_TS = 2**64 - 1
SECOND = 10**9
RTYPES = {"bbo-1s": 0xC3, "bbo-1m": 0xC4, "cbbo-1s": 0xC0, "cbbo-1m": 0xC1}
STEP = {"bbo-1s": SECOND, "bbo-1m": 60 * SECOND, "cbbo-1s": SECOND, "cbbo-1m": 60 * SECOND}


def sampled(schema: str, ts_event: list[int], publisher: int = 1) -> list[Any]:
    """Samples at T0 + k * interval; ``ts_event`` (the last book update) per record."""
    out: list[Any] = []
    for i, event in enumerate(ts_event):
        common: dict[str, Any] = {
            "rtype": RTYPES[schema], "publisher_id": publisher, "instrument_id": 7,
            "ts_event": event, "price": UNDEF_PX, "size": 0, "side": db.Side.NONE,
            "ts_recv": T0 + (i + 1) * STEP[schema],
        }  # fmt: skip
        if schema.startswith("cbbo"):
            level = db.ConsolidatedBidAskPair(
                bid_px=100_000_000_000 + i, ask_px=100_010_000_000, bid_sz=5, ask_sz=6
            )
            out.append(db.CBBOMsg(levels=level, **common))
        else:
            level = db.BidAskPair(
                bid_px=100_000_000_000 + i, ask_px=100_010_000_000, bid_sz=5, ask_sz=6
            )
            out.append(db.BBOMsg(sequence=i, levels=level, **common))
    return out


def write(path: Path, schema: str, records: list[Any], dataset: str = "EQUS.MINI") -> Path:
    header = dbn_metadata(schema, {"AAPL": 7}, dataset=dataset, end=T0 + 10**12)
    path.write_bytes(header + b"".join(bytes(r) for r in records))
    return path


def decoded(path: Path) -> list[Any]:
    decoder = db.DBNDecoder(upgrade_policy=db.VersionUpgradePolicy.AS_IS)
    decoder.write(path.read_bytes())
    _, *records = decoder.decode()
    return records


@pytest.mark.parametrize("schema", list(RTYPES))
def test_sampled_schemas_are_on_ts_recv_and_need_no_ts_event(tmp_path: Path, schema: str) -> None:
    # The first samples follow a book update of the previous day; the rest had none at all.
    events = [T0 - 86_400 * SECOND, T0 - 86_400 * SECOND, UNDEF_TS, UNDEF_TS, UNDEF_TS]
    path = write(tmp_path / f"aapl.{schema}.dbn", schema, sampled(schema, events))
    batches = list(DbnReader().read(expand_inputs([str(path)])[0], ReadOptions()))
    table = pa.concat_tables([b.table for b in batches])
    theirs = decoded(path)
    sample_times = [r.ts_recv for r in theirs]
    assert table.column("ts_event").cast(pa.int64()).to_pylist() == sample_times
    assert table.column("ts_recv").cast(pa.int64()).to_pylist() == sample_times
    assert table.column("bid_px").to_pylist() == [r.levels[0].bid_px / 1e9 for r in theirs]
    notes = next(b.inference.notes for b in batches if b.inference is not None)
    assert any("sampled" in n and "ts_recv" in n for n in notes)

    options = IngestOptions(read=ReadOptions(symbol=None), workers=1)
    result = ingest([str(path)], str(tmp_path / "store"), options, progress=False)
    [report] = result.files
    assert (report.rows_read, report.rows_stored, report.rows_quarantined) == (5, 5, 0)


def test_opra_records_of_several_publishers_are_kept_per_publisher(tmp_path: Path) -> None:
    def trade(publisher: int) -> Any:
        return db.TradeMsg(
            publisher_id=publisher, instrument_id=7, ts_event=T0, price=2_150_000_000, size=3,
            action=db.Action.TRADE, side=db.Side.BID, depth=0, ts_recv=T0 + 5, sequence=0,
        )  # fmt: skip

    records = [trade(22), trade(29), trade(22)]  # Cboe, NYSE Arca, and Cboe again
    path = write(tmp_path / "opra.trades.dbn", "trades", records, dataset="OPRA.PILLAR")
    [batch] = list(DbnReader().read(expand_inputs([str(path)])[0], ReadOptions()))
    assert batch.table.column("venue").to_pylist() == ["XCBO", "ARCO", "XCBO"]
    options = IngestOptions(workers=1)
    [report] = ingest([str(path)], str(tmp_path / "store"), options, progress=False).files
    # Only the true repeat (same publisher, every field equal) is a duplicate.
    assert (report.rows_read, report.rows_stored, report.rows_quarantined) == (3, 2, 1)
    assert report.rules == {"duplicate": 1}


def test_a_legacy_dbz_file_is_named_with_the_way_out(tmp_path: Path) -> None:
    # DBZ: a Zstandard skippable frame (magic 0x184D2A50) whose payload starts b"DBZ".
    head = (0x184D2A50).to_bytes(4, "little") + (64).to_bytes(4, "little") + b"DBZ\x01"
    path = tmp_path / "glbx-trades.dbz"
    path.write_bytes(head + bytes(64))
    source = expand_inputs([str(path)])[0]
    with pytest.raises(ConfigError, match=r"legacy Databento DBZ.*dbn"):
        detect(source)
    with pytest.raises(ConfigError, match=r"legacy Databento DBZ.*dbn"):
        list(DbnReader().read(source, ReadOptions()))
    renamed = tmp_path / "glbx-trades.bin"  # the content says DBZ, whatever the name
    renamed.write_bytes(head + bytes(64))
    with pytest.raises(ConfigError, match=r"legacy Databento DBZ"):
        detect(expand_inputs([str(renamed)])[0])


SAMPLES = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "dbn"
if not SAMPLES.exists():
    SAMPLES = Path(__file__).resolve().parents[3].parent.joinpath("shared/data/dbn")


@pytest.mark.parametrize("schema", ["bbo-1s", "bbo-1m"])
def test_real_glbx_samples_are_stored_on_their_sample_time(tmp_path: Path, schema: str) -> None:
    import zstandard

    path = SAMPLES / "GLBX.MDP3" / f"test_data.{schema}.dbn.zst"
    raw = zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())
    decoder = db.DBNDecoder(upgrade_policy=db.VersionUpgradePolicy.AS_IS)
    decoder.write(raw)
    _, *theirs = decoder.decode()
    batches = list(DbnReader().read(expand_inputs([str(path)])[0], ReadOptions()))
    table = pa.concat_tables([b.table for b in batches])
    assert table.column("ts_event").cast(pa.int64()).to_pylist() == [r.ts_recv for r in theirs]
    options = IngestOptions(workers=1)
    [report] = ingest([str(path)], str(tmp_path / "store"), options, progress=False).files
    assert report.rows_read == len(theirs) == report.rows_stored + report.rows_quarantined
    assert report.rows_stored == len(theirs)
