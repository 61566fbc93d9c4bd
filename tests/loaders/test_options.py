"""FastOptions: validation, and the deprecated DataLoader keywords folded into it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from ticktensor import DataLoader
from ticktensor.errors import ConfigError
from ticktensor.loaders import (
    DaliOptions,
    FastOptions,
    ResidentOptions,
    UniformOrder,
    WindowDataset,
)

from .test_dataloader import WINDOW, build_version


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> WindowDataset:
    return WindowDataset(build_version(tmp_path_factory.mktemp("opts") / "store"), WINDOW)


def test_defaults_and_derived_values() -> None:
    options = FastOptions()
    assert options.dali is None
    assert options.resident is None
    assert options.torch_device is None
    assert FastOptions(device="cpu").torch_device == torch.device("cpu")
    assert FastOptions(backend="dali").dali == DaliOptions()
    assert FastOptions(device="cpu", residency="device").resident == ResidentOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seed = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"order": "uniform"}, "order: expected an Order"),
        ({"seed": -1}, "seed: expected an integer >= 0"),
        ({"rank": 1}, "give both, or neither"),
        ({"rank": 2, "world_size": 2}, "rank 2 is not below world_size 2"),
        ({"pad": 1}, "pad: expected True, False or None"),
        ({"device": "nonsense"}, "is not a torch device"),
        ({"device": "meta"}, "delivers to 'cpu' or 'cuda'"),
        ({"prefetch": 0}, "prefetch: expected an integer >= 1"),
        ({"readahead": True}, "readahead: expected an integer >= 1"),
        ({"backend": "jax"}, "backend: expected 'torch', 'dali'"),
        ({"residency": "disk"}, "residency: expected 'host', 'device'"),
        ({"residency": "device"}, "needs device="),
        ({"engine": "rust"}, "engine: expected 'auto', 'python' or 'native'"),
        ({"device": "cpu", "residency": "device", "backend": "dali"}, "do not combine"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FastOptions(**kwargs)  # type: ignore[arg-type]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_cuda_is_refused() -> None:
    with pytest.raises(ConfigError, match="CUDA is not available"):
        FastOptions(device="cuda")


def test_the_old_keywords_still_work_with_a_deprecation_warning(dataset: WindowDataset) -> None:
    with pytest.warns(DeprecationWarning, match=r"order=, seed=\) is deprecated.*FastOptions"):
        old = DataLoader(dataset, batch_size=8, order=UniformOrder(3), seed=3)
    new = DataLoader(dataset, batch_size=8, fast=FastOptions(order=UniformOrder(3), seed=3))
    assert old.options == new.options
    assert [x.tolist() for x, _ in old] == [x.tolist() for x, _ in new]


def test_old_keywords_beside_fast_options_and_unknown_keywords(dataset: WindowDataset) -> None:
    with pytest.raises(ConfigError, match=r"\['seed'\]: give these in fast="):
        DataLoader(dataset, batch_size=8, seed=1, fast=FastOptions())
    with pytest.raises(TypeError, match="unexpected keyword"):
        DataLoader(dataset, batch_size=8, sed=1)


def test_engine_python_keeps_the_python_thread(dataset: WindowDataset, tmp_path: Path) -> None:
    from ticktensor.loaders._prefetch import Prefetcher

    loader = DataLoader(dataset, batch_size=8, fast=FastOptions(engine="python"))
    list(loader)  # every chunk is loaded now: "auto" would start on the native thread
    it = iter(loader)
    next(it)
    assert isinstance(loader._last() if loader._last else None, Prefetcher)
