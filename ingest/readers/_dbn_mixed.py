"""Mixed DBN streams: records of several types interleaved (live captures), split by type.

The record headers are walked one by one (each says its length and type); the market
data records of each type are then gathered into a contiguous array and decoded like a
single-schema file. Symbol-mapping records (rtype 0x16) name the instrument ids of the
records after them, before the metadata's mappings. Instrument definitions and
statistics become rows of the reference kinds ``definitions`` and ``statistics``.
System records (heartbeats, 0x17), errors and the records ticktensor has no schema for
(status, imbalance) are skipped and counted in the file's report. They are not rows:
rows read = market-data and reference records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import IO

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor.errors import InputError
from ticktensor.schemas import EventKind, cast_columns, schema_for

from ._base import REJECT_SCHEMA, EventBatch, Inference, ReadOptions
from ._dbn_metadata import Metadata, cstr, metadata_symbols
from ._dbn_records import SAMPLED, record_dtype
from ._dbn_reference import decode_records, layout_of, rtype_schema

__all__ = ["SKIPPED", "split_mixed"]

#: Record types skipped (and counted): they are neither market events nor reference data.
SKIPPED: dict[int, str] = {
    0x12: "status", 0x14: "imbalance", 0x15: "error", 0x16: "symbol mapping", 0x17: "system",
}  # fmt: skip
_MAPPING = 0x16
_BLOCK_RECORDS = 1 << 16


class _Walk:
    """State carried across blocks: record count, in-stream symbols, what was skipped."""

    def __init__(self, url: str, meta: Metadata, options: ReadOptions, number: int) -> None:
        self.url = url
        self.meta = meta
        self.options = options
        self.number = number  # records before the current block
        self.symbols: dict[int, str] = {}  # instrument id -> name, from mapping records
        self.counts: Counter[str] = Counter()
        self.last_kind = options.kind or EventKind.TRADES

    def block(self, buf: bytes, offset: int) -> tuple[list[EventBatch], int]:
        """Decode the whole records of ``buf``; return the batches and the bytes used."""
        starts: list[int] = []
        rtypes: list[int] = []
        lengths: list[int] = []
        names: list[str | None] = []
        pos, end = 0, len(buf)
        while pos < end:
            length = buf[pos] * 4
            if length < 16:
                raise InputError(
                    f"{self.url}: record {self.number + len(starts) + 1} at byte offset "
                    f"{offset + pos} declares {length} bytes (a DBN record has at least 16): "
                    "corrupt stream"
                )
            if pos + length > end:
                break
            rtype = buf[pos + 1]
            iid = int.from_bytes(buf[pos + 4 : pos + 8], "little")
            if rtype == _MAPPING:
                self.symbols[iid] = _mapped_name(buf[pos : pos + length])
            starts.append(pos)
            rtypes.append(rtype)
            lengths.append(length)
            names.append(self.symbols.get(iid))
            pos += length
        return self._decode(buf, np.asarray(starts), rtypes, lengths, names), pos

    def _decode(
        self,
        buf: bytes,
        starts: npt.NDArray[np.int64],
        rtypes: list[int],
        lengths: list[int],
        names: list[str | None],
    ) -> list[EventBatch]:
        numbers = np.arange(self.number + 1, self.number + 1 + len(starts), dtype=np.int64)
        self.number += len(starts)
        kinds = np.asarray(rtypes, dtype=np.int64)
        sizes = np.asarray(lengths, dtype=np.int64)
        data = np.frombuffer(buf, dtype=np.uint8)
        batches: list[EventBatch] = []
        rejects: list[dict[str, object]] = []
        for rtype in np.unique(kinds).tolist():
            where = np.flatnonzero(kinds == rtype)
            schema = rtype_schema(int(rtype))
            layout = None if schema is None else layout_of(schema, self.meta.version)
            if schema is None or layout is None:
                self.counts[SKIPPED.get(int(rtype), f"rtype 0x{int(rtype):02x}")] += len(where)
                continue
            kind = layout.kinds[0]
            if self.options.kind is not None:
                if self.options.kind not in layout.kinds:
                    self.counts[f"{schema} (not --schema {self.options.kind.value})"] += len(where)
                    continue
                kind = self.options.kind
            size = layout.size + (8 if self.meta.ts_out else 0)
            wrong = where[sizes[where] != size].tolist()
            rejects += [
                self._wrong_size(int(numbers[i]), schema, int(sizes[i]), size) for i in wrong
            ]
            where = where[sizes[where] == size]
            if not where.size:
                continue
            gathered = data[starts[where][:, None] + np.arange(size)]
            records = gathered.view(record_dtype(layout, size)).reshape(-1)
            symbols = self._symbols(records, [names[i] for i in where.tolist()])
            table = decode_records(records, schema, kind, self.meta.dataset, symbols)
            batches.append(EventBatch(kind, cast_columns(table, kind), numbers[where]))
            self.counts[f"{schema} -> {kind.value}"] += len(where)
            self.last_kind = kind
        if rejects:
            table = pa.Table.from_pylist(rejects, schema=REJECT_SCHEMA)
            if not batches:
                batches.append(EventBatch(self.last_kind, _empty(self.last_kind), _none()))
            first = batches[0]
            batches[0] = EventBatch(first.kind, first.table, first.rows, rejects=table)
        return batches

    def _symbols(self, records: npt.NDArray[np.void], live: list[str | None]) -> pa.Array:
        has_recv = "ts_recv" in (records.dtype.names or ())
        ts = records["ts_recv"] if has_recv else records["ts_event"]
        names = metadata_symbols(records["instrument_id"], ts, self.meta, self.options.symbol)
        known = np.array([name is not None for name in live], dtype=bool)
        if known.any():
            names[known] = np.array(live, dtype=object)[known]
        return pa.array(names, type=pa.string())

    def _wrong_size(self, number: int, schema: str, got: int, want: int) -> dict[str, object]:
        message = (
            f"{self.url} record {number}: a {schema} record of {got} bytes; expected {want} "
            "(rule: unparseable)"
        )
        return {
            "row": number,
            "column": None,
            "value": None,
            "rule": "unparseable",
            "message": message,
            "raw": None,
        }

    def inference(self) -> Inference:
        parts = ", ".join(f"{what} {n:,}" for what, n in sorted(self.counts.items()))
        sampled = sorted({w.split(" ")[0] for w in self.counts if w.split(" ")[0] in SAMPLED})
        notes = [f"mixed DBN records: {parts or 'none'}"]
        if sampled:
            notes.append(
                f"{', '.join(sampled)}: sampled top of book, on the sample time (DBN ts_recv)"
            )
        return Inference({}, tuple(notes))


def _mapped_name(record: bytes) -> str:
    """The instrument's name in a symbol-mapping record (v1: 80 bytes; v2, v3: 176)."""
    if len(record) < 176:
        inside, outside = cstr(record[16:38]), cstr(record[38:60])
    else:
        inside, outside = cstr(record[17:88]), cstr(record[89:160])
    return outside if outside and not outside.isdigit() else inside


