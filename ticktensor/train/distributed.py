"""The process's place in a training job: ranks, device, process groups and the dp x tp mesh."""

from __future__ import annotations

import datetime
import gc
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from ticktensor.errors import ConfigError
from ticktensor.loaders import data_parallel_world

__all__ = ["Distributed"]


@dataclass
class Distributed:
    """Ranks, device and groups of this process; one process is a world of one.

    ``rank``/``world_size`` are global; ``dp_rank``/``dp_size`` are the place along the
    data-parallel dimension, which is what the loader shards by. With ``tp > 1`` the
    ranks form a ``(dp, tp)`` :class:`~torch.distributed.device_mesh.DeviceMesh` and
    ``dp_group`` is this rank's data-parallel group (gradients are averaged in it).
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str | None
    mesh: DeviceMesh | None
    dp_rank: int
    dp_size: int
    dp_group: Any
    tp_group: Any
    owns_group: bool = False

    @classmethod
    def from_env(cls, backend: str = "auto", device: str = "auto", tp: int = 1) -> Distributed:
        """Set up from torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
        ``MASTER_ADDR`` ...), initializing the process group when there are several ranks.
        """
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        cuda = torch.cuda.is_available()
        if device == "auto":
            dev = torch.device("cuda", local_rank % torch.cuda.device_count()) if cuda else None
            dev = dev or torch.device("cpu")
        else:
            dev = torch.device(device)
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        chosen, owns = None, False
        if world > 1:
            chosen = ("nccl" if dev.type == "cuda" else "gloo") if backend == "auto" else backend
            if not dist.is_initialized():
                _init_process_group(chosen, rank, world, local_world)
                owns = True
        if world % tp:
            raise ConfigError(f"tp={tp} does not divide the world size {world}")
        mesh = None
        dp_group = tp_group = None
        if tp > 1:
            mesh = init_device_mesh(dev.type, (world // tp, tp), mesh_dim_names=("dp", "tp"))
            dp_group, tp_group = mesh.get_group("dp"), mesh.get_group("tp")
        dp_rank, dp_size = data_parallel_world(mesh) if mesh is not None else (rank, world)
        return cls(
            rank,
            world,
            local_rank,
            local_world,
            dev,
            chosen,
            mesh,
            dp_rank,
            dp_size,
            dp_group,
            tp_group,
            owns,
        )

    @property
    def distributed(self) -> bool:
        """Whether there is a process group (more than one rank)."""
        return self.world_size > 1

    def all_reduce(self, values: list[float], op: str = "sum", group: Any = None) -> list[float]:
        """Sum (``op="sum"``) or maximum (``"max"``) of ``values`` over the ranks of ``group``."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self._comm_device)
        dist.all_reduce(t, dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX, group=group)
        return [float(v) for v in t.tolist()]

    def same_in_group(self, values: Any, group: Any) -> bool:
        """Whether every rank of ``group`` holds the same 1-D integer array ``values``."""
        t = torch.as_tensor(values, dtype=torch.int64).to(self._comm_device)
        n = dist.get_world_size(group)
        got = [torch.empty_like(t) for _ in range(n)]
        dist.all_gather(got, t, group=group)
        return all(torch.equal(g, t) for g in got)

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (on every rank)."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def close(self) -> None:
        """Destroy the process group if :meth:`from_env` created it (not the caller's),
        and let go of this context's groups, so that their worker threads are joined now
        rather than during interpreter shutdown."""
        self.mesh = self.dp_group = self.tp_group = None
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
            gc.collect()

    @property
    def _comm_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")


def _init_process_group(backend: str, rank: int, world: int, local_world: int) -> None:
    """``init_process_group`` from torchrun's variables, safe across torchrun restarts.

    torchrun's c10d rendezvous shares its TCPStore with the workers and keeps it across
    restarts, so a restarted worker can read a peer's address left by the previous
    attempt and fail to connect (pytorch/pytorch#135712). On one node every worker has
    the same ``TORCHELASTIC_RESTART_COUNT``, so each attempt gets keys of its own; on
    several nodes the count is not consistent: set ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
    for torchrun there (the recipes in ``examples/`` do).
    """
    timeout = datetime.timedelta(minutes=10)
    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    if not shared or world != local_world:
        if shared and int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0 and rank == 0:
            print(
                "ticktensor train: warning: torchrun restarts with a shared rendezvous store "
                "can reuse stale peer addresses across nodes; set "
                "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 for torchrun",
                flush=True,
            )
        dist.init_process_group(backend, timeout=timeout)
        return
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.TCPStore(  # type: ignore[attr-defined]
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        is_master=False,
        timeout=timeout,
    )
    prefixed = dist.PrefixStore(f"ticktensor/attempt-{attempt}/", store)  # type: ignore[attr-defined]
    dist.init_process_group(backend, store=prefixed, rank=rank, world_size=world, timeout=timeout)
