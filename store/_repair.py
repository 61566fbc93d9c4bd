"""Repair: remove what interrupted commits and killed jobs left behind, never published data.

A crash between writing files and flipping ``latest.json`` leaves files that no version
refers to: segments and tables of the lost commit, an unpublished log entry or
checkpoint, temporary ``*.tmp-*`` files, a job's ``staging/`` folder. They are harmless
(readers never see them) but take space. :func:`find_orphans` lists every file below
``segments/``, ``packs/``, ``events/``, ``versions/`` and ``staging/`` that no published version
(0 to the latest) refers to, and temporary files of interrupted atomic writes at the
root; :func:`repair` removes those older than a grace period, so that files a running
job has written but not yet committed are left alone.

Nothing outside the store is touched: on a local store an area, or a folder or file in
it, that is a symlink stops the repair before anything is removed
(:class:`~ticktensor.errors.StoreCorruptError` naming it), and only regular files in
plain folders are removed, each through its folder's descriptor (no link is followed
between the check and the removal).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ._history import checkpoint_path, entry_path
from ._location import Location
from ._manifest import Manifest
from ._nofollow import unlink_below

__all__ = ["RepairReport", "find_orphans", "repair"]

#: Folders whose files are referenced by manifests (or are scratch).
AREAS = ("segments", "packs", "events", "versions", "staging")


@dataclass
class RepairReport:
    """What a repair found: orphans removed (or to remove, in a dry run) and kept."""

    version: int
    referenced: int = 0
    removed: list[tuple[str, int]] = field(default_factory=list)
    too_young: list[str] = field(default_factory=list)
    dry_run: bool = False

    @property
    def removed_bytes(self) -> int:
        return sum(n for _, n in self.removed)


def referenced_files(manifests: Iterable[Manifest]) -> set[str]:
    """Every store-relative path the given versions refer to, their version files included.

    A version's files are its log entry (or format-1 manifest) and, if it has one, its
    checkpoint; a checkpoint of a version that was never published is debris.
    """
    keep: set[str] = set()
    for m in manifests:
        keep.update((entry_path(m.version), checkpoint_path(m.version)))
        for seg in m.segments:
            keep.update(f"{seg.path}/{name}" for name in seg.files)
        for pack in m.packs:
            keep.update(f"{pack.path}/{name}" for name in pack.files)
        keep.update(t.path for t in m.tables)
    return keep


def find_orphans(location: Location, manifests: Iterable[Manifest]) -> tuple[list[str], int]:
    """Unreferenced files below the managed areas, and how many files are referenced.

    Raises :class:`~ticktensor.errors.StoreCorruptError` naming a symlink met on a local
    store (an area, or anything in one: :meth:`Location.find`).
    """
    keep = referenced_files(manifests)
    if location.is_local:
        top = [name for name, _ in _files_at_root(location)]
    else:
        root = location.root.rstrip("/") + "/"
        listed = location.fs.ls(location.root, detail=False)
        top = [
            p[len(root) :] for p in map(location.fs._strip_protocol, listed) if p.startswith(root)
        ]
    orphans = [name for name in top if ".tmp-" in name]
    for area in AREAS:
        if location.exists(area):
            orphans += [f"{area}/{rel}" for rel in location.find(area)]
    return sorted(p for p in orphans if p not in keep), len(keep)


def repair(
    location: Location,
    manifests: list[Manifest],
    *,
    grace_s: float,
    dry_run: bool = False,
) -> RepairReport:
    """Remove orphaned files older than ``grace_s`` seconds (none with ``dry_run``).

    The caller holds the commit lock, so no commit publishes files meanwhile; the grace
    period protects files of a job that has written but not yet committed them.
    """
    orphans, referenced = find_orphans(location, manifests)
    report = RepairReport(version=manifests[-1].version, referenced=referenced, dry_run=dry_run)
    now = time.time()
    for rel in orphans:
        found = _stat(location, rel)
        if found is None:
            continue
        mtime, size = found
        if grace_s > 0 and (mtime is None or now - mtime < grace_s):
            report.too_young.append(rel)
            continue
        report.removed.append((rel, size))
        if dry_run:
            continue
        if location.is_local:
            unlink_below(location.root, rel)  # a regular file in plain folders, or nothing
        else:
            location.fs.rm_file(location.path(rel))
    if not dry_run:
        _remove_empty_dirs(location)
    return report


def _files_at_root(location: Location) -> list[tuple[str, os.stat_result]]:
    """The regular files directly in a local store's root (no link is followed)."""
    with os.scandir(location.root) as entries:
        return [
            (e.name, e.stat(follow_symlinks=False))
            for e in entries
            if e.is_file(follow_symlinks=False)
        ]


def _stat(location: Location, rel: str) -> tuple[float | None, int] | None:
    """The modification time and size of ``rel`` (local: its ``lstat``); ``None`` if gone."""
    if location.is_local:
        try:
            info = os.lstat(location.path(rel))
        except FileNotFoundError:
            return None
        return info.st_mtime, info.st_size
    try:
        found = location.fs.info(location.path(rel))
    except FileNotFoundError:
        return None
    return _mtime(found), int(found.get("size") or 0)


def _mtime(info: dict[str, object]) -> float | None:
    value = info.get("mtime", info.get("created"))
    if isinstance(value, int | float):
        return float(value)
    stamp = getattr(value, "timestamp", None)
    return float(stamp()) if callable(stamp) else None


def _remove_empty_dirs(location: Location) -> None:
    """Local stores: drop directories the removal emptied (object stores have none)."""
    if not location.is_local:
        return
    for area in AREAS:
        top = location.path(area)
        for base, _dirs, _files in os.walk(top, topdown=False):  # never into a link
            if base != top and not os.path.islink(base) and not os.listdir(base):
                os.rmdir(base)
