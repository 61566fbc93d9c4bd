"""Fault injection: kill the writer, fill the disk, damage or remove stored files.

Each scenario breaks one conversion (or one stored file) of a :class:`Workload` and
checks, from the outside, what the design promises:

- the previous version stays readable, byte for byte, and verifies;
- the error names the file or chunk;
- :meth:`Store.repair` removes the debris and nothing published;
- a rerun completes with exactly the rows of a clean run (rows lost = 0).

Every scenario returns :class:`FaultOutcome` records instead of raising, so one run
reports all of them; ``ok`` is False with a reason when a promise was broken.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ticktensor.errors import StoreCorruptError
from ticktensor.store import Store, StoreVersion
from ticktensor.store.testing import write_segment

from ._faultyfs import FaultyFileSystem
from .workload import Workload

__all__ = [
    "FaultOutcome",
    "damaged_files",
    "disk_full",
    "reference_rows",
    "sigkill_during_ingest",
]


@dataclass(frozen=True)
class FaultOutcome:
    """One injected fault: where, whether every promise held, and what the error said."""

    fault: str
    point: str
    ok: bool
    detail: str = ""
    rows_lost: int = 0


@dataclass(frozen=True)
class _Reference:
    """What a clean conversion of day two publishes."""

    features: frozenset[tuple[str, str, str]]
    tables: frozenset[str]
    rows_read: int
    rows_stored: int
    rows_quarantined: int


def _content(v: StoreVersion) -> tuple[frozenset[tuple[str, str, str]], frozenset[str]]:
    """The version's feature records (segments and packs, by content hash) and tables."""
    features = frozenset((s.symbol, s.session, s.content_hash) for s in v.segments) | frozenset(
        ("*", p.session, p.content_hash) for p in v.packs
    )
    return features, frozenset(t.path for t in v.tables)


def reference_rows(work: Workload) -> _Reference:
    """Run the day-two conversion cleanly once, on a copy."""
    store = work.fresh_store("reference")
    result = Workload.ingest(str(store), work.day2)
    features, tabs = _content(result.version)
    return _Reference(features, tabs, result.rows_read, result.rows_stored, result.rows_quarantined)


def _snapshot(url: str) -> tuple[int, bytes]:
    store = Store.open(url)
    v = store.latest_version()
    return v, store.location.read_bytes(f"versions/{v:08d}.json")


def _check_after(url: str, before: tuple[int, bytes], ref: _Reference) -> str | None:
    """After a fault: old version intact, latest verifies, repair clean, rerun exact."""
    store = Store.open(url)
    latest = store.latest_version()
    old = store.location.read_bytes(f"versions/{before[0]:08d}.json")
    if old != before[1]:
        return f"manifest of version {before[0]} changed"
    if latest not in (before[0], before[0] + 1):
        return f"latest version is {latest}, expected {before[0]} or {before[0] + 1}"
    for v in range(latest + 1):
        store.verify(v)
    pinned = store.version(before[0])
    for seg in pinned.segments:
        pinned.read_segment(seg, verify=True)
    for pack in pinned.packs:
        pinned.read_pack(pack, verify=True)
    store.repair(grace_s=0)
    left = [rel for rel, _ in store.repair(grace_s=0, dry_run=True).removed]
    if left:
        return f"repair left orphans: {left[:3]}"
    store.verify(before[0])
    return None


def _rerun(url: str, work: Workload, ref: _Reference) -> tuple[str | None, int]:
    result = Workload.ingest(url, work.day2)
    lost = ref.rows_stored + ref.rows_quarantined - result.rows_stored - result.rows_quarantined
    if result.rows_read != ref.rows_read:
        return f"rerun read {result.rows_read} rows, a clean run {ref.rows_read}", lost
    version = Store.open(url).version()
    if _content(version) != (ref.features, ref.tables):
        return "rerun published other content than a clean run", lost
    Store.open(url).verify()
    return (None, lost) if lost == 0 else (f"{lost} rows lost", lost)


# -- SIGKILL ---------------------------------------------------------------------------


def _child(url: str, kill_at: int, files: list[Path]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "ticktensor.reliability._killpoint", url, str(kill_at)]
    return subprocess.run(
        [*cmd, *map(str, files)], capture_output=True, text=True, timeout=300, check=False
    )


def count_steps(work: Workload) -> int:
    """How many storage steps the day-two conversion takes (in a child, never killed)."""
    store = work.fresh_store("count")
    done = _child(str(store), 0, work.day2)
    if done.returncode != 0:
        raise RuntimeError(f"counting run failed: {done.stderr[-2000:]}")
    return int(done.stdout.split("steps ", 1)[1].split()[0])


