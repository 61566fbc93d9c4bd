"""The DALI backend: prefetched batches through an NVIDIA DALI pipeline that normalizes and casts.

``DataLoader(ds, ..., backend="dali")`` (or ``backend=DaliOptions(...)``) feeds the fast
path's batches, in the same plan order, to a DALI pipeline: an ``external_source`` in
batch mode reads the prefetcher's buffers without a copy (``no_copy=True``; a buffer is
held until DALI has consumed it), arithmetic operators apply the store's mean and std,
``fn.cast`` casts, and DALI's PyTorch iterator returns its outputs, which are handed out
as torch tensors in torch's own memory. A loader builds one pipeline and resets it for
each pass (:mod:`~ticktensor.loaders._dali_pipeline`). With a CUDA ``device`` the
operators run on that GPU; without one (``device_id=None``) on the CPU, which is how the
tests check that its batches equal the torch path's.

DALI is optional: nothing here imports it until a pipeline is built.
"""

from __future__ import annotations

import os
import time
import weakref
from dataclasses import dataclass
from typing import Literal

import torch

from ticktensor.errors import ConfigError

from ._dali_pipeline import DaliPipeline, dali_available
from ._prefetch import Prefetcher, PrefetchStats

__all__ = ["DaliBatches", "DaliOptions", "DaliPipeline", "dali_available"]

DType = Literal["float32", "float16", "bfloat16"]
_DTYPES: tuple[DType, ...] = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class DaliOptions:
    """How ``DataLoader(..., backend="dali")`` runs its pipeline.

    Parameters
    ----------
    dtype
        Type of the delivered features: ``"float32"``, ``"float16"`` (cast by DALI's
        ``fn.cast``) or ``"bfloat16"`` (DALI 2.4 has no bfloat16 type: the pipeline's
        float32 output is cast by torch, on the same device). Labels stay float32.
    normalize
        Apply the store version's feature statistics, ``(x - mean) / std`` per feature
        (a zero or non-finite std divides by 1), as DALI operators. Default: when the
        dataset does not normalize itself. ``True`` with a dataset built with
        ``normalize=True`` is an error (it would normalize twice).
    num_threads
        DALI's CPU threads (default: the CPU count, at most 4).
    prefetch_queue_depth
        Batches DALI runs ahead, at least 1.

    Examples
    --------
    >>> DaliOptions(dtype="float16")
    DaliOptions(dtype='float16', normalize=None, num_threads=None, prefetch_queue_depth=2)
    """

    dtype: DType = "float32"
    normalize: bool | None = None
    num_threads: int | None = None
    prefetch_queue_depth: int = 2

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ConfigError(f"dtype: expected one of {list(_DTYPES)}, got {self.dtype!r}")
        if self.normalize is not None and not isinstance(self.normalize, bool):
            raise ConfigError(f"normalize: expected a bool or None, got {self.normalize!r}")
        for name in ("num_threads", "prefetch_queue_depth"):
            value = getattr(self, name)
            if value is None and name == "num_threads":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}: expected an integer >= 1, got {value!r}")

    @property
    def held_batches(self) -> int:
        """Fed batches kept referenced, since DALI reads them later (``no_copy``)."""
        return self.prefetch_queue_depth + 2

    @property
    def threads(self) -> int:
        """DALI's CPU threads."""
        return self.num_threads or min(4, os.cpu_count() or 1)


class DaliBatches:
    """One pass of batches: the prefetcher's, through the loader's DALI pipeline.

    Yields ``(step, n, x, y, None)`` like the prefetcher, in the same order (DALI keeps
    the order of its input). An empty batch (possible on the last step without padding)
    is fed to DALI as one sample and handed out empty. Errors of the prefetcher reach the
    consumer as the original exception, with its notes.

    Parameters
    ----------
    pipeline
        The loader's pipeline; this pass becomes the one it serves.
    prefetcher
        The pass's batches, delivered as host tensors.
    batch_size
        The plan's batch size.
    sample_bytes
        Bytes per delivered sample, for the statistics.
    """

    def __init__(
        self,
        pipeline: DaliPipeline,
        prefetcher: Prefetcher,
        *,
        batch_size: int,
        sample_bytes: int,
    ) -> None:
        self._pipeline = pipeline
        self._prefetcher = prefetcher
        self._sample_bytes = sample_bytes
        self.stats = PrefetchStats()
        self._done = False
        # The pipeline references the prefetcher, not this object: dropping the pass
        # (breaking out of a loop) stops the prefetcher's thread at once.
        self._finalizer = weakref.finalize(self, prefetcher.close)
        try:
            self._pass = pipeline.start(prefetcher, batch_size)
        except BaseException:
            self.close()
            raise

    @property
    def queue_depth(self) -> int:
        """Batches assembled and waiting in the prefetcher right now."""
        return self._prefetcher.queue_depth

    def __iter__(self) -> DaliBatches:
        return self

    def __next__(self) -> tuple[int, int, torch.Tensor, torch.Tensor, None]:
        if self._done:
            raise StopIteration
        started = time.perf_counter()
        try:
            step, n, x, y = self._pipeline.next(self._pass)
        except BaseException:
            self.close()
            raise
        finally:
            self.stats.wait_s += time.perf_counter() - started
        stats = self.stats
        stats.batches += 1
        stats.samples += n
        stats.bytes += n * self._sample_bytes
        stats.assemble_s = self._prefetcher.stats.assemble_s
        stats.slots_allocated = self._prefetcher.stats.slots_allocated
        if stats.first_batch_s is None:
            stats.first_batch_s = time.perf_counter() - stats.started
        return step, n, x, y, None

    def close(self) -> None:
        """Stop the prefetcher; the pipeline stays with the loader for the next pass."""
        self._done = True
        self._finalizer()
        if self.stats.ended is None:
            self.stats.ended = time.perf_counter()
