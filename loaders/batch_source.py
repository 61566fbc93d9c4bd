"""Batch sources: who assembles a pass's batches (a Python thread, a native one, DALI, the device).

:func:`open_batch_source` picks the producer of one pass from the loader's options and
the state of the dataset's chunk cache; every producer is a :class:`BatchSource`.
A :class:`Delivery`'s ``copy`` turns a filled :class:`Slot` (one pair of preallocated
host batch buffers) into the consumer's tensors.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch

from ticktensor.errors import ConfigError

from ._devices import resolve_device
from ._fences import CudaFences, Fences
from ._index import normalization
from ._native_prefetch import NativePrefetcher, Relay
from ._prefetch import CudaDelivery, Deliver, Prefetcher, PrefetchStats, Slot, host_delivery
from ._readahead import Readahead
from ._resident import DeviceChunks, ResidentBatches, _default_budget, pool_slots
from .dali import DaliBatches, DaliOptions, DaliPipeline, dali_available
from .dataset import WindowDataset
from .options import FastOptions
from .sharding import ShardPlan

__all__ = ["BatchSource", "Deliveries", "Delivery", "Slot", "open_batch_source"]

_threads = itertools.count()


class BatchSource(Protocol):
    """A pass's batches as ``(step, n, x, y, event)``, assembled ahead of the consumer.

    ``step`` is the plan's step, ``n`` the batch's samples, ``x [n, W, F]`` and
    ``y [n, L]`` its tensors, and ``event`` the CUDA event of a device copy that the
    consumer's stream must wait for (``None`` otherwise). ``stats`` are the pass's
    counters; :meth:`close` stops the producer and is safe to call twice.
    """

    stats: PrefetchStats

    def __next__(self) -> tuple[Any, ...]: ...

    def close(self) -> None: ...

    @property
    def queue_depth(self) -> int: ...


@dataclass
class Delivery:
    """Where a pass's batches go (see :class:`Deliveries` for when it is built).

    ``copy`` turns a filled host slot into the consumer's tensors (zero-copy for the
    host, an asynchronous copy for CUDA); ``device_chunks`` is the device-resident
    chunk pool; ``dali`` the loader's DALI pipeline, reused by its passes; ``fences``
    keep a pinned host slot from being refilled while a copy the consumer queued from it
    may still read it (:mod:`~ticktensor.loaders._fences`).
    """

    copy: Deliver
    pin: bool
    memory: str
    device: torch.device | None = None
    device_chunks: DeviceChunks | None = None
    dali: DaliPipeline | None = None
    fences: Fences | None = None

    @classmethod
    def build(
        cls,
        dataset: WindowDataset,
        options: FastOptions,
        pin_memory: bool,
        device: torch.device | None = None,
    ) -> Delivery:
        """Allocate what delivery to ``device`` (resolved: ``cuda:N``, the CPU or
        ``None``) needs, on the consumer's thread when a pass starts."""
        dali, resident = options.dali, options.resident
        on_cuda = device is not None and device.type == "cuda"
        copy: Deliver = host_delivery
        if on_cuda and dali is None and resident is None:
            assert device is not None  # on_cuda says so
            copy = CudaDelivery(device)
        pin, memory = _host_memory(pin_memory, on_cuda, resident is not None)
        device_chunks = None
        if resident is not None:
            # FastOptions refuses residency without a device, and "auto" resolves to one.
            assert device is not None
            device_chunks = DeviceChunks(dataset, device, resident)
        dali_pipeline = None
        if dali is not None:
            device_id = device.index if on_cuda and device is not None else None
            dali_pipeline = DaliPipeline(
                device_id=device_id,
                scale=_dali_normalization(dataset, dali),
                options=dali,
                pin=pin,
            )
        # Pinned host batches may be copied with non_blocking=True by the consumer.
        fences = None
        if pin and copy is host_delivery:
            rank_gpu = resolve_device(torch.device("cuda"))
            assert rank_gpu is not None  # a bare cuda always resolves
            fences = CudaFences(rank_gpu)
        return cls(copy, pin, memory, device, device_chunks, dali_pipeline, fences)

    @property
    def receive(self) -> Any:
        """What the consumer thread calls on each CUDA-copied batch (``None`` otherwise)."""
        return self.copy.receive if isinstance(self.copy, CudaDelivery) else None


