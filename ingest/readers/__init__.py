"""Vendor format readers: the registry of ``--format`` names and format detection.

``READERS`` maps each format name to its reader class; :func:`get_reader` builds one
by name and :func:`detect` picks one for an input by content first (DBN, Parquet and
Arrow magic bytes; a legacy DBZ file is refused, naming the way to DBN), then by name
patterns and header (LOBSTER, tardis, Binance dumps, captures and depth files), then by
suffix.

Examples
--------
>>> from ticktensor.ingest.readers import get_reader
>>> get_reader("parquet").name
'parquet'
"""

from __future__ import annotations

import importlib

from ticktensor.errors import ConfigError
from ticktensor.ingest._sources import Input

from ._base import REJECT_SCHEMA, CsvFormat, EventBatch, Inference, Reader, ReadOptions
from ._dbn_metadata import dbz_message, is_dbz
from ._layout_hints import layout_hint
from ._names import book_update_columns, kind_from_columns
from .arrow import ArrowReader
from .csv import CsvReader
from .parquet import ParquetReader

__all__ = [
    "READERS",
    "REJECT_SCHEMA",
    "ArrowReader",
    "CsvFormat",
    "CsvReader",
    "EventBatch",
    "Inference",
    "Input",
    "ParquetReader",
    "ReadOptions",
    "Reader",
    "book_update_columns",
    "detect",
    "get_reader",
    "kind_from_columns",
    "layout_hint",
]

#: Formats whose reader lives in a sibling module, imported on first use.
_LAZY = {"dbn": ("dbn", "DbnReader"), "lobster": ("lobster", "LobsterReader")}
_LAZY["tardis"] = ("tardis", "TardisReader")
_LAZY["binance"] = ("binance", "BinanceReader")


def _load(name: str) -> type[Reader] | None:
    module_name, class_name = _LAZY[name]
    module = importlib.import_module(f"{__name__}.{module_name}")
    reader = getattr(module, class_name, None)
    return reader if isinstance(reader, type) and issubclass(reader, Reader) else None


def _registry() -> dict[str, type[Reader]]:
    readers: dict[str, type[Reader]] = {
        "arrow": ArrowReader,
        "csv": CsvReader,
        "parquet": ParquetReader,
    }
    for name in _LAZY:
        if (reader := _load(name)) is not None:
            readers[name] = reader
    return dict(sorted(readers.items()))


#: ``--format`` name -> reader class, for every format whose reader is available.
READERS: dict[str, type[Reader]] = _registry()

_TARDIS_HEADER = b"exchange,symbol,timestamp,local_timestamp"


def get_reader(name: str) -> Reader:
    """The reader registered as ``name``.

    Raises
    ------
    ConfigError
        For an unknown name, listing the known ones.
    """
    try:
        return READERS[name]()
    except KeyError:
        raise ConfigError(
            f"unknown format {name!r}: expected one of {', '.join(READERS)}"
        ) from None


def _by_content(head: bytes) -> str | None:
    if head.startswith(b"DBN"):
        return "dbn"
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"ARROW1"):
        return "arrow"
    # IPC stream: a continuation marker (0xFFFFFFFF) then a schema message length.
    if head.startswith(b"\xff\xff\xff\xff") and len(head) >= 8:
        return "arrow"
    return None


def _by_name(name: str, head: bytes) -> str | None:
    lowered = name.lower()
    if "_message_" in lowered or "_orderbook_" in lowered:
        return "lobster"
    if head.lstrip(b"\xef\xbb\xbf").startswith(_TARDIS_HEADER):
        return "tardis"
    if "binance" in READERS and READERS["binance"].sniff(name, head):
        return "binance"
    return None


def detect(source: Input) -> Reader:
    """Pick the reader for ``source``: by content, then name and header, then suffix.

    Raises
    ------
    ConfigError
        Naming the file when no format claims it (or the format's reader is not
        available), suggesting ``--format``.
    """
    head = source.head()
    if is_dbz(head) or source.name.lower().endswith((".dbz", ".dbz.zst")):
        raise ConfigError(dbz_message(source.url))
    name = _by_content(head) or _by_name(source.name, head)
    if name is None:
        for candidate, reader in READERS.items():
            if candidate not in _LAZY and reader.sniff(source.name, head):
                name = candidate
                break
        else:
            for candidate, reader in READERS.items():
                if candidate in _LAZY and reader.sniff(source.name, head):
                    name = candidate
                    break
    if name is None or name not in READERS:
        what = "cannot tell the format" if name is None else f"looks like {name}, whose reader"
        tail = "" if name is None else " is not available"
        raise ConfigError(
            f"{source.url}: {what}{tail}; pass --format (one of {', '.join(READERS)})"
        )
    return READERS[name]()