def sigkill_during_ingest(
    work: Workload, points: int = 20, seed: int = 0, ref: _Reference | None = None
) -> list[FaultOutcome]:
    """SIGKILL the conversion at ``points`` storage steps spread over the whole job."""
    ref = ref or reference_rows(work)
    total = count_steps(work)
    rng = np.random.default_rng(seed)
    even = np.linspace(1, total, min(points, total)).round().astype(int)
    jitter = rng.integers(-1, 2, len(even))
    chosen = sorted(set(np.clip(even + jitter, 1, total).tolist()))
    out = []
    for k in chosen:
        store = work.fresh_store("killed")
        before = _snapshot(str(store))
        done = _child(str(store), k, work.day2)
        point = f"step {k} of {total}"
        if done.returncode != -signal.SIGKILL:
            detail = f"child exited {done.returncode}, not killed: {done.stderr[-300:]}"
            out.append(FaultOutcome("sigkill", point, False, detail))
            continue
        problem = _check_after(str(store), before, ref)
        lost = 0
        if problem is None:
            problem, lost = _rerun(str(store), work, ref)
        out.append(FaultOutcome("sigkill", point, problem is None, problem or "", lost))
    return out


# -- disk full -------------------------------------------------------------------------


def disk_full(work: Workload, points: int = 8, ref: _Reference | None = None) -> list[FaultOutcome]:
    """Run day two on a ``ttfaulty://`` store that is full after N bytes, N spread out."""
    ref = ref or reference_rows(work)
    base = "ttfaulty://reliability/base"
    FaultyFileSystem.store.clear()
    Store.create(base, layout=Store.open(str(work.root / "base")).layout)
    Workload.ingest(base, work.day1)
    pristine = dict(FaultyFileSystem.store)
    with FaultyFileSystem.limit(10**15):
        Workload.ingest(base, work.day2)
        needed = FaultyFileSystem.written
    out = []
    for budget in np.linspace(0, needed - 1, points).astype(int).tolist():
        FaultyFileSystem.store.clear()
        FaultyFileSystem.store.update(pristine)
        before = _snapshot(base)
        error = ""
        with FaultyFileSystem.limit(budget):
            try:
                Workload.ingest(base, work.day2)
            except OSError as exc:
                error = str(exc)
        point = f"full after {budget:,} of {needed:,} bytes"
        if not error or os.strerror(errno.ENOSPC) not in error or "reliability/base/" not in error:
            why = "no error" if not error else f"error does not name the file: {error[:200]}"
            out.append(FaultOutcome("disk-full", point, False, why))
            continue
        problem = _check_after(base, before, ref)
        lost = 0
        if problem is None:
            problem, lost = _rerun(base, work, ref)
        out.append(FaultOutcome("disk-full", point, problem is None, problem or error, lost))
    FaultyFileSystem.store.clear()
    return out


