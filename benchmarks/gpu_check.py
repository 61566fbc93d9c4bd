"""GPU check: H2D bandwidth, the loader's GPU modes, data stall and correctness, in one table.

One command on a machine with an NVIDIA GPU::

    python benchmarks/gpu_check.py --rows 250000 --seconds 2 --json   # the first GPU run
    python benchmarks/gpu_check.py                 # workload D1, 3 s per measurement
    python benchmarks/gpu_check.py --json          # writes results/gpu-check-<date>.json too
    python benchmarks/gpu_check.py --quick         # a tiny store, well under a minute
    python benchmarks/gpu_check.py --rows 100000   # D1's shape with fewer rows per symbol

Every correctness row that ran says ``pass`` or ``FAIL``; one that could not run says
why (``no CUDA``, ``not checked: ...``, ``skipped: ...``) and is never a pass. The
seconds each section took are printed at the end and written to the JSON.

Rows, in the order they are measured:

- ``fences``: the fence path first: ``pin_memory=True`` without a device, the user's own
  ``x.cuda(non_blocking=True)`` queued after ``torch.cuda._sleep`` so the GPU lags, an
  exact checksum (the float bits as integers, summed on the GPU) of every batch against
  the host path's batch of the same epoch and step, 3 epochs, both engines: wrong
  batches, which must be 0; the same with ``x.to(device, non_blocking=True)`` to the last
  GPU and no ``set_device`` (cuda:0 stays current; on one GPU the two are the same
  device); and a negative control with reader fences removed, which must show wrong
  batches (else the check could not see a refilled buffer);
- ``lagged``: the same lagged checksum for ``CudaDelivery`` (``device="cuda"``) and for
  DALI on the GPU in float32, float16 and bfloat16, over 64 batches of windows spread
  over the store: one pass abandoned a third of the way in (its iterator dropped, as
  ``break`` does), then a whole pass checked; ``CudaDelivery`` against the host path's
  bits, DALI (which normalizes on the GPU) against its own first pass read back at every
  batch, itself compared with the host path within the dtype's rounding;
- ``resident``: device residency under the same lag, each batch's GPU checksum against
  the host path's batch of the same order and step, 2 epochs: the whole store on the
  device, and a budget of 8 chunks, so chunks are evicted and copied again on the
  loader's copy stream while gathers queued on the lagging current stream may still
  read the slots they overwrite: wrong batches, which must be 0 (and evictions, which
  must not be);
- ``pinned``: DALI's CPU pipeline with ``pin_memory=True`` and no device hands out
  page-locked batches (``is_pinned()``, features and labels) for float32, float16 and
  bfloat16, so the user's ``non_blocking`` copies stay asynchronous: pinned batches,
  which must be all;
- ``lazy``: in a fresh child process, ``torch.cuda.is_initialized()`` after building
  loaders configured for the GPU (``device="cuda"``, ``pin_memory=True`` without a device,
  device residency with its default budget, DALI on the GPU) and after unpickling them:
  must be 0;
- ``contexts``: in that child, after 4 batches of each loader, the GPUs on which it holds
  a primary CUDA context (torch's query): only the rank's (with several GPUs the child
  is ``LOCAL_RANK`` N-1 without ``set_device``); and the GPUs ``nvidia-smi`` (else NVML)
  lists the child's pid on, or ``not checked`` where it lists none (a PID namespace);
- ``memory``: torch's pinned host allocator (``host_memory_stats``) and device memory
  (``memory_allocated``, and the driver's count for information) after each of 5 passes
  of ``CudaDelivery``, the user's copy, device residency and DALI: growth from pass 2 to
  pass 5 under half a batch;
- ``compile``: a ``torch.compile(mode="reduce-overhead")`` step (CUDA graphs captured
  and replayed while the loader's threads run) on 8 batches per delivery mode, equal to
  the eager step; ``skipped`` without triton, ``not checked`` if inductor ran it without
  CUDA graphs or the compiler fails on a plain tensor;
- ``sweep``: ``CudaDelivery`` under a GPU step of 0.25, 1 and 5 ms (``torch.cuda._sleep``
  calibrated to this GPU's cycles, after a tiny kernel that reads the batch) for batches
  of 256 and 2048, with the host never waiting for the step it just queued (only for
  the one 4 steps back, as a loop that reads an old loss): stall %, delivered GB/s, and
  that rate as a share of pinned ``cudaMemcpy`` of the same batch bytes back to back;
- ``h2d``: host-to-device copy bandwidth of 256 MiB from pageable and from pinned memory
  (``Tensor.copy_``, i.e. ``cudaMemcpy``), and the loader's own copy (``CudaDelivery`` out
  of a pinned batch slot on its side stream), as a share of the pinned bandwidth;
- ``loader``: samples/s and delivered GB/s for the host-pinned (torch backend,
  ``device="cuda"``), DALI (normalization on the GPU) and device-resident modes;
- ``stall``: the share of wall time a training step of fixed GPU work (a matmul loop sized
  to about 5 ms) waits for data, per mode and for ``torch.utils.data.DataLoader`` over
  ``np.load(mmap_mode="r")`` windows: ``1 - steps * step_alone / wall``, so time the GPU
  waits for a copy counts as well as time the host waits for a batch;
- ``traffic``: host-to-device bytes of one epoch, window bytes (host-pinned, DALI) vs
  the chunk bytes device residency copied (once);
- ``correct``: the first batches of every mode equal the host path's (same order, same
  normalization);
- ``goal``: the issue's goals (stall under 2%, device-resident at least 3x host-pinned,
  loader H2D at least 80% of pinned ``cudaMemcpy``).

Time on one H200 with ``--rows 250000 --seconds 2`` (an estimate from batch counts; not
yet measured): the bounded checks (fences, lagged, resident, pinned, memory, compile:
about 10,000 batches of 256 in all, 1 to 2 ms each, most behind 1 ms of GPU sleep, and
about 15 loaders and 8 DALI pipelines built) and the child process under 2 minutes,
the first ``torch.compile`` 0.5 to 1 minute, the sweep and h2d about 20 s, the timed rows
(three warming passes of 15,600 batches, then 2 s per measurement) about 1 minute:
about 4 minutes, under the 8 allowed, plus writing the store once.

Without CUDA everything runs on the CPU instead (the DALI pipeline on the CPU, device
residency on host tensors, a sleeping step as a simulated accelerator) and the rows that
need a GPU say ``no CUDA``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import datetime
import functools
import gc
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils.data

from ticktensor.bench.baselines import MmapWindows
from ticktensor.bench.machine import describe_run
from ticktensor.bench.workload import Workload, prepare
from ticktensor.loaders import (
    DaliOptions,
    DataLoader,
    FastOptions,
    ResidentOptions,
    UniformOrder,
    WindowDataset,
)
from ticktensor.loaders.batch_source import Delivery, Slot
from ticktensor.loaders.dali import dali_available
from ticktensor.store import FeatureStats, Store, StoreVersion

RESULTS = Path(__file__).parent / "results"
NO_CUDA = "no CUDA"
Row = dict[str, Any]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny store, short runs")
    parser.add_argument("--seconds", type=float, help="per measurement (default 3, quick 0.4)")
    parser.add_argument("--step-ms", type=float, default=5.0, help="training step (default 5)")
    parser.add_argument("--rows", type=int, help="rows per symbol of D1 (default 1,000,000)")
    parser.add_argument("--json", nargs="?", const="", metavar="FILE", help="write the rows")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    seconds = args.seconds or (0.4 if args.quick else 3.0)
    if not cuda:
        # Device residency then cuts windows with small torch CPU ops; on a loaded machine
        # OpenMP's waiting threads made each one take milliseconds instead of microseconds.
        torch.set_num_threads(1)
    with contextlib.ExitStack() as stack:
        if args.quick:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu-check-")))
            workload = Workload(
                symbols=4, rows=20_000, features=8, window=32, batch=64, chunk_rows=4096
            )
            workload = dataclasses.replace(workload, cache_dir=tmp)
        else:
            workload = Workload(cache_dir=Path("build/gpu-check"))
            if args.rows:
                workload = workload.resized(args.rows)
        version = _with_stats(prepare(workload, ["none"], say=print), workload)
        sections: dict[str, float] = {}
        rows = run(
            version,
            workload,
            cuda=cuda,
            seconds=seconds,
            step_s=args.step_ms / 1e3,
            sections=sections,
        )
    _print(rows, cuda)
    spent = ", ".join(f"{name} {s:.1f}" for name, s in sections.items())
    print(f"# seconds per section: {spent}; total {sum(sections.values()):.1f}")
    if args.json is not None:
        path = Path(args.json) if args.json else RESULTS / f"gpu-check-{datetime.date.today()}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "run": describe_run(),
            "cuda": cuda,
            "workload": dataclasses.asdict(workload),
            "sections_s": sections,
        }
        path.write_text(json.dumps(report | {"rows": rows}, indent=1, default=str) + "\n")
        print(f"# wrote {path}")
    return 0


def _with_stats(version: StoreVersion, workload: Workload) -> StoreVersion:
    """The version with feature statistics (first series), so DALI has something to apply."""
    if version.stats is not None:
        return version
    values = np.load(workload.npy_dir() / "values-000.npy", mmap_mode="r")
    names = tuple(version.feature_names)
    stats = FeatureStats(
        names,
        tuple(float(m) for m in values.mean(axis=0)),
        tuple(float(s) for s in values.std(axis=0)),
        int(values.shape[0]),
        (0, 2**62),
    )
    store = Store.open(str(version.location.path("")))
    return store.commit(stats=stats, message="gpu check: feature statistics")


def run(
    version: StoreVersion,
    workload: Workload,
    *,
    cuda: bool,
    seconds: float,
    step_s: float,
    sections: dict[str, float] | None = None,
) -> list[Row]:
    """Every row of the check; ``sections`` receives each section's wall seconds."""
    spent = {} if sections is None else sections

    def timed(name: str, rows_of: Callable[[], list[Row]]) -> list[Row]:
        started = time.perf_counter()
        found = rows_of()
        spent[name] = time.perf_counter() - started
        return found

    device = torch.device("cuda") if cuda else None
    raw = WindowDataset(version, workload.window)
    normed = WindowDataset(version, workload.window, normalize=True)
    batch = workload.batch
    order = UniformOrder(seed=0)
    common: dict[str, Any] = {"batch_size": batch, "drop_last": True}
    modes: dict[str, Callable[[], Iterable[Any]]] = {
        "host-pinned": lambda: DataLoader(
            normed, pin_memory=True, **common, fast=FastOptions(order=order, device=device)
        ),
        "device-resident": lambda: DataLoader(
            normed,
            **common,
            fast=FastOptions(order=order, device=device or "cpu", residency="device"),
        ),
    }
    if dali_available():
        modes["dali"] = lambda: DataLoader(
            raw, **common, fast=FastOptions(order=order, device=device, backend=DaliOptions())
        )
    where = "cuda" if cuda else f"cpu ({NO_CUDA})"
    rows = timed("fences", lambda: _fence_rows(normed, order, batch, cuda))
    rows += timed("lagged", lambda: _lagged_rows(normed, raw, order, batch, cuda))
    rows += timed("resident", lambda: _resident_rows(raw, workload, cuda))
    rows += timed("pinned", lambda: _pinned_rows(raw, order, batch, cuda))
    rows += timed("lazy", lambda: _lazy_rows(version, workload, cuda))
    rows += timed("memory", lambda: _memory_rows(normed, raw, order, batch, cuda))
    rows += timed("compile", lambda: _compile_rows(normed, raw, order, workload, cuda))
    rows += timed("sweep", lambda: _sweep_rows(normed, order, workload, cuda, seconds))
    rows += timed("h2d", lambda: _h2d_rows(raw, workload, cuda, seconds))
    started = time.perf_counter()
    # One loader per mode for every timed row, warmed by a whole untimed pass (device
    # residency loads its chunks then), so no timed window pays for building a loader.
    warmed = {name: _warmed(make()) for name, make in modes.items()}
    # The warm pass was the resident loader's first epoch: what it copied to the device.
    resident_h2d = int(warmed["device-resident"].stats()["resident"]["h2d_bytes"])
    for name, loader in warmed.items():
        rate = _throughput(lambda loader=loader: loader, seconds, cuda)
        gbps = rate * workload.sample_bytes / 1e9
        rows.append(_row("loader", name, rate, "samples/s", where, gb_s=gbps))
    if not dali_available():
        rows.append(_row("loader", "dali", None, "samples/s", "nvidia-dali not installed"))
    rows.extend(_traffic(len(normed), workload, resident_h2d))
    mmap = MmapWindows(workload.npy_dir(), workload.symbols, workload.window)
    torch_loader = torch.utils.data.DataLoader(
        mmap, batch_size=batch, shuffle=True, drop_last=True, pin_memory=cuda
    )
    warmed["torch DataLoader"] = torch_loader
    step = _Step(step_s, cuda)
    for name, loader in warmed.items():
        passes = (
            (lambda loader=loader: _to_device(loader, device))
            if loader is torch_loader
            else (lambda loader=loader: loader)
        )
        stall = _stall(passes, step, seconds)
        note = "matmul step" if cuda else f"sleep step, simulated ({NO_CUDA})"
        rows.append(_row("stall", name, 100 * stall, "%", note, step_ms=step.alone_s * 1e3))
    rows.extend(_correctness(modes, normed, order, batch))
    rows.extend(_goals(rows, cuda))
    spent["loader, stall, correct"] = time.perf_counter() - started
    return rows


