"""``bench loader``: our loader, its baselines and the limits, measured in one run."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ticktensor.loaders import UniformOrder
from ticktensor.store import Codec, Store, StoreVersion

from . import goals
from .baselines import MmapWindows, ZarrWindows, numpy_gather, threadpool_mmap, torch_loader
from .engine import (
    cache_budget_bytes,
    cache_hit_rate,
    fresh_pass,
    get_batch_loop,
    new_stats,
    open_dataset,
    ticktensor_loader,
)
from .limits import (
    chunk_payloads,
    decode_gbps,
    evict,
    memcpy_gbps,
    resident_fraction,
    sequential_read_gbps,
)
from .measure import Rep, Timing, summarize
from .model import Demand, Limits, predict
from .options import BenchOptions
from .peers import peer_rows
from .results import Kind, Results, Row
from .workload import Workload, prepare, store_files

__all__ = ["run_loader", "warm"]

Say = Callable[[str], None]
CODECS = (Codec.NONE, Codec.ZSTD, Codec.LZ4)


def warm(paths: list[Path]) -> None:
    """Read files once so that the page cache holds them."""
    for path in paths:
        with path.open("rb", buffering=0) as f:
            while f.read(64 << 20):
                pass


def _row(name: str, kind: Kind, t: Timing, sample_bytes: int, note: str = "") -> Row:
    return Row.from_rate(
        name,
        kind,
        t.samples_per_s,
        sample_bytes,
        first_batch_s=t.first_batch_s,
        peak_rss_mb=t.peak_rss / 2**20,
        rss_growth_mb=t.rss_growth / 2**20,
        note=note,
        stats=dict(t.stats),
    )


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


def _segment_dirs(version: StoreVersion) -> list[Path]:
    return [Path(version.location.path(r.path)) for r in version.segments]


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
        "torch_mmap_w0": torch_loader(mmap, b, 0, w.seed, s),
        "torch_mmap_w2": torch_loader(mmap, b, 2, w.seed, s),
        "threadpool_mmap_copy": threadpool_mmap(ds, w.npy_dir(), b, order, s, threads=o.threads),
        "threadpool_mmap_fancy": threadpool_mmap(
            ds, w.npy_dir(), b, order, s, threads=o.threads, fancy=True
        ),
        "numpy_gather": numpy_gather(ds, b, order, s),
        "get_batch_loop": get_batch_loop(ds, b, order, s),
    }
    timings = _alternate(methods, o.repeats, say)
    memcpy = [memcpy_gbps(o.memcpy_mib) for _ in range(o.repeats)]
    memcpy_t = [memcpy_gbps(o.memcpy_mib, o.threads) for _ in range(o.repeats)]
    sb = w.sample_bytes
    rows = results.rows
    rows.append(
        _row(
            "ticktensor",
            "loader",
            timings["ticktensor"],
            sb,
            f"codec {o.codec.value}, {o.order} order, {o.threads} threads",
        )
    )
    for name in ("torch_mmap_w0", "torch_mmap_w2"):
        workers = name[-1]
        rows.append(
            _row(
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
        _row(
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
        _row(
            "numpy_gather",
            "limit",
            timings["numpy_gather"],
            sb,
            "per-window copy loop over the in-RAM series, 1 thread",
        )
    )
    rows.append(
        _row(
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
    rows.extend(peer_rows())
    del ds, mmap, methods
    _compressed(w, o, stores, results, say)
    _cold(w, o, stores[Codec.NONE], raw_files, results, say)
    _thread_table(w, o, main, stores, results, say)
    _model(w, o, results)
    results.goals.extend(goals.check(rows))
    _rss_and_first_batch(w, o, results)
    _engine_stats(results, say)


def _pass_row(name: str, reps: list[Rep], sb: int, note: str) -> Row:
    return _row(name, "loader", summarize(reps), sb, note)


def _compressed(
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
        reps = [
            fresh_pass(version, w.window, w.batch, o.threads, w.seed + p) for p in range(o.passes)
        ]
        note = (
            f"one epoch over windows with stride {w.window} (each stored byte decoded once), "
            f"timed from opening, {o.threads} threads"
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
    for codec, name in ((Codec.ZSTD, "torch_zarr_w2"), (Codec.LZ4, "torch_zarr_lz4_w2")):
        ds = ZarrWindows(_segment_dirs(stores[codec]), w.rows, w.window, stride=w.window)
        seconds = 2 * o.seconds  # a batch takes about a second here: time at least one
        reps = [torch_loader(ds, w.batch, 2, w.seed, seconds)(0)]
        results.rows.append(
            _row(
                name,
                "baseline",
                summarize(reps),
                sb,
                "torch DataLoader(num_workers=2, shuffle=True) over zarr-python arrays "
                f"({codec.value}), same windows",
            )
        )
        say(f"#   {name}: {reps[0].rate:,.0f} samples/s")


def _cold(
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


def _thread_table(
    w: Workload,
    o: BenchOptions,
    main: StoreVersion,
    stores: dict[Codec, StoreVersion],
    results: Results,
    say: Say,
) -> None:
    """Loader and limits at each thread count."""
    say(f"# thread scaling: {', '.join(map(str, o.thread_counts))} threads")
    payloads = chunk_payloads(stores[Codec.ZSTD], 32 << 20)
    for threads in o.thread_counts:
        ds = open_dataset(main, w.window, threads)
        reps = [
            ticktensor_loader(ds, w.batch, o.order, w.seed, o.seconds, threads)(r)
            for r in range(max(1, o.repeats // 2))
        ]
        t = summarize(reps)
        results.threads.append(
            {
                "threads": threads,
                "samples_per_s": t.samples_per_s,
                "gb_per_s": t.samples_per_s * w.sample_bytes / 1e9,
                "memcpy_gb_per_s": memcpy_gbps(o.memcpy_mib, threads),
                "zstd_decode_gb_per_s": decode_gbps(Codec.ZSTD, payloads, threads, seconds=0.3),
            }
        )
        del ds


def limits_of(results: Results, threads: int) -> Limits:
    """The model's inputs, from the limit rows of ``results``."""

    def gbps(name: str) -> float | None:
        row = results.row(name)
        return None if row is None else row.gb_per_s

    decode = {}
    for codec in ("zstd", "lz4"):
        row = results.row(f"{codec}_decode_x_threads")
        if row is not None and row.gb_per_s is not None:
            decode[codec] = row.gb_per_s / threads
    return Limits(
        memcpy_gbps=gbps("memcpy") or 1.0,
        threads=threads,
        memcpy_threads_gbps=gbps("memcpy_x_threads"),
        read_gbps=gbps("seqread_cold"),
        decode_gbps=decode,
    )


