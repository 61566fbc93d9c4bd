"""The DALI backend: prefetched batches through an NVIDIA DALI pipeline that normalizes and casts.

``DataLoader(ds, ..., backend="dali")`` (or ``backend=DaliOptions(...)``) feeds the fast
path's batches, in the same plan order, to a DALI pipeline: an ``external_source`` in
batch mode reads the prefetcher's buffers without a copy (``no_copy=True``; a buffer is
held until DALI has consumed it), arithmetic operators apply the store's mean and std,
``fn.cast`` casts, and DALI's PyTorch iterator returns torch tensors. With a CUDA
``device`` the operators run on that GPU; without one (``device_id=None``) on the CPU,
which is how the tests check that its batches equal the torch path's.

DALI is optional: nothing here imports it until a pipeline is built.
"""

from __future__ import annotations

import collections
import importlib
import os
import time
import weakref
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch

from ticktensor.errors import ConfigError

from ._prefetch import Prefetcher, PrefetchStats

__all__ = ["DaliBatches", "DaliOptions", "build_pipeline", "dali_available"]

Floats = npt.NDArray[np.float32]
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


def dali_available() -> bool:
    """Whether ``nvidia.dali`` can be imported."""
    try:
        importlib.import_module("nvidia.dali")
    except ImportError:
        return False
    return True


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigError(
            "backend='dali' needs NVIDIA DALI: pip install nvidia-dali-cuda120 "
            "(or the project's 'dali' extra)"
        ) from exc


def build_pipeline(
    source: Any,
    *,
    batch_size: int,
    device_id: int | None,
    scale: tuple[Floats, Floats] | None,
    dtype: DType,
    num_threads: int,
    prefetch_queue_depth: int,
) -> Any:
    """A built DALI pipeline with outputs ``(x, y)`` fed by ``source``.

    Parameters
    ----------
    source
        Called once per batch (DALI's ``external_source`` in batch mode); returns
        ``(x [n, W, F], y [n, L])`` float32 arrays that stay unchanged until DALI has used
        them, and raises :class:`StopIteration` at the end of the epoch.
    batch_size
        The largest ``n``.
    device_id
        GPU to run the operators on, or ``None`` for the CPU.
    scale
        ``(mean [F], std [F])`` to normalize with, or ``None``.
    dtype
        Cast of ``x``; ``"bfloat16"`` is left float32 here (DALI has no such type).
    num_threads, prefetch_queue_depth
        As for ``nvidia.dali.Pipeline``.
    """
    fn = _import("nvidia.dali.fn")
    types = _import("nvidia.dali.types")
    pipeline_module = _import("nvidia.dali.pipeline")
    pipe = pipeline_module.Pipeline(
        batch_size=batch_size,
        num_threads=num_threads,
        device_id=device_id,
        prefetch_queue_depth=prefetch_queue_depth,
    )
    with pipe:
        x, y = fn.external_source(
            source=source, num_outputs=2, batch=True, no_copy=True, dtype=types.FLOAT
        )
        if device_id is not None:  # pragma: no cover - GPU only
            x, y = x.gpu(), y.gpu()
        if scale is not None:
            n_features = int(scale[0].shape[0])
            mean = types.Constant(scale[0].reshape(1, n_features))
            std = types.Constant(scale[1].reshape(1, n_features))
            x = (x - mean) / std
        if dtype == "float16":
            x = fn.cast(x, dtype=types.FLOAT16)
        pipe.set_outputs(x, y)
    pipe.build()
    return pipe


