"""data_parallel_world: shard by the data-parallel dimension of a mesh, or explicit values."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ticktensor.errors import ConfigError
from ticktensor.loaders import ShardPlan, data_parallel_world


@dataclass
class FakeMesh:
    """The few DeviceMesh members used: a 2 x 2 (dp, tp) mesh seen from global rank 3."""

    mesh_dim_names: tuple[str, ...] | None = ("dp", "tp")
    coordinate: tuple[int, ...] = (1, 1)
    shape: tuple[int, ...] = (2, 2)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def get_local_rank(self, mesh_dim: int | str | None = None) -> int:
        if mesh_dim is None:
            return self.coordinate[0]
        i = mesh_dim if isinstance(mesh_dim, int) else self.mesh_dim_names.index(mesh_dim)  # type: ignore[union-attr]
        return self.coordinate[i]

    def size(self, mesh_dim: int | None = None) -> int:
        return self.shape[0 if mesh_dim is None else mesh_dim]


def test_mesh_gives_the_dp_coordinate() -> None:
    assert data_parallel_world(FakeMesh()) == (1, 2)  # type: ignore[arg-type]
    mesh = FakeMesh(mesh_dim_names=("tp", "data"), coordinate=(0, 1), shape=(4, 3))
    assert data_parallel_world(mesh, dp_dim="data") == (1, 3)  # type: ignore[arg-type]
    one_d = FakeMesh(mesh_dim_names=None, coordinate=(2,), shape=(4,))
    assert data_parallel_world(one_d) == (2, 4)  # type: ignore[arg-type]


def test_tp_peers_get_identical_batches() -> None:
    plans = {}
    for dp in range(2):
        for tp in range(2):
            mesh = FakeMesh(coordinate=(dp, tp))
            rank, size = data_parallel_world(mesh)  # type: ignore[arg-type]
            plans[dp, tp] = [b.tolist() for b in ShardPlan(40, 4, size, rank)]
    assert plans[0, 0] == plans[0, 1]
    assert plans[1, 0] == plans[1, 1]
    ids = {dp: {i for batch in plans[dp, 0] for i in batch} for dp in range(2)}
    assert not ids[0] & ids[1]


def test_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match="no data-parallel one named 'dp'"):
        data_parallel_world(FakeMesh(mesh_dim_names=("a", "b")))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not both"):
        data_parallel_world(FakeMesh(), dp_rank=0, dp_size=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="both dp_rank and dp_size"):
        data_parallel_world(dp_rank=1)
    with pytest.raises(ConfigError, match="not below"):
        data_parallel_world(dp_rank=2, dp_size=2)
    assert data_parallel_world(dp_rank=1, dp_size=3) == (1, 3)
