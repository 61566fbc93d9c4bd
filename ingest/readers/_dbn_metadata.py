"""DBN metadata: the header of a DBN file (v1-v3) and the symbols it maps instrument ids to."""

from __future__ import annotations

import datetime as dt
import struct
from dataclasses import dataclass
from typing import IO

import numpy as np
import numpy.typing as npt

from ticktensor.errors import ConfigError, InputError

__all__ = [
    "MAX_METADATA_BYTES",
    "Metadata",
    "cstr",
    "dbz_message",
    "is_dbz",
    "metadata_symbols",
    "read_metadata",
]

#: Largest metadata header accepted (symbol mappings of a whole venue fit many times over).
MAX_METADATA_BYTES = 64 << 20
_SCHEMA_NAMES = {
    0: "mbo", 1: "mbp-1", 2: "mbp-10", 3: "tbbo", 4: "trades", 5: "ohlcv-1s", 6: "ohlcv-1m",
    7: "ohlcv-1h", 8: "ohlcv-1d", 9: "definition", 10: "statistics", 11: "status",
    12: "imbalance", 13: "ohlcv-eod", 14: "cmbp-1", 15: "cbbo-1s", 16: "cbbo-1m", 17: "tcbbo",
    18: "bbo-1s", 19: "bbo-1m",
}  # fmt: skip


@dataclass(frozen=True)
class Metadata:
    """A DBN file's metadata header: what the records need to be read and named."""

    version: int
    dataset: str
    schema: str | None
    ts_out: bool
    #: instrument_id -> [(start ns, end ns, symbol)] from the metadata symbol mappings.
    symbols: dict[int, list[tuple[int, int, str]]]
    length: int  # bytes up to the first record


def cstr(raw: bytes) -> str:
    """A fixed-size NUL-padded DBN string."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _date_ns(yyyymmdd: int) -> int:
    day = dt.date(yyyymmdd // 10000, yyyymmdd // 100 % 100, yyyymmdd % 100)
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()) * 10**9


def is_dbz(head: bytes) -> bool:
    """Whether ``head`` starts a legacy DBZ file: a Zstandard skippable frame (magic
    0x184D2A50-0x184D2A5F) whose payload starts with ``DBZ``."""
    if len(head) < 11:
        return False
    magic = int.from_bytes(head[:4], "little")
    return 0x184D2A50 <= magic <= 0x184D2A5F and head[8:11] == b"DBZ"


def dbz_message(url: str) -> str:
    """The refusal of a DBZ file, with the way to DBN."""
    return (
        f"{url}: a legacy Databento DBZ file (the format DBN replaced in 2023), which "
        "ticktensor does not read; upgrade it to DBN with databento's converter, the `dbn` "
        "command of dbn-cli (`cargo install dbn-cli`; `dbn FILE.dbz --dbn --output "
        "FILE.dbn.zst`, see `dbn --help`), then ingest the .dbn.zst file"
    )


def read_metadata(stream: IO[bytes], url: str) -> Metadata:
    """Parse the metadata header (DBN v1, v2 and v3 share all but the reserved tail)."""
    prelude = stream.read(8)
    if prelude[:3] != b"DBN" and is_dbz(prelude + stream.read(4)):
        raise ConfigError(dbz_message(url))
    if len(prelude) < 8 or prelude[:3] != b"DBN":
        raise ConfigError(f"{url}: not a DBN file (starts with {prelude[:8]!r})")
    version, (length,) = prelude[3], struct.unpack("<I", prelude[4:8])
    if version not in (1, 2, 3):
        raise ConfigError(f"{url}: DBN version {version} is not supported (1, 2, 3 are)")
    if length > MAX_METADATA_BYTES:
        raise InputError(
            f"{url}: DBN metadata length {length:,} bytes exceeds the {MAX_METADATA_BYTES >> 20} "
            "MiB limit (corrupt header?)"
        )
    body = stream.read(length)
    if len(body) < length:
        raise ConfigError(f"{url}: DBN metadata truncated ({len(body)} of {length} bytes)")
    try:
        return _parse_metadata(version, length, body)
    except (struct.error, ValueError, OverflowError) as exc:
        raise InputError(f"{url}: DBN metadata is corrupt ({exc})") from None


def _parse_metadata(version: int, length: int, body: bytes) -> Metadata:
    dataset = cstr(body[:16])
    (schema_id,) = struct.unpack_from("<H", body, 16)
    pos = 16 + 2 + 24 + (8 if version == 1 else 0)  # dataset, schema, start/end/limit, count
    ts_out = bool(body[pos + 2])
    cstr_len = 22 if version == 1 else struct.unpack_from("<H", body, pos + 3)[0]
    pos += 3 + (47 if version == 1 else 55)
    (schema_def,) = struct.unpack_from("<I", body, pos)
    pos += 4 + schema_def
    for _ in range(3):  # symbols, partial, not_found
        (count,) = struct.unpack_from("<I", body, pos)
        pos += 4 + count * cstr_len
    (n_mappings,) = struct.unpack_from("<I", body, pos)
    pos += 4
    symbols: dict[int, list[tuple[int, int, str]]] = {}
    for _ in range(n_mappings):
        raw_symbol = cstr(body[pos : pos + cstr_len])
        (n_intervals,) = struct.unpack_from("<I", body, pos + cstr_len)
        pos += cstr_len + 4
        for _ in range(n_intervals):
            start, end = struct.unpack_from("<II", body, pos)
            mapped = cstr(body[pos + 8 : pos + 8 + cstr_len])
            pos += 8 + cstr_len
            # One side of the mapping is the numeric instrument id, the other the name.
            iid, name = (mapped, raw_symbol) if mapped.isdigit() else (raw_symbol, mapped)
            if iid.isdigit():
                span = (_date_ns(start), _date_ns(end), name)
                symbols.setdefault(int(iid), []).append(span)
    schema = None if schema_id == 0xFFFF else _SCHEMA_NAMES.get(schema_id, f"#{schema_id}")
    return Metadata(version, dataset, schema, ts_out, symbols, 8 + length)


def metadata_symbols(
    iids: npt.NDArray[np.uint32],
    ts: npt.NDArray[np.uint64],
    meta: Metadata,
    fallback: str | None,
) -> npt.NDArray[np.object_]:
    """Symbol per record: the metadata mapping valid on the record's date, else ``fallback``
    (``ReadOptions.symbol``), else the instrument id as text."""
    out = np.empty(len(iids), dtype=object)
    for iid in np.unique(iids):
        rows = iids == iid
        out[rows] = fallback or str(iid)
        for start, end, name in meta.symbols.get(int(iid), []):
            day = ts.astype(np.int64)  # UINT64_MAX (undefined) wraps negative: no match
            out[rows & (day >= start) & (day < end)] = name
    return out
