"""A loader's DALI pipeline: built at the loader's first pass, reset for each later one.

Building a DALI pipeline starts its threads and allocates its buffers (on a GPU, its
streams and memory pools too), so a loader builds one and keeps it for its lifetime. The
pipeline reads its batches from a :class:`_Feed`, which each pass points at that pass's
prefetcher: a reset pipeline reads the new pass's order, not the one it was built with.

DALI resets a pipeline only at the end of an epoch: its iterator ignores a reset in the
middle, and the batches the pipeline queued ahead would come out first. A pass that ran
to its end is followed by a reset. A pass abandoned in the middle (``break``, an
exception, Lightning's sanity check or ``limit_val_batches``) leaves its pipeline
mid-epoch: the next pass ends that epoch by closing the old feed and draining what DALI
queued ahead (at most ``prefetch_queue_depth`` outputs), then resets it. Only when that
fails is the pipeline freed and built again, which ``stats["rebuilds"]``
(``loader.stats()["dali"]``) counts.
"""

from __future__ import annotations

import collections
import importlib
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
import numpy.typing as npt
import torch

from ticktensor.errors import ConfigError

from ._fences import CudaFences, Fence
from ._prefetch import Prefetcher

if TYPE_CHECKING:
    from .dali import DaliOptions, DType

__all__ = ["DaliPipeline", "build_pipeline", "dali_available"]

Floats = npt.NDArray[np.float32]
Batch = tuple[int, int, torch.Tensor, torch.Tensor]

_FRESH: Final = "fresh"  # built, never run
_RUNNING: Final = "running"  # inside an epoch: batches may be queued
_ENDED: Final = "ended"  # DALI ended the epoch; a reset starts the next one
State = Literal["fresh", "running", "ended"]


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


