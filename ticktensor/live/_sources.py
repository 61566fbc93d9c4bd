"""Vendor files as a live feed: their events decoded by ingest's readers, in file order."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import fsspec
import pyarrow as pa

from ticktensor.ingest.readers import Input, ReadOptions, detect
from ticktensor.schemas import EventKind

__all__ = ["read_events"]


def read_events(
    paths: Iterable[str | Path], options: ReadOptions | None = None
) -> dict[EventKind, pa.Table]:
    """Every event of local vendor files (DBN captures, Binance websocket captures, tardis,
    CSV ...) in canonical tables by kind, each in the files' order: what a feed handler
    would have pushed. Nothing is sorted, validated or deduplicated: the engine applies
    ingest's rules to each event as it comes (a late one is refused, not reordered).

    Examples
    --------
    >>> from ticktensor.live import LiveEngine, read_events
    >>> from ticktensor.schemas import FeatureSpec
    >>> engine = LiveEngine(FeatureSpec(("mid", "signed_volume_1s"), version=2))
    >>> rows = engine.replay(read_events(["trades.dbn.zst", "mbp-1.dbn.zst"]))  # doctest: +SKIP
    """
    options = options or ReadOptions()
    fs = fsspec.filesystem("file")
    parts: dict[EventKind, list[pa.Table]] = {}
    for path in paths:
        local = os.path.abspath(os.fspath(path))
        source = Input(local, fs, local, os.path.getsize(local))
        for batch in detect(source).read(source, options):
            parts.setdefault(batch.kind, []).append(batch.table)
    return {kind: pa.concat_tables(tables) for kind, tables in parts.items()}