class DaliBatches:
    """One pass of batches: the prefetcher's, through a DALI pipeline and its torch iterator.

    Yields ``(step, n, x, y, None)`` like the prefetcher, in the same order (DALI keeps
    the order of its input). An empty batch (possible on the last step without padding)
    is fed to DALI as one sample and handed out empty. Errors of the prefetcher reach the
    consumer as the original exception, with its notes.

    Parameters
    ----------
    prefetcher
        The pass's batches, delivered as host tensors.
    batch_size
        The plan's batch size.
    device_id
        GPU for the operators, or ``None`` for the CPU.
    scale
        ``(mean, std)`` for the normalization, or ``None``.
    options
        dtype, threads, queue depth.
    sample_bytes
        Bytes per delivered sample, for the statistics.
    """

    def __init__(
        self,
        prefetcher: Prefetcher,
        *,
        batch_size: int,
        device_id: int | None,
        scale: tuple[Floats, Floats] | None,
        options: DaliOptions,
        sample_bytes: int,
    ) -> None:
        self._prefetcher = prefetcher
        self._feed = _Feed(prefetcher, options.held_batches)
        self._bfloat16 = options.dtype == "bfloat16"
        self._sample_bytes = sample_bytes
        self.stats = PrefetchStats()
        self._done = False
        plugin = _import("nvidia.dali.plugin.pytorch")
        pipe = build_pipeline(
            self._feed,
            batch_size=batch_size,
            device_id=device_id,
            scale=scale,
            dtype=options.dtype,
            num_threads=options.threads,
            prefetch_queue_depth=options.prefetch_queue_depth,
        )
        self._iterator: Any
        try:  # runs the pipeline for the first batch already
            self._iterator = plugin.DALIGenericIterator(
                [pipe], ["x", "y"], last_batch_policy=plugin.LastBatchPolicy.PARTIAL
            )
        except RuntimeError:
            # DALI refuses an epoch without data: an empty pass (resumed at its end), or
            # the first batch failed (its error is raised by __next__).
            if self._feed.fed:
                prefetcher.close()
                raise
            self._iterator = iter(())
        # The pipeline references the feed, not this object: dropping the pass (breaking
        # out of a loop) stops the prefetcher's thread at once, without waiting for the
        # cyclic garbage collector to free DALI's objects.
        self._finalizer = weakref.finalize(self, prefetcher.close)

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
            out = next(self._iterator)
        except StopIteration:
            self.close()
            if self._feed.error is not None:
                raise self._feed.error from None
            raise
        except BaseException:
            self.close()
            raise
        finally:
            self.stats.wait_s += time.perf_counter() - started
        step, n = self._feed.fed.popleft()
        x, y = out[0]["x"], out[0]["y"]
        if n == 0:
            x, y = x[:0], y[:0]
        if self._bfloat16:
            x = x.to(torch.bfloat16)
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
        """Stop the prefetcher and release the pipeline."""
        self._done = True
        self._finalizer()
        self._feed.held.clear()
        if self.stats.ended is None:
            self.stats.ended = time.perf_counter()


class _Feed:
    """DALI's external source: the next prefetched batch, ``StopIteration`` at the end.

    It records each fed batch's ``(step, n)`` for the consumer and holds the last few
    fed arrays, which DALI reads later (``no_copy``): holding them keeps their ring slots
    from being refilled. DALI runs ahead of the consumer, so a batch that failed to
    assemble ends DALI's epoch here, and its error (:attr:`error`) is raised after the
    batches before it have been handed out, as on the torch path.
    """

    def __init__(self, prefetcher: Prefetcher, hold: int) -> None:
        self._prefetcher = prefetcher
        self.fed: collections.deque[tuple[int, int]] = collections.deque()
        self.held: collections.deque[tuple[Any, Any]] = collections.deque(maxlen=hold)
        self.error: BaseException | None = None

    def __call__(self) -> tuple[Any, Any]:
        try:
            step, n, x, y, _ = next(self._prefetcher)
        except StopIteration:
            raise
        except BaseException as exc:
            self.error = exc
            raise StopIteration from None
        if n == 0:  # DALI rejects an empty batch: feed one zero sample, hand out none
            x_in = np.zeros((1, *x.shape[1:]), dtype=np.float32)
            y_in = np.zeros((1, *y.shape[1:]), dtype=np.float32)
        else:
            x_in, y_in = x.numpy(), y.numpy()
        self.fed.append((int(step), int(n)))
        self.held.append((x_in, y_in))
        return x_in, y_in
