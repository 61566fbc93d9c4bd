"""Device resolution: each rank's bare ``cuda`` is its own GPU, whatever thread asks."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from ticktensor.errors import ConfigError
from ticktensor.loaders._devices import resolve_device


@pytest.mark.parametrize("rank", [0, 1])
def test_two_ranks_resolve_to_their_local_gpu(rank: int) -> None:
    env = {"LOCAL_RANK": str(rank), "RANK": str(rank), "WORLD_SIZE": "2"}
    seen: list[torch.device | None] = []

    def from_another_thread() -> None:  # the producer thread: its current device is 0
        seen.append(
            resolve_device(torch.device("cuda"), env=env, current=lambda: 0, count=lambda: 2)
        )

    thread = threading.Thread(target=from_another_thread)
    thread.start()
    thread.join()
    here = resolve_device(torch.device("cuda"), env=env, current=lambda: 0, count=lambda: 2)
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


def test_auto_follows_an_accelerator_created_before_the_loader(tmp_path: Path) -> None:
    """accelerate's ``prepare`` returns our loader unwrapped; ``device="auto"`` takes the
    Accelerator's device instead (the CPU here, the rank's GPU under accelerate launch)."""
    accelerate = pytest.importorskip("accelerate")
    from accelerate.state import AcceleratorState

    from ticktensor import DataLoader
    from ticktensor.loaders import FastOptions, WindowDataset

    from .test_dataloader import WINDOW, build_version

    ds = WindowDataset(build_version(tmp_path / "store"), WINDOW)
    plain = DataLoader(ds, batch_size=4, fast=FastOptions(device="auto"))
    if torch.cuda.is_available():  # pragma: no cover - GPU only
        assert plain.device == torch.device("cuda", torch.cuda.current_device())
    else:
        assert plain.device == torch.device("cpu")
    accelerator = accelerate.Accelerator(cpu=True)
    try:
        loader = accelerator.prepare(DataLoader(ds, batch_size=4, fast=FastOptions(device="auto")))
        assert loader.device == accelerator.device
        x, y = next(iter(loader))
        assert x.device == y.device == accelerator.device
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)


def test_a_device_the_process_chose_wins_over_local_rank() -> None:
    """Lightning ``devices=[2, 3]``: rank 0 (``LOCAL_RANK=0``) sets ``cuda:2`` current."""
    env = {"LOCAL_RANK": "0"}
    chosen = resolve_device(torch.device("cuda"), env=env, current=lambda: 2, count=lambda: 4)
    assert chosen == torch.device("cuda", 2)


def test_a_local_rank_beyond_the_visible_devices_is_named_with_them() -> None:
    """Per-rank ``CUDA_VISIBLE_DEVICES``: rank 1 sees one GPU, its ``cuda:0``."""
    env = {"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "5"}
    with pytest.raises(ConfigError, match=r"LOCAL_RANK=1 .* sees 1 \(CUDA_VISIBLE_DEVICES='5'\)"):
        resolve_device(torch.device("cuda"), env=env, current=lambda: 0, count=lambda: 1)
