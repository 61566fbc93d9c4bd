"""The drop-in DataLoader: torch's keywords and behaviour, with a fast path for window datasets."""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch
import torch.utils.data

from ticktensor.errors import ConfigError

from ._index import normalization
from ._native_prefetch import NativePrefetcher, Relay
from ._prefetch import CudaDelivery, Deliver, Prefetcher, PrefetchStats, Slot, host_delivery
from ._readahead import Readahead
from ._resident import DeviceChunks, ResidentBatches, ResidentOptions
from .dali import DaliBatches, DaliOptions, dali_available
from .dataset import WindowDataset
from .samplers import BlockShuffleOrder, Order, SequentialOrder, UniformOrder
from .sharding import EpochState, ShardPlan, world_from_env

__all__ = ["DataLoader"]

Batch = tuple[torch.Tensor, torch.Tensor]
_PERMUTATIONS = (UniformOrder, SequentialOrder, BlockShuffleOrder)  # len(order) == len(dataset)
_PER_SAMPLE = ("sampler", "batch_sampler", "collate_fn", "worker_init_fn")
_threads = itertools.count()
_READAHEAD = 16


class DataLoader(Iterable[Any]):
    """``torch.utils.data.DataLoader`` with a fast path for :class:`WindowDataset`.

    Every keyword of :class:`torch.utils.data.DataLoader` is accepted with the same
    meaning. For any dataset that is not a :class:`WindowDataset`, or when one of the
    per-sample hooks ``sampler``, ``batch_sampler``, ``collate_fn``, ``worker_init_fn`` is
    given or ``batch_size`` is ``None``, a real torch ``DataLoader`` is built and
    everything is delegated to it.

    Otherwise (the fast path) each batch is gathered by the native kernel in one call,
    in a background thread (a C++ one that never takes the GIL once every chunk of the
    dataset is loaded, for host batches; set ``native_engine = False`` on the loader to
    keep the Python one), into a ring of preallocated buffers (page-locked when
    ``pin_memory=True`` and CUDA is present; without CUDA pinning is a no-op), and
    handed out zero-copy as ``(x [B, W, F] float32, y [B, L] float32)`` tensors. A
    buffer is refilled only once no batch made from it is referenced any more, so a
    consumer that keeps batches (``list(loader)``) still sees correct data. On this path:

    - the order comes from ``order`` (default: ``UniformOrder(seed)`` when ``shuffle``
      else ``SequentialOrder()``), sharded over ranks by :class:`ShardPlan`: each global
      step of ``batch_size * world_size`` samples gives rank ``r`` its ``r``-th slice, so
      every rank gets the same number of batches;
    - ``drop_last`` drops the short last step; otherwise ``pad`` (default: on when
      ``world_size > 1``) fills it by wrapping around the order, and without padding the
      last batches are smaller, as with torch;
    - ``num_workers``, ``multiprocessing_context`` and ``persistent_workers`` are accepted
      and unused (there are no worker processes; threads come from the dataset's
      :class:`~ticktensor.kernels.ThreadPool`), ``prefetch_factor`` is the default of
      ``prefetch``, batches always come in order;
    - the epoch advances by itself after a complete pass, or by :meth:`set_epoch`;
      :meth:`state_dict` and :meth:`load_state_dict` resume mid-epoch exactly, also with
      another world size.

    Parameters
    ----------
    dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, \
pin_memory, drop_last, timeout, worker_init_fn, multiprocessing_context, generator, \
prefetch_factor, persistent_workers, pin_memory_device, in_order
        As for :class:`torch.utils.data.DataLoader`. On the fast path ``generator``
        only seeds the default order (its ``initial_seed()``) and ``timeout`` raises
        :class:`TimeoutError` naming the batch that did not come in time.
    order
        Fast path: the sample order (an :class:`~ticktensor.loaders.Order`).
    seed
        Fast path: seed of the default shuffled order (default: from ``generator``,
        else 0); also recorded in :meth:`state_dict`.
    rank, world_size
        Fast path: this rank and the number of ranks (default: from
        ``torch.distributed`` when initialized, else ``RANK``/``WORLD_SIZE``, else 0/1).
    pad
        Fast path: fill the last step by wrapping around; see above.
    device
        Fast path: copy each batch to this device. For CUDA the copy runs with
        ``non_blocking=True`` on a side stream from pinned buffers, and the consumer's
        current stream waits on it.
    prefetch
        Fast path: batches assembled ahead of the consumer, the depth of the ring of
        batch buffers (default 2).
    readahead
        Fast path: batches whose feature chunks are loaded ahead of their assembly, as
        far as the dataset's chunk cache budget allows (default 16).
    backend
        Fast path: ``"torch"`` (default) hands out the buffers as torch tensors;
        ``"dali"`` (or a :class:`~ticktensor.loaders.dali.DaliOptions`) runs them through
        an NVIDIA DALI pipeline that normalizes and casts, on the GPU of ``device`` or on
        the CPU. Same batches, length, sharding and state.
    residency
        Fast path: ``"host"`` (default) keeps chunks in host memory and copies windows;
        ``"device"`` (or a :class:`~ticktensor.loaders.ResidentOptions`) copies each chunk
        to ``device`` once and cuts windows there, so host-to-device traffic is chunk
        bytes, not window bytes. Needs ``device``; ``"cpu"`` runs the same logic on host
        tensors. When the chunks do not all fit the budget, ``shuffle=True`` without an
        ``order`` uses ``BlockShuffleOrder(seed, block_chunks=slots // 4)``.

    Examples
    --------
    >>> import torch
    >>> from ticktensor import DataLoader
    >>> squares = [torch.tensor([i * i]) for i in range(5)]
    >>> [b.tolist() for b in DataLoader(squares, batch_size=2)]
    [[[0], [1]], [[4], [9]], [[16]]]
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        order: Order | None = None,
        seed: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        pad: bool | None = None,
        device: torch.device | str | None = None,
        prefetch: int | None = None,
        readahead: int | None = None,
        backend: str | DaliOptions | None = None,
        residency: str | ResidentOptions | None = None,
    ) -> None:
        hooks = {"sampler": sampler, "batch_sampler": batch_sampler, "collate_fn": collate_fn}
        hooks["worker_init_fn"] = worker_init_fn
        self.dataset = dataset
        self.fast = (
            isinstance(dataset, WindowDataset)
            and batch_size is not None
            and all(hooks[name] is None for name in _PER_SAMPLE)
        )
        if not self.fast:
            fast_only: dict[str, object] = {"order": order, "seed": seed, "rank": rank}
            fast_only["world_size"] = world_size
            fast_only |= {"pad": pad, "device": device, "prefetch": prefetch}
            fast_only |= {"readahead": readahead, "backend": backend, "residency": residency}
            given = sorted(name for name, value in fast_only.items() if value is not None)
            if given:
                raise ConfigError(
                    f"{', '.join(given)}: only for the fast path (a WindowDataset, an integer "
                    "batch_size and no sampler, batch_sampler, collate_fn or worker_init_fn)"
                )
            self._torch: torch.utils.data.DataLoader[Any] = torch.utils.data.DataLoader(
                dataset,
                batch_size=batch_size,
                shuffle=shuffle,
                **hooks,
                num_workers=num_workers,
                pin_memory=pin_memory,
                drop_last=drop_last,
                timeout=timeout,
                multiprocessing_context=multiprocessing_context,
                generator=generator,
                prefetch_factor=prefetch_factor,
                persistent_workers=persistent_workers,
                pin_memory_device=pin_memory_device,
                in_order=in_order,
            )
            return
        self.batch_size = self._check_fast(
            batch_size, num_workers, timeout, prefetch_factor, prefetch, readahead
        )
        if seed is None:
            seed = int(generator.initial_seed()) if generator is not None else 0
        if order is not None and not isinstance(order, Order):
            raise ConfigError(f"order: expected an Order, got {type(order).__name__}")
        self.order: Order = order or (UniformOrder(seed) if shuffle else SequentialOrder())
        self.rank, self.world_size = world_from_env(rank, world_size)
        self.drop_last = bool(drop_last)
        self.pad = self.world_size > 1 if pad is None else bool(pad)
        self.timeout = float(timeout)
        self.prefetch = int(prefetch or prefetch_factor or 2)
        self.readahead = int(readahead or _READAHEAD)
        self.device = None if device is None else torch.device(device)
        cuda = torch.cuda.is_available()
        if self.device is not None and self.device.type == "cuda" and not cuda:
            raise ConfigError(f"device {self.device}: CUDA is not available")
        self._dali, self._resident = self._check_backend(backend, residency, self.device)
        self._delivery: Deliver = host_delivery
        on_cuda = self.device is not None and self.device.type == "cuda"
        plain = self._dali is None and self._resident is None
        if self.device is not None and self.device.type == "cuda" and plain:
            self._delivery = CudaDelivery(self.device)
        self.pin_memory = bool(cuda and (pin_memory or on_cuda) and self._resident is None)
        self._memory = "pinned" if self.pin_memory else "pageable" if cuda else "pageable (no CUDA)"
        if self._resident is not None:
            self._memory = "device-resident (no host batch buffers)"
        self._chunks_on_device: DeviceChunks | None = None
        if self._resident is not None and self.device is not None:
            device_chunks = DeviceChunks(dataset, self.device, self._resident)
            self._chunks_on_device = device_chunks
            if order is None and shuffle and not device_chunks.whole:
                # A chunk cache on the device: fill it block by block, each chunk about
                # once per epoch, instead of every batch reading chunks from everywhere.
                blocks = max(1, device_chunks.slots // 4)
                self.order = BlockShuffleOrder(seed, block_chunks=blocks)
        self._dali_scale = None if self._dali is None else self._dali_normalization(dataset)
        self._state = EpochState(seed=seed)
        self._orders = _Orders(self.order, dataset)
        self._orders.prefetch(self._state.epoch)  # overlaps the caller's own setup
        weakref.finalize(self, self._orders.close)
        self._generation = 0
        # Passes over a dataset whose chunks are all loaded run on the native thread;
        # False keeps the Python one (to compare the two).
        self.native_engine = True
        self._last: weakref.ref[_Batches] | None = None  # weak: it owns the thread
        self._last_stats: PrefetchStats | None = None

    @staticmethod
    def _check_fast(
        batch_size: int | None,
        num_workers: int,
        timeout: float,
        prefetch_factor: int | None,
        prefetch: int | None,
        readahead: int | None,
    ) -> int:
        """Validate the fast path's numbers; returns the batch size."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size: expected an integer >= 1, got {batch_size!r}")
        if num_workers < 0:
            raise ConfigError(f"num_workers: expected >= 0, got {num_workers}")
        if timeout < 0:
            raise ConfigError(f"timeout: expected >= 0, got {timeout}")
        knobs = {"prefetch_factor": prefetch_factor, "prefetch": prefetch, "readahead": readahead}
        for name, value in knobs.items():
            if value is not None and (isinstance(value, bool) or value < 1):
                raise ConfigError(f"{name}: expected an integer >= 1, got {value!r}")
        return int(batch_size)

    @staticmethod
    def _check_backend(
        backend: str | DaliOptions | None,
        residency: str | ResidentOptions | None,
        device: torch.device | None,
    ) -> tuple[DaliOptions | None, ResidentOptions | None]:
        """The DALI and residency options asked for (``None``: the plain path)."""
        dali: DaliOptions | None = None
        if isinstance(backend, DaliOptions):
            dali = backend
        elif backend == "dali":
            dali = DaliOptions()
        elif backend not in (None, "torch"):
            raise ConfigError(
                f"backend: expected 'torch', 'dali' or a DaliOptions, got {backend!r}"
            )
        resident: ResidentOptions | None = None
        if isinstance(residency, ResidentOptions):
            resident = residency
        elif residency == "device":
            resident = ResidentOptions()
        elif residency not in (None, "host"):
            raise ConfigError(
                f"residency: expected 'host', 'device' or a ResidentOptions, got {residency!r}"
            )
        if dali is not None and resident is not None:
            raise ConfigError("backend='dali' and residency='device' do not combine: pick one")
        if resident is not None and device is None:
            raise ConfigError(
                "residency='device' needs device= (e.g. 'cuda'; 'cpu' runs it on host tensors)"
            )
        if dali is not None and device is not None and device.type not in ("cpu", "cuda"):
            raise ConfigError(f"backend='dali' runs on 'cpu' or 'cuda', not on {device}")
        return dali, resident

    # -- the torch path ------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes not set here: torch's (sampler, collate_fn, ...).
        if name.startswith("__") or "_torch" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["_torch"], name)

    # -- iteration -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        if not self.fast:
            return iter(self._torch)
        self._generation += 1
        epoch, start = self._state.epoch, self._state.samples_consumed
        plan = self._state.plan(
            self._orders.get(epoch),
            self.batch_size,
            self.world_size,
            self.rank,
            self.drop_last,
            self.pad,
        )
        dataset: WindowDataset = self.dataset
        if self._resident is not None and self._chunks_on_device is not None:
            resident = ResidentBatches(self._chunks_on_device, plan, self._resident.lookahead)
            self._last_stats = resident.stats
            self._last = weakref.ref(resident)
            return _FastIterator(self, self._generation, plan, resident)
        context = (
            f"epoch {epoch}, rank {self.rank} of {self.world_size}, from global sample {start}"
        )
        source = self._host_batches(dataset, plan, context)
        iterator = _FastIterator(self, self._generation, plan, source)
        self._last = weakref.ref(source)
        self._last_stats = source.stats
        return iterator

    def _host_batches(self, dataset: WindowDataset, plan: ShardPlan, context: str) -> _Batches:
        """The pass's batches in host buffers: the Python thread (which loads chunks), the
        native one once every chunk is loaded, or DALI's pipeline over the Python one."""
        x_shape = (self.batch_size, dataset.window, dataset.n_features)
        y_shape = (self.batch_size, dataset.n_labels)
        pin = self.pin_memory

        def make_slot() -> Slot:
            return Slot(x_shape, y_shape, pin)

        readahead = Readahead(
            dataset.cache,
            lambda step: dataset.chunks_of(plan.batch(step)),
            plan.num_steps,
            self.readahead,
        )

        def fill(step: int, slot: Slot) -> int:
            indices = plan.batch(step)
            n = int(indices.shape[0])
            upcoming = readahead.upcoming(step)
            chunks = None if dataset.cache.complete else readahead.chunks(step)
            dataset._get_batch(indices, slot.x[:n], slot.y[:n], chunks, upcoming)
            return n

        sample_bytes = 4 * (dataset.window * dataset.n_features + dataset.n_labels)
        # Host batches straight to the consumer: once every chunk is loaded, a native thread
        # assembles them (no GIL between batches); until then the Python thread, which loads.
        native = self.native_engine and self._dali is None and self._delivery is host_delivery

        def native_from(
            step: int, stats: PrefetchStats | None = None, slots: Sequence[Slot] = ()
        ) -> NativePrefetcher:
            return NativePrefetcher(
                dataset,
                plan,
                make_slot,
                depth=self.prefetch,
                timeout=self.timeout,
                context=context,
                sample_bytes=sample_bytes,
                first_step=step,
                stats=stats,
                slots=slots,
                on_stop=dataset.cache.stop_threads,
            )

        if native and dataset.cache.complete:
            return native_from(0)
        prefetcher = Prefetcher(
            fill,
            range(plan.num_steps),
            make_slot,
            self._delivery,
            depth=self.prefetch,
            timeout=self.timeout,
            name=f"ticktensor-loader-{next(_threads)}",
            context=context,
            sample_bytes=sample_bytes,
            on_stop=dataset.cache.stop_threads,
            extra_slots=0 if self._dali is None else self._dali.held_batches,
            handover=(lambda: dataset.cache.complete) if native else None,
        )
        if self._dali is not None:
            return self._through_dali(prefetcher)
        return Relay(prefetcher, native_from) if native else prefetcher

    def _dali_normalization(self, dataset: WindowDataset) -> tuple[Any, Any] | None:
        """``(mean, std)`` for DALI to apply, or ``None``; errors before any thread starts."""
        options = self._dali
        assert options is not None
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

    def _through_dali(self, prefetcher: Prefetcher) -> DaliBatches:
        """The pass's batches through a DALI pipeline (normalize, cast)."""
        options = self._dali
        assert options is not None
        dataset: WindowDataset = self.dataset
        device_id = None
        if self.device is not None and self.device.type == "cuda":  # pragma: no cover - GPU only
            # torch types ``index`` as int; it is None for a bare "cuda".
            index: int | None = self.device.index
            device_id = torch.cuda.current_device() if index is None else index
        return DaliBatches(
            prefetcher,
            batch_size=self.batch_size,
            device_id=device_id,
            scale=self._dali_scale,
            options=options,
            sample_bytes=4 * (dataset.window * dataset.n_features + dataset.n_labels),
        )

    def __len__(self) -> int:
        """Batches per epoch (for this rank on the fast path)."""
        if not self.fast:
            return len(self._torch)
        if isinstance(self.order, _PERMUTATIONS):
            total: int | npt.NDArray[np.int64] = len(self.dataset)
        else:
            total = self._orders.get(self._state.epoch)
        plan = ShardPlan(
            total, self.batch_size, self.world_size, self.rank, self.drop_last, self.pad
        )
        return plan.num_steps

    # -- epochs, state, statistics ---------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Start the next pass at the beginning of ``epoch``.

        Setting the epoch the loader is already in keeps its position, so a loop that
        calls ``set_epoch(e)`` at the top of every epoch still resumes mid-epoch after
        :meth:`load_state_dict`. On the torch path this calls the sampler's
        ``set_epoch`` when it has one.
        """
        if not self.fast:
            hooks: tuple[Any, ...] = (self._torch.sampler, self._torch.batch_sampler)
            for hook in hooks:
                if hasattr(hook, "set_epoch"):
                    hook.set_epoch(epoch)
            return
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f"epoch: expected an integer >= 0, got {epoch!r}")
        if epoch != self._state.epoch:
            self._generation += 1  # a running pass no longer moves the state
            self._state.epoch, self._state.samples_consumed = epoch, 0
            self._orders.prefetch(epoch)

    @property
    def epoch(self) -> int:
        """The epoch the next (or running) pass belongs to."""
        self._require_fast("epoch")
        return self._state.epoch

    def state_dict(self) -> dict[str, Any]:
        """Position after the batches handed out so far: epoch, seed, global samples consumed.

        Any rank's state restores every rank, also with another world size: the rest of
        the epoch's global order is partitioned again.
        """
        self._require_fast("state_dict")
        return self._state.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` at the next ``iter()``; a running pass stops counting."""
        self._require_fast("load_state_dict")
        restored = EpochState.from_state_dict(state)
        if restored.seed != self._state.seed:
            raise ConfigError(
                f"state was saved with seed {restored.seed}, this loader uses seed "
                f"{self._state.seed}: the order would differ"
            )
        self._generation += 1
        self._state = restored

    def stats(self) -> dict[str, Any]:
        """Figures of the running (or last) pass.

        Returns
        -------
        dict
            ``batches``, ``samples``, ``bytes`` handed out; ``wait_s``: seconds the
            consumer waited for data (the data stall); ``assemble_s``: seconds spent
            assembling batches in the background; ``queue_depth``: batches ready now;
            ``mean_queue_depth``: batches ready when the consumer asked, on average;
            ``first_batch_s``: seconds from ``iter()`` to the first batch; ``wall_s``:
            seconds from ``iter()`` to the end of the pass (or now); ``stall_fraction``:
            ``wait_s / wall_s``; ``buffers_allocated``: batch buffers allocated in the pass;
            ``epoch`` and ``samples_consumed``: the position, as in :meth:`state_dict`;
            ``cache``: the dataset's chunk cache counters since it was built (hits,
            misses, hit_rate, loads, evictions, bytes_read, budget_bytes, used_bytes,
            ...); ``stage_s``: seconds per stage - ``fetch``, ``decode`` and
            ``prepare`` summed over the loading threads, ``load_wait`` (the assembler
            waiting for chunks), ``assemble`` (whole batches, waits included) and
            ``consumer_wait`` - so the slow stage shows; ``memory``: the kind of the
            batch buffers (``"pinned"``, ``"pageable"``, or ``"pageable (no CUDA)"`` when
            pinning was skipped because CUDA is absent); ``backend`` and ``residency``;
            with ``residency="device"``, ``resident``: the device chunk cache's ``slots``,
            ``whole`` (every chunk fits), ``loads``, ``evictions``, ``hits``, ``misses``,
            ``h2d_bytes`` (chunk bytes copied to the device), ``load_s``,
            ``loaded_chunks``.
        """
        self._require_fast("stats")
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
        s = self._last_stats
        if s is not None:
            running = None if self._last is None else self._last()
            figures |= {
                "batches": s.batches,
                "samples": s.samples,
                "bytes": s.bytes,
                "wait_s": s.wait_s,
                "assemble_s": s.assemble_s,
                "queue_depth": 0 if running is None else running.queue_depth,
                "mean_queue_depth": s.depth_seen / s.batches if s.batches else 0.0,
                "first_batch_s": s.first_batch_s,
                "wall_s": s.wall_s,
                "stall_fraction": s.wait_s / s.wall_s if s.wall_s > 0 else 0.0,
                "buffers_allocated": s.slots_allocated,
            }
        cache = self.dataset.cache_stats()
        figures["cache"] = cache
        figures["stage_s"] = {
            "fetch": cache["fetch_s"],
            "decode": cache["decode_s"],
            "prepare": cache["prepare_s"],
            "load_wait": cache["wait_s"],
            "assemble": figures["assemble_s"],
            "consumer_wait": figures["wait_s"],
        }
        figures["memory"] = self._memory
        figures["backend"] = "torch" if self._dali is None else "dali"
        figures["residency"] = "host" if self._resident is None else "device"
        if self._chunks_on_device is not None:
            device_chunks = self._chunks_on_device
            figures["resident"] = device_chunks.stats | {"loaded_chunks": device_chunks.loaded}
        return figures | {
            "epoch": self._state.epoch,
            "samples_consumed": self._state.samples_consumed,
        }

    def _require_fast(self, what: str) -> None:
        if not self.fast:
            raise TypeError(
                f"{what}() needs the fast path (a WindowDataset); this loader wraps torch's"
            )

    def __repr__(self) -> str:
        if not self.fast:
            return (
                f"DataLoader(torch, dataset={self.dataset!r}, batch_size={self._torch.batch_size})"
            )
        return (
            f"DataLoader(fast, dataset={self.dataset!r}, batch_size={self.batch_size}, "
            f"order={self.order!r}, rank={self.rank}, world_size={self.world_size}, "
            f"epoch={self._state.epoch})"
        )


