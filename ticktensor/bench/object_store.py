"""A first epoch from an object store with latency, against the link's limit and local disk.

The workload's raw pack (:func:`~ticktensor.bench.integrity.pack_store`) is read once from
the local folder and once through ``slowfile://`` (:mod:`ticktensor.bench.slow_link`): the
same files behind a link of :data:`LATENCY_S` per request and :data:`BANDWIDTH` bytes per
second. Each pass is one epoch over non-overlapping windows in block-shuffle order, timed
from opening the dataset, so every stored byte is read once. The link limit is the time
those bytes need at the link's bandwidth alone: a loader that keeps enough bytes in flight
comes close to it, one that waits for each request pays the latency per request.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from pathlib import Path

from ticktensor.store import Codec, open_store

from .engine import fresh_pass
from .integrity import pack_store
from .measure import Rep, summarize, timing_row, warm
from .options import BenchOptions
from .results import Results, Row
from .slow_link import PROTOCOL, LinkCounts, link_of
from .workload import Workload

__all__ = ["BANDWIDTH", "LATENCY_S", "object_store_rows"]

Say = Callable[[str], None]
#: Seconds before each request's first byte: an object store in another region.
LATENCY_S = 0.02
#: Bytes per second of the link (2 Gbit/s): well below what a first epoch from local disk
#: reaches on 2 cores, so that the link, not the machine, bounds the object-store row.
BANDWIDTH = 250e6


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def object_store_rows(
    w: Workload,
    o: BenchOptions,
    results: Results,
    say: Say,
    *,
    latency_s: float = LATENCY_S,
    bandwidth: float = BANDWIDTH,
) -> None:
    """``ticktensor_object_store``, ``link_limit`` and ``ticktensor_local_disk``: first epochs
    of the raw pack through a link of ``latency_s`` and ``bandwidth`` and from local disk,
    taking turns; the link's limit is the bytes it carried over its bandwidth."""
    sb = w.sample_bytes
    root = Path(pack_store(w, Codec.NONE, say).location.root)
    files = _files(root)
    stored = sum(f.stat().st_size for f in files)
    warm(files)  # the link, not the disk under it, is what the object-store row meets
    say(
        f"# object store: {o.passes} first epochs of the none pack ({stored / 1e6:,.0f} MB) "
        f"through {PROTOCOL}:// ({latency_s * 1e3:g} ms per request, "
        f"{bandwidth / 1e6:,.0f} MB/s) and from local disk, taking turns"
    )
    options = {"latency_s": latency_s, "bandwidth": bandwidth}
    url = f"{PROTOCOL}://{root}"
    link = link_of(open_store(url, storage_options=options).location.fs)
    reps: dict[str, list[Rep]] = {"local": [], "remote": []}
    carried: list[LinkCounts] = []
    for p in range(o.passes):
        # Each pass opens its store again: nothing read by an earlier pass is reused.
        local = open_store(str(root))
        reps["local"].append(fresh_pass(local, w.window, w.batch, o.threads, w.seed + p))
        remote = open_store(url, storage_options=options)
        link.reset()
        reps["remote"].append(fresh_pass(remote, w.window, w.batch, o.threads, w.seed + p))
        carried.append(link.counts())
    note = f"one epoch of the none pack, stride {w.window}, block order, from opening, "
    note += f"{o.threads} threads"
    remote_t, local_t = summarize(reps["remote"]), summarize(reps["local"])
    last = carried[-1]
    # The limit carries the pass's samples in the time its bytes take at the bandwidth.
    limit = statistics.median(
        r.samples / link.seconds(c.bytes) for r, c in zip(reps["remote"], carried, strict=True)
    )
    results.rows.append(
        timing_row(
            "ticktensor_object_store",
            "loader",
            remote_t,
            sb,
            f"{note}; through {PROTOCOL}://, {latency_s * 1e3:g} ms per request, "
            f"{bandwidth / 1e6:,.0f} MB/s shared: {last.range_requests} range requests, "
            f"at most {last.max_in_flight} ({last.max_bytes_in_flight / 2**20:.1f} MiB) in flight",
        )
    )
    results.rows.append(
        Row.from_rate(
            "link_limit",
            "limit",
            limit,
            sb,
            note=f"the {last.bytes / 1e6:,.0f} MB the link carried in a pass "
            f"({last.bytes / stored:.2f}x the pack's {stored / 1e6:,.0f} MB) at "
            f"{bandwidth / 1e6:,.0f} MB/s, latency aside",
            stats={
                "bandwidth": bandwidth,
                "latency_s": latency_s,
                "stored_bytes": stored,
                "link": dataclasses.asdict(last),
            },
        )
    )
    results.rows.append(
        timing_row(
            "ticktensor_local_disk",
            "loader",
            local_t,
            sb,
            f"{note}; the same pack from its local folder, page cache warm",
        )
    )
    say(
        f"#   object store {remote_t.samples_per_s:,.0f} samples/s: "
        f"{remote_t.samples_per_s / limit:.2f}x the link limit ({limit:,.0f} samples/s; "
        f"goal >= 0.8x), {remote_t.samples_per_s / local_t.samples_per_s:.2f}x local disk "
        f"({local_t.samples_per_s:,.0f} samples/s); {last.range_requests} range requests, "
        f"at most {last.max_in_flight} in flight"
    )
