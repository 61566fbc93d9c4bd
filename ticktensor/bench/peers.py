"""Other loaders, measured on the same windows when installed; each one skipped says why."""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ticktensor.loaders import WindowDataset

from .baselines import MmapGather, MmapWindows, series_of_sources
from .measure import Rep, timed
from .results import Row

__all__ = ["PEERS", "Peer", "peer_methods", "peer_rows", "spdl_pipeline"]

Measure = Callable[[int], Rep]


@dataclass(frozen=True)
class Peer:
    """A peer library: its row name, import name, how to install it, and its adapter."""

    name: str
    module: str
    install: str
    adapter: Callable[..., Measure] | None = None

    def installed(self) -> bool:
        """Whether the library can be imported here."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False


def spdl_pipeline(
    ds: WindowDataset,
    arrays: MmapWindows,
    batch: int,
    order: npt.NDArray[np.int64],
    seconds: float,
    threads: int,
) -> Measure:
    """SPDL's pipeline: a source of batch numbers, a batch-level gather from the mmap arrays
    on ``threads`` threads (results in order), a sink of 3 batches.

    Each batch is a fresh pair of arrays, as a pipeline stage returns them, filled with one
    numpy fancy index per series (few Python steps per batch, which suits threads).
    """
    from spdl.pipeline import (  # type: ignore[import-not-found, import-untyped, unused-ignore]
        PipelineBuilder,
    )

    to_series = series_of_sources(ds)
    gather = MmapGather(arrays, ds.window, fancy=True)
    steps = order.shape[0] // batch

    def fill(step: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        idx = order[step * batch : (step + 1) * batch]
        x = np.empty((batch, ds.window, ds.n_features), dtype=np.float32)
        y = np.empty((batch, ds.n_labels), dtype=np.float32)
        gather(to_series[ds.sample_segment[idx]], ds.sample_start[idx], x, y)
        return x, y

    def batches(rep: int) -> tuple[Iterator[int], Callable[[], Mapping[str, Any]]]:
        pipeline = (
            PipelineBuilder()
            .add_source(itertools.cycle(range(steps)))
            .pipe(fill, concurrency=threads, output_order="input")
            .add_sink(3)
            .build(num_threads=threads)
        )

        def stream() -> Iterator[int]:
            with pipeline.auto_stop():
                for x, _ in pipeline.get_iterator(timeout=600):
                    yield int(x.shape[0])

        return stream(), dict

    return timed(batches, seconds)


PEERS = (
    Peer("spdl", "spdl.pipeline", "pip install spdl", spdl_pipeline),
    Peer("litdata", "litdata", "pip install litdata"),
    Peer("mosaicml_streaming", "streaming", "pip install mosaicml-streaming"),
    Peer("dali_external_source", "nvidia.dali", "pip install nvidia-dali-cuda120 (needs CUDA)"),
)


def peer_methods(
    ds: WindowDataset,
    arrays: MmapWindows,
    batch: int,
    order: npt.NDArray[np.int64],
    seconds: float,
    threads: int,
) -> dict[str, Measure]:
    """The installed peers that have an adapter, ready to time on the same windows."""
    return {
        peer.name: peer.adapter(ds, arrays, batch, order, seconds, threads)
        for peer in PEERS
        if peer.adapter is not None and peer.installed()
    }


def peer_rows(measured: set[str] | frozenset[str] = frozenset()) -> list[Row]:
    """One skipped row per peer not in ``measured``, saying why."""
    rows = []
    for peer in PEERS:
        if peer.name in measured:
            continue
        if not peer.installed():
            reason = f"not installed ({peer.install})"
        else:
            reason = "installed, but the bench has no adapter for it yet"
        rows.append(Row.skipped(peer.name, "peer", reason))
    return rows