# mode: (engine, fenced, the copy names its device with ``x.to(device)``)
_FENCE_MODES = {
    "pinned, user copy (python)": ("python", True, False),
    "pinned, user copy (native)": ("native", True, False),
    "pinned, .to(device) (native)": ("native", True, True),
    "negative control: no fences": ("python", False, False),
}


def _fence_rows(
    normed: WindowDataset, order: UniformOrder, batch: int, cuda: bool, epochs: int = 3
) -> list[Row]:
    """Wrong batches of the fence path per engine, and of the control without fences."""
    if not cuda:
        return [
            _row("fences", mode, None, "wrong batches", NO_CUDA, ok=None) for mode in _FENCE_MODES
        ]
    return _fence_rows_cuda(normed, order, batch, epochs)  # pragma: no cover - GPU only


_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def _checksum(x: torch.Tensor) -> torch.Tensor:
    """An exact checksum: the float bits as integers, summed (order does not matter)."""
    return x.contiguous().view(_BITS[x.dtype]).to(torch.int64).sum()


def _sync_all() -> None:  # pragma: no cover - GPU only
    """Wait for every visible GPU (``torch.cuda.synchronize()`` waits for the current one)."""
    for index in range(torch.cuda.device_count()):
        torch.cuda.synchronize(index)


