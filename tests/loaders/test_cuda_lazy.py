"""No CUDA call before the first pass; the rank's device is found when a pass starts.

Each scenario runs in a child process whose ``torch.cuda`` records every call
(:mod:`fake_cuda`): building and unpickling a loader must call none (Lightning
``ddp_fork`` and notebook launchers refuse a process whose CUDA is initialised), and a
bare ``cuda`` becomes the GPU of ``LOCAL_RANK`` as set when the pass starts (Lightning
``ddp_spawn`` unpickles the loader before the rank's environment is complete).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .fake_cuda import run_child
from .test_dataloader import WINDOW, build_version

SCRIPT = """
import json, os, pickle
from ticktensor import DataLoader
from ticktensor.errors import ConfigError
from ticktensor.loaders import FastOptions, WindowDataset
ds = WindowDataset({store!r}, {window})
loader = DataLoader(ds, batch_size=8, pin_memory=True, fast=FastOptions(device={device!r}))
built = len(CALLS)
copy = pickle.loads(pickle.dumps(loader))
unpickled = len(CALLS) - built
os.environ["LOCAL_RANK"] = {local_rank!r}
error = None
try:
    passes = iter(copy)
except ConfigError as exc:
    error = str(exc)
print(json.dumps({{"built": CALLS[:built], "unpickled": unpickled, "pass": CALLS[built:],
                  "error": error}}))
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lazy") / "store"
    build_version(path)
    return path


def _run(store: Path, device: str | None, local_rank: str) -> Any:
    script = SCRIPT.format(store=str(store), window=WINDOW, device=device, local_rank=local_rank)
    return run_child(script)


@pytest.mark.parametrize("device", ["cuda", "auto", None])
def test_building_and_unpickling_a_loader_calls_no_cuda(store: Path, device: str | None) -> None:
    """``device=None`` with ``pin_memory=True`` is the fence path; ``cuda`` and ``auto``
    deliver on the rank's GPU."""
    seen = _run(store, device, "1")
    assert seen["built"] == []
    assert seen["unpickled"] == 0


@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_the_device_is_the_local_rank_set_when_the_pass_starts(store: Path, device: str) -> None:
    seen = _run(store, device, "1")
    assert seen["error"] is None
    streams = [call for call in seen["pass"] if call["call"] == "Stream"]
    assert streams, seen["pass"]
    assert {call["args"][0] for call in streams} == {"cuda:1"}
    assert {call["thread"] for call in streams} == {"MainThread"}  # the consumer's


def test_a_local_rank_beyond_the_visible_devices_is_one_line_naming_both(store: Path) -> None:
    seen = _run(store, "cuda", "3")
    error = seen["error"]
    assert error is not None, "LOCAL_RANK=3 with 2 visible devices was accepted"
    assert "\\n" not in error
    assert "\n" not in error
    assert "LOCAL_RANK=3" in error
    assert "sees 2" in error


PASS_SCRIPT = """
import json, torch
from ticktensor import DataLoader
from ticktensor.loaders import FastOptions, WindowDataset
ds = WindowDataset({store!r}, {window})
loader = DataLoader(ds, batch_size=4, pin_memory=True, fast=FastOptions(engine={engine!r}))
if {side!r}:
    loader.add_reader_stream(torch.cuda.Stream(device="side"))
# The training loop copies to cuda:1 only: CUDA is initialised, with a context on GPU 1.
torch.cuda.is_initialized = lambda: True
torch._C._cuda_hasPrimaryContext = lambda index: index == 1
batches = 0
for x, y in loader:
    batches += 1
    del x, y
records = [call["args"][0] for call in CALLS if call["call"] == "Event.record"]
print(json.dumps({{"batches": batches, "records": records}}))
"""


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_pinned_pass_fences_the_devices_with_a_context(store: Path, engine: str) -> None:
    """``pin_memory=True`` without a device: each batch the consumer let go is fenced on
    the current stream of the device its copies can be on (GPU 1 here), not on GPU 0."""
    script = PASS_SCRIPT.format(store=str(store), window=WINDOW, engine=engine, side=False)
    seen = run_child(script)
    assert seen["batches"] > 8
    assert len(seen["records"]) >= seen["batches"] - 6  # the ring's last slots stay out
    assert set(seen["records"]) == {"1"}


def test_a_reader_stream_named_on_the_loader_is_fenced(store: Path) -> None:
    """``loader.add_reader_stream(side)``: copies on a side stream never joined to the
    current stream are fenced too."""
    script = PASS_SCRIPT.format(store=str(store), window=WINDOW, engine="python", side=True)
    seen = run_child(script)
    assert set(seen["records"]) == {"1", "side"}
    assert seen["records"].count("side") == seen["records"].count("1")


RESIDENT_SCRIPT = """
import json, pickle
from ticktensor import DataLoader
from ticktensor.loaders import FastOptions, ResidentOptions, WindowDataset
ds = WindowDataset({store!r}, {window})
options = FastOptions(device="cuda", residency=ResidentOptions(budget_bytes=1 << 20))
loader = DataLoader(ds, batch_size=8, shuffle=True, fast=options)
pickle.loads(pickle.dumps(loader))
print(json.dumps({{"calls": CALLS, "order": type(loader.order).__name__}}))
"""


