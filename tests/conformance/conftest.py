"""The conformance suite's data and loaders: the same scenario runs on torch's loader and ours."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import ticktensor
from tests.one_pack import one_pack_store
from ticktensor.loaders import WindowDataset
from ticktensor.store import StoreVersion

WINDOW = 4
# Rows per symbol: 31 + 34 + 27 + 36 windows = 128 samples, so batch sizes 8 and 16 divide
# it and 5, 7 and 12 leave a short last batch.
ROWS = (34, 37, 30, 39)
SAMPLES = sum(rows - WINDOW + 1 for rows in ROWS)

LoaderFactory = Callable[..., Any]


def build_version(path: Path) -> StoreVersion:
    """Feature 0 of each row is ``1000 * symbol + row``, so ``x[:, 0, 0]`` names a sample."""
    return one_pack_store(
        path,
        ROWS,
        lambda s, r: np.stack([1000 * s + r, r / 3], axis=1),
        lambda r: r[:, None],
        ("id", "frac"),
        ("y",),
        message="conformance",
    )


@pytest.fixture(scope="session")
def version(tmp_path_factory: pytest.TempPathFactory) -> StoreVersion:
    return build_version(tmp_path_factory.mktemp("conformance") / "store")


@pytest.fixture(scope="session")
def dataset(version: StoreVersion) -> WindowDataset:
    ds = WindowDataset(version, WINDOW)
    assert len(ds) == SAMPLES
    return ds


@pytest.fixture(params=["torch", "ticktensor"])
def make_loader(request: pytest.FixtureRequest) -> LoaderFactory:
    """``make_loader(dataset, **kwargs)``: torch's DataLoader or ticktensor's, same keywords."""
    if request.param == "torch":
        return torch.utils.data.DataLoader
    return ticktensor.DataLoader


def is_ours(loader: Any) -> bool:
    return isinstance(loader, ticktensor.DataLoader)


def ids(batch: Any) -> list[int]:
    """The samples of a batch, by the id of each window's first row."""
    x, _ = batch
    return [int(v) for v in x[:, 0, 0].tolist()]


def all_ids(batches: Iterable[Any]) -> list[int]:
    return [i for batch in batches for i in ids(batch)]


@pytest.fixture(scope="session")
def id_of(dataset: WindowDataset) -> list[int]:
    """Sample index -> the id of its window's first row."""
    x, _ = dataset.get_batch(np.arange(len(dataset)))
    return [int(v) for v in x[:, 0, 0].tolist()]
