"""Arrow IPC: the file format (Feather v2) and the stream format, mapped onto a schema."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa

from ticktensor.ingest._sources import Input

from ._base import EventBatch, Reader, ReadOptions
from ._tabular import decode_batches, guard

__all__ = ["ArrowReader"]

_FILE_MAGIC = b"ARROW1"
_STREAM_MARKER = b"\xff\xff\xff\xff"


class ArrowReader(Reader):
    """Arrow IPC files (``ARROW1`` magic) and streams, mapped like Parquet.

    Record batches are re-cut to at most ``batch_rows`` rows; only the mapped columns
    are converted.
    """

    name = "arrow"
    suffixes = (".arrow", ".feather", ".ipc", ".arrows")

    @classmethod
    def sniff(cls, name: str, head: bytes) -> bool:
        """The file magic ``ARROW1`` or a stream's continuation marker, else the suffix."""
        return head.startswith((_FILE_MAGIC, _STREAM_MARKER)) or super().sniff(name, head)

    def read(self, source: Input, options: ReadOptions) -> Iterator[EventBatch]:
        """Decode ``source`` in batches of at most ``options.batch_rows`` rows."""
        yield from guard(source.url, "Arrow IPC", self._read(source, options))

    def _read(self, source: Input, options: ReadOptions) -> Iterator[EventBatch]:
        if source.head(len(_FILE_MAGIC)) == _FILE_MAGIC:
            with source.open_seekable() as file:
                reader = pa.ipc.open_file(file)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
                yield from self._decode(source, options, reader.schema, batches)
        else:
            with source.open() as stream:
                stream_reader = pa.ipc.open_stream(stream)
                yield from self._decode(source, options, stream_reader.schema, stream_reader)

    @staticmethod
    def _decode(
        source: Input,
        options: ReadOptions,
        schema: pa.Schema,
        batches: Iterator[pa.RecordBatch],
    ) -> Iterator[EventBatch]:
        def cut(columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
            step = options.batch_rows
            for batch in batches:
                selected = batch.select(list(columns))
                for start in range(0, selected.num_rows, step):
                    yield selected.slice(start, step)

        yield from decode_batches(source, options, schema, cut)
