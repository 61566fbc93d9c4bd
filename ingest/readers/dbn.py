"""Databento DBN (v1-v3): metadata, and a vectorized decoder of records into canonical events."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor.errors import ConfigError
from ticktensor.ingest._sources import Input
from ticktensor.ingest.readers._base import (
    REJECT_SCHEMA,
    EventBatch,
    Inference,
    Reader,
    ReadOptions,
)
from ticktensor.schemas import EventKind, cast_columns, schema_for

from ._dbn_metadata import Metadata, metadata_symbols, read_metadata
from ._dbn_mixed import split_mixed
from ._dbn_records import LAYOUTS, SAMPLED, Layout, record_dtype
from ._dbn_reference import decode_records, layout_of

__all__ = ["DbnReader"]


class DbnReader(Reader):
    """Databento Binary Encoding files (``.dbn``, ``.dbn.zst``), versions 1 to 3.

    Records are decoded in blocks of whole records with numpy structured dtypes (no
    per-record Python). Schema mapping: ``trades`` -> trades; ``mbp-1``, ``bbo-1s``,
    ``bbo-1m``, and the consolidated ``cmbp-1``, ``cbbo-1s``, ``cbbo-1m`` -> quotes;
    ``tbbo``/``tcbbo`` -> quotes (the book just before each trade) or trades with
    ``kind=trades``; ``mbp-10`` -> mbp10 (or quotes from level 0);
    ``mbo`` -> mbo; ``ohlcv-1s/1m/1h/1d`` -> ohlcv; the reference schemas
    ``definition`` -> definitions and ``statistics`` -> statistics. Other schemas
    (``status``, ``imbalance``) raise ConfigError.
    """

    name = "dbn"
    suffixes = (".dbn",)

    @classmethod
    def sniff(cls, name: str, head: bytes) -> bool:
        """Whether ``head`` starts with the DBN magic bytes."""
        return head[:3] == b"DBN"

    def read(self, source: Input, options: ReadOptions) -> Iterator[EventBatch]:
        """Decode ``source`` in batches of at most ``options.batch_rows`` records."""
        with source.open() as stream:
            meta = read_metadata(stream, source.url)
            if meta.schema is None:  # a live capture: several record types interleaved
                yield from split_mixed(stream, source.url, meta, options, b"", meta.length, 0)
                return
            layout = layout_of(meta.schema, meta.version)
            if layout is None:
                supported = ", ".join([*LAYOUTS, "definition", "statistics"])
                raise ConfigError(
                    f"{source.url}: DBN schema {meta.schema!r} has no canonical "
                    f"ticktensor schema; supported: {supported} and mixed-schema streams"
                )
            kind = options.kind or layout.kinds[0]
            if kind not in layout.kinds:
                raise ConfigError(
                    f"{source.url}: requested kind {kind.value!r} but the DBN schema is "
                    f"{meta.schema!r}, which maps to {', '.join(k.value for k in layout.kinds)}"
                )
            batches = self._records(stream, source.url, meta, layout, kind, options)
            notes = _notes(meta)
            for batch in batches:
                yield replace(batch, inference=Inference({}, notes)) if notes else batch
                notes = ()

    def _records(
        self,
        stream: IO[bytes],
        url: str,
        meta: Metadata,
        layout: Layout,
        kind: EventKind,
        options: ReadOptions,
    ) -> Iterator[EventBatch]:
        size = layout.size + (8 if meta.ts_out else 0)
        dtype = record_dtype(layout, size)
        offset, record, pending = meta.length, 0, b""  # byte offset and number of pending[0]
        while True:
            chunk = stream.read(options.batch_rows * size - len(pending))
            buf = pending + chunk
            whole = len(buf) // size * size
            if whole:
                records = np.frombuffer(buf, dtype=dtype, count=whole // size)
                lengths = records["length"].astype(np.int64) * 4
                bad = (lengths != size) | ~np.isin(records["rtype"], list(layout.rtypes))
                # A foreign record (symbol mapping, heartbeat) breaks the fixed stride: the
                # records before it are read here, the rest of the stream as a mixed one.
                good = int(np.argmax(bad)) if bad.any() else len(records)
                if good:
                    yield self._batch(records[:good], meta, kind, options, record)
                if good < len(records):
                    tail = buf[good * size :]
                    start, number = offset + good * size, record + good
                    yield from split_mixed(stream, url, meta, options, tail, start, number)
                    return
                offset, record = offset + whole, record + len(records)
            pending = buf[whole:]
            if not chunk:
                break
        if pending:
            message = (
                f"{url} record {record + 1} at byte offset {offset}: truncated record "
                f"({len(pending)} of {size} bytes; rule: unparseable)"
            )
            reject = {"row": [record + 1], "column": [None], "value": [pending.hex()]}
            reject |= {"rule": ["unparseable"], "message": [message], "raw": [None]}
            rejects = pa.table(reject, schema=REJECT_SCHEMA)
            empty = cast_columns(schema_for(kind).empty_table(), kind)
            yield EventBatch(kind, empty, np.empty(0, dtype=np.int64), rejects=rejects)

    @staticmethod
    def _batch(
        records: npt.NDArray[Any],
        meta: Metadata,
        kind: EventKind,
        options: ReadOptions,
        before: int,
    ) -> EventBatch:
        has_recv = "ts_recv" in (records.dtype.names or ())
        mapping_ts = records["ts_recv"] if has_recv else records["ts_event"]
        names = metadata_symbols(records["instrument_id"], mapping_ts, meta, options.symbol)
        symbols = pa.array(names, type=pa.string())
        table = decode_records(records, meta.schema or "", kind, meta.dataset, symbols)
        rows = np.arange(before + 1, before + 1 + len(records), dtype=np.int64)
        return EventBatch(kind, cast_columns(table, kind), rows)


def _notes(meta: Metadata) -> tuple[str, ...]:
    """What the report says of how a whole-schema file's records were placed in time
    and venue, where that is not the plain reading."""
    notes: list[str] = []
    if meta.schema in SAMPLED:
        notes.append(
            f"{meta.schema}: top of book sampled at fixed intervals: ts_event and ts_recv "
            "are the sample time (DBN ts_recv); DBN's ts_event, the last book update "
            "before the sample (undefined when there was none), is not stored"
        )
    if meta.dataset.startswith("OPRA"):
        notes.append("venue: the publishing exchange's MIC (OPRA records are per publisher)")
    return tuple(notes)
