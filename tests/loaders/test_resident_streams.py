"""Device residency's copy stream: chunk copies overlap compute and the gathers wait for them.

On a GPU the resident mode queues each chunk's copy on a copy stream of its own, ordered
after the gathers already queued on the consumer's current stream (a gather may still
read the slot the copy overwrites), and makes the current stream wait on an event
recorded after the copies (the gathers that read the new chunk come after it). The
emulation (:class:`~tests.loaders.test_fences.FakeCuda`) runs the current stream and the
copy stream each behind the consumer by its own amount; every copy and gather is queued
on the stream that is current when it is issued, as CUDA queues it, and runs when that
stream gets to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import numpy as np
import pytest
import torch

from ticktensor.loaders import ResidentOptions, WindowDataset
from ticktensor.loaders._fences import CopyStream
from ticktensor.loaders._resident import DeviceChunks
from ticktensor.store import StoreVersion

from .test_fences import FakeCuda
from .test_resident import CHUNK_BYTES, dataset, resident_epochs, version  # noqa: F401


class StreamedChunks(DeviceChunks):
    """Device chunks on host tensors whose device work goes where CUDA puts it: each copy
    and each gather on the stream current when it is queued, run when that stream gets to
    it (a copy reads its host rows then)."""

    def __init__(self, ds: WindowDataset, options: ResidentOptions, cuda: FakeCuda) -> None:
        copies = CopyStream(torch.device("cuda", 0))
        super().__init__(ds, torch.device("cpu"), options, copy_stream=copies)
        # Not memory a freed pool left with the right rows: a gather before its copy shows.
        self.pool.fill_(float("nan"))
        self.cuda = cuda
        self.queued_on: list[str] = []  # which stream each chunk copy went to

    def _copy_in(self, device: torch.Tensor, host: torch.Tensor) -> None:
        stream = self.cuda.current_stream()
        self.queued_on.append("current" if stream is self.cuda.streams[0] else "side")
        stream.queue(lambda: device.copy_(host))

    def _cut(self, first: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.full((first.shape[0], self.window, self.n_features), float("nan"))
        y = torch.full((first.shape[0], self.dataset.n_labels), float("nan"))
        cut = super()._cut

        def run() -> None:
            try:
                x_now, y_now = cut(first)
            except IndexError:  # a slot table of chunks evicted since: NaN, read outside
                return
            x.copy_(x_now)
            y.copy_(y_now)

        self.cuda.current_stream().queue(run)
        return x, y


def streamed_epochs(
    store: StoreVersion, budget: int | None, cuda: FakeCuda
) -> tuple[StreamedChunks, list[tuple[torch.Tensor, torch.Tensor, np.ndarray]]]:
    """Two resident epochs under ``cuda``, each stream advanced after every batch; the
    batches and the samples they hold."""
    ds = dataset(store)
    chunks = StreamedChunks(ds, ResidentOptions(budget_bytes=budget, lookahead=4), cuda)
    out = resident_epochs(chunks, cuda.advance)
    cuda.finish()
    return chunks, out


def wrong_batches(
    chunks: DeviceChunks, batches: list[tuple[torch.Tensor, torch.Tensor, np.ndarray]]
) -> int:
    ds = chunks.dataset
    wrong = 0
    for x, y, samples in batches:
        want_x, want_y = ds.get_batch(samples)
        same = torch.equal(x, torch.from_numpy(want_x)) and torch.equal(y, torch.from_numpy(want_y))
        wrong += not same
    return wrong


LAGS = [(0, 0), (0, 9), (9, 0), (3, 7), (7, 3), (0, 40), (40, 0)]  # (current stream, copy stream)


@pytest.mark.parametrize("budget", [None, 6 * CHUNK_BYTES])
@pytest.mark.parametrize(("current_lag", "copy_lag"), LAGS)
def test_copies_run_on_the_copy_stream_between_the_gathers(
    version: StoreVersion,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    budget: int | None,
    current_lag: int,
    copy_lag: int,
) -> None:
    cuda = FakeCuda({0: current_lag}, side_lag=copy_lag)
    cuda.install(monkeypatch)
    chunks, batches = streamed_epochs(version, budget, cuda)
    assert chunks.whole == (budget is None)
    if not chunks.whole:
        assert chunks.stats["evictions"] > 0
    assert len(cuda.side) == 1  # one copy stream, made at the first miss
    assert chunks.queued_on
    assert set(chunks.queued_on) == {"side"}
    assert wrong_batches(chunks, batches) == 0


@contextmanager
def side_stream_only(self: CopyStream, *, wait_before: bool, wait_after: bool) -> Iterator[None]:
    """:meth:`CopyStream.copies` with one of its two waits left out (the controls)."""
    current = torch.cuda.current_stream(self.device)
    side = self._side()
    if wait_before:
        side.wait_stream(current)
    with torch.cuda.stream(side):
        yield
    if wait_after:
        copied = torch.cuda.Event()  # type: ignore[no-untyped-call]
        copied.record(side)
        current.wait_event(copied)


@pytest.mark.parametrize(
    ("left_out", "current_lag", "copy_lag", "budget"),
    [
        ("the current stream's wait", 0, 40, None),  # gathers run before their chunk arrives
        ("the copy stream's wait", 40, 0, 6 * CHUNK_BYTES),  # a copy overwrites a slot read later
    ],
)
def test_the_emulation_catches_a_missing_wait(
    version: StoreVersion,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    left_out: str,
    current_lag: int,
    copy_lag: int,
    budget: int | None,
) -> None:
    """The controls: without either wait, a copy stream that lags, or a current stream
    that lags, hands out wrong batches, so the test above can fail."""
    cuda = FakeCuda({0: current_lag}, side_lag=copy_lag)
    cuda.install(monkeypatch)
    before, after = left_out != "the copy stream's wait", left_out != "the current stream's wait"

    def copies(self: CopyStream) -> AbstractContextManager[None]:
        return side_stream_only(self, wait_before=before, wait_after=after)

    monkeypatch.setattr(CopyStream, "copies", copies)
    chunks, batches = streamed_epochs(version, budget, cuda)
    assert wrong_batches(chunks, batches) > len(batches) // 4


class ComputeWatched(StreamedChunks):
    """Streamed chunks that note, as each chunk copy runs, how many training steps the
    current stream has run by then."""

    def __init__(self, ds: WindowDataset, options: ResidentOptions, cuda: FakeCuda) -> None:
        super().__init__(ds, options, cuda)
        self.step = 0  # the step being cut
        self.computed: list[int] = []  # steps whose compute the current stream has run
        self.copies: list[tuple[int, int]] = []  # (step queued, steps computed when run)

    def _copy_in(self, device: torch.Tensor, host: torch.Tensor) -> None:
        step = self.step

        def copy() -> None:
            self.copies.append((step, len(self.computed)))
            device.copy_(host)

        self.cuda.current_stream().queue(copy)


def test_a_copy_waits_for_the_gathers_not_for_the_compute_queued_after_them(
    version: StoreVersion,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each step's compute is queued on the current stream after its gather; the copies of
    the next miss wait for that gather only, so they run while the step's compute has not
    (they overlap it), and every batch is still right."""
    cuda = FakeCuda({0: 10**6}, side_lag=0)  # the current stream runs only what is waited for
    cuda.install(monkeypatch)
    ds = dataset(version)
    chunks = ComputeWatched(ds, ResidentOptions(budget_bytes=6 * CHUNK_BYTES, lookahead=4), cuda)

    def step_done() -> None:
        cuda.current_stream().queue(lambda s=chunks.step: chunks.computed.append(s))
        chunks.step += 1
        cuda.advance()

    batches = resident_epochs(chunks, step_done)
    cuda.finish()
    later = [(step, computed) for step, computed in chunks.copies if step > 0]
    assert later, "the budget should make later steps miss"
    assert all(computed < step for step, computed in later), later
    assert wrong_batches(chunks, batches) == 0
