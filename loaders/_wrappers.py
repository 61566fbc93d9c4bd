"""torch's dataset and sampler wrappers (Subset, ConcatDataset, samplers) mapped onto the fast path.

:func:`fast_path` tells, from a ``DataLoader``'s torch arguments, what its fast path reads
(a :class:`WindowDataset`, possibly a subset or a concatenation of several) and in what
order, or why it cannot take the fast path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from torch.utils.data import (
    ConcatDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    default_collate,
)
from torch.utils.data.distributed import DistributedSampler

from ticktensor.errors import ConfigError

from .dataset import WindowDataset
from .samplers import Order, SequentialOrder, UniformOrder

__all__ = ["FastPath", "SlowPath", "fast_path", "window_dataset"]

Int64s = npt.NDArray[np.int64]


@dataclass(frozen=True)
class FastPath:
    """What the fast path reads, and what the torch arguments fix of its plan.

    Attributes
    ----------
    dataset
        The window dataset batches are gathered from.
    index_map
        Its sample ``j`` is sample ``index_map[j]`` of the loader's ``dataset`` (``None``:
        the same index), for a ``SubsetRandomSampler``.
    order, shuffle, seed, world, pad
        Set by a sampler (``None``: the loader's own choice): a ``RandomSampler`` shuffles
        (a :class:`UniformOrder` seeded by its generator, else by the loader's seed), a
        ``DistributedSampler`` fixes rank, world size, seed and shuffle.
    distributed
        The ``DistributedSampler`` given, whose ``set_epoch`` the loader follows and
        whose ``drop_last`` shapes the epoch's order (:meth:`epoch_order`).
    """

    dataset: WindowDataset
    index_map: Int64s | None = None
    order: Order | None = None
    shuffle: bool | None = None
    seed: int | None = None
    world: tuple[int, int] | None = None
    pad: bool | None = None
    distributed: DistributedSampler[Any] | None = None

    def epoch_order(self, order: Int64s) -> Int64s:
        """The epoch's order as the ranks share it: for a ``DistributedSampler``, cut to a
        multiple of the world size (``drop_last=True``) or wrapped around to the next one,
        so each rank gets the number of samples that sampler gives it."""
        sampler = self.distributed
        n = order.shape[0]
        if sampler is None or n == 0:
            return order
        world = int(sampler.num_replicas)
        if not repeats_samples(sampler):
            return order  # the ranks share the order as it is, off by one sample at most
        size = n // world * world if sampler.drop_last else -(-n // world) * world
        return order if size == n else order[np.arange(size) % n]

    def user_indices(self, indices: Int64s) -> Int64s:
        """``indices`` of :attr:`dataset` as indices of the loader's ``dataset``."""
        return indices if self.index_map is None else self.index_map[indices]


@dataclass(frozen=True)
class SlowPath:
    """A window dataset that cannot take the fast path: ``hook`` forces torch's per-sample
    path for ``reason``; ``instead`` names the fast alternative."""

    hook: str
    reason: str
    instead: str

    def message(self) -> str:
        return (
            f"ticktensor.DataLoader: {self.hook} sends this window dataset through torch's "
            f"per-sample path ({self.reason}), typically 100x slower than the fast path; "
            f"{self.instead}"
        )


def window_dataset(dataset: Any) -> WindowDataset | SlowPath | None:
    """The :class:`WindowDataset` behind ``dataset`` (a ``Subset`` or ``ConcatDataset``
    of window datasets included), a :class:`SlowPath` when one cannot be formed, or
    ``None`` when ``dataset`` holds no window dataset at all."""
    if isinstance(dataset, WindowDataset):
        return dataset
    if isinstance(dataset, Subset):
        base = window_dataset(dataset.dataset)
        if not isinstance(base, WindowDataset):
            return base
        return base.subset(np.asarray(dataset.indices, dtype=np.int64).reshape(-1))
    if isinstance(dataset, ConcatDataset):
        parts = [window_dataset(part) for part in dataset.datasets]
        if all(part is None for part in parts):
            return None
        for part in parts:
            if isinstance(part, SlowPath):
                return part
        if any(part is None for part in parts):
            return SlowPath(
                "ConcatDataset",
                "it mixes window datasets with other datasets",
                "load the other datasets with their own loader",
            )
        windows = [part for part in parts if isinstance(part, WindowDataset)]
        try:
            return WindowDataset.concat(windows)
        except ConfigError as exc:
            return SlowPath(
                "ConcatDataset",
                f"its window datasets cannot be joined: {exc}",
                "build one WindowDataset over the symbols or time range you need",
            )
    return None


def fast_path(
    dataset: Any,
    *,
    batch_size: int | None,
    sampler: Any,
    batch_sampler: Any,
    collate_fn: Any,
) -> FastPath | SlowPath | None:
    """How a ``DataLoader`` with these torch arguments reads ``dataset``.

    ``None``: ``dataset`` is no window dataset (torch's own loader serves it, as
    intended). :class:`SlowPath`: a window dataset that a hook sends through torch's
    per-sample path. :class:`FastPath`: the fast path and what the sampler fixes.
    """
    window = window_dataset(dataset)
    if not isinstance(window, WindowDataset):
        return window
    if batch_size is None:
        return SlowPath(
            "batch_size=None",
            "it asks for single samples",
            "use batch_size=1 for batches of one window",
        )
    if batch_sampler is not None:
        return SlowPath(
            f"batch_sampler={type(batch_sampler).__name__}",
            "it picks every batch's samples one by one",
            "give an Order in FastOptions(order=...) instead",
        )
    if collate_fn is not None and collate_fn is not default_collate:
        name = getattr(collate_fn, "__name__", type(collate_fn).__name__)
        return SlowPath(
            f"collate_fn={name}",
            "it assembles each batch from single samples",
            "use batch_transform=, which gets each whole batch (x [B, W, F], y [B, L])",
        )
    return _with_sampler(window, sampler)


def repeats_samples(sampler: DistributedSampler[Any]) -> bool:
    """Whether ``sampler`` evens its ranks out as ``DistributedSampler`` does (repeating
    or dropping samples to a multiple of the world size). Samplers that share the order
    as it is, with ranks off by one sample (Lightning's ``UnrepeatedDistributedSampler``
    for ``predict``), say so by a ``total_size`` that is not ``num_samples`` per rank."""
    return int(sampler.total_size) == int(sampler.num_samples) * int(sampler.num_replicas)


def _with_sampler(dataset: WindowDataset, sampler: Any) -> FastPath | SlowPath:
    if sampler is None or isinstance(sampler, SequentialSampler):
        order: Order | None = None if sampler is None else SequentialOrder()
        return FastPath(dataset, order=order)
    if isinstance(sampler, DistributedSampler):
        fixed = int(sampler.seed)
        return FastPath(
            dataset,
            order=UniformOrder(fixed) if sampler.shuffle else SequentialOrder(),
            seed=fixed,
            world=(int(sampler.rank), int(sampler.num_replicas)),
            pad=False,  # epoch_order cuts or wraps the order to a multiple of the world
            distributed=sampler,
        )
    if isinstance(sampler, RandomSampler):
        if sampler.replacement or sampler.num_samples != len(dataset):
            return SlowPath(
                "sampler=RandomSampler(replacement=True or num_samples=...)",
                "it draws samples with replacement or a different count",
                "use FastOptions(order=...) with an Order that picks the samples",
            )
        seed = None if sampler.generator is None else int(sampler.generator.initial_seed())
        return FastPath(dataset, seed=seed, shuffle=True)
    if isinstance(sampler, SubsetRandomSampler):
        chosen = np.asarray(sampler.indices, dtype=np.int64).reshape(-1)
        seed = None if sampler.generator is None else int(sampler.generator.initial_seed())
        return FastPath(dataset.subset(chosen), index_map=chosen, seed=seed, shuffle=True)
    return SlowPath(
        f"sampler={type(sampler).__name__}",
        "it picks samples one by one",
        "give an Order in FastOptions(order=...) instead",
    )
