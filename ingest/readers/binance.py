"""Binance: public data dumps (trades, aggTrades, bookTicker, klines) and websocket captures.

Examples
--------
>>> from ticktensor.ingest.readers.binance import BinanceReader
>>> BinanceReader.sniff("BTCUSDT-trades-2024-08-08.csv", b"1,2")
True
>>> BinanceReader.sniff("x.gz", b'1723161253937085768 {"stream":"btcusdt@trade"}')
True
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ticktensor.ingest._sources import Input

from ._base import EventBatch, Reader, ReadOptions
from ._binance_depth_updates import is_depth_updates, read_depth_updates
from ._binance_dumps import DUMP_NAME, read_dump
from ._binance_stream import CaptureDecoder

__all__ = ["BinanceReader"]

#: A capture line: the receive time in ns, a space, a JSON object.
_CAPTURE = re.compile(rb"^\s*\d{15,20} \{")


class BinanceReader(Reader):
    """Binance dumps (detected by the file name ``SYMBOL-KIND-DATE.csv``), websocket
    captures (detected by their lines ``<receive ns> <JSON>``) and futures depth files
    (detected by their header ``symbol,timestamp,first_update_id,...``); see
    ``docs/readers.md``.
    """

    name = "binance"

    @classmethod
    def sniff(cls, name: str, head: bytes) -> bool:
        """A dump's file name, or a capture's first line."""
        base = name.rsplit("/", 1)[-1]
        dump = DUMP_NAME.match(base) is not None
        return dump or _CAPTURE.match(head) is not None or is_depth_updates(head)

    def read(self, source: Input, options: ReadOptions) -> Iterator[EventBatch]:
        """Decode ``source`` in batches of about ``options.batch_rows`` rows."""
        if _CAPTURE.match(source.head(1 << 10)) is not None:
            with source.open() as stream:
                yield from CaptureDecoder(source, options).decode(stream)
            return
        if is_depth_updates(source.head(1 << 10), options.csv.delimiter):
            yield from read_depth_updates(source, options)
            return
        yield from read_dump(source, options)