def _empty(kind: EventKind) -> pa.Table:
    return cast_columns(schema_for(kind).empty_table(), kind)


def _none() -> npt.NDArray[np.int64]:
    return np.empty(0, dtype=np.int64)


def split_mixed(
    stream: IO[bytes],
    url: str,
    meta: Metadata,
    options: ReadOptions,
    head: bytes,
    offset: int,
    number: int,
) -> Iterator[EventBatch]:
    """Decode a mixed stream: ``head`` (bytes already read), then the rest of ``stream``.

    ``offset`` is ``head``'s byte offset in the decompressed file and ``number`` the
    records before it. The file's last batch carries the counts as its inference.
    """
    walk = _Walk(url, meta, options, number)
    pending = head
    held: EventBatch | None = None
    while True:
        chunk = stream.read(max(options.batch_rows, 1) * 80)
        buf = pending + chunk
        batches, used = walk.block(buf, offset)
        pending, offset = buf[used:], offset + used
        for batch in batches:
            if held is not None:
                yield held
            held = batch
        if not chunk:
            break
    if pending:
        message = (
            f"{url} record {walk.number + 1} at byte offset {offset}: truncated record "
            f"({len(pending)} bytes; rule: unparseable)"
        )
        reject = {"row": [walk.number + 1], "column": [None], "value": [pending.hex()]}
        reject |= {"rule": ["unparseable"], "message": [message], "raw": [None]}
        if held is not None:
            yield held
        held = EventBatch(
            walk.last_kind,
            _empty(walk.last_kind),
            _none(),
            rejects=pa.table(reject, schema=REJECT_SCHEMA),
        )
    if held is None:
        held = EventBatch(walk.last_kind, _empty(walk.last_kind), _none())
    yield EventBatch(
        held.kind, held.table, held.rows, rejects=held.rejects, inference=walk.inference()
    )
