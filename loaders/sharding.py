"""Sharding and resumable state: one global order per epoch, consumed in lock-step by all ranks."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ticktensor.errors import ConfigError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["EpochState", "ShardPlan", "data_parallel_world", "rank_batches", "world_from_env"]

Int64s = npt.NDArray[np.int64]


class ShardPlan:
    """How one rank consumes a global epoch order, from a global position onwards.

    The order is consumed in global steps of ``G = batch_size * world_size`` samples:
    step ``k`` covers positions ``[start_sample + k*G, start_sample + (k+1)*G)`` of the
    order and rank ``r`` takes positions ``[r*batch_size, (r+1)*batch_size)`` of that
    step. So no sample is on two ranks in one step, and every rank gets the same number
    of batches (:attr:`num_steps`). The tail of the order (``R = N - start_sample``
    positions when ``R`` is not a multiple of ``G``) is handled by:

    - ``drop_last=True``: the short last step is dropped (at most ``G - 1`` samples);
    - ``pad=True`` (default): the last step is filled by wrapping around to the start of
      the order (``order[0], order[1], ...``), so every batch is full and a few samples
      are seen twice in the epoch;
    - ``pad=False``: the last step's ``T`` samples are split as evenly as possible,
      ``T // W`` per rank and one more for ranks below ``T % W``: batches on the last
      step may be smaller (even empty), but every sample of the order is seen exactly once.

    Parameters
    ----------
    num_samples_or_order
        The epoch's global order, or ``N`` for ``arange(N)``.
    batch_size, world_size, rank
        Per-rank batch size, number of ranks, this rank.
    drop_last, pad
        Tail handling, above; ``drop_last`` wins over ``pad``.
    start_sample
        Global position to start from (``EpochState.samples_consumed`` on resume).
    padded
        How many positions at the end of the order repeat earlier samples (an order
        wrapped around to a multiple of the world size, as ``DistributedSampler`` pads):
        they are not real samples of the epoch, for clients that drop padding
        (accelerate's ``gather_for_metrics``).

    Examples
    --------
    >>> [b.tolist() for b in ShardPlan(10, batch_size=2, world_size=2, rank=1)]
    [[2, 3], [6, 7], [0, 1]]
    >>> [b.tolist() for b in ShardPlan(10, batch_size=2, world_size=2, rank=1, pad=False)]
    [[2, 3], [6, 7], [9]]
    """

    def __init__(
        self,
        num_samples_or_order: int | npt.ArrayLike,
        batch_size: int,
        world_size: int = 1,
        rank: int = 0,
        drop_last: bool = False,
        pad: bool = True,
        *,
        start_sample: int = 0,
        padded: int = 0,
    ) -> None:
        if isinstance(num_samples_or_order, int | np.integer):
            _check_int("num_samples", num_samples_or_order, 0)
            order = np.arange(int(num_samples_or_order), dtype=np.int64)
        else:
            order = np.asarray(num_samples_or_order)
            if order.ndim != 1 or not (order.size == 0 or np.issubdtype(order.dtype, np.integer)):
                raise ConfigError(
                    f"order: expected a 1-D integer array, got {order.dtype}{order.shape}"
                )
            order = order.astype(np.int64, copy=False)
        _check_int("batch_size", batch_size, 1)
        _check_int("world_size", world_size, 1)
        _check_int("rank", rank, 0)
        if rank >= world_size:
            raise ConfigError(f"rank {rank} is not below world_size {world_size}")
        _check_int("start_sample", start_sample, 0)
        if start_sample > order.shape[0]:
            raise ConfigError(f"start_sample {start_sample} is past the order's {order.shape[0]}")
        self.order = order
        self.batch_size, self.world_size, self.rank = int(batch_size), int(world_size), int(rank)
        self.drop_last, self.pad, self.start_sample = bool(drop_last), bool(pad), int(start_sample)
        _check_int("padded", padded, 0)
        self.padded = int(padded)

    @property
    def global_batch_size(self) -> int:
        """Samples per global step, ``batch_size * world_size``."""
        return self.batch_size * self.world_size

    @property
    def num_steps(self) -> int:
        """Batches every rank gets from ``start_sample`` to the end of the epoch."""
        remaining = self.order.shape[0] - self.start_sample
        if self.drop_last:
            return remaining // self.global_batch_size
        return -(-remaining // self.global_batch_size)

    def __len__(self) -> int:
        return self.num_steps

    def samples_consumed(self, steps: int) -> int:
        """Global position in the order after ``steps`` steps of this plan (clipped at ``N``)."""
        return min(self.start_sample + steps * self.global_batch_size, self.order.shape[0])

    def batch(self, step: int) -> Int64s:
        """This rank's sample indices at ``step`` (``0 <= step < num_steps``)."""
        if not 0 <= step < self.num_steps:
            raise IndexError(f"step {step} out of range for a plan of {self.num_steps} steps")
        n, size = self.order.shape[0], self.global_batch_size
        first = self.start_sample + step * size
        if first + size <= n or self.pad:
            lo = first + self.rank * self.batch_size
            positions = np.arange(lo, lo + self.batch_size) % n
            return self.order[positions]
        lo, hi = self._tail_share(first, n - first)
        return self.order[lo:hi]

    def _tail_share(self, first: int, tail: int) -> tuple[int, int]:
        """This rank's positions of a last step of ``tail`` samples starting at ``first``:
        ``tail // W`` each and one more for the lowest ``tail % W`` ranks, the counts
        ``DistributedSampler``-style samplers that repeat nothing give (rank ``r`` gets
        ``len(range(r, N, W))`` samples in the epoch)."""
        share, extra = divmod(tail, self.world_size)
        lo = first + self.rank * share + min(self.rank, extra)
        return lo, lo + share + (self.rank < extra)

    def step_ranges(self) -> tuple[Int64s, Int64s]:
        """Every step at once as ``(first, count)``: step ``s`` is this rank's
        ``order[(first[s] + j) % len(order)]`` for ``j < count[s]``, the same samples as
        :meth:`batch` (for a native thread that gathers the steps itself)."""
        steps = self.num_steps
        n, size = self.order.shape[0], self.global_batch_size
        starts = self.start_sample + np.arange(steps, dtype=np.int64) * size
        first = starts + self.rank * self.batch_size
        count = np.full(steps, self.batch_size, dtype=np.int64)
        if steps and starts[-1] + size > n and not self.pad:
            lo, hi = self._tail_share(int(starts[-1]), n - int(starts[-1]))
            first[-1], count[-1] = lo, hi - lo
        return first, count

    def __iter__(self) -> Iterator[Int64s]:
        for step in range(self.num_steps):
            yield self.batch(step)

    def __repr__(self) -> str:
        return (
            f"ShardPlan(samples={self.order.shape[0]}, batch_size={self.batch_size}, "
            f"world_size={self.world_size}, rank={self.rank}, drop_last={self.drop_last}, "
            f"pad={self.pad}, start_sample={self.start_sample}, steps={self.num_steps})"
        )


def rank_batches(
    order: npt.ArrayLike,
    batch_size: int,
    world_size: int,
    rank: int,
    start_sample: int = 0,
    *,
    drop_last: bool = False,
    pad: bool = True,
) -> Iterator[Int64s]:
    """This rank's batches of ``order`` from global position ``start_sample``; see ShardPlan."""
    return iter(
        ShardPlan(order, batch_size, world_size, rank, drop_last, pad, start_sample=start_sample)
    )


def world_from_env(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """``(rank, world_size)`` of this process, as known now.

    Explicit arguments win (both must be given together); then an initialized
    ``torch.distributed`` process group; then the launcher's environment: ``RANK`` and
    ``WORLD_SIZE`` (``torchrun``, accelerate), or ``LOCAL_RANK`` with ``NODE_RANK`` and
    ``LOCAL_WORLD_SIZE`` (Lightning's launcher sets ``LOCAL_RANK``, ``NODE_RANK`` and
    ``WORLD_SIZE`` only, which names the rank on a single node); else ``(0, 1)``.
    An environment that says ``WORLD_SIZE > 1`` without naming this process's rank is
    an error, not rank 0: every rank would otherwise load the full data.
    """
    if (rank is None) != (world_size is None):
        raise ConfigError("give both rank and world_size, or neither")
    if rank is None or world_size is None:
        rank, world_size = _detect_world()
    _check_int("world_size", world_size, 1)
    _check_int("rank", rank, 0)
    if rank >= world_size:
        raise ConfigError(f"rank {rank} is not below world_size {world_size}")
    return int(rank), int(world_size)


def data_parallel_world(
    mesh: DeviceMesh | None = None,
    *,
    dp_dim: str = "dp",
    dp_rank: int | None = None,
    dp_size: int | None = None,
) -> tuple[int, int]:
    """``(dp_rank, dp_size)``: this process's place along the data-parallel dimension.

    Pass the result as the loader's ``rank=`` / ``world_size=``. With tensor or pipeline
    parallelism, the ranks that share a data-parallel index must see identical batches
    in identical order (they hold parts of one model replica); sharding by the global
    rank would give each of them different data.

    Parameters
    ----------
    mesh
        A ``torch.distributed.device_mesh.DeviceMesh``. A 1-D mesh is data parallel
        as a whole; a mesh with more dimensions needs ``dp_dim`` among its
        ``mesh_dim_names``.
    dp_dim
        Name of the data-parallel dimension of ``mesh``.
    dp_rank, dp_size
        Explicit values (both or neither), instead of a mesh.

    Without a mesh or explicit values this is :func:`world_from_env`: every rank is a
    data-parallel rank.

    Examples
    --------
    >>> data_parallel_world(dp_rank=1, dp_size=2)
    (1, 2)
    """
    if mesh is not None:
        if dp_rank is not None or dp_size is not None:
            raise ConfigError("give a mesh or dp_rank/dp_size, not both")
        names = tuple(mesh.mesh_dim_names or ())
        if mesh.ndim == 1:
            return world_from_env(mesh.get_local_rank(), mesh.size())
        if dp_dim not in names:
            raise ConfigError(
                f"mesh has dimensions {names or mesh.ndim} and no data-parallel one named "
                f"{dp_dim!r}; name it with init_device_mesh(..., mesh_dim_names=...) or pass "
                "dp_dim="
            )
        return world_from_env(mesh.get_local_rank(dp_dim), mesh.size(names.index(dp_dim)))
    if (dp_rank is None) != (dp_size is None):
        raise ConfigError("give both dp_rank and dp_size, or neither")
    return world_from_env(dp_rank, dp_size)


def _detect_world() -> tuple[int, int]:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is optional for the store side
        dist = None  # type: ignore[assignment]
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    env = os.environ
    world = _env_int("WORLD_SIZE")
    if "RANK" in env and world is not None:
        return _env_int("RANK") or 0, world
    if "LOCAL_RANK" in env and world is not None:
        local, node = _env_int("LOCAL_RANK") or 0, _env_int("NODE_RANK") or 0
        if node == 0:
            return local, world
        local_world = _env_int("LOCAL_WORLD_SIZE")
        if local_world is not None:
            return node * local_world + local, world
    if world is not None and world > 1:
        named = {k: env[k] for k in ("LOCAL_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE") if k in env}
        raise ConfigError(
            f"WORLD_SIZE={world} but this process's rank is unknown (no process group, no "
            f"RANK, and {named or 'no LOCAL_RANK'} do not name it): set RANK, or "
            "LOCAL_WORLD_SIZE with NODE_RANK, or pass rank= and world_size=; loading the "
            "full data on every rank would repeat it"
        )
    return 0, 1


def _env_int(name: str, env: Mapping[str, str] | None = None) -> int | None:
    """The integer in environment variable ``name`` of ``env`` (default: the process's;
    ``None`` when unset or empty)."""
    value = (os.environ if env is None else env).get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not an integer") from None


@dataclass
class EpochState:
    """Where training is in the sample stream: epoch, seed and global samples consumed.

    ``samples_consumed`` counts positions of the epoch's *global* order, not per-rank
    samples, so a state saved by any rank restores all of them, also with another world
    size or batch size: the new plan starts at the same global position and re-partitions
    the rest of the order (``ShardPlan(..., start_sample=state.samples_consumed)``).

    Examples
    --------
    >>> state = EpochState(seed=7)
    >>> state.advance(64)
    >>> EpochState.from_state_dict(state.state_dict())
    EpochState(epoch=0, seed=7, samples_consumed=64, extra={})
    """

    epoch: int = 0
    seed: int = 0
    samples_consumed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_int("epoch", self.epoch, 0)
        _check_int("seed", self.seed, 0)
        _check_int("samples_consumed", self.samples_consumed, 0)

    def advance(self, samples: int) -> None:
        """Record that ``samples`` more global positions of the order were consumed."""
        _check_int("samples", samples, 0)
        self.samples_consumed += int(samples)

    def next_epoch(self) -> None:
        """Move to the start of the next epoch."""
        self.epoch += 1
        self.samples_consumed = 0

    def plan(
        self,
        order: int | npt.ArrayLike,
        batch_size: int,
        world_size: int,
        rank: int,
        drop_last: bool = False,
        pad: bool = True,
    ) -> ShardPlan:
        """The plan of the rest of this epoch for one rank."""
        return ShardPlan(
            order, batch_size, world_size, rank, drop_last, pad, start_sample=self.samples_consumed
        )

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "seed", "samples_consumed", **extra}``: plain ints, JSON-safe."""
        return {
            **self.extra,
            "epoch": self.epoch,
            "seed": self.seed,
            "samples_consumed": self.samples_consumed,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`; unknown keys are kept in :attr:`extra`."""
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise ConfigError(f"state dict lacks {missing}; got keys {sorted(state)}")
        for key in _STATE_KEYS:
            _check_int(key, state[key], 0)
        self.epoch = int(state["epoch"])
        self.seed = int(state["seed"])
        self.samples_consumed = int(state["samples_consumed"])
        self.extra = {k: v for k, v in state.items() if k not in _STATE_KEYS}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> EpochState:
        """A new state restored from :meth:`state_dict`."""
        new = cls()
        new.load_state_dict(state)
        return new


_STATE_KEYS = ("epoch", "seed", "samples_consumed")


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ConfigError(f"{name}: expected an integer >= {minimum}, got {value!r}")
