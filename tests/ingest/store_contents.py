"""What a store holds, to compare stores two ways of writing gave: its data files, byte for
byte, and each version's records of its packs and tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ticktensor.store import Store

__all__ = ["assert_same_latest", "data_files", "version_records"]


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


def assert_same_latest(got_store: Path, want_store: Path) -> None:
    """The latest versions hold the same packs (arrays, bit for bit) and tables."""
    got, want = Store.open(str(got_store)).version(), Store.open(str(want_store)).version()
    assert [p.session for p in got.packs] == [p.session for p in want.packs]
    for mine, theirs in zip(got.packs, want.packs, strict=True):
        a, b = got.read_pack(mine), want.read_pack(theirs)
        assert a.symbols == b.symbols
        for name in ("offsets", "ts", "values", "labels"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        # A pack whose rows an append leaves as they are keeps its record (and sources).
        assert set(mine.sources) <= set(theirs.sources)
    assert [t.key for t in got.tables] == [t.key for t in want.tables]
    for mine, theirs in zip(got.tables, want.tables, strict=True):
        assert got.read_table(mine).equals(want.read_table(theirs)), mine.key
