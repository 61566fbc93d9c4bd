"""Scaling sweeps: batch size, window length, dataset size (page cache cold and warm), codecs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ticktensor.store import Codec, Store

from .engine import fresh_pass, open_dataset, ticktensor_loader
from .limits import chunk_payloads, decode_gbps, evict, sequential_read_gbps
from .measure import summarize, warm
from .options import BenchOptions
from .results import Results
from .workload import Workload, prepare, store_files

__all__ = ["run_sweeps", "sweep_values"]

Say = Callable[[str], None]


def sweep_values(workload: Workload, quick: bool) -> dict[str, list[int]]:
    """The points of each sweep.

    Examples
    --------
    >>> sweep_values(Workload(), quick=True)["rows"]
    [250000, 500000, 1000000]
    """
    rows = sorted(
        {
            max(workload.window, workload.rows // 4),
            max(workload.window, workload.rows // 2),
            workload.rows,
        }
    )
    return {
        "batch": [64, 256, 1024],
        "window": [w for w in (32, 128, 512) if w <= workload.rows],
        "rows": rows,
    }


def run_sweeps(
    workload: Workload, options: BenchOptions, results: Results, say: Say = print
) -> None:
    """Fill ``results.sweeps`` with ``batch``, ``window``, ``rows`` and ``codec``."""
    w, o = workload, options
    points = sweep_values(w, o.quick)
    version = Store.open(str(w.store_dir(Codec.NONE))).version()
    warm(store_files(version))
    repeats = max(1, o.repeats // 2)
    seconds = o.seconds
    say(
        f"# sweeps: batch {points['batch']}, window {points['window']}, "
        f"rows {points['rows']}, codecs"
    )
    ds = open_dataset(version, w.window, o.threads)
    batch_points = []
    for batch in points["batch"]:
        t = summarize(
            [
                ticktensor_loader(ds, batch, "uniform", w.seed, seconds, o.threads)(r)
                for r in range(repeats)
            ]
        )
        batch_points.append(
            {
                "batch": batch,
                "samples_per_s": t.samples_per_s,
                "gb_per_s": t.samples_per_s * w.sample_bytes / 1e9,
            }
        )
    del ds
    results.sweeps["batch"] = batch_points
    window_points = []
    for window in points["window"]:
        ds = open_dataset(version, window, o.threads)
        t = summarize(
            [
                ticktensor_loader(ds, w.batch, "uniform", w.seed, seconds, o.threads)(r)
                for r in range(repeats)
            ]
        )
        sample_bytes = 4 * (window * w.features + 1)
        window_points.append(
            {
                "window": window,
                "samples_per_s": t.samples_per_s,
                "gb_per_s": t.samples_per_s * sample_bytes / 1e9,
            }
        )
        del ds
    results.sweeps["window"] = window_points
    size_points = []
    for rows in points["rows"]:
        sized = w.resized(rows)
        v = prepare(sized, [Codec.NONE], say)
        files = store_files(v)
        evict(files)
        cold = fresh_pass(v, w.window, w.batch, o.threads, w.seed)
        evict(files)
        read = sequential_read_gbps(files)
        warm(files)
        hot = fresh_pass(v, w.window, w.batch, o.threads, w.seed)
        size_points.append(
            {
                "rows": rows,
                "gib": sized.nbytes / 2**30,
                "cold_gb_per_s": cold.rate * w.sample_bytes / 1e9,
                "warm_gb_per_s": hot.rate * w.sample_bytes / 1e9,
                "seqread_gb_per_s": read,
            }
        )
    results.sweeps["rows"] = size_points
    codec_points = []
    prepare(w, list(Codec), say)
    for codec in Codec:
        v = Store.open(str(w.store_dir(codec))).version()
        files = store_files(v)
        warm(files)
        rep = fresh_pass(v, w.window, w.batch, o.threads, w.seed)
        limit = (
            None
            if codec is Codec.NONE
            else decode_gbps(codec, chunk_payloads(v, 32 << 20), 1, seconds=0.3) * o.threads
        )
        stored = sum(f.stat().st_size for f in files if "values/c/" in f.as_posix())
        codec_points.append(
            {
                "codec": codec.value,
                "gb_per_s": rep.rate * w.sample_bytes / 1e9,
                "decode_x_threads_gb_per_s": limit,
                "compression": float(np.float64(w.nbytes) / stored),
            }
        )
    results.sweeps["codec"] = codec_points
