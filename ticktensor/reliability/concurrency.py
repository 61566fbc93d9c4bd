"""Concurrency: readers iterate pinned versions while a writer commits; two writers race.

Readers (threads and separate processes) repeatedly pin the latest version and read
every pack (and segment, where a store has any) with ``verify=True``, which re-hashes
each chunk and the decoded content: a reader that saw a half-written version would fail.
Two writers that commit a session each on the same base version at once: one wins, the
other gets :class:`~ticktensor.errors.VersionConflictError`, reopens and retries, and in
the end both changes are published (no lost update).
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ticktensor.errors import VersionConflictError
from ticktensor.store import Codec, Layout, PackRecord, Store

__all__ = ["ConcurrencyResult", "readers_during_commits", "two_writers"]

_FEATURES = ("ret", "spread")


@dataclass
class ConcurrencyResult:
    """Reads done, versions seen, conflicts met, and every error (should be empty)."""

    reads: int = 0
    versions_seen: set[int] = field(default_factory=set)
    commits: int = 0
    conflicts: int = 0
    errors: list[str] = field(default_factory=list)


def _pack(
    store: Store, symbols: tuple[str, ...], day: int, session: str = "", rows: int = 3000
) -> PackRecord:
    """One session (``session``, default ``day<day>``) of ``rows`` rows per symbol."""
    rng = np.random.default_rng([day, *(sum(map(ord, s)) for s in symbols)])
    ts = 1_704_186_000 * 10**9 + day * 86_400 * 10**9 + np.arange(rows, dtype=np.int64) * 1000
    return store.write_pack(
        session=session or f"day{day:03d}",
        symbols=symbols,
        offsets=np.arange(len(symbols) + 1) * rows,
        ts=np.tile(ts, len(symbols)),
        values=rng.standard_normal((rows * len(symbols), len(_FEATURES))).astype(np.float32),
        feature_names=_FEATURES,
    )


def read_latest(url: str) -> tuple[int, int]:
    """Pin the latest version and read all of it, verifying; returns (version, rows)."""
    pinned = Store.open(url).version()
    rows = 0
    for pack in pinned.packs:
        read = pinned.read_pack(pack, verify=True).values.shape[0]
        if read != pack.rows:
            raise AssertionError(f"{pack.path}: {read} rows, manifest {pack.rows}")
        rows += pack.rows
    for seg in pinned.segments:
        read = pinned.read_segment(seg, verify=True).values.shape[0]
        if read != seg.rows:
            raise AssertionError(f"{seg.path}: {read} rows, manifest {seg.rows}")
        rows += seg.rows
    if rows != pinned.rows:
        raise AssertionError(f"version {pinned.version}: {rows} rows read of {pinned.rows}")
    return pinned.version, rows


def _reader_loop(url: str, stop: Any, out: Any) -> None:
    """Read until ``stop`` is set; put (reads, versions seen, errors) on ``out``."""
    reads, seen, errors = 0, set(), []
    while not stop.is_set() or reads == 0:
        try:
            version, _ = read_latest(url)
            seen.add(version)
            reads += 1
        except Exception as exc:  # reported, not raised: the caller counts them
            errors.append(f"{type(exc).__name__}: {exc}")
            break
    out.put((reads, sorted(seen), errors))


def readers_during_commits(
    url: str, commits: int = 10, threads: int = 2, processes: int = 2
) -> ConcurrencyResult:
    """Commit ``commits`` new versions while readers in threads and processes read."""
    layout = Layout(codec=Codec.ZSTD, chunk_rows=512)
    store = Store.create(url, layout=layout, exist_ok=True)
    store.commit(packs=[_pack(store, ("AAA",), 0)])
    ctx = multiprocessing.get_context("spawn")
    stop_p, out_p = ctx.Event(), ctx.Queue()
    stop_t = threading.Event()
    out_t: queue.Queue[Any] = queue.Queue()
    procs = [ctx.Process(target=_reader_loop, args=(url, stop_p, out_p)) for _ in range(processes)]
    workers = [
        threading.Thread(target=_reader_loop, args=(url, stop_t, out_t)) for _ in range(threads)
    ]
    for p in procs:
        p.start()
    for t in workers:
        t.start()
    result = ConcurrencyResult()
    time.sleep(0.2)
    for day in range(1, commits + 1):
        store.commit(packs=[_pack(store, ("AAA", "BBB"), day)], message=f"day {day}")
        result.commits += 1
    stop_t.set()
    stop_p.set()
    for t in workers:
        t.join()
    gathered = [out_t.get() for _ in workers] + [out_p.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    for reads, seen, errors in gathered:
        result.reads += reads
        result.versions_seen.update(seen)
        result.errors += errors
    return result


def _writer(url: str, symbol: str, barrier: Any, out: Any) -> None:
    """Commit one session (named ``symbol``) based on the latest version; on conflict
    reopen and retry."""
    try:
        store = Store.open(url)
        base = store.latest_version()
        pack = _pack(store, (symbol,), 500, session=symbol)
        barrier.wait(timeout=60)
        conflicts = 0
        while True:
            try:
                store.commit(packs=[pack], base_version=base, message=f"writer {symbol}")
                break
            except VersionConflictError:
                conflicts += 1
                base = Store.open(url).latest_version()  # redo the change on the new base
        out.put((symbol, conflicts, None))
    except Exception as exc:  # reported to the parent
        out.put((symbol, 0, f"{type(exc).__name__}: {exc}"))


def two_writers(url: str, *, processes: bool, rounds: int = 5) -> ConcurrencyResult:
    """``rounds`` races of two writers on the same base version (threads or processes)."""
    store = Store.create(url, exist_ok=True)
    result = ConcurrencyResult()
    for r in range(rounds):
        before = store.latest_version()
        symbols = (f"W{r}A", f"W{r}B")
        barrier: Any
        out: Any
        if processes:
            ctx = multiprocessing.get_context("spawn")
            barrier, out = ctx.Barrier(2), ctx.Queue()
            runners: list[Any] = [
                ctx.Process(target=_writer, args=(url, s, barrier, out)) for s in symbols
            ]
        else:
            barrier, out = threading.Barrier(2), queue.Queue()
            runners = [
                threading.Thread(target=_writer, args=(url, s, barrier, out)) for s in symbols
            ]
        _run_all(runners)
        reports = [out.get(timeout=120) for _ in symbols]
        for symbol, conflicts, error in reports:
            result.conflicts += conflicts
            if error:
                result.errors.append(f"{symbol}: {error}")
        latest = Store.open(url).version()
        result.commits += latest.version - before
        have = {p.session for p in latest.packs}
        if not set(symbols) <= have:
            result.errors.append(f"round {r}: lost update, version {latest.version} has {have}")
        if latest.version != before + 2:
            result.errors.append(f"round {r}: {latest.version - before} versions, expected 2")
    return result


def _run_all(runners: list[Any]) -> None:
    for r in runners:
        r.start()
    for r in runners:
        r.join(timeout=120)