class DaliPipeline:
    """One loader's DALI pipeline and torch iterator, reused by every pass.

    :meth:`start` points the pipeline at a new pass's prefetcher; the pass's first
    :meth:`next` resets it when the previous epoch ended. A pass that stopped in the middle
    of its epoch makes :meth:`start` drain what DALI queued and end that epoch first (and
    build a new pipeline only if that fails). Only the newest pass reads from the pipeline.

    Batches come out in torch's own memory. DALI's dynamic executor (the default of DALI
    2.4) hands out its output buffers through DLPack; they are copied, on the
    consumer's current stream, which the DLPack exchange orders after DALI's work, so the
    consumer's tensors follow torch's lifetime rules (``record_stream``, the caching
    allocator) and DALI's buffers go back to DALI. On a GPU, DALI's buffers are held
    until a fence recorded after the copy has completed. With DALI's other executors the
    iterator copies into torch tensors itself, and nothing more is copied. A CPU
    pipeline with ``pin`` hands out page-locked tensors (the copy is made into them), so
    the consumer's ``non_blocking`` copies to a GPU stay asynchronous.

    Parameters
    ----------
    device_id
        GPU for the operators, or ``None`` for the CPU.
    scale
        ``(mean, std)`` for the normalization, or ``None``.
    options
        dtype, threads, queue depth.
    pin
        Hand out a CPU pipeline's batches in page-locked memory (``pin_memory=True``
        with CUDA present); ignored on a GPU.
    """

    def __init__(
        self,
        *,
        device_id: int | None,
        scale: tuple[Floats, Floats] | None,
        options: DaliOptions,
        pin: bool = False,
    ) -> None:
        self.device_id = device_id
        self.scale = scale
        self.options = options
        self.pin = pin and device_id is None
        self.stats = {"builds": 0, "resets": 0, "rebuilds": 0}
        self._iterator: Any = None
        self._feed = _Feed(options.held_batches)
        self._state: State = _FRESH
        self._batch_size = 0
        self._zero_copy = False  # the iterator hands out DALI's buffers
        self._pass = 0
        self._fences = None if device_id is None else CudaFences(torch.device("cuda", device_id))
        self._pending: collections.deque[tuple[Fence, tuple[torch.Tensor, ...]]] = (
            collections.deque()
        )

    def start(self, prefetcher: Prefetcher, batch_size: int) -> int:
        """Serve a new pass from ``prefetcher``; returns the pass's number for :meth:`next`.

        The pass before (whatever became of it) no longer reads from the pipeline, and
        its prefetcher is closed.
        """
        if self._iterator is not None and (
            batch_size != self._batch_size or not self._finish_epoch()
        ):
            self._free()
            self.stats["rebuilds"] += 1
        if self._iterator is None:
            self._build(batch_size)
        self._feed.point_at(prefetcher)
        self._pass += 1
        return self._pass

    def next(self, number: int) -> Batch:
        """The next batch of pass ``number`` as ``(step, n, x, y)``, in torch's memory.

        Raises :class:`StopIteration` at the end of the pass, after the batches before a
        failed one were handed out; then the error of the failed batch.
        """
        if number != self._pass:
            raise RuntimeError(
                "this pass was superseded by a newer iter() of the same loader: its DALI "
                "pipeline serves the newest pass only"
            )
        if self._state == _ENDED:
            self._iterator.reset()
            self.stats["resets"] += 1
        self._state = _RUNNING
        feed = self._feed
        try:
            out = next(self._iterator)[0]
        except StopIteration:
            self._state = _ENDED
            feed.held.clear()  # DALI has read every batch it was fed
            if feed.error is not None:
                raise feed.error from None
            raise
        step, n = feed.fed.popleft()
        x, y = out["x"], out["y"]
        if n == 0:
            x, y = x[:0], y[:0]
        return step, n, *self._own(x, y)

    def _own(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)`` in torch's memory, copied from DALI's buffers where the iterator
        handed those out."""
        dali = (x, y)
        bfloat16 = self.options.dtype == "bfloat16"  # DALI has none: torch casts, a copy
        if self.pin:  # one copy into page-locked memory (torch's caching host allocator)
            x = _pinned(x, torch.bfloat16 if bfloat16 else x.dtype)
            y = _pinned(y, y.dtype)
            return x, y
        if bfloat16:
            x = x.to(torch.bfloat16)
        elif self._zero_copy:
            x = x.clone()
        if self._zero_copy:
            y = y.clone()
            if self._fences is not None:  # pragma: no cover - GPU only
                # The copies are queued on the consumer's stream: DALI's buffers stay
                # referenced until they have run.
                self._pending.append((self._fences.record(), dali))
                while self._pending and self._pending[0][0].query():
                    self._pending.popleft()
        return x, y

    def _finish_epoch(self) -> bool:
        """Whether the pipeline can serve a new pass as it is (fresh) or after a reset.

        A pass that stopped before DALI's epoch ended (it handed out its last batch
        without asking for one more, or it was abandoned) leaves DALI mid-epoch, with up
        to ``prefetch_queue_depth`` batches queued ahead: the pass's prefetcher is
        closed, so the feed ends DALI's epoch at its next read, and the queued outputs
        are drained (never handed out). ``False`` when DALI fails meanwhile or does not
        end its epoch within that many outputs: then the pipeline is built again.
        """
        if self._state != _RUNNING:
            return True
        feed = self._feed
        if not feed.exhausted:
            feed.point_at(None)
        for _ in range(self.options.prefetch_queue_depth + 2):
            try:
                next(self._iterator)
            except StopIteration:
                self._state = _ENDED
                feed.held.clear()
                feed.fed.clear()
                return True
            except RuntimeError:  # a failed pipeline is built again
                return False
        return False

    def _build(self, batch_size: int) -> None:
        plugin = _import("nvidia.dali.plugin.pytorch")
        options = self.options
        self._feed = _Feed(options.held_batches)  # the arrays it holds belong to one pipeline
        pipe = build_pipeline(
            self._feed,
            batch_size=batch_size,
            device_id=self.device_id,
            scale=self.scale,
            dtype=options.dtype,
            num_threads=options.threads,
            prefetch_queue_depth=options.prefetch_queue_depth,
        )
        # prepare_first_batch=False: nothing runs before a pass asks for its first batch,
        # so a pass dropped before that leaves the pipeline fresh.
        self._iterator = plugin.DALIGenericIterator(
            [pipe],
            ["x", "y"],
            last_batch_policy=plugin.LastBatchPolicy.PARTIAL,
            prepare_first_batch=False,
        )
        self._zero_copy = bool(getattr(pipe, "exec_dynamic", False))
        self._batch_size = batch_size
        self._state = _FRESH
        self.stats["builds"] += 1

    def _free(self) -> None:
        """Drop the pipeline: its threads and buffers go with the last reference (the
        pipeline references its feed, never this object)."""
        while self._pending:  # pragma: no cover - GPU only
            fence, _ = self._pending.popleft()
            fence.synchronize()
        self._feed.point_at(None)
        self._iterator = None


def _pinned(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A page-locked copy of host ``tensor`` as ``dtype``."""
    out = torch.empty(tensor.shape, dtype=dtype, pin_memory=True)
    out.copy_(tensor)
    return out


class _Feed:
    """DALI's external source: the next batch of the pass it is pointed at.

    It records each fed batch's ``(step, n)`` for the consumer and holds the last few
    fed arrays, which DALI reads later (``no_copy``): holding them keeps their ring slots
    from being refilled. DALI runs ahead of the consumer, so a batch that failed to
    assemble ends DALI's epoch here, and its error (:attr:`error`) is raised after the
    batches before it have been handed out, as on the torch path.
    """

    def __init__(self, hold: int) -> None:
        self.source: Prefetcher | None = None
        self.fed: collections.deque[tuple[int, int]] = collections.deque()
        self.held: collections.deque[tuple[Any, Any]] = collections.deque(maxlen=hold)
        self.error: BaseException | None = None
        self.exhausted = False  # the source ended (or failed): DALI's epoch ends with it

    def point_at(self, source: Prefetcher | None) -> None:
        """Feed ``source``'s batches from now on; the previous source is closed."""
        if self.source is not None:
            self.source.close()
        self.source = source
        self.fed.clear()
        self.error = None
        self.exhausted = False

    def __call__(self) -> tuple[Any, Any]:
        if self.source is None:
            raise StopIteration
        try:
            step, n, x, y, _ = next(self.source)
        except StopIteration:
            self.exhausted = True
            raise
        except BaseException as exc:
            self.exhausted = True
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