def demand_of(name: str, w: Workload) -> Demand | None:
    """Bytes per sample at each stage for the loader rows of ``bench loader``."""
    sb = w.sample_bytes
    if name == "ticktensor":
        return Demand(sample_bytes=sb)
    if name in ("ticktensor_zstd_block", "ticktensor_lz4_block"):
        return Demand(
            sample_bytes=sb, decoded_bytes=w.window * w.row_bytes, codec=name.split("_")[1]
        )
    if name == "ticktensor_cold":
        return Demand(sample_bytes=sb, read_bytes=w.window * w.row_bytes)
    return None


def _model(w: Workload, o: BenchOptions, results: Results) -> None:
    limits = limits_of(results, o.threads)
    for row in results.rows:
        demand = demand_of(row.name, w)
        if demand is None or row.samples_per_s is None:
            continue
        p = predict(limits, demand)
        results.model.append(
            {
                "name": row.name,
                "predicted_samples_per_s": p.samples_per_s,
                "measured_samples_per_s": row.samples_per_s,
                "measured_over_predicted": row.samples_per_s / p.samples_per_s,
                "binding": p.binding.name,
                "verdict": p.verdict(row.samples_per_s),
                "stages": {s.name: s.samples_per_s for s in p.stages},
            }
        )


def _rss_and_first_batch(w: Workload, o: BenchOptions, results: Results) -> None:
    """Goals: first batch < 0.3 s; RSS growth of a fresh loader < cache budget + ring + 200 MB."""
    tt = results.row("ticktensor")
    if tt is not None and tt.first_batch_s is not None:
        results.goals.append(
            {
                "goal": "ticktensor first batch (s) < 0.3",
                "ratio": tt.first_batch_s,
                "verdict": "met" if tt.first_batch_s < 0.3 else "NOT met",
                "value": tt.first_batch_s,
            }
        )
    cold = results.row("ticktensor_cold")
    if cold is None or cold.peak_rss_mb is None:
        return
    stats = cold.stats
    budget = cache_budget_bytes(stats)
    what = "cache budget from stats()"
    if budget is None:
        budget = float(w.symbols * w.rows * (w.row_bytes + 4 + 8))  # series, labels, ts in RAM
        what = (
            "no cache budget in stats(): the engine holds the series in RAM, counted as its cache"
        )
    ring = 5 * w.batch * w.sample_bytes  # prefetch 2 + 3 buffers
    limit_mb = (budget + ring) / 2**20 + 200
    growth = cold.rss_growth_mb if cold.rss_growth_mb is not None else cold.peak_rss_mb
    results.goals.append(
        {
            "goal": f"peak RSS growth (MB) of a fresh dataset + loader < {limit_mb:,.0f} "
            "(cache budget + ring + 200 MB)",
            "ratio": growth,
            "verdict": "met" if growth < limit_mb else "NOT met",
            "value": growth,
            "note": f"{growth:,.0f} MB vs {limit_mb:,.0f} MB ({what})",
        }
    )


def _engine_stats(results: Results, say: Say) -> None:
    for row in results.rows:
        extra = new_stats(row.stats) if row.kind == "loader" else {}
        rate = cache_hit_rate(row.stats)
        if extra:
            shown = ", ".join(f"{k}={_short(v)}" for k, v in sorted(extra.items()))
            results.notes.append(f"{row.name} stats(): {shown}")
        if rate is not None:
            results.notes.append(f"{row.name}: chunk cache hit rate {rate:.1%}")
    say("# done")


def _short(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