def disk_full_tmpfs(
    work: Workload, points: int = 4, ref: _Reference | None = None
) -> list[FaultOutcome]:
    """Day two into a store on a small tmpfs that fills up (a real ENOSPC from the kernel).

    Needs the right to mount (root in a container that allows it); returns no outcomes
    where mounting is refused. Sizes where the conversion fits are not counted.
    """
    ref = ref or reference_rows(work)
    base = work.root / "base"
    # tmpfs charges whole pages per file: room for day one and a share of day two (about
    # as large again), from a sliver to nearly all of it.
    pages = sum(-(-f.stat().st_size // 4096) for f in base.rglob("*") if f.is_file())
    out: list[FaultOutcome] = []
    for k in range(points):
        mnt = work.root / f"tmpfs-{k}"
        mnt.mkdir(exist_ok=True)
        size = (pages + int(pages * 3 * (k + 0.5) / points)) * 4096
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
            capture_output=True,
            check=False,
        )
        if mounted.returncode != 0:
            mnt.rmdir()
            return out
        try:
            store = mnt / "store"
            shutil.copytree(base, store)
            before = _snapshot(str(store))
            error = ""
            try:
                Workload.ingest(str(store), work.day2)
            except OSError as exc:
                error = f"{type(exc).__name__}: {exc}"
            point = f"tmpfs of {size:,} bytes"
            if not error:  # the conversion fitted: no fault was injected
                continue
            named = str(mnt) in error
            problem = _check_after(str(store), before, ref)
            if problem is None and not named:
                problem = f"error does not name the file: {error[:200]}"
            out.append(FaultOutcome("tmpfs-full", point, problem is None, problem or error))
        finally:
            subprocess.run(["umount", str(mnt)], capture_output=True, check=False)
            mnt.rmdir()
    return out


# -- damaged stored files --------------------------------------------------------------


def _expect_named(fault: str, point: str, action: Callable[[], object], name: str) -> FaultOutcome:
    try:
        action()
    except StoreCorruptError as exc:
        ok = name in str(exc)
        return FaultOutcome(fault, point, ok, str(exc).splitlines()[0][:300])
    except OSError as exc:
        ok = name in str(exc)
        return FaultOutcome(fault, point, ok, f"{type(exc).__name__}: {exc}"[:300])
    return FaultOutcome(fault, point, False, "no error raised")


@dataclass(frozen=True)
class _Target:
    """The feature record a damage scenario breaks: a session's pack, or a segment in a
    store an older ticktensor wrote; ``read`` reads it whole (with ``verify``)."""

    path: str
    chunk: str
    read: Callable[[StoreVersion, bool], object]
    copy_to: Callable[[Store, StoreVersion], tuple[StoreVersion, str]]


def _target(pinned: StoreVersion) -> _Target:
    if pinned.packs:
        pack = pinned.packs[0]
        chunk = "values/c/0/0"  # the shard: damage inside it is named by chunk and shard

        def copy_pack(dst: Store, src: StoreVersion) -> tuple[StoreVersion, str]:
            data = src.read_pack(pack)
            rec = dst.write_pack(
                session=pack.session,
                symbols=data.symbols,
                offsets=data.offsets,
                ts=data.ts,
                values=data.values,
                feature_names=pack.feature_names,
                labels=data.labels,
                label_names=pack.label_names,
            )
            remote = dst.commit(packs=[rec])
            return remote, rec.path

        return _Target(
            pack.path,
            chunk,
            lambda v, verify: v.read_pack(v.pack(pack.session), verify=verify),
            copy_pack,
        )
    seg = pinned.segments[0]

    def copy_segment(dst: Store, src: StoreVersion) -> tuple[StoreVersion, str]:
        data = src.read_segment(seg)
        rec = write_segment(
            dst,
            symbol=seg.symbol,
            session=seg.session,
            ts=data.ts,
            values=data.values,
            feature_names=seg.feature_names,
            labels=data.labels,
            label_names=seg.label_names,
        )
        return dst.commit(segments=[rec]), rec.path

    return _Target(
        seg.path,
        "values/c/1/0",
        lambda v, verify: v.read_segment(v.segment(seg.symbol, seg.session), verify=verify),
        copy_segment,
    )


def damaged_files(work: Workload) -> list[FaultOutcome]:
    """Alter, remove and make unreadable stored files of the published version."""
    out = []
    store_dir = work.fresh_store("damaged")
    url = str(store_dir)
    pinned = Store.open(url).version()
    target = _target(pinned)
    chunk = target.chunk
    path = store_dir / target.path / chunk
    original = path.read_bytes()
    what = "read_pack" if pinned.packs else "read_segment"

    # a chunk whose bytes were altered (same size)
    altered = bytearray(original)
    altered[len(altered) // 3] ^= 0xFF  # inside the data, before a shard's index
    path.write_bytes(bytes(altered))
    out.append(_expect_named("altered-chunk", "verify", lambda: Store.open(url).verify(), chunk))
    out.append(
        _expect_named(
            "altered-chunk",
            f"{what}(verify=True)",
            lambda: target.read(pinned, True),
            chunk,
        )
    )
    path.write_bytes(original)

    # a chunk that cannot be read (an I/O error: the file became a directory)
    path.unlink()
    path.mkdir()
    out.append(_expect_named("io-error", what, lambda: target.read(pinned, False), chunk))
    path.rmdir()
    path.write_bytes(original)

    # an I/O error (EIO) while reading a chunk from a filesystem
    faulty = "ttfaulty://reliability/io"
    FaultyFileSystem.store.clear()
    src = Store.open(url).version()
    dst = Store.create(faulty, layout=Store.open(url).layout)
    remote, rel = target.copy_to(dst, src)
    FaultyFileSystem.broken = {f"/reliability/io/{rel}/{chunk}"}
    try:
        out.append(
            _expect_named("io-error", "EIO on a chunk", lambda: target.read(remote, False), chunk)
        )
        out.append(_expect_named("io-error", "EIO in verify", dst.verify, chunk))
    finally:
        FaultyFileSystem.broken = set()
        FaultyFileSystem.store.clear()

    # a manifest pointing at a missing chunk / table / segment or pack
    path.unlink()
    out.append(
        _expect_named("missing-file", "chunk read", lambda: target.read(pinned, False), chunk)
    )
    out.append(_expect_named("missing-file", "verify", lambda: Store.open(url).verify(), chunk))
    path.write_bytes(original)
    table = pinned.tables[0]
    tpath = store_dir / table.path
    tbytes = tpath.read_bytes()
    tpath.unlink()
    out.append(
        _expect_named("missing-file", "table read", lambda: pinned.read_table(table), table.path)
    )
    tpath.write_bytes(tbytes)
    moved = store_dir / "moved-away"
    shutil.move(str(store_dir / target.path), moved)
    group = "pack group" if pinned.packs else "segment group"
    out.append(
        _expect_named("missing-file", group, lambda: target.read(pinned, False), target.path)
    )
    shutil.move(str(moved), str(store_dir / target.path))
    # everything restored: the version must verify again (reported only if it does not)
    try:
        Store.open(url).verify()
    except StoreCorruptError as exc:
        out.append(FaultOutcome("missing-file", "restored copy", False, str(exc)[:300]))
    return out


def summarize(outcomes: list[FaultOutcome]) -> dict[str, object]:
    """Counts per fault kind, as JSON-friendly data."""
    kinds: dict[str, dict[str, int]] = {}
    for o in outcomes:
        k = kinds.setdefault(o.fault, {"injected": 0, "ok": 0, "rows_lost": 0})
        k["injected"] += 1
        k["ok"] += int(o.ok)
        k["rows_lost"] += o.rows_lost
    return dict(kinds)
