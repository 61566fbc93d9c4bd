"""Readahead: the chunks of the next batches of a pass, handed to the chunk cache ahead of need."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from ._cache import ChunkCache

__all__ = ["Readahead"]

Int64s = npt.NDArray[np.int64]


class Readahead:
    """Keeps the chunks of batches ``step .. step + distance`` and plans their loads.

    Each batch's chunks are computed once, when the batch enters the window. Before batch
    ``step`` is gathered, :meth:`upcoming` returns the chunks of the batches after it,
    and the cache starts loading the window's chunks in batch order; local files one
    window further ahead get a readahead hint to the kernel.

    Parameters
    ----------
    cache
        The cache to plan.
    chunks_of
        The distinct chunks batch ``step`` reads.
    steps
        Batches in the pass.
    distance
        Batches to plan ahead, at least 1.
    """

    def __init__(
        self, cache: ChunkCache, chunks_of: Callable[[int], Int64s], steps: int, distance: int
    ) -> None:
        if distance < 1:
            raise ValueError(f"distance: expected >= 1, got {distance}")
        self._cache = cache
        self._chunks_of = chunks_of
        self._steps = int(steps)
        self._distance = int(distance)
        self._window: deque[tuple[int, Int64s]] = deque()
        self._advised_through = -1
        self._advised = np.zeros(len(cache.index), dtype=bool)  # hinted once per pass
        self._hinted: dict[int, Int64s] = {}  # batches hinted, kept until they are planned

    def chunks(self, step: int) -> Int64s:
        """The chunks of batch ``step`` (computed again unless it is in the window)."""
        if self._window and self._window[0][0] == step:
            return self._window[0][1]
        return self._chunks_of(step)

    def upcoming(self, step: int) -> list[Int64s]:
        """Plan the loads of batches ``step ..`` and return the chunks of those after ``step``."""
        if self._cache.complete:
            return []  # everything is loaded: no batch needs planning
        window = self._window
        while window and window[0][0] < step:
            window.popleft()
        if window and window[0][0] != step:
            window.clear()  # a jump (not expected within one pass): start over
        nxt = window[-1][0] + 1 if window else step
        for s in range(nxt, min(self._steps, step + self._distance + 1)):
            hinted = self._hinted.pop(s, None)
            window.append((s, self._chunks_of(s) if hinted is None else hinted))
        chunks = [c for _, c in window]
        self._cache.plan(chunks)
        self._advise(step)
        return chunks[1:]

    def _advise(self, step: int) -> None:
        """Hint the kernel about the batch one window beyond the planned ones."""
        target = step + 2 * self._distance
        if target >= self._steps or target <= self._advised_through:
            return
        self._advised_through = target
        chunks = self._chunks_of(target)
        self._hinted[target] = chunks  # computed once: planned `distance` batches later
        fresh = chunks[~self._advised[chunks]]
        if fresh.size:
            self._advised[fresh] = True
            self._cache.advise(fresh)
