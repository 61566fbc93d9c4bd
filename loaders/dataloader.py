"""The drop-in DataLoader: torch's keywords, attributes and pass rules, fast for windows."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.utils.data
from torch.utils.data import Sampler, default_collate

from ticktensor.errors import ConfigError, SlowPathWarning

from . import _accelerate
from ._devices import resolve_device
from ._orders import EpochOrders
from ._pass_samplers import PassBatchSampler, PassSampler, ShardSampler
from ._passes import Pass, PassIterator, PassState, SkippedPasses
from ._prefetch import PrefetchStats
from ._stats import loader_stats
from ._wrappers import FastPath, SlowPath, fast_path
from .batch_source import BatchSource, Deliveries, Delivery, open_batch_source
from .options import FastOptions, Padding, with_legacy_keywords
from .samplers import BlockShuffleOrder, Order, SequentialOrder, UniformOrder
from .sharding import ShardPlan, world_from_env

__all__ = ["DataLoader"]

Int64s = npt.NDArray[np.int64]
_PERMUTATIONS = (UniformOrder, SequentialOrder, BlockShuffleOrder)  # len(order) == len(dataset)
# state_dict()'s key for the default order of device residency on a GPU's default budget:
# the chunks of its BlockShuffleOrder's blocks (0: the shuffled order, every chunk fits).
_RESIDENT_BLOCKS = "resident_block_chunks"


# torch attributes that are properties here, also kept in the instance dict (see _mirror).
_MIRRORED = ("sampler", "batch_sampler", "collate_fn", "multiprocessing_context")


@dataclass(frozen=True)
class _Early:
    """A batch source opened at ``iter()`` for the pass ``key`` (epoch, start, rank,
    world) would be, kept for the first ``next()`` if the pass is still that one."""

    key: tuple[int, int, int, int]
    plan: ShardPlan
    source: BatchSource


class DataLoader(Iterable[Any]):
    """``torch.utils.data.DataLoader`` with a fast path for window datasets.

    Every keyword of :class:`torch.utils.data.DataLoader` is accepted, checked the way
    torch checks it, and kept as the attribute of the same name. A dataset that holds no
    :class:`WindowDataset` is served by a real torch ``DataLoader`` built from the same
    arguments.

    A :class:`WindowDataset` (also inside ``torch.utils.data.Subset``, ``random_split``
    and ``ConcatDataset``) takes the fast path: each batch is gathered by the native
    kernel in one call, in a background thread, into a ring of preallocated buffers
    (page-locked with ``pin_memory=True`` when CUDA is present), and handed out zero-copy
    as ``(x [B, W, F] float32, y [B, L] float32)``. A buffer is refilled only once no
    batch made from it is referenced, so ``list(loader)`` sees correct data. The samplers
    ``SequentialSampler``, ``RandomSampler``, ``SubsetRandomSampler`` and
    ``DistributedSampler`` (its rank, world size, seed, shuffle and ``drop_last`` become
    the shard plan, and its ``set_epoch`` is followed) stay on the fast path. A
    ``batch_sampler``, a custom ``sampler``, a ``collate_fn`` other than torch's default
    or ``batch_size=None`` send a window dataset through torch's per-sample path, with
    one :class:`~ticktensor.errors.SlowPathWarning` naming the hook and the fast
    alternative.

    Passes and epochs, as with torch: each ``iter(loader)`` starts a pass of the current
    epoch from its beginning (after :meth:`load_state_dict`, that one pass resumes at
    the saved position). A pass takes its epoch, start, rank and world size at its first
    ``next()``, as torch's sampler iterator does, so a ``set_epoch`` between ``iter()``
    and the first batch (Lightning's order) is honoured, and so is a
    ``DistributedSampler.set_epoch`` called before the loader was built. A pass that
    hands out its last batch finishes the epoch, even if nobody asks for one more; the
    next pass then belongs to the next epoch, in a new order fixed by ``(seed, epoch)``.
    An abandoned pass (``break``, an exception, a dropped or closed iterator) does not
    finish it. :meth:`set_epoch` (also ``loader.sampler.set_epoch``) sets the epoch
    explicitly; :meth:`skip_first_batches` starts passes further in. Rank and world size
    are resolved when each pass starts (and for ``len()``), so a loader built before the
    process group is up shards correctly once it is. With more than one rank, an epoch
    the ranks cannot share evenly is padded as ``DistributedSampler`` pads it (at most
    ``world_size - 1`` samples repeated), so every rank gets torch's samples and batch
    counts, in training and evaluation (``FastOptions.pad`` for whole padded steps).

    Parameters
    ----------
    dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, \
pin_memory, drop_last, timeout, worker_init_fn, multiprocessing_context, generator, \
prefetch_factor, persistent_workers, pin_memory_device, in_order
        As for :class:`torch.utils.data.DataLoader`. On the fast path there are no
        worker processes (``num_workers``, ``multiprocessing_context``,
        ``persistent_workers`` and ``worker_init_fn`` are kept and unused; threads come
        from the dataset's pool); ``prefetch_factor`` is the default ring depth;
        ``generator`` seeds the default shuffled order (its ``initial_seed()``);
        ``timeout`` raises :class:`TimeoutError` naming the batch that did not come.
        ``drop_last`` drops each rank's short last batch (the short last global step).
    fast
        The fast path's own settings (order, seed, rank, world size, device, ring depth,
        DALI, device residency, engine): a :class:`~ticktensor.loaders.FastOptions`.
    batch_transform
        Called with each batch (``(x, y)`` on the fast path) in the consumer's thread;
        what it returns is what the loader yields. The fast path's replacement for a
        ``collate_fn`` that edits whole batches; on torch's path it runs after
        ``collate_fn``.
    **legacy
        The fast-path keywords of earlier releases (``order``, ``seed``, ``rank``,
        ``world_size``, ``pad``, ``device``, ``prefetch``, ``readahead``, ``backend``,
        ``residency``): still accepted, with a ``DeprecationWarning``; use ``fast=``.

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
        fast: FastOptions | None = None,
        batch_transform: Callable[[Any], Any] | None = None,
        **legacy: Any,
    ) -> None:
        fast = with_legacy_keywords(fast, legacy)
        self._args: dict[str, Any] = {
            "dataset": dataset,
            "batch_size": batch_size,
            "shuffle": shuffle,
            "sampler": sampler,
            "batch_sampler": batch_sampler,
            "num_workers": num_workers,
            "collate_fn": collate_fn,
            "pin_memory": pin_memory,
            "drop_last": drop_last,
            "timeout": timeout,
            "worker_init_fn": worker_init_fn,
            "multiprocessing_context": multiprocessing_context,
            "generator": generator,
            "prefetch_factor": prefetch_factor,
            "persistent_workers": persistent_workers,
            "pin_memory_device": pin_memory_device,
            "in_order": in_order,
        }
        self._setup(fast, batch_transform, announce=True)

    def _setup(
        self,
        fast: FastOptions | None,
        batch_transform: Callable[[Any], Any] | None,
        *,
        announce: bool,
    ) -> None:
        """Build everything from the constructor's arguments (also after unpickling)."""
        args = self._args
        # torch checks its own arguments (and raises what it raises); on the fast path
        # the loader it builds is only a check and is dropped.
        torch_loader: torch.utils.data.DataLoader[Any] = torch.utils.data.DataLoader(**args)
        self.dataset = args["dataset"]
        self.batch_size: int | None = args["batch_size"]
        self.drop_last = bool(args["drop_last"])
        self.num_workers: int = args["num_workers"]
        self.pin_memory = bool(args["pin_memory"])
        self.pin_memory_device: str = args["pin_memory_device"]
        self.timeout = float(args["timeout"])
        self.worker_init_fn = args["worker_init_fn"]
        self.generator: torch.Generator | None = args["generator"]
        self.prefetch_factor: int | None = torch_loader.prefetch_factor
        self.persistent_workers = bool(args["persistent_workers"])
        self.in_order = bool(args["in_order"])
        self.batch_transform = batch_transform
        self._fast_options = fast
        path = fast_path(
            self.dataset,
            batch_size=self.batch_size,
            sampler=args["sampler"],
            batch_sampler=args["batch_sampler"],
            collate_fn=args["collate_fn"],
        )
        if not isinstance(path, FastPath):
            if fast is not None:
                why = "no window dataset" if path is None else path.hook
                raise ConfigError(
                    f"fast=FastOptions(...) applies to the fast path only, and this loader "
                    f"takes torch's ({why})"
                )
            if isinstance(path, SlowPath) and announce:
                warnings.warn(path.message(), SlowPathWarning, stacklevel=3)
            self._torch: torch.utils.data.DataLoader[Any] | None = torch_loader
            self._path: FastPath | None = None
        else:
            self._torch = None
            self._path = path
            self._setup_fast(path, fast or FastOptions(), announce=announce)
            _accelerate.route_skip_first_batches()
        self._mirror_attributes()

    def _setup_fast(self, path: FastPath, options: FastOptions, *, announce: bool) -> None:
        args = self._args
        if path.world is not None and options.rank is not None:
            raise ConfigError(
                "rank and world_size come from the DistributedSampler given; do not set "
                "them in FastOptions too"
            )
        if announce and self.worker_init_fn is not None and self.num_workers > 0:
            # Not a slow path: the batches stay on the fast path; only the hook is unused.
            warnings.warn(
                f"ticktensor.DataLoader: worker_init_fn is never called: the fast path "
                f"starts no worker processes (num_workers={self.num_workers} is kept for "
                f"torch's attribute); the dataset's threads assemble the batches",
                UserWarning,
                stacklevel=4,
            )
        generator = self.generator
        seed = options.seed
        if seed is None:
            seed = path.seed
        if seed is None:
            seed = int(generator.initial_seed()) if generator is not None else 0
        shuffle = path.shuffle if path.shuffle is not None else bool(args["shuffle"])
        order: Order = (
            options.order or path.order or (UniformOrder(seed) if shuffle else SequentialOrder())
        )
        self.options = replace(options, seed=seed)
        dataset = path.dataset
        # No CUDA call here: the device is found when a pass starts (Deliveries).
        self._deliveries = Deliveries(dataset, options, self.pin_memory)
        # A chunk cache on the device: a shuffled order then fills it block by block, each
        # chunk about once per epoch, instead of every batch reading chunks from
        # everywhere. A budget given (or the CPU's) says now how many chunks fit; the GPU's
        # default budget is asked for when the first pass starts (_settle_order).
        self._seed, self._given_order = seed, order
        pool_order = options.resident is not None and options.order is None and shuffle
        pool = self._deliveries.pool
        self._asks_gpu = pool_order and pool is None  # the choice travels in state_dict()
        self._order: Order | None = None
        self._orders: EpochOrders | None = None
        self._blocks: int | None = None  # _RESIDENT_BLOCKS of the order chosen
        self._shuffle = shuffle
        self._passes = PassState(seed)
        self._sampler_epoch: int | None = None
        if not pool_order:
            self._use_order(order)
        elif pool is not None:
            self._choose(_pool_blocks(pool))
        self._follow_sampler_epoch()  # one set before the loader was built counts too
        self._prefetch_order(self._passes.epoch)  # overlaps the caller's own setup
        self._last: weakref.ref[BatchSource] | None = None  # weak: it owns the thread
        self._last_stats: PrefetchStats | None = None
        self._samplers: dict[tuple[int, int], tuple[Sampler[int], PassBatchSampler]] = {}

    def _choose(self, blocks: int) -> None:
        """Use the default resident order of ``blocks`` chunks a block (0: every chunk fits
        the pool, so the default shuffled order stays)."""
        order = self._given_order
        if blocks > 0:
            order = BlockShuffleOrder(self._seed, block_chunks=blocks)
        self._blocks = blocks
        self._use_order(order)

    def _use_order(self, order: Order) -> None:
        """Make ``order`` the loader's, its epochs computed ahead from now on."""
        if self._orders is not None:
            self._orders.close()
        path = self._path
        assert path is not None  # fast path only
        self._order = order
        self._orders = EpochOrders(order, path.dataset)
        weakref.finalize(self, self._orders.close)

    def _settle_order(self) -> EpochOrders:
        """The loader's epoch orders; device residency's default order is chosen on the
        first call (on the consumer's thread: the GPU is asked how many chunks fit)."""
        if self._orders is None:
            pool = self._deliveries.resident_pool()
            assert pool is not None  # an order is pending only with residency
            self._choose(_pool_blocks(pool))
            assert self._orders is not None  # just made
        return self._orders

    def _prefetch_order(self, epoch: int) -> None:
        """Start computing ``epoch``'s order, unless the order is not chosen yet."""
        if self._orders is not None:
            self._orders.prefetch(epoch)

    def _saved_blocks(self, state: Mapping[str, Any]) -> int | None:
        """The default resident order a saved ``state`` was made with, if this loader
        chooses one from the GPU's memory (see :meth:`state_dict`)."""
        blocks = state.get(_RESIDENT_BLOCKS)
        if not self._asks_gpu or blocks is None:
            return None
        if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 0:
            raise ConfigError(f"{_RESIDENT_BLOCKS}: expected an integer >= 0, got {blocks!r}")
        return blocks

    def _adopt_order(self, blocks: int | None) -> None:
        """Take the saved default resident order, so the rest of its epoch is the same
        samples whatever the GPU has free now."""
        if blocks is not None and blocks != self._blocks:
            self._choose(blocks)

    # -- torch's attributes ------------------------------------------------------------------

    @property
    def fast(self) -> bool:
        """Whether this loader takes the fast path (else it wraps torch's own loader)."""
        return self._path is not None

    @property
    def sampler(self) -> Any:
        """torch's ``sampler``: the one given, else one that yields this rank's indices of
        the next pass (a ``DistributedSampler`` when the world has more than one rank)."""
        if self._torch is not None:
            return self._mirror("sampler", self._torch.sampler)
        given = self._args["sampler"]
        return self._mirror("sampler", given if given is not None else self._pass_samplers()[0])

    @property
    def batch_sampler(self) -> Any:
        """torch's ``batch_sampler``: this rank's index lists of the next pass, in order."""
        if self._torch is not None:
            return self._mirror("batch_sampler", self._torch.batch_sampler)
        return self._mirror("batch_sampler", self._pass_samplers()[1])

    @property
    def collate_fn(self) -> Any:
        """torch's ``collate_fn`` (the fast path's batches are what ``default_collate``
        makes of the samples)."""
        if self._torch is not None:
            return self._mirror("collate_fn", self._torch.collate_fn)
        return self._mirror("collate_fn", self._args["collate_fn"] or default_collate)

    @property
    def multiprocessing_context(self) -> Any:
        """torch's ``multiprocessing_context``."""
        if self._torch is not None:
            return self._mirror("multiprocessing_context", self._torch.multiprocessing_context)
        return self._mirror("multiprocessing_context", self._args["multiprocessing_context"])

    def _mirror(self, name: str, value: Any) -> Any:
        """Keep ``value`` in the instance dict too: wrappers that copy a torch loader's
        ``__dict__`` (Ray Train's ``prepare_data_loader``) then find torch's attributes.
        The properties above always recompute; the copy is what was read last."""
        self.__dict__[name] = value
        return value

    def _mirror_attributes(self) -> None:
        """Fill the mirrored attributes now, where the world can be told."""
        try:
            for name in _MIRRORED:
                getattr(self, name)
        except ConfigError:  # e.g. WORLD_SIZE set and no rank yet: filled on use
            pass

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes not set here: the rest of torch's loader's.
        torch_loader = self.__dict__.get("_torch")
        if name.startswith("__") or torch_loader is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(torch_loader, name)

    def _pass_samplers(self) -> tuple[Sampler[int], PassBatchSampler]:
        rank, world = self._world()
        found = self._samplers.get((rank, world))
        if found is None:
            sampler: Sampler[int]
            if world > 1:
                sampler = ShardSampler(
                    self,
                    rank=rank,
                    world_size=world,
                    shuffle=self._shuffle,
                    seed=self._passes.position.seed,
                    drop_last=self._padding(world) == "none",
                )
            else:
                sampler = PassSampler(self)
            assert self.batch_size is not None  # the fast path has an integer batch size
            found = (sampler, PassBatchSampler(self, sampler, self.batch_size, self.drop_last))
            self._samplers[(rank, world)] = found
        return found

    # -- the fast path's settings --------------------------------------------------------------

    @property
    def order(self) -> Order:
        """The sample order of the fast path's epochs.

        With ``residency="device"`` on a GPU's default budget, ``shuffle=True`` and no
        ``order`` given, it depends on how many chunks fit the budget, which the GPU is
        asked for when the first pass starts (reading this attribute earlier asks it
        then): ``BlockShuffleOrder(seed, block_chunks=slots // 4)`` when the chunks do not
        all fit, else the default shuffled order.
        """
        self._settle_order()
        assert self._order is not None  # settled
        return self._order

    @property
    def rank(self) -> int:
        """This process's rank, resolved now."""
        return self._world()[0]

    @property
    def world_size(self) -> int:
        """The number of ranks, resolved now."""
        return self._world()[1]

    @property
    def device(self) -> torch.device | None:
        """Where batches are delivered (``None``: the CPU, zero-copy), as a pass starting
        now would find it (a bare ``cuda``: this rank's GPU, see ``resolve_device``)."""
        return resolve_device(self.options.device)

    @property
    def prefetch(self) -> int:
        """Batches assembled ahead of the consumer."""
        return int(self.options.prefetch or self.prefetch_factor or 2)

    def _world(self) -> tuple[int, int]:
        path = self._path
        assert path is not None  # fast path only
        if path.world is not None:
            return path.world
        return world_from_env(self.options.rank, self.options.world_size)

    def _padding(self, world_size: int) -> Padding:
        """How the tail of an epoch is spread over ``world_size`` ranks (see FastOptions)."""
        path = self._path
        assert path is not None  # fast path only
        if path.distributed is not None:
            return "none"  # the sampler's rule shaped the order already (epoch_order)
        pad = self.options.pad
        if pad is None or pad == "samples":
            return "samples"
        return "steps" if pad is True or pad == "steps" else "none"

    def _plan(
        self,
        epoch: int,
        start_sample: int,
        rank: int,
        world: int,
        *,
        skip: int = 0,
        order: Int64s | None = None,
    ) -> ShardPlan:
        """This rank's plan of ``epoch`` from global sample ``start_sample``, ``skip``
        batches further (at most to the end of the epoch), over the epoch's order (or
        ``order`` instead)."""
        path = self._path
        assert path is not None
        assert self.batch_size is not None  # fast path only
        order = path.epoch_order(self._settle_order().get(epoch) if order is None else order)
        padding = self._padding(world)
        padded = 0
        if padding == "samples":
            order, padded = _wrap_to_multiple(order, world)
        elif path.distributed is not None:
            padded = max(0, order.shape[0] - len(path.dataset))
        start = min(start_sample + skip * self.batch_size * world, order.shape[0])
        return ShardPlan(
            order,
            self.batch_size,
            world,
            rank,
            self.drop_last,
            padding == "steps",
            start_sample=start,
            padded=padded,
        )

    def _next_plan(self) -> tuple[ShardPlan, FastPath]:
        """The plan of the pass that would begin now, and the path it reads."""
        assert self._path is not None  # fast path only
        self._follow_sampler_epoch()
        plan = self._plan(self._passes.epoch, self._passes.next_start(), *self._world())
        return plan, self._path

    def _follow_sampler_epoch(self) -> None:
        """Take the epoch a user set on the ``DistributedSampler`` given."""
        path = self._path
        if path is not None and path.distributed is not None:
            epoch = int(path.distributed.epoch)
            if epoch != self._sampler_epoch:
                self._sampler_epoch = epoch
                self._passes.set_epoch(epoch)

    # -- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        if self._torch is not None:
            batches = iter(self._torch)
            transform = self.batch_transform
            return batches if transform is None else map(transform, batches)
        return self._iter(0)

    def add_reader_stream(self, stream: Any) -> None:
        """Name a CUDA stream on which the loop copies pinned host batches.

        With ``pin_memory=True`` and no ``device``, a batch's buffer is refilled only once
        the copies queued from it have run: the loader fences the current stream of every
        device with a CUDA context when the batch is let go. A copy on another stream
        (``with torch.cuda.stream(side): x.cuda(non_blocking=True)``) not joined to the
        current stream before the next ``next()`` is covered only once that stream is
        named here. Streams do not pickle: name them again on a copy of the loader.
        """
        self._require_fast("add_reader_stream")
        self._deliveries.add_reader_stream(stream)

    def skip_first_batches(self, num_batches: int) -> SkippedPasses:
        """This loader with each pass starting ``num_batches`` batches in.

        ``iter()`` of the result is a pass of this loader that begins where
        ``iter(loader)`` would (the epoch's start, or a position given to
        :meth:`load_state_dict`) and skips ``num_batches`` batches without assembling
        them; it ends the epoch like a whole pass, so the loader's next pass is the next
        epoch. ``len()`` is ``len(loader) - num_batches``. accelerate's
        ``skip_first_batches(loader, k)`` (and ``Accelerator.skip_first_batches``) return
        this for a fast-path loader.

        Examples
        --------
        >>> # resuming in the epoch of a checkpoint taken after `step` batches:
        >>> # for batch in loader.skip_first_batches(step): ...
        >>> # for batch in loader: ...    # the next epoch, whole
        """
        if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
            raise ConfigError(f"num_batches: expected an integer >= 0, got {num_batches!r}")
        self._require_fast("skip_first_batches")
        return SkippedPasses(self, int(num_batches))

    def _skip_first_batches(self, num_batches: int) -> SkippedPasses | None:
        """accelerate's ``skip_first_batches`` for this loader (``None``: torch's path,
        left to accelerate)."""
        return None if self._torch is not None else self.skip_first_batches(num_batches)

    def _iter(self, skip: int) -> PassIterator:
        """A pass that begins at its first ``next()``, ``skip`` batches in.

        Its batches are assembled from ``iter()`` on, for the pass as it would begin
        then; if the first ``next()`` finds another epoch, start or world (a
        ``set_epoch`` in between), that work is dropped and the pass begins as it is now.
        """
        path = self._path
        assert path is not None
        _accelerate.route_skip_first_batches()
        self._settle_order()  # device residency's default order: how many chunks fit
        delivery = self._deliveries.for_pass()  # the rank's device, found now
        early = None if self.options.dali is not None else self._early_source(skip, delivery)
        held = [early]

        def open_pass(skip: int) -> tuple[Pass, ShardPlan, BatchSource]:
            found, held[0] = held[0], None
            return self._open_pass(skip, delivery, found)

        def discard() -> None:
            found, held[0] = held[0], None
            if found is not None:
                found.source.close()

        return PassIterator(
            open_pass,
            length=lambda: max(0, len(self) - skip),
            discard=discard,
            skip=skip,
            receive=delivery.receive,
            transform=self.batch_transform,
            on_halfway=self._prefetch_order,
            index_map=path.index_map,
        )

    def _early_source(self, skip: int, delivery: Delivery) -> _Early | None:
        """The batch source of the pass as it would begin now (``None`` when the world
        is not known yet: the first ``next()`` says why)."""
        self._follow_sampler_epoch()
        try:
            rank, world = self._world()
        except ConfigError:
            return None
        epoch, start = self._passes.epoch, self._passes.next_start()
        plan = self._plan(epoch, start, rank, world, skip=skip)
        key = (epoch, start, rank, world)
        return _Early(key, plan, self._open_source(plan, delivery, epoch, rank, world))

    def _open_pass(
        self, skip: int, delivery: Delivery, early: _Early | None = None
    ) -> tuple[Pass, ShardPlan, BatchSource]:
        """Begin a pass now: its epoch, start, rank and world size as they are at its first
        batch (as torch's sampler iterator reads them), ``skip`` batches in; ``early``'s
        source is used when it was opened for that same pass."""
        self._follow_sampler_epoch()
        rank, world = self._world()
        handle = self._passes.begin()
        if early is not None and early.key == (handle.epoch, handle.start_sample, rank, world):
            plan, source = early.plan, early.source
        else:
            if early is not None:
                early.source.close()
            plan = self._plan(handle.epoch, handle.start_sample, rank, world, skip=skip)
            source = self._open_source(plan, delivery, handle.epoch, rank, world)
        handle.start_sample = plan.start_sample
        return handle, plan, source

    def _open_source(
        self, plan: ShardPlan, delivery: Delivery, epoch: int, rank: int, world: int
    ) -> BatchSource:
        path = self._path
        assert path is not None
        assert self.batch_size is not None
        context = f"epoch {epoch}, rank {rank} of {world}, from global sample {plan.start_sample}"
        source = open_batch_source(
            path.dataset,
            plan,
            self.options,
            delivery,
            batch_size=self.batch_size,
            prefetch=self.prefetch,
            timeout=self.timeout,
            context=context,
        )
        self._last = weakref.ref(source)
        self._last_stats = source.stats
        return source

    def __len__(self) -> int:
        """Batches per epoch (for this rank, with the world as it is now, on the fast path)."""
        if self._torch is not None:
            return len(self._torch)
        path = self._path
        assert path is not None
        assert self.batch_size is not None
        rank, world = self._world()
        order = self._order
        permutation = order is None or isinstance(order, _PERMUTATIONS)  # pending: one
        if not permutation:
            return self._plan(self._passes.epoch, 0, rank, world).num_steps
        if path.distributed is not None:
            # A permutation's length is the dataset's, whichever it is: no need to compute
            # (or to choose) it.
            same_length = np.arange(len(path.dataset), dtype=np.int64)
            return self._plan(self._passes.epoch, 0, rank, world, order=same_length).num_steps
        total = len(path.dataset)
        padding = self._padding(world)
        if padding == "samples":
            total = -(-total // world) * world
        plan = ShardPlan(total, self.batch_size, world, rank, self.drop_last, padding == "steps")
        return plan.num_steps

    # -- epochs, state, statistics ----------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the current one: the next pass starts at its beginning.

        Setting the epoch the loader is in already changes nothing, so a loop that calls
        ``set_epoch(e)`` at the top of every epoch still resumes mid-epoch after
        :meth:`load_state_dict`. On torch's path this calls the sampler's ``set_epoch``.
        """
        if self._torch is not None:
            hooks: tuple[Any, ...] = (self._torch.sampler, self._torch.batch_sampler)
            for hook in hooks:
                if hasattr(hook, "set_epoch"):
                    hook.set_epoch(epoch)
            return
        self._passes.set_epoch(epoch)
        self._prefetch_order(self._passes.epoch)

    @property
    def epoch(self) -> int:
        """The epoch the next (or running) pass belongs to."""
        self._require_fast("epoch")
        return self._passes.epoch

    def state_dict(self) -> dict[str, Any]:
        """Where the next batches come from: epoch, seed, global samples consumed.

        While a pass runs (its iterator lives), its position after the batches handed out
        so far; otherwise where the next pass starts: a pending :meth:`load_state_dict`
        position, else the start of the current epoch (after a ``break``, an exception
        or a closed iterator, as the next ``iter()`` starts the epoch again). A copy of
        the loader (``copy.deepcopy``, pickle) starts the epoch again too, unless a
        resume was pending. So a fresh loader given this state does what this loader
        does next. Any rank's state restores every rank, also with another world size:
        the rest of the epoch's global order is partitioned again. With device
        residency's default order on a GPU (see :attr:`order`), ``resident_block_chunks``
        says which order the GPU's memory chose (0: the shuffled order), and a loader
        given the state takes that order, whatever memory its own GPU has free.
        """
        self._require_fast("state_dict")
        return self._position()

    def _position(self) -> dict[str, Any]:
        state = self._passes.state_dict()
        if self._asks_gpu and self._blocks is not None:
            state[_RESIDENT_BLOCKS] = self._blocks  # the order chosen from the GPU's memory
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state`` at the next ``iter()``; a running pass stops counting."""
        self._require_fast("load_state_dict")
        blocks = self._saved_blocks(state)
        self._passes.load(state)
        self._adopt_order(blocks)
        self._prefetch_order(self._passes.epoch)

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
            ``loaded_chunks``; with the DALI backend, ``dali``: the loader's pipeline
            ``builds``, ``resets`` (passes that reused it) and ``rebuilds`` (passes that
            found it mid-epoch, left by an abandoned pass, and built it again).
        """
        self._require_fast("stats")
        path = self._path
        assert path is not None
        return loader_stats(
            self._last_stats,
            None if self._last is None else self._last(),
            path.dataset,
            self._deliveries.reported(),
            "torch" if self.options.dali is None else "dali",
            "host" if self.options.resident is None else "device",
            self._passes.state_dict(),
        )

    def _require_fast(self, what: str) -> None:
        if self._torch is not None:
            raise TypeError(
                f"{what}() needs the fast path (a WindowDataset); this loader wraps torch's"
            )

    # -- copies: the arguments and the position travel; threads and buffers are rebuilt --------

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "args": self._args,
            "fast": self._fast_options,
            "batch_transform": self.batch_transform,
        }
        if self._path is not None:
            state["position"] = self._position()
            state["resume"] = self._passes.resuming
            state["sampler_epoch"] = self._sampler_epoch
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._args = dict(state["args"])
        self._setup(state["fast"], state["batch_transform"], announce=False)
        if "position" in state:
            self._passes.restore(state["position"], resume=bool(state["resume"]))
            self._adopt_order(self._saved_blocks(state["position"]))
            self._sampler_epoch = state["sampler_epoch"]

    def __repr__(self) -> str:
        if self._torch is not None:
            return f"DataLoader(torch, dataset={self.dataset!r}, batch_size={self.batch_size})"
        return (
            f"DataLoader(fast, dataset={self.dataset!r}, batch_size={self.batch_size}, "
            f"order={'(chosen at the first pass)' if self._order is None else repr(self._order)}, "
            f"epoch={self._passes.epoch})"
        )


def _pool_blocks(pool: tuple[int, bool]) -> int:
    """The blocks of the default shuffled order for device residency's pool of
    ``(slots, whole)``: a quarter of the slots (0: every chunk fits, no blocks needed)."""
    slots, whole = pool
    return 0 if whole else max(1, slots // 4)


def _wrap_to_multiple(order: Int64s, world: int) -> tuple[Int64s, int]:
    """``order`` wrapped around to a multiple of ``world`` positions, and how many were
    added: ``DistributedSampler``'s padding (its first samples repeated, at most
    ``world - 1``), so every rank gets the same number of samples, as torch's."""
    n = order.shape[0]
    size = -(-n // world) * world
    if n in (size, 0):
        return order, 0
    return np.concatenate([order, order[np.arange(size - n) % n]]), size - n
