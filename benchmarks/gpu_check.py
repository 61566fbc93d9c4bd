"""GPU check: H2D bandwidth, the loader's GPU modes, data stall and correctness, in one table.

One command on a machine with an NVIDIA GPU (under 8 minutes with D1)::

    python benchmarks/gpu_check.py                 # workload D1, 3 s per measurement
    python benchmarks/gpu_check.py --json          # writes results/gpu-check-<date>.json too
    python benchmarks/gpu_check.py --quick         # a tiny store, well under a minute
    python benchmarks/gpu_check.py --rows 100000   # D1's shape with fewer rows per symbol

Rows, in the order they are measured:

- ``fences``: the fence path first: ``pin_memory=True`` without a device, the user's own
  ``x.cuda(non_blocking=True)`` queued after ``torch.cuda._sleep`` so the GPU lags, an
  exact checksum (int32 view, summed on the GPU) of every batch against the host path's
  batch of the same epoch and step, 3 epochs, both engines: wrong batches, which must be
  0; and a negative control with reader fences removed, which should show wrong batches
  (else the check could not see a refilled buffer);
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

Without CUDA everything runs on the CPU instead (the DALI pipeline on the CPU, device
residency on host tensors, a sleeping step as a simulated accelerator) and the rows that
need a GPU say ``no CUDA``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import json
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
        rows = run(version, workload, cuda=cuda, seconds=seconds, step_s=args.step_ms / 1e3)
    _print(rows, cuda)
    if args.json is not None:
        path = Path(args.json) if args.json else RESULTS / f"gpu-check-{datetime.date.today()}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        report = {"run": describe_run(), "cuda": cuda, "workload": dataclasses.asdict(workload)}
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
    version: StoreVersion, workload: Workload, *, cuda: bool, seconds: float, step_s: float
) -> list[Row]:
    """Every row of the check."""
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
    rows = _fence_rows(normed, order, batch, cuda)
    rows.extend(_resident_rows(raw, workload, cuda))
    rows.extend(_pinned_rows(raw, order, batch, cuda))
    rows.extend(_h2d_rows(raw, workload, cuda, seconds))
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
    return rows


_FENCE_MODES = {
    "pinned, user copy (python)": ("python", True),
    "pinned, user copy (native)": ("native", True),
    "negative control: no fences": ("python", False),
}


def _fence_rows(
    normed: WindowDataset, order: UniformOrder, batch: int, cuda: bool, epochs: int = 3
) -> list[Row]:
    """Wrong batches of the fence path per engine, and of the control without fences."""
    if not cuda:
        return [_row("fences", mode, None, "wrong batches", NO_CUDA) for mode in _FENCE_MODES]
    return _fence_rows_cuda(normed, order, batch, epochs)  # pragma: no cover - GPU only


def _checksum(x: torch.Tensor) -> torch.Tensor:
    """An exact checksum: the float32 bits as integers, summed (order does not matter)."""
    return x.contiguous().view(torch.int32).to(torch.int64).sum()


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
    rows = []
    for mode, (engine, fenced) in _FENCE_MODES.items():
        loader = DataLoader(
            normed, pin_memory=True, **common, fast=FastOptions(order=order, engine=engine)
        )
        sums: list[list[torch.Tensor]] = []
        with contextlib.nullcontext() if fenced else _no_fences():
            for epoch in range(epochs):
                loader.set_epoch(epoch)
                got = []
                for x, _ in loader:  # batch by batch: the loop keeps only the device copy
                    torch.cuda._sleep(2_000_000)  # type: ignore[no-untyped-call]  # about 1 ms
                    got.append(_checksum(x.cuda(non_blocking=True)))
                    del x
                    if len(got) == limit:
                        break
                sums.append(got)
        torch.cuda.synchronize()
        total = sum(len(e) for e in expected)
        wrong = sum(
            int(g) != e
            for got, want in zip(sums, expected, strict=True)
            for g, e in zip(got, want, strict=True)
        )
        note = f"of {total} batches, {epochs} epochs, GPU lagging"
        rows.append(_row("fences", mode, float(wrong), "wrong batches", note))
    return rows


_RESIDENT_MODES = ("whole store, lagging GPU", "8-chunk budget, lagging GPU")
_DALI_DTYPES = ("float32", "float16", "bfloat16")


def _resident_rows(raw: WindowDataset, workload: Workload, cuda: bool) -> list[Row]:
    """Wrong batches of device residency under a lagging current stream."""
    if not cuda:
        return [_row("resident", mode, None, "wrong batches", NO_CUDA) for mode in _RESIDENT_MODES]
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
                evictions=int(stats["evictions"]),
            )
        )
    return rows


def _pinned_rows(raw: WindowDataset, order: UniformOrder, batch: int, cuda: bool) -> list[Row]:
    """Page-locked batches of DALI's CPU pipeline with ``pin_memory=True``, per dtype."""
    modes = [f"dali cpu {dtype}" for dtype in _DALI_DTYPES]
    if not dali_available():
        return [
            _row("pinned", m, None, "pinned batches", "nvidia-dali not installed") for m in modes
        ]
    if not cuda:  # nothing is page-locked without CUDA
        return [_row("pinned", mode, None, "pinned batches", NO_CUDA) for mode in modes]
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
        rows.append(_row("pinned", f"dali cpu {dtype}", float(pinned), "pinned batches", note))
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
        print(f"{row['check']:<8} {row['mode']:<30} {shown:>12} {row['unit']:<28} {note}")


if __name__ == "__main__":
    raise SystemExit(main())