class Deliveries:
    """A loader's :class:`Delivery`, built when a pass starts for the device found then.

    Building a loader and unpickling it call no CUDA function: the device (a bare
    ``cuda`` or ``"auto"``) is resolved on the consumer's thread at the start of each
    pass (:func:`~ticktensor.loaders._devices.resolve_device`), and the delivery for it
    (copy stream, pinned-buffer fences, DALI pipeline) is built then and kept while the
    device stays the same. Device residency's pool holds ``budget_bytes`` of chunks; with
    the default budget (a share of the GPU's free memory) the GPU is asked once per
    device, when a pass (or :meth:`resident_pool`) first needs it.
    """

    def __init__(self, dataset: WindowDataset, options: FastOptions, pin_memory: bool) -> None:
        self._dataset, self._options, self._pin_memory = dataset, options, pin_memory
        self._built: Delivery | None = None
        self._reader_streams: list[Any] = []
        self._budgets: dict[torch.device | None, int] = {}
        if options.dali is not None:  # its errors belong to building the loader
            _dali_normalization(dataset, options.dali)
        # Device residency: how many chunks fit can decide the loader's default order.
        # A budget given (or the CPU's) says so without CUDA; the default budget of a
        # GPU is asked for when a pass needs it.
        self.pool: tuple[int, bool] | None = None
        resident = options.resident
        if resident is not None:
            target = options.device
            on_cpu = isinstance(target, torch.device) and target.type == "cpu"
            if resident.budget_bytes is not None:
                self.pool = pool_slots(dataset, resident.budget_bytes)
            elif on_cpu:
                self.pool = pool_slots(dataset, int(dataset.cache_bytes))

    def resident_pool(self) -> tuple[int, bool] | None:
        """``(slots, whole)`` of device residency's pool (``None`` without residency),
        for the device a pass starting now finds: on the consumer's thread, as it may ask
        the GPU for its free memory. The first answer is kept in :attr:`pool`."""
        if self.pool is None and self._options.resident is not None:
            device = resolve_device(self._options.device)
            self.pool = pool_slots(self._dataset, self._budget(device))
        return self.pool

    def for_pass(self) -> Delivery:
        """The delivery of a pass that starts now, on the consumer's thread."""
        device = resolve_device(self._options.device)
        built = self._built
        if built is None or built.device != device:
            options = self._options
            resident = options.resident
            if resident is not None and resident.budget_bytes is None:
                budget = replace(resident, budget_bytes=self._budget(device))
                options = replace(options, residency=budget)
            built = Delivery.build(self._dataset, options, self._pin_memory, device)
            if isinstance(built.fences, CudaFences):
                for stream in self._reader_streams:
                    built.fences.add_reader_stream(stream)
            self._built = built
        return built

    def _budget(self, device: torch.device | None) -> int:
        """The default residency budget on ``device``, asked for once (a GPU's share of
        its free memory when first asked; the chunk cache's budget on the CPU)."""
        budget = self._budgets.get(device)
        if budget is None:
            # FastOptions refuses residency without a device, and "auto" resolves to one.
            assert device is not None
            budget = _default_budget(self._dataset, device)
            pool_slots(self._dataset, budget)  # a budget that holds no chunk says so here
            self._budgets[device] = budget
        return budget

    def add_reader_stream(self, stream: Any) -> None:
        """Fence ``stream`` too, in this pass's delivery and every later one."""
        self._reader_streams.append(stream)
        built = self._built
        if built is not None and isinstance(built.fences, CudaFences):
            built.fences.add_reader_stream(stream)

    @property
    def last(self) -> Delivery | None:
        """The delivery of the latest pass (``None`` before the first)."""
        return self._built

    def reported(self) -> Delivery:
        """The latest pass's delivery, for statistics (a placeholder before the first)."""
        if self._built is not None:
            return self._built
        options = self._options
        target = options.device
        on_cuda = target == "auto" or (isinstance(target, torch.device) and target.type == "cuda")
        pin, memory = _host_memory(self._pin_memory, on_cuda, options.resident is not None)
        return Delivery(host_delivery, pin=pin, memory=memory)