@contextlib.contextmanager
def _no_fences() -> Iterator[None]:  # pragma: no cover - GPU only
    """Loaders whose first pass starts inside deliver without reader fences."""
    build = Delivery.build

    def unfenced(*args: Any, **kwargs: Any) -> Delivery:
        return dataclasses.replace(build(*args, **kwargs), fences=None)

    Delivery.build = unfenced  # type: ignore[method-assign]
    try:
        yield
    finally:
        Delivery.build = build  # type: ignore[method-assign]


def _fence_rows_cuda(
    normed: WindowDataset, order: UniformOrder, batch: int, epochs: int, limit: int = 64
) -> list[Row]:  # pragma: no cover - GPU only
    common: dict[str, Any] = {"batch_size": batch, "drop_last": True}
    reference = DataLoader(normed, **common, fast=FastOptions(order=order))
    expected = []
    for epoch in range(epochs):
        reference.set_epoch(epoch)
        expected.append([int(_checksum(x)) for x, _ in _first(reference, limit)])
    # The last GPU, named by the copy while cuda:0 stays current (no set_device): the
    # fence must follow the copy to its device (on one GPU it is the current one).
    current = torch.cuda.current_device()
    target = torch.device("cuda", torch.cuda.device_count() - 1)
    rows = []
    for mode, (engine, fenced, named) in _FENCE_MODES.items():
        loader = DataLoader(
            normed, pin_memory=True, **common, fast=FastOptions(order=order, engine=engine)
        )
        sums: list[list[torch.Tensor]] = []
        with contextlib.nullcontext() if fenced else _no_fences():
            for epoch in range(epochs):
                loader.set_epoch(epoch)
                got = []
                for x, _ in loader:  # batch by batch: the loop keeps only the device copy
                    if named:
                        with torch.cuda.device(target):  # the lag on the copy's stream
                            torch.cuda._sleep(2_000_000)  # type: ignore[no-untyped-call]
                        copy = x.to(target, non_blocking=True)
                    else:
                        torch.cuda._sleep(2_000_000)  # type: ignore[no-untyped-call]  # ~1 ms
                        copy = x.cuda(non_blocking=True)
                    got.append(_checksum(copy))
                    del x, copy
                    if len(got) == limit:
                        break
                sums.append(got)
        _sync_all()
        total = sum(len(e) for e in expected)
        wrong = sum(
            int(g) != e
            for got, want in zip(sums, expected, strict=True)
            for g, e in zip(got, want, strict=True)
        )
        note = f"of {total} batches, {epochs} epochs, GPU lagging"
        if named:
            alone = " (one GPU: the current one)" if target.index == current else ""
            note += f"; x.to('{target}') with cuda:{current} current{alone}, no set_device"
        ok = wrong == 0 if fenced else wrong > 0  # the control must see refilled buffers
        rows.append(_row("fences", mode, float(wrong), "wrong batches", note, ok=ok))
    return rows


_RESIDENT_MODES = ("whole store, lagging GPU", "8-chunk budget, lagging GPU")
_DALI_DTYPES = ("float32", "float16", "bfloat16")


def _resident_rows(raw: WindowDataset, workload: Workload, cuda: bool) -> list[Row]:
    """Wrong batches of device residency under a lagging current stream."""
    if not cuda:
        return [
            _row("resident", mode, None, "wrong batches", NO_CUDA, ok=None)
            for mode in _RESIDENT_MODES
        ]
    return _resident_rows_cuda(raw, workload)  # pragma: no cover - GPU only


