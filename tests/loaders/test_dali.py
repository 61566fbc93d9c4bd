"""The DALI backend on the CPU: same batches, length, sharding and state as the torch path."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
import torch

from tests.one_pack import one_pack_store
from ticktensor.errors import ConfigError
from ticktensor.kernels import ThreadPool
from ticktensor.loaders import (
    BlockShuffleOrder,
    DaliOptions,
    FastOptions,
    UniformOrder,
    WindowDataset,
)
from ticktensor.loaders.dali import DaliPipeline, dali_available
from ticktensor.loaders.dataloader import DataLoader
from ticktensor.store import FeatureStats, StoreVersion

from .fake_cuda import run_child

pytestmark = pytest.mark.skipif(not dali_available(), reason="nvidia-dali-cuda120 not installed")

WINDOW = 6
ROWS = (61, 40, 77)
NAMES = ("id", "noise", "frac")


def build_version(path: Path) -> StoreVersion:
    rng = np.random.default_rng(1)
    return one_pack_store(
        path,
        ROWS,
        lambda s, r: np.stack([1000 * s + r, rng.normal(size=r.size), r / 7], axis=1),
        lambda r: np.stack([r, -r], axis=1),
        NAMES,
        ("a", "b"),
        stats=FeatureStats(NAMES, (900.0, 0.25, 3.0), (700.0, 3.0, 0.0), 178, (0, 1)),
        message="dali tests",
    )


@pytest.fixture(scope="module")
def version(tmp_path_factory: pytest.TempPathFactory) -> StoreVersion:
    return build_version(tmp_path_factory.mktemp("store") / "store")


def dataset(version: StoreVersion, normalize: bool = False) -> WindowDataset:
    return WindowDataset(version, WINDOW, normalize=normalize, pool=ThreadPool(1), threads=1)


def collect(batches: Iterable[Any]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in batches]


def assert_same(
    got: list[tuple[torch.Tensor, torch.Tensor]], expected: list[tuple[torch.Tensor, torch.Tensor]]
) -> None:
    assert len(got) == len(expected)
    for (x1, y1), (x2, y2) in zip(got, expected, strict=True):
        assert x1.dtype == x2.dtype
        assert x1.shape == x2.shape
        torch.testing.assert_close(x1, x2, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(y1, y2, rtol=0, atol=0)


def test_normalized_batches_equal_the_torch_paths(version: StoreVersion) -> None:
    order = BlockShuffleOrder(seed=4, block_chunks=2)
    torch_path = DataLoader(
        dataset(version, normalize=True), batch_size=8, fast=FastOptions(order=order)
    )
    dali = DataLoader(dataset(version), batch_size=8, fast=FastOptions(order=order, backend="dali"))
    assert len(dali) == len(torch_path)
    expected = collect(torch_path)
    assert_same(collect(dali), expected)
    assert expected[-1][0].shape[0] < 8  # a short last batch went through DALI too
    stats = dali.stats()
    assert stats["backend"] == "dali"
    assert stats["batches"] == len(expected)
    assert stats["samples"] == sum(x.shape[0] for x, _ in expected)
    # The batches DALI may still read hold their slots; the ring is sized for them.
    assert stats["buffers_allocated"] <= 2 + 3 + DaliOptions().held_batches
    assert dali.epoch == 1  # advanced after the complete pass, as on the torch path
    assert_same(collect(dali), collect(torch_path))  # epoch 1: a new order, still equal


def test_unnormalized_and_float16(version: StoreVersion) -> None:
    raw = dataset(version)
    plain = collect(DataLoader(raw, batch_size=16, shuffle=True, fast=FastOptions(seed=3)))
    off = DaliOptions(normalize=False)
    assert_same(
        collect(
            DataLoader(raw, batch_size=16, shuffle=True, fast=FastOptions(seed=3, backend=off))
        ),
        plain,
    )
    normed = collect(
        DataLoader(dataset(version, True), batch_size=16, shuffle=True, fast=FastOptions(seed=3))
    )
    half = DataLoader(
        raw, batch_size=16, shuffle=True, fast=FastOptions(seed=3, backend=DaliOptions("float16"))
    )
    got = collect(half)
    assert got[0][0].dtype == torch.float16
    assert_same(got, [(x.half(), y) for x, y in normed])
    bf16 = DataLoader(
        raw, batch_size=16, shuffle=True, fast=FastOptions(seed=3, backend=DaliOptions("bfloat16"))
    )
    got = collect(bf16)
    assert got[0][0].dtype == torch.bfloat16
    assert_same(got, [(x.bfloat16(), y) for x, y in normed])


def test_sharding_state_and_empty_batches(version: StoreVersion) -> None:
    raw, normed = dataset(version), dataset(version, normalize=True)
    n = len(raw)
    # pad=False over 3 ranks: the last step's few samples leave some ranks an empty batch.
    batch = 9
    assert 0 < n % (batch * 3) < 3
    common = {"batch_size": batch}
    plan = {"order": UniformOrder(seed=9), "world_size": 3, "pad": False}
    for rank in range(3):
        expected = collect(DataLoader(normed, **common, fast=FastOptions(rank=rank, **plan)))
        dali = DataLoader(raw, **common, fast=FastOptions(rank=rank, backend="dali", **plan))
        assert len(dali) == len(expected)
        it = iter(dali)
        head = [(x.clone(), y.clone()) for x, y in (next(it) for _ in range(2))]
        state = dali.state_dict()
        assert state["samples_consumed"] == 2 * batch * 3
        it.close()  # type: ignore[attr-defined]
        resumed = DataLoader(raw, **common, fast=FastOptions(rank=rank, backend="dali", **plan))
        resumed.load_state_dict(state)
        assert_same(head + collect(resumed), expected)


def test_errors_reach_the_consumer(version: StoreVersion, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = dataset(version)
    loader = DataLoader(raw, batch_size=8, fast=FastOptions(backend="dali"))
    original = raw.runtime.gather_batch
    calls = []

    def failing(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk on fire")
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(raw.runtime, "gather_batch", failing)
    with pytest.raises(OSError, match="disk on fire") as info:
        collect(loader)
    assert any("while assembling batch 2" in note for note in info.value.__notes__)
    assert loader.state_dict()["samples_consumed"] == 16
    # DALI's epoch ended at the failed batch: the next pass resets the pipeline.
    monkeypatch.setattr(raw.runtime, "gather_batch", original)
    assert_same(collect(loader), collect(DataLoader(dataset(version, True), batch_size=8)))
    assert loader.stats()["dali"] == {"builds": 1, "resets": 1, "rebuilds": 0}


def test_options(version: StoreVersion) -> None:
    with pytest.raises(ConfigError, match="dtype"):
        DaliOptions(dtype="int8")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="prefetch_queue_depth"):
        DaliOptions(prefetch_queue_depth=0)
    with pytest.raises(ConfigError, match="num_threads"):
        DaliOptions(num_threads=0)
    with pytest.raises(ConfigError, match="backend"):
        DataLoader(dataset(version), batch_size=4, fast=FastOptions(backend="jax"))
    with pytest.raises(ConfigError, match="do not combine"):
        DataLoader(
            dataset(version),
            batch_size=4,
            fast=FastOptions(backend="dali", device="cpu", residency="device"),
        )
    with pytest.raises(ConfigError, match="normalize twice"):
        DataLoader(
            dataset(version, True),
            batch_size=4,
            fast=FastOptions(backend=DaliOptions(normalize=True)),
        )


def test_breaking_out_stops_the_background_thread(version: StoreVersion) -> None:
    loader = DataLoader(dataset(version), batch_size=4, fast=FastOptions(backend="dali"))
    for _ in loader:
        break
    deadline = time.monotonic() + 5
    while any(t.name.startswith("ticktensor-loader") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the loader thread outlived the pass"
        time.sleep(0.01)
    assert loader.state_dict()["samples_consumed"] == 0  # the next pass starts the epoch again


def test_an_empty_pass_and_an_error_in_the_first_batch(
    version: StoreVersion, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = dataset(version)
    loader = DataLoader(raw, batch_size=8, fast=FastOptions(backend="dali"))
    loader.load_state_dict({"epoch": 0, "seed": 0, "samples_consumed": len(raw)})
    assert list(loader) == []
    assert loader.epoch == 1

    def failing(*args: object, **kwargs: object) -> object:
        raise OSError("no such chunk")

    monkeypatch.setattr(raw.runtime, "gather_batch", failing)
    with pytest.raises(OSError, match="no such chunk"):
        next(iter(loader))
    assert loader.state_dict()["samples_consumed"] == 0


def live_pipelines() -> int:
    from nvidia.dali.pipeline import Pipeline

    return sum(issubclass(type(o), Pipeline) for o in gc.get_objects())


def shuffled(version: StoreVersion, backend: Literal["torch", "dali"] = "torch") -> DataLoader:
    """A shuffled loader; the torch path's batches are what DALI's must equal."""
    ds = dataset(version, normalize=backend == "torch")
    return DataLoader(ds, batch_size=8, shuffle=True, fast=FastOptions(seed=5, backend=backend))


def test_epochs_reuse_one_pipeline(version: StoreVersion) -> None:
    reference = shuffled(version)
    expected = [collect(reference), collect(reference)]
    assert not torch.equal(expected[0][0][0], expected[1][0][0])  # a new order per epoch
    loader = shuffled(version, "dali")
    for epoch, batches in enumerate(expected):
        assert loader.epoch == epoch
        assert_same(collect(loader), batches)
    assert loader.stats()["dali"] == {"builds": 1, "resets": 1, "rebuilds": 0}
    # A pass that hands out its last batch without asking for one more ends the epoch
    # too: the next pass resets the pipeline, it does not build another.
    third = [(x.clone(), y.clone()) for _, (x, y) in zip(range(len(loader)), loader, strict=False)]
    assert_same(third, collect(reference))
    assert_same(collect(loader), collect(reference))
    assert loader.stats()["dali"] == {"builds": 1, "resets": 3, "rebuilds": 0}


def test_an_abandoned_pass_is_drained_not_rebuilt(version: StoreVersion) -> None:
    """Lightning's sanity check, ``limit_val_batches`` and ``max_steps`` abandon passes:
    the next pass drains what DALI queued ahead and resets the same pipeline."""
    reference = shuffled(version)
    loader = shuffled(version, "dali")
    for _ in zip(range(3), loader, strict=False):  # out after 3 of 21 batches: epoch 0 stays
        pass
    assert loader.stats()["dali"] == {"builds": 1, "resets": 0, "rebuilds": 0}
    assert_same(collect(loader), collect(reference))  # epoch 0 again, whole
    assert loader.stats()["dali"] == {"builds": 1, "resets": 1, "rebuilds": 0}
    assert_same(collect(loader), collect(reference))  # epoch 1
    assert loader.stats()["dali"] == {"builds": 1, "resets": 2, "rebuilds": 0}
    # A pass dropped before its first batch leaves the pipeline as it was.
    iter(loader)
    assert_same(collect(loader), collect(reference))
    assert loader.stats()["dali"] == {"builds": 1, "resets": 3, "rebuilds": 0}


def test_only_the_newest_pass_reads_the_pipeline(version: StoreVersion) -> None:
    loader = shuffled(version, "dali")
    first = iter(loader)
    next(first)
    second = iter(loader)
    assert_same(collect(second), collect(shuffled(version)))
    with pytest.raises(RuntimeError, match="superseded by a newer iter"):
        next(first)


def test_handed_out_batches_stay_unchanged_when_dali_reuses_its_buffers(
    version: StoreVersion, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches are kept without a copy (``list(loader)``) while DALI's output buffers are
    overwritten after each batch, as a DALI that recycles them would: the batches handed
    out are torch's own copies and stay as they were."""
    from nvidia.dali.plugin import pytorch as plugin

    expected = collect(shuffled(version))
    outputs: list[torch.Tensor] = []
    original = plugin.DALIGenericIterator.__next__

    def recycling(self: Any) -> Any:
        for tensor in outputs:  # the buffers of the batches handed out before
            tensor.fill_(float("nan"))
        out = original(self)
        outputs[:] = [out[0]["x"], out[0]["y"]]
        return out

    monkeypatch.setattr(plugin.DALIGenericIterator, "__next__", recycling)
    kept = list(shuffled(version, "dali"))
    assert_same(kept, expected)

    # The control: handed out without the copy, the same batches are overwritten.
    monkeypatch.setattr(DaliPipeline, "_own", lambda self, x, y: (x, y))
    outputs.clear()
    kept = list(shuffled(version, "dali"))
    overwritten = sum(bool(x.isnan().any()) for x, _ in kept)
    assert overwritten >= len(kept) - 1