def test_device_residency_with_a_budget_calls_no_cuda_when_built(store: Path) -> None:
    """How many chunks fit decides the order; a given budget says so without the GPU."""
    seen = run_child(RESIDENT_SCRIPT.format(store=str(store), window=WINDOW))
    assert seen["calls"] == []
    assert seen["order"]  # chosen when the loader was built


DEFAULT_BUDGET_SCRIPT = """
import json, pickle
from ticktensor import DataLoader
from ticktensor.loaders import FastOptions, SequentialOrder, WindowDataset
ds = WindowDataset({store!r}, {window})
options = FastOptions(device="cuda", residency="device", order={order})
loader = DataLoader(ds, batch_size=8, shuffle=True, fast=options)
copy = pickle.loads(pickle.dumps(loader))
built = len(CALLS)
try:  # the pass sizes the pool (then fails allocating it: there is no GPU here)
    next(iter(copy))
except Exception:
    pass
asked = [call for call in CALLS[built:] if call["call"] == "mem_get_info"]
print(json.dumps({{"built": CALLS[:built], "asked": asked, "order": type(loader.order).__name__}}))
"""


def test_device_residency_with_the_default_budget_and_an_order_asks_the_gpu_at_the_pass(
    store: Path,
) -> None:
    """An ``order`` given needs no chunk count: the default budget (a share of the GPU's
    free memory) is asked for when the first pass starts, on the consumer's thread."""
    order = "SequentialOrder()"
    script = DEFAULT_BUDGET_SCRIPT.format(store=str(store), window=WINDOW, order=order)
    seen = run_child(script)
    assert seen["built"] == []
    assert seen["order"] == "SequentialOrder"
    assert [call["args"] for call in seen["asked"]] == [["cuda:0"]]
    assert {call["thread"] for call in seen["asked"]} == {"MainThread"}


DEFAULT_ORDER_SCRIPT = """
import json, pickle, torch
from ticktensor import DataLoader
from ticktensor.loaders import FastOptions, ResidentOptions, WindowDataset

def mem_get_info(device=None):
    fake._record("mem_get_info", device)
    return {free}, {total}

torch.cuda.mem_get_info = mem_get_info
ds = WindowDataset({store!r}, {window})
options = FastOptions(device="cuda", residency="device", seed=5)
try:  # a loader that sized its pool here would allocate it, and fail: no GPU here
    loader = DataLoader(ds, batch_size=8, shuffle=True, fast=options)
    copy = pickle.loads(pickle.dumps(loader))
except Exception as exc:
    print(json.dumps({{"built": CALLS, "error": repr(exc)}}))
    raise SystemExit(0)
built = len(CALLS)
try:  # the pass sizes the pool (then fails allocating it: there is no GPU here)
    next(iter(copy))
except Exception:
    pass
asked = [call for call in CALLS[built:] if call["call"] == "mem_get_info"]
chosen = copy.order
state = copy.state_dict()
# What the same budget, given, makes the order (chosen when the loader is built).
given = FastOptions(device="cuda", residency=ResidentOptions(budget_bytes={budget}), seed=5)
reference = DataLoader(ds, batch_size=8, shuffle=True, fast=given).order
# A fresh loader given the state takes its order, with no CUDA call.
before = len(CALLS)
fresh = DataLoader(ds, batch_size=8, shuffle=True, fast=options)
fresh.load_state_dict(state)
resumed = fresh.order
copied = pickle.loads(pickle.dumps(copy)).order  # a copy keeps the order chosen
print(json.dumps({{"built": CALLS[:built], "asked": asked, "order": repr(chosen),
                  "same": chosen == reference, "state": state, "resumed": resumed == chosen,
                  "copied": copied == chosen,
                  "resume_calls": CALLS[before:]}}))
"""


@pytest.mark.parametrize(
    ("free_chunks", "order", "blocks"),
    [(8, "BlockShuffleOrder", 2), (1 << 20, "UniformOrder", 0)],
)
def test_device_residency_with_the_default_budget_chooses_its_order_at_the_pass(
    store: Path, free_chunks: int, order: str, blocks: int
) -> None:
    """No ``order`` given: the default order depends on how many chunks fit the GPU's
    share, which is asked for when the first pass starts, on the consumer's thread; the
    order is the one the same budget given would make, and ``state_dict()`` carries it,
    so a loader resuming there (or a copy) takes it whatever its GPU has free."""
    chunk_bytes = 16 * 3 * 4  # build_version: 16-row chunks of 3 float32 features
    headroom = 2 << 30  # cuda_budget leaves 2 GiB of the free memory
    budget = free_chunks * chunk_bytes
    free, total = headroom + budget, 1 << 40
    script = DEFAULT_ORDER_SCRIPT.format(
        store=str(store), window=WINDOW, free=free, total=total, budget=budget
    )
    seen = run_child(script)
    assert seen["built"] == []  # building and unpickling
    assert [call["args"] for call in seen["asked"]] == [["cuda:0"]]
    assert {call["thread"] for call in seen["asked"]} == {"MainThread"}
    assert seen["order"].startswith(order), seen["order"]
    assert seen["same"], seen["order"]
    assert seen["state"]["resident_block_chunks"] == blocks
    assert seen["resumed"]
    assert seen["copied"]
    assert seen["resume_calls"] == []
