"""``bench loader``: our loader, its baselines and the limits, measured in one run."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import numpy as np

from ticktensor.loaders import UniformOrder, WindowDataset
from ticktensor.store import Codec, Store, StoreVersion

from .baselines import MmapWindows, numpy_gather, threadpool_mmap, torch_loader
from .engine import fresh_pass, get_batch_loop, open_dataset, ticktensor_loader, ticktensor_wrapped
from .integrity import integrity_rows
from .limits import chunk_payloads, decode_gbps, h2d_gbps, memcpy_gbps
from .measure import Rep, Timing, summarize, timing_row, warm
from .object_store import object_store_rows
from .options import BenchOptions
from .passes import cold_rows, compressed_rows
from .peers import peer_methods, peer_rows
from .results import Results, Row
from .verdicts import judge
from .workload import Workload, prepare, store_files

__all__ = ["run_loader"]

Say = Callable[[str], None]
CODECS = (Codec.NONE, Codec.ZSTD, Codec.LZ4)


def _alternate(
    methods: dict[str, Callable[[int], Rep]], repeats: int, say: Say
) -> dict[str, Timing]:
    """Repetitions taking turns, so that load from elsewhere hits every method alike."""
    reps: dict[str, list[Rep]] = {name: [] for name in methods}
    for rep in range(repeats):
        for name, measure in methods.items():
            reps[name].append(measure(rep))
        say(f"#   repetition {rep + 1}/{repeats} done")
    return {name: summarize(r) for name, r in reps.items()}


def run_loader(
    workload: Workload, options: BenchOptions, results: Results, say: Say = print
) -> None:
    """Measure the loader, baselines and limits on ``workload``; fill ``results``."""
    w, o = workload, options
    codecs = sorted({*CODECS, o.codec}, key=list(Codec).index)
    prepare(w, codecs, say)
    stores = {c: Store.open(str(w.store_dir(c))).version() for c in codecs}
    main = stores[o.codec]
    raw_files = store_files(stores[Codec.NONE])
    npy_files = sorted(w.npy_dir().glob("*.npy"))
    warm(npy_files + [f for c in codecs for f in store_files(stores[c])])
    say(
        f"# data: {w.symbols} series x {w.rows:,} rows x {w.features} float32 features "
        f"({w.nbytes / 2**30:.2f} GiB per copy) in {w.data_dir}; W={w.window}, B={w.batch}, "
        f"{w.sample_bytes:,} bytes per sample; chunks of {w.chunk_rows:,} rows; "
        f"{o.threads} loader threads"
    )
    started = time.perf_counter()
    ds = open_dataset(main, w.window, o.threads)
    say(
        f"# WindowDataset (codec {o.codec.value}) opened in "
        f"{time.perf_counter() - started:.2f} s; {len(ds):,} samples"
    )
    order = UniformOrder(w.seed).order(ds, 0)
    mmap = MmapWindows(w.npy_dir(), w.symbols, w.window)
    s, b = o.seconds, w.batch
    say(
        f"# warm page cache, {o.order} order: {o.repeats} repetitions of {s:g} s per method, "
        "taking turns"
    )
    methods = {
        "ticktensor": ticktensor_loader(ds, b, o.order, w.seed, s, o.threads),
        "ticktensor_subset": ticktensor_wrapped(ds, b, "subset", w.seed, s),
        "ticktensor_distributed": ticktensor_wrapped(ds, b, "distributed", w.seed, s),
        "torch_mmap_w0": torch_loader(mmap, b, 0, w.seed, s),
        "torch_mmap_w2": torch_loader(mmap, b, 2, w.seed, s),
        "threadpool_mmap_copy": threadpool_mmap(ds, mmap, b, order, s, threads=o.threads),
        "threadpool_mmap_fancy": threadpool_mmap(
            ds, mmap, b, order, s, threads=o.threads, fancy=True
        ),
        "numpy_gather": numpy_gather(ds, b, order, s),
        "get_batch_loop": get_batch_loop(ds, b, order, s),
    }
    peers = peer_methods(ds, mmap, b, order, s, o.threads)
    timings = _alternate(methods | peers, o.repeats, say)
    memcpy = [memcpy_gbps(o.memcpy_mib) for _ in range(o.repeats)]
    memcpy_t = [memcpy_gbps(o.memcpy_mib, o.threads) for _ in range(o.repeats)]
    sb = w.sample_bytes
    rows = results.rows
    rows.append(
        timing_row(
            "ticktensor",
            "loader",
            timings["ticktensor"],
            sb,
            f"codec {o.codec.value}, {o.order} order, {o.threads} threads",
        )
    )
    for name, note in (
        ("ticktensor_subset", "random_split(ds, [0.9, 0.1])[0], shuffle=True"),
        ("ticktensor_distributed", "sampler=DistributedSampler(ds, 2, rank=0, shuffle=True)"),
    ):
        rows.append(timing_row(name, "loader", timings[name], sb, f"{note}; uniform order"))
    for name in ("torch_mmap_w0", "torch_mmap_w2"):
        workers = name[-1]
        rows.append(
            timing_row(
                name,
                "baseline",
                timings[name],
                sb,
                f"torch DataLoader(num_workers={workers}) over np.load(mmap_mode='r') windows",
            )
        )
    copy, fancy = timings["threadpool_mmap_copy"], timings["threadpool_mmap_fancy"]
    best, how = (
        (copy, "per-window copies")
        if copy.samples_per_s >= fancy.samples_per_s
        else (fancy, "one fancy index per series")
    )
    rows.append(
        timing_row(
            "threadpool_mmap",
            "baseline",
            best,
            sb,
            f"ThreadPoolExecutor({o.threads}), mmap arrays, 2 batches ahead; faster of per-window "
            f"copies ({copy.samples_per_s:,.0f}/s) and fancy index "
            f"({fancy.samples_per_s:,.0f}/s): {how}",
        )
    )
    rows.append(
        timing_row(
            "numpy_gather",
            "limit",
            timings["numpy_gather"],
            sb,
            "per-window copy loop over the in-RAM series, 1 thread",
        )
    )
    rows.append(
        timing_row(
            "get_batch_loop",
            "limit",
            timings["get_batch_loop"],
            sb,
            "WindowDataset.get_batch in a bare loop (no loader)",
        )
    )
    rows.append(
        Row.from_gbps(
            "memcpy", "limit", float(np.median(memcpy)), sb, note="np.copyto of 256 MiB, 1 thread"
        )
    )
    rows.append(
        Row.from_gbps(
            "memcpy_x_threads",
            "limit",
            float(np.median(memcpy_t)),
            sb,
            note=f"np.copyto of 256 MiB split over {o.threads} threads",
        )
    )
    rows.extend(_device_rows(ds, w, o))
    for name in peers:
        note = f"the same windows from the mmap arrays, {o.threads} threads (bench/peers.py)"
        rows.append(timing_row(name, "peer", timings[name], sb, note))
    rows.extend(peer_rows(set(peers)))
    # Drop every reference to the warm dataset: an engine that maps chunk files keeps their
    # pages mapped, and posix_fadvise cannot evict mapped pages for the cold rows.
    del ds, mmap, methods, peers
    gc.collect()
    compressed_rows(w, o, stores, results, say)
    integrity_rows(w, o, results, say)
    object_store_rows(w, o, results, say)
    cold_rows(w, o, stores[Codec.NONE], raw_files, results, say)
    _thread_table(w, o, main, stores, results, say)
    judge(w, o, results, say)


def _thread_table(
    w: Workload,
    o: BenchOptions,
    main: StoreVersion,
    stores: dict[Codec, StoreVersion],
    results: Results,
    say: Say,
) -> None:
    """Loader (main row, and one epoch of the zstd store) and limits at each thread count."""
    say(f"# thread scaling: {', '.join(map(str, o.thread_counts))} threads")
    payloads = chunk_payloads(stores[Codec.ZSTD], 32 << 20)
    for threads in o.thread_counts:
        ds = open_dataset(main, w.window, threads)
        # The first repetition maps every chunk of the fresh dataset (as the main row's
        # first one did): it warms up, and is left out like there by the median.
        reps = [
            ticktensor_loader(ds, w.batch, o.order, w.seed, o.seconds, threads)(r)
            for r in range(max(1, o.repeats // 2) + 1)
        ][1:]
        t = summarize(reps)
        del ds
        zstd = fresh_pass(stores[Codec.ZSTD], w.window, w.batch, threads, w.seed)
        results.threads.append(
            {
                "threads": threads,
                "samples_per_s": t.samples_per_s,
                "gb_per_s": t.samples_per_s * w.sample_bytes / 1e9,
                "memcpy_gb_per_s": memcpy_gbps(o.memcpy_mib, threads),
                "zstd_decode_gb_per_s": decode_gbps(Codec.ZSTD, payloads, threads, seconds=0.3),
                "zstd_block_gb_per_s": zstd.rate * w.sample_bytes / 1e9,
            }
        )


def _device_rows(ds: WindowDataset, w: Workload, o: BenchOptions) -> list[Row]:
    """With CUDA: the pinned host-to-device copy rate and the loader delivering to the GPU."""
    rate = h2d_gbps()
    if rate is None:
        reason = "no CUDA device here"
        return [
            Row.skipped("h2d", "limit", reason),
            Row.skipped("ticktensor_cuda", "loader", reason),
        ]
    reps = [
        ticktensor_loader(ds, w.batch, o.order, w.seed, o.seconds, o.threads, device="cuda")(r)
        for r in range(o.repeats)
    ]
    return [
        Row.from_gbps(
            "h2d", "limit", rate, w.sample_bytes, note="pinned tensor to the GPU, 256 MiB"
        ),
        timing_row(
            "ticktensor_cuda",
            "loader",
            summarize(reps),
            w.sample_bytes,
            "as ticktensor, with device='cuda' (pinned buffers, copy on a side stream)",
        ),
    ]
