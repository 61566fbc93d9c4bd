"""Device resolution: each rank's bare ``cuda`` is its own GPU, whatever thread asks."""

from __future__ import annotations

import threading

import pytest
import torch

from ticktensor.errors import ConfigError
from ticktensor.loaders._devices import resolve_device


@pytest.mark.parametrize("rank", [0, 1])
def test_two_ranks_resolve_to_their_local_gpu(rank: int) -> None:
    env = {"LOCAL_RANK": str(rank), "RANK": str(rank), "WORLD_SIZE": "2"}
    seen: list[torch.device | None] = []

    def from_another_thread() -> None:  # the producer thread: its current device is 0
        seen.append(resolve_device(torch.device("cuda"), env=env, current=lambda: 0))

    thread = threading.Thread(target=from_another_thread)
    thread.start()
    thread.join()
    here = resolve_device(torch.device("cuda"), env=env, current=lambda: 0)
    assert here == seen[0] == torch.device("cuda", rank)


def test_without_a_launcher_the_current_device_is_used() -> None:
    assert resolve_device(torch.device("cuda"), env={}, current=lambda: 2) == torch.device(
        "cuda", 2
    )


def test_explicit_and_other_devices_are_kept() -> None:
    env = {"LOCAL_RANK": "1"}
    assert resolve_device(torch.device("cuda", 0), env=env) == torch.device("cuda", 0)
    assert resolve_device(torch.device("cpu"), env=env) == torch.device("cpu")
    assert resolve_device(None, env=env) is None


def test_a_bad_local_rank_is_named() -> None:
    with pytest.raises(ConfigError, match="LOCAL_RANK='x' is not an integer"):
        resolve_device(torch.device("cuda"), env={"LOCAL_RANK": "x"})
