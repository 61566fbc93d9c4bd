"""DBN metadata headers for the reader tests, written with databento-dbn's own encoder."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import databento_dbn as db

DAY = dt.date(2024, 8, 8)
T0 = int(dt.datetime(2024, 8, 8, 14, tzinfo=dt.UTC).timestamp()) * 10**9


@dataclass(frozen=True)
class _Interval:
    start_date: dt.date
    end_date: dt.date
    symbol: str


@dataclass(frozen=True)
class _SymbolMapping:
    """A symbol mapping in the shape ``databento_dbn.Metadata`` reads (attributes)."""

    raw_symbol: str
    intervals: list[_Interval]


def metadata(
    schema: str | None,
    instruments: Mapping[str, int],
    *,
    dataset: str = "GLBX.MDP3",
    version: int = 3,
    end: int | None = None,
) -> bytes:
    """An encoded DBN header of ``schema`` (``None``: mixed) whose symbol mappings send
    each raw symbol of ``instruments`` to its instrument id for ``DAY``."""
    fields: dict[str, Any] = {
        "dataset": dataset,
        "start": T0,
        "stype_in": db.SType.RAW_SYMBOL,
        "stype_out": db.SType.INSTRUMENT_ID,
        "schema": None if schema is None else db.Schema.from_str(schema),
        "symbols": list(instruments)[:1],
        "partial": [],
        "not_found": [],
        "mappings": [
            _SymbolMapping(raw, [_Interval(DAY, DAY + dt.timedelta(days=1), str(iid))])
            for raw, iid in instruments.items()
        ],
        "version": version,
    }
    if end is not None:
        fields["end"] = end
    return bytes(db.Metadata(**fields).encode())
