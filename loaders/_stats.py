"""Loader statistics: one pass's counters, the chunk cache's and the delivery's, as one dict."""

from __future__ import annotations

from typing import Any

from ._prefetch import PrefetchStats
from .batch_source import BatchSource, Delivery
from .dataset import WindowDataset

__all__ = ["loader_stats"]


def loader_stats(
    last: PrefetchStats | None,
    running: BatchSource | None,
    dataset: WindowDataset,
    delivery: Delivery,
    backend: str,
    residency: str,
    position: dict[str, Any],
) -> dict[str, Any]:
    """The figures :meth:`ticktensor.DataLoader.stats` documents, for the last pass ``last``
    (``running`` while its producer lives) over ``dataset``."""
    figures: dict[str, Any] = {
        "batches": 0,
        "samples": 0,
        "bytes": 0,
        "wait_s": 0.0,
        "assemble_s": 0.0,
        "queue_depth": 0,
        "mean_queue_depth": 0.0,
        "first_batch_s": None,
        "wall_s": 0.0,
        "stall_fraction": 0.0,
        "buffers_allocated": 0,
    }
    if last is not None:
        figures |= {
            "batches": last.batches,
            "samples": last.samples,
            "bytes": last.bytes,
            "wait_s": last.wait_s,
            "assemble_s": last.assemble_s,
            "queue_depth": 0 if running is None else running.queue_depth,
            "mean_queue_depth": last.depth_seen / last.batches if last.batches else 0.0,
            "first_batch_s": last.first_batch_s,
            "wall_s": last.wall_s,
            "stall_fraction": last.wait_s / last.wall_s if last.wall_s > 0 else 0.0,
            "buffers_allocated": last.slots_allocated,
        }
    cache = dataset.cache_stats()
    figures["cache"] = cache
    figures["stage_s"] = {
        "fetch": cache["fetch_s"],
        "decode": cache["decode_s"],
        "prepare": cache["prepare_s"],
        "load_wait": cache["wait_s"],
        "assemble": figures["assemble_s"],
        "consumer_wait": figures["wait_s"],
    }
    figures["memory"] = delivery.memory
    figures["backend"] = backend
    figures["residency"] = residency
    device_chunks = delivery.device_chunks
    if device_chunks is not None:
        figures["resident"] = device_chunks.stats | {"loaded_chunks": device_chunks.loaded}
    if delivery.dali is not None:
        figures["dali"] = dict(delivery.dali.stats)
    return figures | {
        "epoch": position["epoch"],
        "samples_consumed": position["samples_consumed"],
    }
