"""The reader interface: one vendor format in, batches of canonical events out."""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor.errors import ConfigError
from ticktensor.ingest._sources import Input
from ticktensor.schemas import EventKind

__all__ = ["REJECT_SCHEMA", "CsvFormat", "EventBatch", "Inference", "ReadOptions", "Reader"]

#: Rows a reader could not decode at all (wrong field count, unparseable number ...).
REJECT_SCHEMA = pa.schema(
    [
        pa.field("row", pa.int64(), nullable=False),
        pa.field("column", pa.string()),
        pa.field("value", pa.string()),
        pa.field("rule", pa.string(), nullable=False),
        pa.field("message", pa.string(), nullable=False),
        pa.field("raw", pa.string()),
    ]
)

TsUnit = Literal["s", "ms", "us", "ns"]


@dataclass(frozen=True)
class CsvFormat:
    """How to read a generic CSV: delimiter, header, column mapping, time and price units.

    Parameters
    ----------
    columns
        Canonical column name -> the file's column name (or 0-based index as a string
        when ``header`` is False). Canonical columns not listed are looked up by their
        own name; ``symbol`` may be omitted when ``ReadOptions.symbol`` is given.
    ts_unit
        Unit of numeric timestamps since the UNIX epoch; ``None`` infers it from the
        first timestamp's magnitude (see ``docs/readers.md``).
    ts_format
        ``strptime``-style format for text timestamps (overrides ``ts_unit``), e.g.
        ``"%Y%m%d %H%M%S%f"``; ``None``: ISO 8601, or a common layout recognised from the
        first timestamp.
    timezone
        Zone of text timestamps without an offset (IANA name), converted to UTC.
    price_scale
        Multiplier applied to prices (``1e-4`` for integer prices in 1/10,000 dollars).
    side_map
        File side values -> canonical side (+1 buy/bid, -1 sell/ask, 0 unknown).
    """

    delimiter: str = ","
    header: bool = True
    columns: Mapping[str, str] = field(default_factory=dict)
    ts_unit: TsUnit | None = None
    ts_format: str | None = None
    timezone: str = "UTC"
    price_scale: float = 1.0
    side_map: Mapping[str, int] = field(
        default_factory=lambda: {
            "B": 1,
            "b": 1,
            "buy": 1,
            "BUY": 1,
            "Buy": 1,
            "bid": 1,
            "1": 1,
            "S": -1,
            "s": -1,
            "A": -1,
            "a": -1,
            "sell": -1,
            "SELL": -1,
            "Sell": -1,
            "ask": -1,
            "-1": -1,
            "N": 0,
            "": 0,
            "0": 0,
        }
    )

    def __post_init__(self) -> None:
        if len(self.delimiter) != 1:
            raise ConfigError(f"delimiter must be one character, got {self.delimiter!r}")
        if self.ts_unit not in (None, "s", "ms", "us", "ns"):
            raise ConfigError(f"ts_unit must be s, ms, us or ns, got {self.ts_unit!r}")
        if not self.price_scale > 0:
            raise ConfigError(f"price_scale must be > 0, got {self.price_scale!r}")
        bad = {k: v for k, v in self.side_map.items() if v not in (-1, 0, 1)}
        if bad:
            raise ConfigError(f"side_map values must be -1, 0 or 1, got {bad}")


@dataclass(frozen=True)
class ReadOptions:
    """What the user told the reader (the CLI flags of ``ticktensor ingest``).

    ``kind`` is the canonical schema wanted (``None``: the reader decides from the
    file); ``symbol`` names the instrument of files without a symbol column;
    ``batch_rows`` bounds memory: readers yield at most about this many rows at once.
    ``interval_ns`` is the bar length of ohlcv files without an ``interval_ns`` column
    (``None``: from a length in the file name such as ``_1m``, else from the timestamps).
    """

    kind: EventKind | None = None
    symbol: str | None = None
    batch_rows: int = 1 << 20
    csv: CsvFormat = field(default_factory=CsvFormat)
    interval_ns: int | None = None

    def __post_init__(self) -> None:
        if self.batch_rows < 1:
            raise ConfigError(f"batch_rows must be >= 1, got {self.batch_rows}")
        if self.interval_ns is not None and self.interval_ns < 1:
            raise ConfigError(f"interval_ns must be >= 1, got {self.interval_ns}")
        if self.kind is not None:
            object.__setattr__(self, "kind", EventKind(self.kind))


@dataclass(frozen=True)
class Inference:
    """What a reader worked out about one file, for the ingest report.

    ``columns`` maps canonical columns to where they come from (a file column, or a
    description such as ``"date + time"``); ``notes`` say how times, bar lengths or a
    vendor layout were recognised.
    """

    columns: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form: ``{"columns": {...}, "notes": [...]}``."""
        return {"columns": dict(self.columns), "notes": list(self.notes)}


@dataclass(frozen=True)
class EventBatch:
    """Events decoded from one input, in a canonical schema, with where each came from.

    ``rows`` holds the source row number of each table row (1-based data line for
    text formats, 1-based record number for binary ones). ``raw`` holds the source
    text of each row where the format has one (``None`` otherwise: the quarantine then
    stores the decoded row as JSON). ``rejects`` (``REJECT_SCHEMA``) are rows that
    could not be decoded at all. ``inference`` (on a file's first batch) says how the
    reader mapped the file.
    """

    kind: EventKind
    table: pa.Table
    rows: npt.NDArray[np.int64]
    raw: pa.Array | None = None
    rejects: pa.Table = field(default_factory=REJECT_SCHEMA.empty_table)
    inference: Inference | None = None

    def __post_init__(self) -> None:
        if len(self.rows) != self.table.num_rows:
            raise ValueError(f"{len(self.rows)} row numbers for {self.table.num_rows} rows")
        if self.raw is not None and len(self.raw) != self.table.num_rows:
            raise ValueError(f"{len(self.raw)} raw texts for {self.table.num_rows} rows")


class Reader(abc.ABC):
    """A vendor format. Subclasses live one per module in ``ticktensor.ingest.readers``.

    A reader decodes and normalizes (timestamps to ns UTC, prices descaled, sides
    mapped, symbols kept) but does not validate: the ingest job applies the schema's
    rules to every batch and quarantines the rows that break them.
    """

    #: The ``--format`` name.
    name: ClassVar[str]
    #: File-name suffixes (after removing a compression suffix) this format claims.
    suffixes: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def sniff(cls, name: str, head: bytes) -> bool:
        """Whether a file named ``name`` starting with ``head`` is in this format."""
        return name.lower().endswith(cls.suffixes) if cls.suffixes else False

    @abc.abstractmethod
    def read(self, source: Input, options: ReadOptions) -> Iterator[EventBatch]:
        """Decode ``source`` in batches of at most about ``options.batch_rows`` rows."""