class _Batches(Protocol):
    """A pass's batches as ``(step, n, x, y, event)``: prefetched, through DALI, or resident."""

    stats: PrefetchStats

    def __next__(self) -> tuple[Any, ...]: ...

    def close(self) -> None: ...

    @property
    def queue_depth(self) -> int: ...


class _FastIterator(Iterator[Batch]):
    """One pass over the rest of an epoch; moves the loader's state as batches are handed out.

    :attr:`indices` are the dataset's sample indices of the batch handed out last, for
    consumers that log or check which samples they trained on.
    """

    _step: int | None = None

    def __init__(
        self, loader: DataLoader, generation: int, plan: ShardPlan, prefetcher: _Batches
    ) -> None:
        self._loader = loader
        self._generation = generation
        self._plan = plan
        self._prefetcher = prefetcher
        delivery = loader._delivery
        self._receive = delivery.receive if isinstance(delivery, CudaDelivery) else None

    def __next__(self) -> Batch:
        try:
            step, _, x, y, event = next(self._prefetcher)
        except StopIteration:
            if self._current():
                self._loader._state.next_epoch()
                self._generation = -1
            raise
        if self._receive is not None:
            self._receive(x, y, event)
        self._step = step
        if self._current():
            loader = self._loader
            loader._state.samples_consumed = self._plan.samples_consumed(step + 1)
            if step == self._plan.num_steps // 2:
                loader._orders.prefetch(loader._state.epoch + 1)
        return x, y

    @property
    def indices(self) -> npt.NDArray[np.int64] | None:
        """The dataset's sample indices of the batch handed out last (``None`` before)."""
        return None if self._step is None else self._plan.batch(self._step)

    def _current(self) -> bool:
        return self._generation == self._loader._generation

    def close(self) -> None:
        """Stop assembling; the loader's position stays after the last batch handed out."""
        self._prefetcher.close()

    def __len__(self) -> int:
        return self._plan.num_steps