def _host_memory(pin_memory: bool, on_cuda: bool, resident: bool) -> tuple[bool, str]:
    """Whether host batches are pinned, and the memory they are in, in words. Asking
    whether CUDA is available initialises nothing."""
    if resident:
        return False, "device-resident (no host batch buffers)"
    cuda = torch.cuda.is_available()
    pin = bool(cuda and (pin_memory or on_cuda))
    return pin, "pinned" if pin else "pageable" if cuda else "pageable (no CUDA)"


def open_batch_source(
    dataset: WindowDataset,
    plan: ShardPlan,
    options: FastOptions,
    delivery: Delivery,
    *,
    batch_size: int,
    prefetch: int,
    timeout: float,
    context: str,
) -> BatchSource:
    """The producer of one pass over ``plan``'s steps.

    - device-resident chunks: windows cut on the device in the consumer's thread;
    - DALI: the Python thread's host batches through a DALI pipeline;
    - otherwise host batches: the native thread when every chunk is loaded already, else
      the Python thread (which loads chunks ahead), handing over to the native thread
      once the cache is complete (``engine="python"`` keeps the Python thread).
    """
    if delivery.device_chunks is not None:
        resident = options.resident
        assert resident is not None  # device_chunks exist only for residency="device"
        return ResidentBatches(delivery.device_chunks, plan, resident.lookahead)
    x_shape = (batch_size, dataset.window, dataset.n_features)
    y_shape = (batch_size, dataset.n_labels)
    pin = delivery.pin

    def make_slot() -> Slot:
        return Slot(x_shape, y_shape, pin)

    readahead = Readahead(
        dataset.cache,
        lambda step: dataset.chunks_of(plan.batch(step)),
        plan.num_steps,
        options.readahead,
    )

    def fill(step: int, slot: Slot) -> int:
        indices = plan.batch(step)
        n = int(indices.shape[0])
        upcoming = readahead.upcoming(step)
        chunks = None if dataset.cache.complete else readahead.chunks(step)
        dataset.runtime.gather_batch(
            dataset.index, indices, slot.x[:n], slot.y[:n], chunks, upcoming
        )
        return n

    sample_bytes = 4 * (dataset.window * dataset.n_features + dataset.n_labels)
    dali = options.dali
    native = options.engine != "python" and dali is None and delivery.copy is host_delivery

    def native_from(
        step: int, stats: PrefetchStats | None = None, slots: Sequence[Slot] = ()
    ) -> NativePrefetcher:
        return NativePrefetcher(
            dataset,
            plan,
            make_slot,
            depth=prefetch,
            timeout=timeout,
            context=context,
            sample_bytes=sample_bytes,
            first_step=step,
            stats=stats,
            slots=slots,
            on_stop=dataset.cache.release_threads,
            fences=delivery.fences,
        )

    if native and dataset.cache.complete:
        return native_from(0)
    prefetcher = Prefetcher(
        fill,
        range(plan.num_steps),
        make_slot,
        delivery.copy,
        depth=prefetch,
        timeout=timeout,
        name=f"ticktensor-loader-{next(_threads)}",
        context=context,
        sample_bytes=sample_bytes,
        on_stop=dataset.cache.release_threads,
        extra_slots=0 if dali is None else dali.held_batches,
        handover=(lambda: dataset.cache.complete) if native else None,
        fences=delivery.fences,
    )
    if delivery.dali is not None:
        return DaliBatches(
            delivery.dali, prefetcher, batch_size=batch_size, sample_bytes=sample_bytes
        )
    return Relay(prefetcher, native_from) if native else prefetcher


def _dali_normalization(dataset: WindowDataset, options: DaliOptions) -> tuple[Any, Any] | None:
    """``(mean, std)`` for DALI to apply, or ``None``; errors before any thread starts."""
    if not dali_available():
        raise ConfigError(
            "backend='dali' needs NVIDIA DALI: pip install nvidia-dali-cuda120 "
            "(or the project's 'dali' extra)"
        )
    if options.normalize and dataset.normalize:
        raise ConfigError(
            "DaliOptions(normalize=True) with a dataset built with normalize=True "
            "would normalize twice"
        )
    normalize = not dataset.normalize if options.normalize is None else options.normalize
    return normalization(dataset.version, dataset.feature_names) if normalize else None