def test_the_loader_keeps_one_pipeline_and_frees_it_with_the_loader(
    version: StoreVersion,
) -> None:
    """Passes reuse the loader's pipeline, also after an abandoned pass, so passes never
    pile pipelines (and their threads) up until a gc.collect(). It goes with the loader."""
    loader = DataLoader(dataset(version), batch_size=8, fast=FastOptions(backend="dali"))
    gc.collect()
    before = live_pipelines()
    gc.disable()
    try:
        it = iter(loader)
        next(it)
        assert live_pipelines() == before + 1
        del it  # abandoned mid-pass: its pipeline stays with the loader until the next pass
        assert live_pipelines() == before + 1
        for _ in range(3):
            collect(loader)  # whole passes
            assert live_pipelines() == before + 1
        assert loader.stats()["dali"] == {"builds": 1, "resets": 3, "rebuilds": 0}
    finally:
        gc.enable()
    del loader  # the loader's samplers reference it: the cyclic collector frees it
    gc.collect()
    assert live_pipelines() == before


PINNED_SCRIPT = """
import json
import numpy as np
import torch
from ticktensor import DataLoader
from ticktensor.loaders import DaliOptions, FastOptions, WindowDataset
ds = WindowDataset({store!r}, {window})
host = DataLoader(ds, batch_size=16, shuffle=True, fast=FastOptions(seed=3))
expected = [(x.clone(), y.clone()) for x, y in host]
seen = {{}}
for dtype in ("float32", "float16", "bfloat16"):
    backend = DaliOptions(dtype, normalize=False)
    loader = DataLoader(
        ds, batch_size=16, shuffle=True, pin_memory=True, fast=FastOptions(seed=3, backend=backend)
    )
    batches = list(loader)
    seen[dtype] = {{
        "batches": len(batches),
        "pinned": sum(x.is_pinned() and y.is_pinned() for x, y in batches),
        "same": all(  # 16-bit casts may round differently (DALI's, torch's)
            torch.allclose(x.float(), want_x, rtol=2**-7, atol=0) and torch.equal(y, want_y)
            for (x, y), (want_x, want_y) in zip(batches, expected, strict=True)
        ),
        "dtype": str(batches[0][0].dtype),
        "memory": loader.stats()["memory"],
    }}
print(json.dumps(seen))
"""


def test_a_cpu_pipeline_with_pin_memory_hands_out_pinned_batches(tmp_path: Path) -> None:
    """``pin_memory=True`` without a device: DALI runs on the CPU and its batches are
    page-locked, so the consumer's ``x.cuda(non_blocking=True)`` stays asynchronous.
    Run in a child process whose ``torch.cuda`` is a stand-in (:mod:`fake_cuda`): its
    page-locked allocations are ordinary memory that says ``is_pinned()``."""
    build_version(tmp_path / "store")
    seen = run_child(PINNED_SCRIPT.format(store=str(tmp_path / "store"), window=WINDOW))
    for dtype, figures in seen.items():
        assert figures["memory"] == "pinned", dtype
        assert figures["batches"] > 5, dtype
        assert figures["pinned"] == figures["batches"], dtype
        assert figures["same"], dtype
        assert figures["dtype"] == f"torch.{dtype}"
