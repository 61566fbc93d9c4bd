"""The loader's goals (issue #5), each a ratio of two rows of the same run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .results import Row, ratio

__all__ = ["GOALS", "Goal", "check", "ours_for"]


@dataclass(frozen=True)
class Goal:
    """``top / bottom`` of ``metric`` should be at least ``at_least``."""

    top: str
    bottom: str
    at_least: float
    metric: Literal["samples_per_s", "gb_per_s"] = "samples_per_s"

    def evaluate(self, rows: Sequence[Row]) -> dict[str, Any]:
        """The ratio and its verdict (``met``, ``NOT met``, or ``skipped`` with no ratio)."""
        value = ratio(rows, self.top, self.bottom, self.metric)
        verdict = "skipped" if value is None else "met" if value >= self.at_least else "NOT met"
        unit = "GB/s" if self.metric == "gb_per_s" else "samples/s"
        return {
            "goal": f"{self.top} / {self.bottom} ({unit}) >= {self.at_least:g}x",
            "ratio": value,
            "verdict": verdict,
        }


GOALS = (
    Goal("ticktensor", "memcpy_x_threads", 0.5, "gb_per_s"),
    Goal("ticktensor", "torch_mmap_w0", 10.0),
    Goal("ticktensor", "torch_mmap_w2", 10.0),
    Goal("ticktensor", "threadpool_mmap", 1.5),
    # torch's wrappers stay on the fast path: within noise of the plain loader.
    Goal("ticktensor_subset", "ticktensor", 0.8),
    Goal("ticktensor_distributed", "ticktensor", 0.8),
    Goal("ticktensor_zstd_block", "zstd_decode_x_threads", 0.7, "gb_per_s"),
    Goal("ticktensor_lz4_block", "lz4_decode_x_threads", 0.7, "gb_per_s"),
    # The same epochs against all the work a first epoch does (read, decode into the fresh
    # memory the cache keeps, copy out), which the decode rates above leave out.
    Goal("ticktensor_zstd_block", "zstd_first_epoch_x_threads", 0.7, "gb_per_s"),
    Goal("ticktensor_lz4_block", "lz4_first_epoch_x_threads", 0.7, "gb_per_s"),
    Goal("ticktensor_zstd_block", "torch_zarr_w2", 300.0),
    Goal("ticktensor_lz4_block", "torch_zarr_lz4_w2", 300.0),
    Goal("ticktensor_cold", "seqread_cold", 0.7, "gb_per_s"),
    # The default chunk check (CRC-32C once per load) costs at most 5% of a first epoch.
    Goal("ticktensor_check_none", "ticktensor_nocheck_none", 0.95),
    Goal("ticktensor_check_zstd", "ticktensor_nocheck_zstd", 0.95),
    # A first epoch from an object store with 20 ms per request is bound by the bandwidth.
    Goal("ticktensor_object_store", "link_limit", 0.8),
)


def check(rows: Sequence[Row], goals: Sequence[Goal] = GOALS) -> list[dict[str, Any]]:
    """Every goal's ratio and verdict on ``rows``.

    Examples
    --------
    >>> rows = [Row("ticktensor", "loader", 4e5, 6.5), Row("torch_mmap_w2", "baseline", 3.6e4, 0.6)]
    >>> [g["verdict"] for g in check(rows, [Goal("ticktensor", "torch_mmap_w2", 10.0)])]
    ['met']
    """
    return [goal.evaluate(rows) for goal in goals]


_OURS = {
    "torch_zarr_w2": "ticktensor_zstd_block",
    "torch_zarr_lz4_w2": "ticktensor_lz4_block",
    "zstd_decode_x_threads": "ticktensor_zstd_block",
    "lz4_decode_x_threads": "ticktensor_lz4_block",
    "zstd_first_epoch_x_threads": "ticktensor_zstd_block",
    "lz4_first_epoch_x_threads": "ticktensor_lz4_block",
    "seqread_cold": "ticktensor_cold",
    "ticktensor_nocheck_none": "ticktensor_check_none",
    "ticktensor_nocheck_zstd": "ticktensor_check_zstd",
    "link_limit": "ticktensor_object_store",
}


def ours_for(name: str) -> str:
    """The loader row that a baseline or limit row is compared with (same samples).

    Examples
    --------
    >>> ours_for("torch_zarr_w2"), ours_for("torch_mmap_w2")
    ('ticktensor_zstd_block', 'ticktensor')
    """
    return _OURS.get(name, "ticktensor")
