"""torch sampler objects over the fast path's plan: ``loader.sampler`` and ``loader.batch_sampler``.

Clients read these attributes of a torch ``DataLoader``: accelerate's
``skip_first_batches`` iterates ``batch_sampler``, Ray Train checks whether ``sampler`` is
a ``DistributedSampler`` before wrapping one around the dataset, Lightning calls
``sampler.set_epoch``. Here they describe the pass that ``iter(loader)`` starts next,
in indices of the loader's ``dataset``, and ``set_epoch`` moves the loader.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from torch.utils.data import BatchSampler, Sampler
from torch.utils.data.distributed import DistributedSampler

from .sharding import ShardPlan

__all__ = ["PassBatchSampler", "PassSampler", "ShardSampler"]


class PlannedLoader(Protocol):
    """What the samplers need of the loader."""

    dataset: Any

    def set_epoch(self, epoch: int) -> None: ...

    def _next_plan(self) -> tuple[ShardPlan, Any]: ...


def _batches(loader: PlannedLoader) -> Iterator[npt.NDArray[np.int64]]:
    plan, path = loader._next_plan()
    for batch in plan:
        yield path.user_indices(batch)


def _count(loader: PlannedLoader) -> int:
    plan, _ = loader._next_plan()
    _, counts = plan.step_ranges()
    return int(counts.sum())


class _NextPass:
    """Iterates this rank's sample indices of the pass ``iter(loader)`` starts next."""

    _loader: PlannedLoader

    def __iter__(self) -> Iterator[int]:
        for batch in _batches(self._loader):
            yield from batch.tolist()

    def __len__(self) -> int:
        return _count(self._loader)


class PassSampler(_NextPass, Sampler[int]):
    """This rank's sample indices of the pass ``iter(loader)`` starts next, in order."""

    def __init__(self, loader: PlannedLoader) -> None:
        self._loader = loader

    def set_epoch(self, epoch: int) -> None:
        """Set the loader's epoch (what ``DistributedSampler.set_epoch`` users call)."""
        self._loader.set_epoch(epoch)


class ShardSampler(_NextPass, DistributedSampler[Any]):
    """:class:`PassSampler` as a ``DistributedSampler`` for a loader sharded over ranks.

    Its ``rank``, ``num_replicas``, ``seed``, ``shuffle`` and ``drop_last`` describe the
    loader's plan, so clients that add a ``DistributedSampler`` unless one is there
    (Ray Train's ``prepare_data_loader``) leave the loader as it is.
    """

    def __init__(
        self,
        loader: PlannedLoader,
        *,
        rank: int,
        world_size: int,
        shuffle: bool,
        seed: int,
        drop_last: bool,
    ) -> None:
        super().__init__(
            loader.dataset,
            num_replicas=world_size,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )
        self._loader = loader

    def set_epoch(self, epoch: int) -> None:
        """Set the loader's epoch."""
        super().set_epoch(epoch)
        self._loader.set_epoch(epoch)


class PassBatchSampler(BatchSampler):
    """This rank's batches (lists of indices) of the pass ``iter(loader)`` starts next."""

    def __init__(
        self, loader: PlannedLoader, sampler: Sampler[int], batch_size: int, drop_last: bool
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self._loader = loader

    def __iter__(self) -> Iterator[list[int]]:
        for batch in _batches(self._loader):
            yield batch.tolist()

    def __len__(self) -> int:
        plan, _ = self._loader._next_plan()
        return plan.num_steps
