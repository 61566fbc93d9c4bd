"""One-epoch rows from opening the dataset: compressed stores and a cold page cache.

Windows with stride = window do not overlap, so every delivered byte is a stored byte read
and decoded once: the rows' GB/s compares directly with a decode rate or a read rate.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ticktensor.store import Codec, StoreVersion

from .baselines import ZarrWindows, torch_loader
from .engine import fresh_pass
from .limits import (
    chunk_files,
    chunk_payloads,
    decode_gbps,
    evict,
    first_epoch_gbps,
    resident_fraction,
    sequential_read_gbps,
)
from .measure import Rep, summarize, timing_row, warm
from .options import BenchOptions
from .results import Results, Row
from .workload import Workload, store_files

__all__ = ["cold_rows", "compressed_rows"]

Say = Callable[[str], None]


def _segment_dirs(version: StoreVersion) -> list[Path]:
    return [Path(version.location.path(r.path)) for r in version.segments]


def _pass_row(name: str, reps: list[Rep], sb: int, note: str) -> Row:
    return timing_row(name, "loader", summarize(reps), sb, note)


def compressed_rows(
    w: Workload, o: BenchOptions, stores: dict[Codec, StoreVersion], results: Results, say: Say
) -> None:
    """Compressed stores in block-shuffle order against decode x threads and torch over zarr."""
    sb = w.sample_bytes
    say(
        f"# compressed stores, block-shuffle order: {o.passes} passes over non-overlapping "
        "windows from open"
    )
    for codec in (Codec.ZSTD, Codec.LZ4):
        version = stores[codec]
        # Read again just before: a machine that reclaims cold page cache (DAMON's pageout,
        # a VM's balloon) may have dropped what the run read at its start.
        warm(store_files(version))
        cached = resident_fraction(store_files(version))
        reps = [
            fresh_pass(version, w.window, w.batch, o.threads, w.seed + p) for p in range(o.passes)
        ]
        note = (
            f"one epoch over windows with stride {w.window} (each stored byte decoded once), "
            f"timed from opening, {o.threads} threads; "
            + ("page cache residency unknown" if cached is None else f"{cached:.0%} cached")
        )
        results.rows.append(_pass_row(f"ticktensor_{codec.value}_block", reps, sb, note))
        payloads = chunk_payloads(version)
        one = decode_gbps(codec, payloads, 1, seconds=min(o.seconds, 1.0))
        many = decode_gbps(codec, payloads, o.threads, seconds=min(o.seconds, 1.0))
        ratio = sum(map(len, payloads)) / (len(payloads) * w.chunk_rows * w.row_bytes)
        results.rows.append(
            Row.from_gbps(
                f"{codec.value}_decode_x_threads",
                "limit",
                one * o.threads,
                sb,
                note=f"numcodecs decode of the store's chunks: {one:.2f} GB/s on 1 thread "
                f"x {o.threads}; "
                f"{many:.2f} GB/s measured on {o.threads} threads; stored/decoded {ratio:.2f}",
                stats={"one_thread_gb_per_s": one, "measured_threads_gb_per_s": many},
            )
        )
        files = chunk_files(version)
        epochs = [first_epoch_gbps(codec, files, o.threads) for _ in range(max(o.passes, 2))]
        results.rows.append(
            Row.from_gbps(
                f"{codec.value}_first_epoch_x_threads",
                "limit",
                max(epochs),
                sb,
                note=f"every chunk read (pread), decoded into fresh memory kept as a cache "
                f"keeps it, and copied out once, on {o.threads} threads; best of "
                f"{len(epochs)}: " + ", ".join(f"{g:.2f}" for g in epochs) + " GB/s",
                stats={"passes_gb_per_s": epochs},
            )
        )
    for codec, name in ((Codec.ZSTD, "torch_zarr_w2"), (Codec.LZ4, "torch_zarr_lz4_w2")):
        ds = ZarrWindows(_segment_dirs(stores[codec]), w.rows, w.window, stride=w.window)
        seconds = 2 * o.seconds  # a batch takes about a second here: time at least one
        reps = [torch_loader(ds, w.batch, 2, w.seed, seconds)(0)]
        results.rows.append(
            timing_row(
                name,
                "baseline",
                summarize(reps),
                sb,
                "torch DataLoader(num_workers=2, shuffle=True) over zarr-python arrays "
                f"({codec.value}), same windows",
            )
        )
        say(f"#   {name}: {reps[0].rate:,.0f} samples/s")


def cold_rows(
    w: Workload,
    o: BenchOptions,
    version: StoreVersion,
    files: list[Path],
    results: Results,
    say: Say,
) -> None:
    """Page cache cold: one epoch from a just-evicted store, against a sequential read."""
    sb = w.sample_bytes
    reps, resident = [], []
    for p in range(o.passes):
        gc.collect()  # datasets of earlier passes may still map the files
        evict(files)
        resident.append(resident_fraction(files))
        reps.append(fresh_pass(version, w.window, w.batch, o.threads, w.seed + p))
    left = [r for r in resident if r is not None]
    evicted = (
        f"{max(left):.0%} of the store still cached after eviction" if left else "residency unknown"
    )
    results.rows.append(
        _pass_row(
            "ticktensor_cold",
            reps,
            sb,
            f"posix_fadvise(DONTNEED) first ({evicted}); one epoch, stride {w.window}, "
            "block order, from opening",
        )
    )
    rates = []
    for _ in range(o.passes):
        evict(files)
        rates.append(sequential_read_gbps(files))
    nbytes = sum(f.stat().st_size for f in files)
    results.rows.append(
        Row.from_gbps(
            "seqread_cold",
            "limit",
            float(np.median(rates)),
            sb,
            note=f"the store's {len(files)} files ({nbytes / 2**20:,.0f} MiB) read in order, "
            "8 MiB reads, after eviction",
        )
    )
    if left and max(left) > 0.5:
        results.notes.append(
            f"eviction did not work here ({evicted}): the cold rows measure cached reads"
        )
    say(
        f"#   cold: ticktensor {reps[-1].rate:,.0f} samples/s, sequential read "
        f"{np.median(rates):.2f} GB/s ({evicted})"
    )
