"""Reading a version: walk the log back to a checkpoint, check every hash, replay forward.

A version file ``versions/NNNNNNNN.json`` is either a format-2 log entry or a format-1
manifest (the full state). The state of version ``N`` is found by reading entries
``N, N-1, ...`` until one of them carries a checkpoint, is a format-1 manifest, is
version 0, or is a state already in memory; the entries read are then applied
oldest first. Each file's sha256 must equal what its child recorded (``latest.json``
for the latest), so one hash vouches for the whole chain. With a checkpoint every
``K`` versions, opening any version reads one checkpoint and at most ``K`` entries.

States are immutable, so recent ones are kept in a small cache keyed by store URL,
version and the version file's hash (a hit needs the file's exact bytes): every
:class:`~ticktensor.store.Store` handle in a process (an ingest worker opens one per
task) shares the work of building them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ticktensor.errors import StoreCorruptError

from ._location import Location
from ._log import LOG_FORMAT, CheckpointRef, LogEntry, RemovedRecord
from ._manifest import (
    VERSION_FILE_BYTES,
    Manifest,
    PackRecord,
    SegmentRecord,
    TableRecord,
    load_json,
    sha256_hex,
)
from ._state import VersionState

__all__ = [
    "CACHE",
    "StateCache",
    "checkpoint_path",
    "checkpoint_problems",
    "entry_path",
    "parent_sha256",
    "read_state",
]

_Record = SegmentRecord | TableRecord | PackRecord
#: A kind of record: its name, what an entry adds and removes, what a state holds.
_Kind = tuple[str, Sequence[_Record], Sequence[RemovedRecord], Mapping[Any, _Record]]


def entry_path(version: int) -> str:
    """The version file of ``version``: a log entry (format 2) or a manifest (format 1)."""
    return f"versions/{version:08d}.json"


def checkpoint_path(version: int) -> str:
    """Where the checkpoint of ``version`` is written, when it has one."""
    return f"versions/{version:08d}.checkpoint.json"


class StateCache:
    """The last few states read, by (store URL, version, sha256 of the version file)."""

    def __init__(self, size: int = 4) -> None:
        self._size = size
        self._states: OrderedDict[tuple[str, int, str], VersionState] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, url: str, version: int, sha256: str) -> VersionState | None:
        with self._lock:
            state = self._states.get((url, version, sha256))
            if state is not None:
                self._states.move_to_end((url, version, sha256))
            return state

    def put(self, url: str, state: VersionState) -> None:
        if state.sha256 is None:
            return
        with self._lock:
            self._states[(url, state.version, state.sha256)] = state
            self._states.move_to_end((url, state.version, state.sha256))
            while len(self._states) > self._size:
                self._states.popitem(last=False)


CACHE = StateCache()


def _read(location: Location, rel: str, what: str) -> bytes:
    try:
        return location.read_bytes(rel, limit=VERSION_FILE_BYTES)
    except FileNotFoundError:
        raise StoreCorruptError(f"{location.display(rel)}: {what} is missing") from None


def _check_hash(location: Location, rel: str, digest: str, expected: str, by: str) -> None:
    if digest != expected:
        raise StoreCorruptError(
            f"{location.display(rel)}: sha256 {digest[:16]} != {expected[:16]} recorded by {by}"
        )


def read_state(
    location: Location,
    version: int,
    expected_sha256: str | None,
    *,
    vouched_by: str = "latest.json",
    cache: StateCache = CACHE,
    known: VersionState | None = None,
    check_checkpoint: bool = True,
) -> VersionState:
    """The state of ``version``; its file's hash must be ``expected_sha256`` when given.

    The walk back stops early at a state in ``cache`` or at ``known`` (a state the
    caller read before) when the file there has the exact bytes it was built from.
    A checkpoint it stops at must agree with its own log entry and, with
    ``check_checkpoint``, with the log: the state of the version before it (read back to
    the checkpoint before, whose agreement with the log is not checked again) with the
    entry applied (:func:`_check_against_log`).

    Raises :class:`StoreCorruptError` naming the file for anything missing, malformed
    or not matching the hash its child (or ``vouched_by``) recorded.
    """
    if expected_sha256 is not None:
        hit = cache.get(location.url, version, expected_sha256)
        if hit is not None:
            return hit
    chain: list[tuple[LogEntry, str, str]] = []
    v, expected, by = version, expected_sha256, vouched_by
    while True:
        rel = entry_path(v)
        data = _read(location, rel, f"version file of version {v}")
        digest = sha256_hex(data)
        if expected is not None:
            _check_hash(location, rel, digest, expected, by)
        hit = known if known is not None and (known.version, known.sha256) == (v, digest) else None
        hit = hit or cache.get(location.url, v, digest)
        if hit is not None:  # e.g. the version a Store handle read before this commit
            base = hit
            break
        where = location.display(rel)
        doc = load_json(data, where, "version file")
        if not isinstance(doc, dict) or doc.get("format") != LOG_FORMAT:
            manifest = Manifest.from_doc(doc, where)  # format 1: the full state
            _check_version(manifest.version, v, where)
            base = VersionState.from_manifest(manifest, digest, where)
            break
        entry = LogEntry.from_doc(doc, where)
        _check_version(entry.version, v, where)
        if entry.checkpoint is not None:
            base = _read_checkpoint(location, entry, entry.checkpoint, digest, where)
            if check_checkpoint:
                _check_against_log(location, entry, base, rel, cache, known)
            break
        chain.append((entry, digest, where))
        if entry.parent is None or entry.parent_sha256 is None:
            base = VersionState.before_first()
            break
        v, expected, by = entry.parent, entry.parent_sha256, rel
    for entry, digest, where in reversed(chain):
        base = base.apply(entry, digest, where)
    cache.put(location.url, base)
    return base


def _check_version(found: int, wanted: int, where: str) -> None:
    if found != wanted:
        raise StoreCorruptError(f"{where}: holds version {found}, expected version {wanted}")


def _read_checkpoint(
    location: Location, entry: LogEntry, ref: CheckpointRef, digest: str, where: str
) -> VersionState:
    if ref.path != checkpoint_path(entry.version):
        raise StoreCorruptError(
            f"{where}: names checkpoint {ref.path!r}; version {entry.version}'s is "
            f"{checkpoint_path(entry.version)!r}"
        )
    data = _read(location, ref.path, f"checkpoint of version {entry.version}")
    _check_hash(location, ref.path, sha256_hex(data), ref.file.sha256, where)
    cp_where = location.display(ref.path)
    manifest = Manifest.from_json(data, cp_where)
    _check_version(manifest.version, entry.version, cp_where)
    if manifest.parent_sha256 != entry.parent_sha256:
        raise StoreCorruptError(f"{cp_where}: names another parent than its log entry {where}")
    state = VersionState.from_manifest(manifest, digest, cp_where)
    disagree = _entry_disagreements(entry, state)
    if disagree:
        raise StoreCorruptError(
            f"{cp_where}: the checkpoint disagrees with the log entry it summarises, "
            f"{where}: {_listed(disagree)}",
            [(ref.path, "checkpoint disagrees with its log entry")],
        )
    return state


def _check_against_log(
    location: Location,
    entry: LogEntry,
    checkpoint: VersionState,
    rel: str,
    cache: StateCache,
    known: VersionState | None,
) -> None:
    """The checkpoint of ``entry`` (file ``rel``) must hold what the log holds: the state
    of the version before, with the entry applied. The state before is read as any
    version is (from the previous checkpoint, a cached state or ``known``), so this
    costs at most one more checkpoint and ``checkpoint_every`` entries, once per state
    built (states are cached)."""
    if entry.parent is None or entry.parent_sha256 is None or entry.checkpoint is None:
        return
    parent = read_state(
        location,
        entry.parent,
        entry.parent_sha256,
        vouched_by=rel,
        cache=cache,
        known=known,
        check_checkpoint=False,
    )
    where = location.display(rel)
    logged = parent.apply(entry, checkpoint.sha256 or "", where)
    differ = logged.differences(checkpoint, "the log", "the checkpoint")
    if differ:
        cp_where = location.display(entry.checkpoint.path)
        raise StoreCorruptError(
            f"{cp_where}: the checkpoint disagrees with the log entries it summarises "
            f"({where} and those before it): {_listed(differ)}",
            [(entry.checkpoint.path, "checkpoint disagrees with the log")],
        )


def _entry_disagreements(entry: LogEntry, state: VersionState) -> list[str]:
    """Where a checkpoint's ``state`` contradicts the entry of its version: a field of
    the version, a record the entry adds that the checkpoint lacks, or one the entry
    removes that it keeps. O(the entry): every open of a checkpoint makes this check;
    ``verify`` replays the whole log (:func:`checkpoint_problems`)."""
    info = state.info
    fields = {
        "parent": (entry.parent, info.parent),
        "created": (entry.created, info.created),
        "message": (entry.message, info.message),
        "feature_names": (entry.feature_names, info.feature_names),
        "label_names": (entry.label_names, info.label_names),
        "stats": (entry.stats, info.stats),
        "attributes": (dict(entry.attributes), dict(info.attributes)),
    }
    out = [
        f"{name} is {logged!r:.80} in the entry, {kept!r:.80} in the checkpoint"
        for name, (logged, kept) in fields.items()
        if logged != kept
    ]
    kinds: tuple[_Kind, ...] = (
        ("segment", entry.segments, entry.removed_segments, state.segments),
        ("table", entry.tables, entry.removed_tables, state.tables),
        ("pack", entry.packs, entry.removed_packs, state.packs),
    )
    for kind, added, removed, held in kinds:
        out.extend(
            f"the entry adds {kind} {'/'.join(rec.key)} at {rec.path}, the checkpoint "
            "does not hold it"
            for rec in added
            if held.get(rec.key) != rec
        )
        readded = {rec.key for rec in added}
        for rm in removed:
            kept = held.get(rm.key)
            if rm.key not in readded and kept is not None and kept.path == rm.path:
                out.append(
                    f"the entry removes {kind} {'/'.join(rm.key)} at {rm.path}, "
                    "the checkpoint still holds it"
                )
    return out


def _listed(problems: list[str], most: int = 5) -> str:
    more = f"; and {len(problems) - most} more" if len(problems) > most else ""
    return "; ".join(problems[:most]) + more


def checkpoint_problems(location: Location, version: int) -> list[tuple[str, str]]:
    """Replay the log from its first entry to ``version`` and compare every checkpoint on
    the way with the state the entries up to it give: ``(path, why)`` for each that
    disagrees. A format-1 manifest on the way is a full state: the replay starts again
    there. Reads every version file (this is ``verify``'s check; an open trusts a
    checkpoint its entry vouches for, after :func:`_entry_disagreements`).

    Raises :class:`StoreCorruptError` for a version file that is missing, malformed or
    does not follow its parent.
    """
    problems: list[tuple[str, str]] = []
    state = VersionState.before_first()
    first = 0
    for v in range(version + 1):
        rel = entry_path(v)
        data = _read(location, rel, f"version file of version {v}")
        digest = sha256_hex(data)
        where = location.display(rel)
        doc = load_json(data, where, "version file")
        if not isinstance(doc, dict) or doc.get("format") != LOG_FORMAT:
            manifest = Manifest.from_doc(doc, where)
            _check_version(manifest.version, v, where)
            state, first = VersionState.from_manifest(manifest, digest, where), v
            continue
        entry = LogEntry.from_doc(doc, where)
        _check_version(entry.version, v, where)
        state = state.apply(entry, digest, where)
        if entry.checkpoint is None:
            continue
        kept = _read_checkpoint(location, entry, entry.checkpoint, digest, where)
        differ = state.differences(kept, "the log", "the checkpoint")
        if differ:
            cp_where = location.display(entry.checkpoint.path)
            problems.append(
                (
                    entry.checkpoint.path,
                    f"{cp_where} disagrees with the log entries it summarises "
                    f"({entry_path(first)} to {rel}): {_listed(differ)}",
                )
            )
    return problems


def parent_sha256(location: Location, version: int) -> str:
    """The parent hash that ``version``'s file records (it must record one)."""
    rel = entry_path(version)
    where = location.display(rel)
    doc = load_json(
        _read(location, rel, f"version file of version {version}"), where, "version file"
    )
    if isinstance(doc, dict) and doc.get("format") == LOG_FORMAT:
        recorded = LogEntry.from_doc(doc, where).parent_sha256
    else:
        recorded = Manifest.from_doc(doc, where).parent_sha256
    if recorded is None:
        raise StoreCorruptError(f"{where}: version {version} does not record its parent's hash")
    return recorded