def _resident_rows_cuda(
    raw: WindowDataset, workload: Workload, epochs: int = 2, device: str = "cuda"
) -> list[Row]:  # pragma: no cover - GPU only
    chunk_bytes = workload.chunk_rows * workload.features * 4
    slots = 8
    budgets = dict(zip(_RESIDENT_MODES, (None, slots * chunk_bytes), strict=True))
    # Enough batches a pass that the small budget's pool fills and evicts (its default
    # order shuffles blocks of 2 chunks); the whole store copies each chunk once.
    per_chunk = max(1, workload.chunk_rows // workload.batch)
    limits = dict(zip(_RESIDENT_MODES, (256, (slots + 4) * per_chunk), strict=True))
    rows = []
    for mode, budget in budgets.items():
        residency = ResidentOptions(budget_bytes=budget)
        options = FastOptions(seed=0, device=device, residency=residency)
        loader = DataLoader(
            raw, batch_size=workload.batch, shuffle=True, drop_last=True, fast=options
        )
        reference = DataLoader(
            raw, batch_size=workload.batch, drop_last=True, fast=FastOptions(order=loader.order)
        )
        wrong = total = 0
        for epoch in range(epochs):
            reference.set_epoch(epoch)
            want = []
            for x, _ in reference:  # one batch at a time: the ring's buffers are reused
                want.append(int(_checksum(x.to(device))))
                if len(want) == limits[mode]:
                    break
            loader.set_epoch(epoch)
            got = []
            for x, _ in loader:
                got.append(_checksum(x))  # queued on the current stream, behind the sleep
                if len(got) == len(want):
                    break
                torch.cuda._sleep(2_000_000)  # type: ignore[no-untyped-call]  # about 1 ms
            torch.cuda.synchronize()
            total += len(want)
            wrong += sum(int(g) != w for g, w in zip(got, want, strict=True))
        stats = loader.stats()["resident"]
        # The small budget must evict, else it checked nothing the whole store did not.
        evicted = budget is None or int(stats["evictions"]) > 0
        note = (
            f"of {total} batches, {epochs} epochs, {loader.order!r}; "
            f"{stats['slots']} slots, {stats['evictions']} evictions"
        )
        rows.append(
            _row(
                "resident",
                mode,
                float(wrong),
                "wrong batches",
                note,
                ok=wrong == 0 and evicted,
                evictions=int(stats["evictions"]),
            )
        )
    return rows


def _pinned_rows(raw: WindowDataset, order: UniformOrder, batch: int, cuda: bool) -> list[Row]:
    """Page-locked batches of DALI's CPU pipeline with ``pin_memory=True``, per dtype."""
    modes = [f"dali cpu {dtype}" for dtype in _DALI_DTYPES]
    if not dali_available():
        why = "nvidia-dali not installed"
        return [_row("pinned", m, None, "pinned batches", why, ok=None) for m in modes]
    if not cuda:  # nothing is page-locked without CUDA
        return [_row("pinned", mode, None, "pinned batches", NO_CUDA, ok=None) for mode in modes]
    return _pinned_rows_cuda(raw, order, batch)  # pragma: no cover - GPU only


def _pinned_rows_cuda(
    raw: WindowDataset, order: UniformOrder, batch: int, limit: int = 16
) -> list[Row]:  # pragma: no cover - GPU only
    rows = []
    for dtype in _DALI_DTYPES:
        options = FastOptions(order=order, backend=DaliOptions(dtype=dtype))
        loader = DataLoader(raw, batch_size=batch, pin_memory=True, drop_last=True, fast=options)
        pinned = total = 0
        for x, y in loader:
            total += 1
            pinned += int(x.is_pinned() and y.is_pinned())
            del x, y
            if total == limit:
                break
        note = f"of {total}, pin_memory=True, device=None; {loader.stats()['memory']}"
        ok = pinned == total > 0
        rows.append(
            _row("pinned", f"dali cpu {dtype}", float(pinned), "pinned batches", note, ok=ok)
        )
    return rows


_SUBSET_BATCHES = 64
_CUDA_DELIVERY = "CudaDelivery, device=cuda"
_USER_COPY = "pinned, user copy"
_LAGGED_MODES = (_CUDA_DELIVERY, *(f"dali gpu {dtype}" for dtype in _DALI_DTYPES))
_RESIDENT_WHOLE = "resident, whole store"
_PER_MODE = (_CUDA_DELIVERY, _USER_COPY, _RESIDENT_WHOLE, "dali gpu float32")
_NO_DALI = "nvidia-dali not installed"


def _spread(dataset: WindowDataset, samples: int) -> WindowDataset:
    """``samples`` windows spread evenly over ``dataset`` (every chunk is read), so that a
    whole pass is a bounded number of batches whatever the store's size."""
    count = min(samples, len(dataset))
    return dataset.subset(np.linspace(0, len(dataset) - 1, count).astype(np.int64))


def _gpu_modes(
    normed: WindowDataset, raw: WindowDataset, order: UniformOrder, batch: int
) -> dict[str, Callable[[], DataLoader]]:  # pragma: no cover - GPU only
    """A loader per way batches reach the GPU, all in ``order`` (DALI: one per dtype)."""
    common: dict[str, Any] = {"batch_size": batch, "drop_last": True}
    on_gpu = FastOptions(order=order, device="cuda")
    resident = FastOptions(order=order, device="cuda", residency="device")
    modes: dict[str, Callable[[], DataLoader]] = {
        _CUDA_DELIVERY: functools.partial(
            DataLoader, normed, pin_memory=True, **common, fast=on_gpu
        ),
        _USER_COPY: functools.partial(
            DataLoader, normed, pin_memory=True, **common, fast=FastOptions(order=order)
        ),
        _RESIDENT_WHOLE: functools.partial(DataLoader, normed, **common, fast=resident),
    }
    for dtype in _DALI_DTYPES if dali_available() else ():
        dali = FastOptions(order=order, device="cuda", backend=DaliOptions(dtype=dtype))
        modes[f"dali gpu {dtype}"] = functools.partial(DataLoader, raw, **common, fast=dali)
    return modes


def _on_gpu(mode: str, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - GPU only
    """The batch on the GPU: the user's own copy in the pinned mode, else as delivered."""
    return x.cuda(non_blocking=True) if mode == _USER_COPY else x


def _lagged_rows(
    normed: WindowDataset, raw: WindowDataset, order: UniformOrder, batch: int, cuda: bool
) -> list[Row]:
    """Wrong batches of ``CudaDelivery`` and DALI on the GPU under a lagging current
    stream, in a whole pass that follows a pass abandoned in the middle."""
    if not cuda:
        return [
            _row("lagged", mode, None, "wrong batches", NO_CUDA, ok=None) for mode in _LAGGED_MODES
        ]
    return _lagged_rows_cuda(normed, raw, order, batch)  # pragma: no cover - GPU only


def _lagged_rows_cuda(
    normed: WindowDataset,
    raw: WindowDataset,
    order: UniformOrder,
    batch: int,
    limit: int = _SUBSET_BATCHES,
) -> list[Row]:  # pragma: no cover - GPU only
    normed, raw = _spread(normed, limit * batch), _spread(raw, limit * batch)
    modes = _gpu_modes(normed, raw, order, batch)
    host = DataLoader(normed, batch_size=batch, drop_last=True, fast=FastOptions(order=order))
    expected = [(x.clone(), y.clone()) for x, y in host]
    host_sums = [(int(_checksum(x)), int(_checksum(y))) for x, y in expected]
    abandon = limit // 3
    rows = []
    for mode in _LAGGED_MODES:
        if mode not in modes:
            rows.append(_row("lagged", mode, None, "wrong batches", _NO_DALI, ok=None))
            continue
        loader = modes[mode]()
        if mode == _CUDA_DELIVERY:  # a copy: the host path's bits
            want, off, source = host_sums, 0, "host path"
        else:  # DALI normalizes on the GPU: its own pass, synchronized at every batch
            want, off = _synchronized_pass(loader, expected)
            source = f"the same pipeline synced every batch ({off} off the host path)"
        abandoned = _lagging(loader)
        for _ in range(abandon):
            next(abandoned)
        abandoned.close()  # what ``break`` does to a pass: its iterator is dropped mid-epoch
        got = list(_lagging(loader))
        torch.cuda.synchronize()
        sums = [(int(x), int(y)) for x, y in got]
        wrong = sum(g != w for g, w in zip(sums, want, strict=False)) + abs(len(sums) - len(want))
        note = (
            f"of {len(want)} batches, a whole pass after one abandoned at batch {abandon}, "
            f"GPU lagging; against {source}"
        )
        ok = wrong == 0 and off == 0 and len(want) == limit
        rows.append(_row("lagged", mode, float(wrong), "wrong batches", note, ok=ok))
        del loader
    return rows


def _lagging(
    loader: DataLoader,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:  # pragma: no cover - GPU only
    """Checksums of epoch 0's batches, each queued behind about 1 ms of GPU sleep."""
    loader.set_epoch(0)
    for x, y in loader:
        torch.cuda._sleep(2_000_000)  # type: ignore[no-untyped-call]
        yield _checksum(x), _checksum(y)
        del x, y


def _synchronized_pass(
    loader: DataLoader, expected: list[tuple[torch.Tensor, torch.Tensor]]
) -> tuple[list[tuple[int, int]], int]:  # pragma: no cover - GPU only
    """Epoch 0's checksums read back at every batch (no lag), and how many batches are
    not close to the host path's (the dtype's rounding allowed)."""
    loader.set_epoch(0)
    sums, off = [], 0
    for step, (x, y) in enumerate(loader):
        sums.append((int(_checksum(x)), int(_checksum(y))))
        tol = 1e-5 if x.dtype == torch.float32 else 1e-2
        if step >= len(expected):
            off += 1
            continue
        want_x, want_y = expected[step]
        close = torch.allclose(x.float().cpu(), want_x, rtol=tol, atol=tol)
        off += not (close and torch.equal(y.cpu(), want_y))
    return sums, off + max(0, len(expected) - len(sums))


_LAZY_CHILD = r"""
import json, os, pickle, shutil, subprocess, sys
import torch
from ticktensor import DataLoader
from ticktensor.loaders import DaliOptions, FastOptions, WindowDataset
from ticktensor.loaders.dali import dali_available

store, window, batch, local = json.loads(sys.argv[1])
normed = WindowDataset(store, window, normalize=True)
raw = WindowDataset(store, window)
world = {"rank": 0, "world_size": 1}
made = {
    "device=cuda": lambda: DataLoader(
        normed, batch_size=batch, pin_memory=True, fast=FastOptions(device="cuda", **world)
    ),
    "pin_memory, no device": lambda: DataLoader(
        normed, batch_size=batch, pin_memory=True, fast=FastOptions(**world)
    ),
    "resident, default budget": lambda: DataLoader(
        normed, batch_size=batch, shuffle=True,
        fast=FastOptions(device="cuda", residency="device", **world),
    ),
}
if dali_available():
    made["dali gpu"] = lambda: DataLoader(
        raw, batch_size=batch, fast=FastOptions(device="cuda", backend=DaliOptions(), **world)
    )
first, loaders, copies = {}, {}, {}
for name, make in made.items():
    loaders[name] = make()
    if torch.cuda.is_initialized():
        first.setdefault("built", name)
built = torch.cuda.is_initialized()
for name, loader in loaders.items():
    copies[name] = pickle.loads(pickle.dumps(loader))
    if torch.cuda.is_initialized():
        first.setdefault("unpickled", name)
unpickled = torch.cuda.is_initialized()
device = torch.device("cuda", local)
for loader in copies.values():
    for step, (x, y) in enumerate(loader):
        x = x.to(device, non_blocking=True)  # nothing to do where the loader delivered there
        if step == 3:
            break
    del x, y
torch.cuda.synchronize(device)
has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
count = torch.cuda.device_count()
contexts = None if has_context is None else [i for i in range(count) if has_context(i)]
pid, smi, why = str(os.getpid()), None, ""
tool = shutil.which("nvidia-smi")
if tool is not None:
    out = subprocess.run(
        [tool, "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    fields = [[part.strip() for part in line.split(",")] for line in out.stdout.splitlines()]
    mine = {f[1] for f in fields if len(f) >= 2 and f[0] == pid}
    smi = len(mine) or None
    why = "" if smi else f"nvidia-smi (exit {out.returncode}) lists no process {pid}"
else:
    try:
        import pynvml
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        smi = sum(
            any(str(p.pid) == pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h))
            for h in handles
        ) or None
        why = "" if smi else f"NVML lists no process {pid}"
    except Exception as exc:
        why = f"neither nvidia-smi nor pynvml ({type(exc).__name__})"
print(json.dumps({"names": list(made), "built": built, "unpickled": unpickled, "first": first,
                  "contexts": contexts, "count": count, "smi": smi, "why": why}))
"""

_LAZY_ROWS = (
    ("lazy", "after building GPU loaders", "CUDA initialised (1: yes)"),
    ("lazy", "after unpickling them", "CUDA initialised (1: yes)"),
    ("contexts", "primary contexts (torch)", "CUDA contexts"),
    ("contexts", "GPUs with this pid (smi)", "GPUs"),
)


def _lazy_rows(version: StoreVersion, workload: Workload, cuda: bool) -> list[Row]:
    """In a fresh child process: CUDA not initialised by building and unpickling loaders
    configured for the GPU; after a few batches of each, a context on the rank's GPU only."""
    if not cuda:
        return [_row(check, mode, None, unit, NO_CUDA, ok=None) for check, mode, unit in _LAZY_ROWS]
    return _lazy_rows_cuda(version, workload)  # pragma: no cover - GPU only


def _lazy_rows_cuda(version: StoreVersion, workload: Workload) -> list[Row]:  # pragma: no cover
    # With several GPUs the child is local rank N-1 (no set_device): nothing may land on 0.
    count = torch.cuda.device_count()
    local = count - 1
    env = {key: value for key, value in os.environ.items() if key != "LOCAL_RANK"}
    if count > 1:
        env["LOCAL_RANK"] = str(local)
    arg = json.dumps([str(version.location.path("")), workload.window, workload.batch, local])
    done = subprocess.run(
        [sys.executable, "-c", _LAZY_CHILD, arg],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        why = f"child process failed (exit {done.returncode}): {tail}"
        return [_row(check, mode, None, unit, why, ok=False) for check, mode, unit in _LAZY_ROWS]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    names = ", ".join(seen["names"])
    rank = f"LOCAL_RANK={local} of {count} GPUs" if count > 1 else "one GPU"
    rows = []
    for (check, mode, unit), key in zip(_LAZY_ROWS[:2], ("built", "unpickled"), strict=True):
        culprit = seen["first"].get(key)
        note = names + (f"; first initialised by {culprit}" if culprit else "")
        rows.append(_row(check, mode, float(seen[key]), unit, note, ok=not seen[key]))
    contexts = seen["contexts"]
    check, mode, unit = _LAZY_ROWS[2]
    if contexts is None:
        rows.append(_row(check, mode, None, unit, "not checked: no primary-context query", ok=None))
    else:
        note = f"on GPUs {contexts}, expected [{local}] ({rank}), after 4 batches of each"
        rows.append(_row(check, mode, float(len(contexts)), unit, note, ok=contexts == [local]))
    check, mode, unit = _LAZY_ROWS[3]
    smi = seen["smi"]
    if smi is None:
        rows.append(_row(check, mode, None, unit, f"not checked: {seen['why']}", ok=None))
    else:
        note = f"GPUs on which this process holds a context ({rank}), by the driver"
        rows.append(_row(check, mode, float(smi), unit, note, ok=smi == 1))
    return rows


def _memory_rows(
    normed: WindowDataset, raw: WindowDataset, order: UniformOrder, batch: int, cuda: bool
) -> list[Row]:
    """Pinned and device memory after each of 5 passes: flat after the first."""
    if not cuda:
        return [_row("memory", mode, None, "MiB growth", NO_CUDA, ok=None) for mode in _PER_MODE]
    return _memory_rows_cuda(normed, raw, order, batch)  # pragma: no cover - GPU only


def _memory_now() -> tuple[int | None, int, int]:  # pragma: no cover - GPU only
    """Pinned bytes of torch's host allocator (None without its statistics), device bytes
    allocated by torch, device bytes in use by the driver's count, with nothing pending."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # frees blocks whose stream uses are done, so they count out
    host = torch.cuda.host_memory_stats() if hasattr(torch.cuda, "host_memory_stats") else {}
    pinned = host.get("allocated_bytes.current")
    free, total = torch.cuda.mem_get_info()
    return pinned, torch.cuda.memory_allocated(), total - free


def _mib(values: list[Any]) -> str:
    return "/".join(f"{v / 2**20:.1f}" for v in values)


def _memory_rows_cuda(
    normed: WindowDataset,
    raw: WindowDataset,
    order: UniformOrder,
    batch: int,
    passes: int = 5,
    limit: int = 48,
) -> list[Row]:  # pragma: no cover - GPU only
    samples = limit * batch
    modes = _gpu_modes(_spread(normed, samples), _spread(raw, samples), order, batch)
    rows = []
    for mode in _PER_MODE:
        if mode not in modes:
            rows.append(_row("memory", mode, None, "MiB growth", _NO_DALI, ok=None))
            continue
        loader = modes[mode]()
        seen, slack = [], 0
        for _ in range(passes):
            for x, _y in loader:
                slack = x.nbytes // 2  # half a batch: a batch kept per pass is growth
                _on_gpu(mode, x)  # the user's copy, dropped at once
            del x, _y  # nothing of the last batch kept while memory is read
            seen.append(_memory_now())
        del loader
        gc.collect()
        pinned, device, used = ([s[i] for s in seen] for i in range(3))
        # The first pass warms (allocator caches, pools); passes 2 to 5 must not grow.
        grow_device = device[-1] - device[1]
        grow_pinned = None if None in pinned else pinned[-1] - pinned[1]
        shown = "" if grow_pinned is None else f"pinned {_mib(pinned)} MiB, "
        note = (
            f"after each of {passes} passes of {limit} batches: {shown}device {_mib(device)} MiB"
            f", driver in use {(used[-1] - used[1]) / 2**20:+.1f} MiB (pass 2 to {passes})"
        )
        if grow_pinned is None:
            note += "; pinned not checked (no host allocator statistics)"
            value, ok = max(0, grow_device) / 2**20, None
        else:
            value = (max(0, grow_device) + max(0, grow_pinned)) / 2**20
            ok = grow_device <= slack and grow_pinned <= slack
        rows.append(_row("memory", mode, value, "MiB growth", note, ok=ok))
    return rows


def _compile_unavailable() -> str | None:
    """Why ``torch.compile(mode="reduce-overhead")`` cannot run here, if it cannot."""
    if not hasattr(torch, "compile"):
        return "skipped: this torch has no torch.compile"
    if importlib.util.find_spec("triton") is None:
        return "skipped: triton is not installed (inductor needs it for CUDA)"
    return None


def _compile_rows(
    normed: WindowDataset, raw: WindowDataset, order: UniformOrder, workload: Workload, cuda: bool
) -> list[Row]:
    """A ``torch.compile(mode="reduce-overhead")`` step (CUDA graphs) per delivery mode,
    captured and replayed while the loader's threads run: equal to the eager step."""
    why = NO_CUDA if not cuda else _compile_unavailable()
    if why is not None:
        return [
            _row("compile", mode, None, "steps equal to eager", why, ok=None) for mode in _PER_MODE
        ]
    return _compile_rows_cuda(normed, raw, order, workload)  # pragma: no cover - GPU only


def _cudagraph_skips() -> int:  # pragma: no cover - GPU only
    """How often inductor ran a reduce-overhead graph without CUDA graphs, so far."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def _compile_rows_cuda(
    normed: WindowDataset,
    raw: WindowDataset,
    order: UniformOrder,
    workload: Workload,
    steps: int = 8,
) -> list[Row]:  # pragma: no cover - GPU only
    weights = torch.randn(workload.features, 16, device="cuda")

    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x.float() @ weights).mean(dim=(1, 2))

    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True, dynamic=False)
    unit, batch = "steps equal to eager", workload.batch
    try:  # the compiler itself, on a plain device tensor, before any loader runs
        probe = torch.randn(batch, workload.window, workload.features, device="cuda")
        for _ in range(3):
            torch.compiler.cudagraph_mark_step_begin()
            compiled(probe).clone()
    except Exception as exc:  # reported: the rows cannot be checked
        why = f"not checked: torch.compile fails on a plain tensor: {type(exc).__name__}: {exc}"
        return [_row("compile", mode, None, unit, why[:300], ok=None) for mode in _PER_MODE]
    samples = _SUBSET_BATCHES * batch
    modes = _gpu_modes(_spread(normed, samples), _spread(raw, samples), order, batch)
    rows = []
    for mode in _PER_MODE:
        if mode not in modes:
            rows.append(_row("compile", mode, None, unit, _NO_DALI, ok=None))
            continue
        skips, equal, total = _cudagraph_skips(), 0, 0
        try:
            for x, _ in modes[mode]():
                batch_x = _on_gpu(mode, x)
                torch.compiler.cudagraph_mark_step_begin()
                got = compiled(batch_x)  # read before the next replay overwrites it
                equal += bool(torch.allclose(got, step(batch_x), rtol=1e-3, atol=1e-5))
                total += 1
                if total == steps:
                    break
        except Exception as exc:  # the failure is the finding
            note = f"failed at step {total}: {type(exc).__name__}: {exc}"[:300]
            rows.append(_row("compile", mode, None, unit, note, ok=False))
            continue
        skipped = _cudagraph_skips() - skips
        if skipped:  # ran without a graph: capture beside the loader was not checked
            note = (
                f"not checked: inductor skipped CUDA graphs {skipped}x ({equal} of {total} equal)"
            )
            rows.append(_row("compile", mode, None, unit, note, ok=None))
            continue
        note = f"of {total} steps, mode='reduce-overhead' (CUDA graphs), loader threads running"
        rows.append(_row("compile", mode, float(equal), unit, note, ok=equal == total == steps))
    return rows


_SWEEP_STEPS_MS = (0.25, 1.0, 5.0)
_SWEEP_BATCHES = (256, 2048)


def _sweep_rows(
    normed: WindowDataset, order: UniformOrder, workload: Workload, cuda: bool, seconds: float
) -> list[Row]:
    """Stall % and delivered GB/s of ``CudaDelivery`` per (GPU step time, batch size),
    with no host synchronization on the step just queued."""
    if not cuda:
        return [
            _row("sweep", f"step {ms:g} ms, batch {b}", None, "% stall", NO_CUDA)
            for b in _SWEEP_BATCHES
            for ms in _SWEEP_STEPS_MS
        ]
    return _sweep_rows_cuda(normed, order, workload, seconds)  # pragma: no cover - GPU only


def _sleep_rate() -> float:  # pragma: no cover - GPU only
    """Cycles per second of ``torch.cuda._sleep`` on this GPU (its clock, as it runs now)."""
    torch.cuda._sleep(1_000_000)  # type: ignore[no-untyped-call]
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 20_000_000
    start.record()
    torch.cuda._sleep(cycles)  # type: ignore[no-untyped-call]
    end.record()
    end.synchronize()
    return cycles / (start.elapsed_time(end) / 1e3)


class _SleepStep:  # pragma: no cover - GPU only
    """A GPU step of fixed length that reads the batch: one tiny kernel, then a sleep of
    ``step_s`` worth of cycles; ``alone_s`` is its time with nothing waiting."""

    def __init__(self, step_s: float, cycles_per_s: float, reps: int = 20) -> None:
        self.cycles = max(1, round(step_s * cycles_per_s))
        self.seen = torch.zeros((), device="cuda")
        probe = torch.zeros(1, device="cuda")
        self(probe)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            self(probe)
        end.record()
        end.synchronize()
        self.alone_s = start.elapsed_time(end) / 1e3 / reps

    def __call__(self, x: torch.Tensor) -> None:
        self.seen += x.reshape(-1)[0]  # waits for the batch's copy, as a model would
        torch.cuda._sleep(self.cycles)  # type: ignore[no-untyped-call]


def _unsynced(
    loader: DataLoader, step: _SleepStep, seconds: float, ahead: int
) -> tuple[int, float, int]:  # pragma: no cover - GPU only
    """Steps, wall seconds and bytes delivered in about ``seconds``: the host waits only
    for the step ``ahead`` back (as a loop that reads an old loss does), never the last."""
    batches = _batches(lambda: loader)
    step(next(batches)[0])
    torch.cuda.synchronize()
    pending: collections.deque[torch.cuda.Event] = collections.deque()
    count = delivered = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or count < 5:
        x, y = next(batches)
        step(x)
        delivered += x.nbytes + y.nbytes
        del x, y
        done = torch.cuda.Event(blocking=True)  # type: ignore[no-untyped-call]
        done.record()
        pending.append(done)
        if len(pending) > ahead:
            pending.popleft().synchronize()
        count += 1
    torch.cuda.synchronize()
    wall = time.perf_counter() - started
    del batches
    return count, wall, delivered


def _sweep_rows_cuda(
    normed: WindowDataset, order: UniformOrder, workload: Workload, seconds: float, ahead: int = 4
) -> list[Row]:  # pragma: no cover - GPU only
    cycles_per_s = _sleep_rate()
    rows = []
    for batch in _SWEEP_BATCHES:
        nbytes = batch * workload.sample_bytes
        src = torch.ones(nbytes, dtype=torch.uint8, pin_memory=True)
        dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        copy = functools.partial(dst.copy_, src, non_blocking=True)
        memcpy = _copy_rate(copy, nbytes, seconds)
        del src, dst, copy
        options = FastOptions(order=order, device="cuda")
        loader = DataLoader(normed, batch_size=batch, drop_last=True, pin_memory=True, fast=options)
        for step_ms in _SWEEP_STEPS_MS:
            step = _SleepStep(step_ms / 1e3, cycles_per_s)
            count, wall, delivered = _unsynced(loader, step, seconds, ahead)
            stall = max(0.0, 1.0 - count * step.alone_s / wall)
            rate = delivered / wall
            note = (
                f"{100 * rate / memcpy:.0f}% of pinned cudaMemcpy of {nbytes / 2**20:.1f} MiB "
                f"({memcpy / 1e9:.1f} GB/s); {count} steps, host at most {ahead} steps ahead"
            )
            rows.append(
                _row(
                    "sweep",
                    f"step {step_ms:g} ms, batch {batch}",
                    100 * stall,
                    "% stall",
                    note,
                    gb_s=rate / 1e9,
                    memcpy_gb_s=memcpy / 1e9,
                    share=rate / memcpy,
                    step_ms=step.alone_s * 1e3,
                )
            )
        del loader
    return rows


def _traffic(samples: int, workload: Workload, resident_h2d: int) -> list[Row]:
    """Host-to-device bytes of one epoch: window bytes per batch vs chunk bytes once.

    The host modes copy every delivered window; device residency copies each chunk's
    rows once (``resident_h2d``: what its loader copied in its first, warming pass).
    """
    windows = samples // workload.batch * workload.batch * workload.sample_bytes
    note = f"{windows / resident_h2d:,.0f}x less than windows" if resident_h2d else ""
    return [
        _row("traffic", "host-pinned / dali", windows / 1e9, "GB per epoch to device", "windows"),
        _row("traffic", "device-resident", resident_h2d / 1e9, "GB per epoch to device", note),
    ]


def _warmed(loader: Any) -> Any:
    """``loader`` after one whole pass: chunks loaded (and, resident, on the device)."""
    for _ in loader:
        pass
    return loader


def _row(check: str, mode: str, value: float | None, unit: str, note: str, **extra: Any) -> Row:
    return {"check": check, "mode": mode, "value": value, "unit": unit, "note": note} | extra


def _h2d_rows(dataset: WindowDataset, workload: Workload, cuda: bool, seconds: float) -> list[Row]:
    if not cuda:
        names = ("pageable", "pinned (cudaMemcpy)", "pinned, batch-sized", "loader CudaDelivery")
        return [_row("h2d", name, None, "GB/s", NO_CUDA) for name in names]
    return _h2d_cuda(dataset, workload, seconds)  # pragma: no cover - GPU only


def _h2d_cuda(
    dataset: WindowDataset, workload: Workload, seconds: float
) -> list[Row]:  # pragma: no cover - GPU only
    size = 256 << 20
    dst = torch.empty(size, dtype=torch.uint8, device="cuda")
    rows = []
    rates = {}
    for name, pin in (("pageable", False), ("pinned (cudaMemcpy)", True)):
        src = torch.ones(size, dtype=torch.uint8, pin_memory=pin)
        rates[name] = _copy_rate(functools.partial(dst.copy_, src), size, seconds)
        rows.append(_row("h2d", name, rates[name] / 1e9, "GB/s", "256 MiB"))
    slot = Slot((workload.batch, workload.window, workload.features), (workload.batch, 1), True)
    # The copy a host-pinned loader on this GPU delivers its batches with.
    gpu = torch.device("cuda", torch.cuda.current_device())
    delivery = Delivery.build(dataset, FastOptions(device=gpu), True, gpu).copy
    nbytes = slot.x.nbytes + slot.y.nbytes
    # The loader's copies against plain pinned copies of the same size, both issued back
    # to back and synchronized once at the end (as batches stream), not one by one.
    batch_src = torch.ones(nbytes, dtype=torch.uint8, pin_memory=True)
    batch_dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    same_size = _copy_rate(
        functools.partial(batch_dst.copy_, batch_src, non_blocking=True), nbytes, seconds
    )
    size_note = f"{nbytes / 2**20:.1f} MiB copies, back to back"
    rows.append(_row("h2d", "pinned, batch-sized", same_size / 1e9, "GB/s", size_note))
    rate = _copy_rate(lambda: delivery(slot, workload.batch), nbytes, seconds)
    share = rate / same_size
    note = f"{size_note}, side stream; {100 * share:.0f}% of pinned batch-sized copies"
    rows.append(_row("h2d", "loader CudaDelivery", rate / 1e9, "GB/s", note, share=share))
    return rows


def _copy_rate(copy: Callable[[], Any], nbytes: int, seconds: float) -> float:  # pragma: no cover
    copy()
    torch.cuda.synchronize()
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds / 2 or count < 3:
        copy()
        count += 1
    torch.cuda.synchronize()
    return count * nbytes / (time.perf_counter() - started)


def _to_device(loader: Iterable[Any], device: torch.device | None) -> Iterator[Any]:
    for x, y in loader:
        if device is None:
            yield x, y
        else:  # pragma: no cover - GPU only
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def _batches(make: Callable[[], Iterable[Any]]) -> Iterator[Any]:
    while True:
        yield from make()


def _throughput(make: Callable[[], Iterable[Any]], seconds: float, cuda: bool) -> float:
    """Samples per second after the first batch, for about ``seconds``."""
    batches = _batches(make)
    next(batches)
    samples, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        x, _ = next(batches)
        samples += int(x.shape[0])
    if cuda:  # pragma: no cover - GPU only
        torch.cuda.synchronize()
    rate = samples / (time.perf_counter() - started)
    del batches
    return rate


class _Step:
    """A training step of fixed work: a matmul loop of about ``step_s`` on the GPU, else a sleep."""

    def __init__(self, step_s: float, cuda: bool) -> None:
        self.cuda = cuda
        self.step_s = step_s
        self.repeats = 1
        if cuda:  # pragma: no cover - GPU only
            self.a = torch.randn(2048, 2048, device="cuda")
            once = self._time(lambda: self._matmuls(4)) / 4
            self.repeats = max(1, round(step_s / once))
        self.alone_s = self._time(lambda: self(None))

    def _matmuls(self, n: int) -> None:  # pragma: no cover - GPU only
        b = self.a
        for _ in range(n):
            b = torch.tanh(self.a @ b)
        # A blocking event: the host sleeps until the GPU is done instead of spinning on a
        # core the loader's threads need.
        done = torch.cuda.Event(blocking=True)  # type: ignore[no-untyped-call]
        done.record()
        done.synchronize()

    def _time(self, fn: Callable[[], None], reps: int = 10) -> float:
        fn()
        started = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - started) / reps

    def __call__(self, batch: Any) -> None:
        if not self.cuda:
            time.sleep(self.step_s)
            return
        if batch is not None:  # pragma: no cover - GPU only
            self.a[0, :1].add_(batch[0].reshape(-1)[:1].float() * 0)  # the step reads the batch
        self._matmuls(self.repeats)  # pragma: no cover - GPU only


def _stall(make: Callable[[], Iterable[Any]], step: _Step, seconds: float) -> float:
    """Share of wall time not spent on steps: ``1 - steps * step_alone / wall``."""
    batches = _batches(make)
    step(next(batches))
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds or count < 5:
        step(next(batches))
        count += 1
    wall = time.perf_counter() - started
    del batches
    return max(0.0, 1.0 - count * step.alone_s / wall)


def _correctness(
    modes: dict[str, Callable[[], Iterable[Any]]],
    normed: WindowDataset,
    order: UniformOrder,
    batch: int,
) -> list[Row]:
    """The first batches of each loader mode against the host path on the CPU."""
    reference = DataLoader(normed, batch_size=batch, drop_last=True, fast=FastOptions(order=order))
    expected = [(x.clone(), y.clone()) for x, y in _first(reference, 3)]
    rows = []
    for name, make in modes.items():
        if name == "torch DataLoader":
            continue  # its own shuffle: other samples
        got = [(x.float().cpu(), y.cpu()) for x, y in _first(make(), 3)]
        equal = len(got) == len(expected) and all(
            torch.allclose(x, ex, rtol=1e-5, atol=1e-5) and torch.equal(y, ey)
            for (x, y), (ex, ey) in zip(got, expected, strict=True)
        )
        rows.append(_row("correct", name, float(equal), "equal", "3 batches vs host path"))
    return rows


def _first(loader: Iterable[Any], n: int) -> list[Any]:
    out = []
    for item in loader:
        out.append(item)
        if len(out) == n:
            break
    return out


def _goals(rows: list[Row], cuda: bool) -> list[Row]:
    def value(check: str, mode: str) -> float | None:
        for row in rows:
            if row["check"] == check and row["mode"] == mode:
                return row.get("share", row["value"])
        return None

    goals = []
    for mode in ("host-pinned", "dali"):
        stall = value("stall", mode)
        goals.append(("stall < 2%", mode, stall, stall is not None and stall < 2.0))
    resident, pinned = value("loader", "device-resident"), value("loader", "host-pinned")
    ratio = resident / pinned if resident and pinned else None
    goals.append(("resident >= 3x host-pinned", "device-resident", ratio, (ratio or 0) >= 3))
    share = value("h2d", "loader CudaDelivery")
    goals.append(
        ("loader H2D >= 80% pinned batch-sized", "host-pinned", share, (share or 0) >= 0.8)
    )
    out = []
    for name, mode, got, met in goals:
        verdict = ("met" if met else "not met") if cuda else NO_CUDA
        out.append(_row("goal", mode, got, name, verdict))
    return out


def _print(rows: list[Row], cuda: bool) -> None:
    print(f"# gpu check ({'CUDA: ' + torch.cuda.get_device_name() if cuda else NO_CUDA})")
    print(f"{'check':<8} {'mode':<30} {'value':>12} {'unit':<28} note")
    for row in rows:
        value = row["value"]
        shown = "-" if value is None else f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
        note = row["note"]
        if "gb_s" in row:
            note = f"{row['gb_s']:.3f} GB/s; {note}"
        if "step_ms" in row:
            note = f"step {row['step_ms']:.2f} ms; {note}"
        if row.get("ok") is not None:  # a check that ran: passed or failed
            note = f"{'pass' if row['ok'] else 'FAIL'}; {note}"
        print(f"{row['check']:<8} {row['mode']:<30} {shown:>12} {row['unit']:<28} {note}")


if __name__ == "__main__":
    raise SystemExit(main())
