"""Parquet: typed columns streamed by row group, mapped by name onto a canonical schema."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ticktensor.ingest._sources import Input

from ._base import EventBatch, Reader, ReadOptions
from ._tabular import decode_batches, guard

__all__ = ["ParquetReader"]


class ParquetReader(Reader):
    """Parquet files (any writer: pandas, polars, Spark, ticktensor itself).

    Columns are found by canonical name or through ``ReadOptions.csv.columns``;
    timestamps of any unit and zone (or integers in ``csv.ts_unit``) become ns UTC,
    prices are scaled by ``csv.price_scale`` and sides mapped by ``csv.side_map``.
    Only the mapped columns are read, ``batch_rows`` records at a time.
    """

    name = "parquet"
    suffixes = (".parquet", ".pq")

    @classmethod
    def sniff(cls, name: str, head: bytes) -> bool:
        """Parquet files start with the magic bytes ``PAR1``."""
        return head.startswith(b"PAR1") or super().sniff(name, head)

    def read(self, source: Input, options: ReadOptions) -> Iterator[EventBatch]:
        """Decode ``source`` in batches of at most ``options.batch_rows`` rows."""
        yield from guard(source.url, "Parquet", self._read(source, options))

    def _read(self, source: Input, options: ReadOptions) -> Iterator[EventBatch]:
        with source.open_seekable() as file:
            parquet = pq.ParquetFile(file)
            schema = parquet.schema_arrow

            def batches(columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
                yield from parquet.iter_batches(batch_size=options.batch_rows, columns=columns)

            yield from decode_batches(source, options, schema, batches)
