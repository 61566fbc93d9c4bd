"""What a store holds, to compare stores two ways of writing gave: its data files, byte for
byte, and each version's records of its packs and tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ticktensor.store import Store

__all__ = ["data_files", "version_records"]


def data_files(store: Path) -> dict[str, bytes]:
    """Every data file of the store (packs and tables), by path."""
    return {
        str(p.relative_to(store)): p.read_bytes()
        for folder in ("packs", "events")
        for p in sorted((store / folder).rglob("*"))
        if p.is_file()
    }


def version_records(store: Path) -> list[Any]:
    """Each version's packs and tables as the manifest records them, and its statistics."""
    opened = Store.open(str(store))
    out = []
    for number in range(1, opened.latest_version() + 1):
        version = opened.version(number)
        out.append(
            (
                sorted(
                    (p.session, p.path, p.content_hash, p.rows, p.sources) for p in version.packs
                ),
                sorted((t.key, t.path, t.file, t.rows, t.sources) for t in version.tables),
                version.stats,
            )
        )
    return out