class _Orders:
    """Epoch orders, computed ahead in a short-lived thread so that ``iter()`` rarely waits.

    A uniform order over D1's 16 M samples takes about 0.2 s (numpy's: 0.6 s): the order of
    the first epoch is started when the loader is built, the next epoch's halfway through
    a pass.
    At most the orders of the current and the next epoch are kept.
    """

    def __init__(self, order: Order, dataset: WindowDataset) -> None:
        self._order = order
        self._dataset = dataset
        self._done: dict[int, npt.NDArray[np.int64] | BaseException] = {}
        self._running: dict[int, threading.Thread] = {}

    def prefetch(self, epoch: int) -> None:
        """Start computing ``epoch``'s order unless it is known or on its way."""
        if epoch in self._done or epoch in self._running:
            return
        thread = threading.Thread(
            target=_compute_order,
            args=(self._order, self._dataset, epoch, self._done),
            name=f"ticktensor-order-{next(_threads)}",
            daemon=True,
        )
        self._running[epoch] = thread
        thread.start()

    def get(self, epoch: int) -> npt.NDArray[np.int64]:
        """``epoch``'s order, waiting for (or doing) its computation."""
        thread = self._running.pop(epoch, None)
        if thread is not None:
            thread.join()
        if epoch not in self._done:
            _compute_order(self._order, self._dataset, epoch, self._done)
        for old in list(self._done):  # list() is atomic; a thread may add an epoch
            if old < epoch:
                self._done.pop(old, None)
        result = self._done[epoch]
        if isinstance(result, BaseException):
            del self._done[epoch]  # computed again next time
            raise result
        return result

    def close(self) -> None:
        """Wait for orders being computed (at most one epoch's)."""
        for thread in self._running.values():
            thread.join()
        self._running.clear()


def _compute_order(
    order: Order,
    dataset: WindowDataset,
    epoch: int,
    done: dict[int, npt.NDArray[np.int64] | BaseException],
) -> None:
    try:
        done[epoch] = np.asarray(order.order(dataset, epoch), dtype=np.int64)
    except BaseException as exc:  # raised again by _Orders.get in the caller's thread
        done[epoch] = exc
