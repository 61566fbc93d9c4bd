"""Reader fences under an emulated CUDA stream: no buffer is refilled while a copy from it waits.

A training loop does ``x = x.cuda(non_blocking=True)`` and drops the host batch at once;
the copy runs later, when the GPU gets to it. :class:`FakeStream` stands in for the
consumer's stream: a "copy" reads the buffer's memory only when the stream runs it, and
the test runs the stream a few operations behind the consumer, as a busy GPU lags. Every
copy must read the batch it was given, for the Python and the native engine.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ticktensor.loaders import FastOptions, WindowDataset
from ticktensor.loaders._fences import CudaFences, Fence, Fences
from ticktensor.loaders._native_prefetch import NativePrefetcher
from ticktensor.loaders._prefetch import Prefetcher, host_delivery
from ticktensor.loaders.batch_source import BatchSource, Delivery, open_batch_source
from ticktensor.loaders.sharding import ShardPlan

from .test_dataloader import WINDOW, build_version


def _ran() -> None:
    """An operation the stream has run."""


class FakeStream:
    """Operations run in order, only when :meth:`run_until` says (or a fence is waited on).

    Streams of one :class:`FakeCuda` share one reentrant lock: an operation that waits on
    another stream (``wait_stream``, ``wait_event``) runs that stream up to the point
    waited for, from any thread, as the GPU would have run it by then.
    """

    def __init__(self, lock: Any = None, device: int = 0) -> None:
        self._ops: list[Callable[[], None]] = []
        self.executed = 0
        self._lock = threading.RLock() if lock is None else lock
        self.device = device

    def _append(self, op: Callable[[], None]) -> int:
        with self._lock:
            self._ops.append(op)
            return len(self._ops) - 1

    def queue(self, op: Callable[[], None]) -> None:
        """Queue ``op``: it runs after everything queued before, when the stream gets to it."""
        self._append(op)

    def copy(self, tensor: torch.Tensor) -> dict[str, bytes]:
        """A ``non_blocking`` copy: the buffer's bytes as they are when the stream runs it.
        It keeps no reference to ``tensor``, as a queued CUDA copy keeps none."""
        address, size = tensor.data_ptr(), tensor.numel() * tensor.element_size()
        result: dict[str, bytes] = {}
        self.queue(lambda: result.update(data=ctypes.string_at(address, size)))
        return result

    def record(self) -> FakeFence:
        return FakeFence(self, self._append(lambda: None))

    def enter_thread(self) -> None:
        pass

    def wait_stream(self, other: FakeStream) -> None:
        """What is queued here from now on runs after what ``other`` holds now."""
        fence = other.record()
        self.queue(fence.synchronize)

    def wait_event(self, event: FakeEvent) -> None:
        """What is queued here from now on runs after the point ``event`` recorded."""
        self.queue(event.synchronize)

    def run_until(self, position: int) -> None:
        """Run every operation before ``position``; the stream keeps none it has run."""
        with self._lock:
            while self.executed < min(position, len(self._ops)):
                self._ops[self.executed]()
                self._ops[self.executed] = _ran
                self.executed += 1

    def lag(self, behind: int) -> None:
        """Run everything but the last ``behind`` operations: the GPU is that far behind."""
        self.run_until(len(self._ops) - behind)


class FakeFence:
    def __init__(self, stream: FakeStream, position: int) -> None:
        self._stream, self._position = stream, position

    def query(self) -> bool:
        return self._stream.executed > self._position

    def synchronize(self) -> None:
        self._stream.run_until(self._position + 1)


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> WindowDataset:
    ds = WindowDataset(build_version(tmp_path_factory.mktemp("fences") / "store"), WINDOW)
    ds.get_batch(np.arange(len(ds)))  # every chunk loaded: the native engine can run
    assert ds.cache.complete
    return ds


def copies_of_a_pass(
    ds: WindowDataset, engine: str, stream: FakeStream | None, behind: int
) -> tuple[type, list[tuple[dict[str, bytes], bytes]]]:
    """Copy every batch of a pass through ``stream``, lagging ``behind`` operations; the
    copies and what each should read."""
    plan = ShardPlan(np.random.default_rng(0).permutation(len(ds)), 8)
    delivery = Delivery(host_delivery, pin=False, memory="test", fences=stream)
    source: BatchSource = open_batch_source(
        ds,
        plan,
        FastOptions(engine=engine),  # type: ignore[arg-type]
        delivery,
        batch_size=8,
        prefetch=2,
        timeout=10,
        context="fence test",
    )
    kind = type(source)
    lagging = stream or FakeStream()
    out = []
    for _ in range(plan.num_steps):
        step, _, x, _, _ = next(source)
        want = ds.get_batch(plan.batch(step))[0].tobytes()
        out.append((lagging.copy(x), want))
        del x  # the training loop keeps only the device copy
        lagging.lag(behind)
    lagging.run_until(10**9)
    source.close()
    return kind, out


@pytest.mark.parametrize(("engine", "kind"), [("python", Prefetcher), ("native", NativePrefetcher)])
@pytest.mark.parametrize("behind", [0, 3, 9])
def test_every_queued_copy_reads_its_own_batch(
    warm: WindowDataset, engine: str, kind: type, behind: int
) -> None:
    stream = FakeStream()
    used, copies = copies_of_a_pass(warm, engine, stream, behind)
    assert used is kind
    assert len(copies) > 20
    assert all(got["data"] == want for got, want in copies)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_without_fences_the_emulation_catches_overwritten_buffers(
    warm: WindowDataset, engine: str
) -> None:
    """The control: with reference counts alone (no fences), a lagging stream reads
    buffers that were refilled under it, so the check above can fail."""
    _, copies = copies_of_a_pass(warm, engine, None, 9)
    assert sum(got["data"] != want for got, want in copies) > len(copies) // 4


def test_a_consumer_that_keeps_batches_still_gets_them(warm: WindowDataset, tmp_path: Path) -> None:
    """Fences do not stall a consumer that holds every batch (``list(loader)``)."""
    stream = FakeStream()
    plan = ShardPlan(len(warm), 8, pad=False)
    delivery = Delivery(host_delivery, pin=False, memory="test", fences=stream)
    for engine in ("python", "native"):
        source = open_batch_source(
            warm,
            plan,
            FastOptions(engine=engine),  # type: ignore[arg-type]
            delivery,
            batch_size=8,
            prefetch=2,
            timeout=10,
            context="fence test",
        )
        kept = [next(source) for _ in range(plan.num_steps)]
        x = torch.cat([item[2] for item in kept])
        assert torch.equal(x, torch.from_numpy(warm.get_batch(np.arange(len(warm)))[0]))
        source.close()


def test_the_python_producer_makes_the_fences_device_current(warm: WindowDataset) -> None:
    """The producer thread waits on fences: it must first make their device current (a
    new thread starts on GPU 0, where waiting would open a context)."""

    class Recording(FakeStream):
        def __init__(self) -> None:
            super().__init__()
            self.threads: list[str] = []

        def enter_thread(self) -> None:
            self.threads.append(threading.current_thread().name)

    stream = Recording()
    copies_of_a_pass(warm, "python", stream, 0)
    assert stream.threads, "the producer never entered the fences' device"
    assert threading.current_thread().name not in stream.threads


class FakeEvent:
    """``torch.cuda.Event`` on the emulation: a fence at the point of ``record``."""

    def __init__(self, **_: object) -> None:
        self._fence: FakeFence | None = None

    def record(self, stream: FakeStream) -> None:
        self._fence = stream.record()

    def query(self) -> bool:
        return self._fence is None or self._fence.query()

    def synchronize(self) -> None:
        if self._fence is not None:
            self._fence.synchronize()


class FakeCuda:
    """Several GPUs, each with its own current stream and copy engine, lagging by its own
    amount: an idle GPU runs what it is given at once, a busy one runs behind. Streams
    made with ``torch.cuda.Stream`` (side streams) lag by ``side_lag``, and
    ``torch.cuda.stream(side)`` makes one the current stream of its device meanwhile.

    :meth:`install` puts it behind ``torch.cuda``'s streams, events and context queries,
    so the loader's own :class:`~ticktensor.loaders._fences.CudaFences` records on it.
    """

    def __init__(self, lags: dict[int, int], side_lag: int = 0) -> None:
        self.lags = lags
        self.lock = threading.RLock()
        self.streams = {index: FakeStream(self.lock, index) for index in lags}
        self.side: list[FakeStream] = []
        self.side_lag = side_lag
        self.current = 0
        self._current_streams = dict(self.streams)

    def current_stream(self, device: torch.device | int | None = None) -> FakeStream:
        index = device.index if isinstance(device, torch.device) else device
        return self._current_streams[self.current if index is None else index]

    def new_stream(self, device: torch.device | int | None = None, **_: Any) -> FakeStream:
        index = device.index if isinstance(device, torch.device) else device
        stream = FakeStream(self.lock, self.current if index is None else index)
        self.side.append(stream)
        return stream

    @contextlib.contextmanager
    def stream(self, stream: FakeStream) -> Iterator[None]:
        before = self._current_streams[stream.device]
        self._current_streams[stream.device] = stream
        try:
            yield
        finally:
            self._current_streams[stream.device] = before

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        current_stream = self.current_stream
        monkeypatch.setattr(torch.cuda, "Stream", self.new_stream)
        monkeypatch.setattr(torch.cuda, "stream", self.stream)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(self.streams))
        monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
        monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
        monkeypatch.setattr(torch._C, "_cuda_hasPrimaryContext", lambda i: True, raising=False)

    def advance(self) -> None:
        """Each GPU runs all but the last ``lag`` of its operations, each side stream all
        but its last ``side_lag``."""
        for index, stream in self.streams.items():
            stream.lag(self.lags[index])
        for stream in self.side:
            stream.lag(self.side_lag)

    def finish(self) -> None:
        for stream in [*self.streams.values(), *self.side]:
            stream.run_until(10**9)


def copies_to(
    ds: WindowDataset, engine: str, cuda: FakeCuda, copy_on: FakeStream, fences: Fences
) -> list[tuple[dict[str, bytes], bytes]]:
    """A pass whose every batch is copied through ``copy_on`` and then dropped."""
    plan = ShardPlan(np.random.default_rng(0).permutation(len(ds)), 8)
    delivery = Delivery(host_delivery, pin=False, memory="test", fences=fences)
    source = open_batch_source(
        ds,
        plan,
        FastOptions(engine=engine),  # type: ignore[arg-type]
        delivery,
        batch_size=8,
        prefetch=2,
        timeout=10,
        context="fence test",
    )
    out = []
    for _ in range(plan.num_steps):
        step, _, x, _, _ = next(source)
        out.append((copy_on.copy(x), ds.get_batch(plan.batch(step))[0].tobytes()))
        del x
        cuda.advance()
    cuda.finish()
    source.close()
    return out


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_copy_to_another_gpu_than_the_current_one_is_fenced(
    warm: WindowDataset, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``x.to("cuda:1", non_blocking=True)`` with ``cuda:0`` current (no ``set_device``):
    the copy waits on GPU 1's busy stream while GPU 0 is idle. A fence on ``cuda:0``
    alone completes at once and the buffer is refilled under the pending copy."""
    cuda = FakeCuda({0: 0, 1: 9})
    cuda.install(monkeypatch)
    copies = copies_to(warm, engine, cuda, cuda.streams[1], CudaFences(torch.device("cuda", 0)))
    assert len(copies) > 20
    assert [got["data"] == want for got, want in copies] == [True] * len(copies)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_reader_stream_given_explicitly_is_fenced(
    warm: WindowDataset, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy on a side stream the consumer never joins to the current stream is covered
    once the stream is named with ``add_reader_stream``."""
    cuda = FakeCuda({0: 0})
    cuda.install(monkeypatch)
    side = FakeStream()
    fences = CudaFences(torch.device("cuda", 0))
    fences.add_reader_stream(side)

    class Busy(FakeCuda):
        def advance(self) -> None:
            super().advance()
            side.lag(9)

    busy = Busy({0: 0})
    busy.streams = cuda.streams
    copies = copies_to(warm, engine, busy, side, fences)
    side.run_until(10**9)
    assert [got["data"] == want for got, want in copies] == [True] * len(copies)


def test_the_emulation_catches_a_fence_on_the_idle_gpu(
    warm: WindowDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: fences on ``cuda:0``'s stream only let copies to ``cuda:1`` read
    refilled buffers, so the test above can fail."""
    cuda = FakeCuda({0: 0, 1: 9})
    cuda.install(monkeypatch)

    class OnlyCurrent:
        def enter_thread(self) -> None:
            pass

        def record(self) -> Fence:
            return cuda.streams[0].record()

    copies = copies_to(warm, "python", cuda, cuda.streams[1], OnlyCurrent())
    assert sum(got["data"] != want for got, want in copies) > len(copies) // 4
