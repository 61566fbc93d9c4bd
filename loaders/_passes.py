"""Passes over epochs: where each pass starts, when an epoch is finished.

The rules a training client relies on (torch's, plus resumption):

- a pass learns its epoch and start at its first batch, as torch's sampler iterator
  does: a ``set_epoch`` between ``iter()`` and the first ``next()`` is honoured;
- each pass starts the current epoch from its beginning, unless :meth:`PassState.load`
  was called since the last pass began: then that one pass resumes at the saved position;
- a pass that hands out its last batch finishes the epoch, whether or not the consumer
  asks for one more: the next pass belongs to the next epoch;
- an abandoned pass (``break``, an exception, a newer pass, its iterator closed or
  dropped) does not finish it, and the position goes back to where the next pass starts;
- :meth:`PassState.set_epoch` moves to another epoch (the same epoch keeps a pending
  resume, so ``set_epoch(e)`` at the top of every epoch loop does not undo one).

So :meth:`PassState.state_dict` always describes what comes next: the running pass's
position while its iterator lives, else the start of the next pass.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch

from ticktensor.errors import ConfigError

from . import _accelerate
from .batch_source import BatchSource
from .sharding import EpochState, ShardPlan

__all__ = ["Pass", "PassIterator", "PassState", "SkippedPasses"]


class PassState:
    """The loader's position (epoch, seed, global samples consumed) and its pass rules.

    Only the newest pass moves the position: :meth:`begin`, :meth:`set_epoch` and
    :meth:`load` make every earlier :class:`Pass` stale.
    """

    def __init__(self, seed: int) -> None:
        self.position = EpochState(seed=seed)
        self._resume = False
        self._generation = 0

    @property
    def epoch(self) -> int:
        """The epoch the next (or running) pass belongs to."""
        return self.position.epoch

    @property
    def resuming(self) -> bool:
        """Whether the next pass resumes at the saved position (after :meth:`load`)."""
        return self._resume

    def next_start(self) -> int:
        """The global sample the next pass starts at."""
        return self.position.samples_consumed if self._resume else 0

    def restore(self, state: Mapping[str, Any], *, resume: bool) -> None:
        """Take ``state`` as the position (a copy of a loader), resuming it or not."""
        self.load(state)
        self._resume = resume
        if not resume:
            self.position.samples_consumed = 0

    def begin(self) -> Pass:
        """Start a pass: from the saved position after :meth:`load`, else from the
        beginning of the current epoch."""
        self._generation += 1
        if not self._resume:
            self.position.samples_consumed = 0
        self._resume = False
        return Pass(self, self._generation)

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the current one, from its beginning (no-op for the current one)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer) or epoch < 0:
            raise ConfigError(f"epoch: expected an integer >= 0, got {epoch!r}")
        if int(epoch) != self.position.epoch:
            self._generation += 1
            self.position.epoch, self.position.samples_consumed = int(epoch), 0
            self._resume = False

    def load(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state`` (a :meth:`state_dict`) at the next pass."""
        restored = EpochState.from_state_dict(state)
        if restored.seed != self.position.seed:
            raise ConfigError(
                f"state was saved with seed {restored.seed}, this loader uses seed "
                f"{self.position.seed}: the order would differ"
            )
        self._generation += 1
        self.position = restored
        self._resume = True

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "seed", "samples_consumed", ...}``: plain ints, JSON-safe."""
        return self.position.state_dict()

    def _current(self, generation: int) -> bool:
        return generation == self._generation


class Pass:
    """One pass's handle on the :class:`PassState`: moves it while the pass is the newest."""

    def __init__(self, state: PassState, generation: int) -> None:
        self._state = state
        self._generation = generation
        self.epoch = state.position.epoch
        self.start_sample = state.position.samples_consumed

    @property
    def current(self) -> bool:
        """Whether this is still the newest pass (its batches move the position)."""
        return self._state._current(self._generation)

    def consumed(self, samples_consumed: int) -> None:
        """Record the global position after the batch just handed out."""
        if self.current:
            self._state.position.samples_consumed = samples_consumed

    def finish(self) -> None:
        """The pass handed out its last batch: the next one starts the next epoch."""
        if self.current:
            self._state.position.next_epoch()
            self._state._generation += 1  # nothing of this pass moves the next epoch

    def abandon(self) -> None:
        """The pass stopped before its end: the next one starts the epoch again."""
        if self.current:
            self._state.position.samples_consumed = 0
            self._state._generation += 1


Opener = Callable[[int], tuple[Pass, ShardPlan, BatchSource]]
"""``open(skip)`` begins a pass ``skip`` batches after where it would start: its handle,
plan and batch source."""


class PassIterator(Iterator[Any]):
    """The batches of one pass, moving its :class:`Pass` as they are handed out.

    The pass begins at the first ``next()`` (its epoch, start, rank and world size are
    read then); ``len()`` before that is what the pass would have if it began now.
    :attr:`indices` are the dataset's sample indices of the batch handed out last, for
    consumers that log or check which samples they trained on.
    """

    _step: int | None = None
    _pass: Pass | None = None
    _plan: ShardPlan | None = None
    _source: BatchSource | None = None
    _accelerate: Any = None
    _closed = False

    def __init__(
        self,
        opener: Opener,
        *,
        length: Callable[[], int],
        discard: Callable[[], None] | None = None,
        skip: int = 0,
        receive: Callable[[torch.Tensor, torch.Tensor, Any], None] | None = None,
        transform: Callable[[tuple[torch.Tensor, torch.Tensor]], Any] | None = None,
        on_halfway: Callable[[int], None] | None = None,
        index_map: npt.NDArray[np.int64] | None = None,
    ) -> None:
        self._opener = opener
        self._length = length
        self._discard = discard
        self._skip = skip
        self._receive = receive
        self._transform = transform
        self._on_halfway = on_halfway
        self._index_map = index_map

    def _begin(self) -> tuple[Pass, ShardPlan, BatchSource]:
        handle, plan, source = self._opener(self._skip)
        self._pass, self._plan, self._source = handle, plan, source
        self._last = plan.num_steps - 1
        self._accelerate = _accelerate.accelerate_link(plan, self)
        # A dropped iterator (a break, an exception) abandons its pass.
        weakref.finalize(self, handle.abandon)
        if plan.num_steps == 0:
            handle.finish()  # an empty pass is complete as it starts, as with torch
        return handle, plan, source

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        if self._source is None:
            handle, plan, source = self._begin()
        else:
            assert self._pass is not None  # begun with the source
            assert self._plan is not None
            handle, plan, source = self._pass, self._plan, self._source
        try:
            step, _, x, y, event = next(source)
        except StopIteration:
            if self._accelerate is not None:
                _accelerate.end(self._accelerate)
            raise
        if self._receive is not None:
            self._receive(x, y, event)
        self._step = step
        if step == self._last:
            handle.finish()
            if self._accelerate is not None:
                _accelerate.last_batch(self._accelerate)
        else:
            handle.consumed(plan.samples_consumed(step + 1))
            if step == plan.num_steps // 2 and self._on_halfway is not None:
                self._on_halfway(handle.epoch + 1)
        if self._transform is not None:
            return self._transform((x, y))
        return x, y

    @property
    def indices(self) -> npt.NDArray[np.int64] | None:
        """The loader's ``dataset`` indices of the batch handed out last (``None`` before)."""
        if self._step is None or self._plan is None:
            return None
        batch = self._plan.batch(self._step)
        return batch if self._index_map is None else self._index_map[batch]

    def close(self) -> None:
        """Stop assembling; the next pass starts the epoch again (unless this one ended)."""
        self._closed = True
        if self._source is not None:
            self._source.close()
        elif self._discard is not None:  # work started for a pass that never began
            self._discard()
        if self._pass is not None:
            self._pass.abandon()
        if self._accelerate is not None:
            _accelerate.end(self._accelerate)

    def __len__(self) -> int:
        return self._length() if self._plan is None else self._plan.num_steps


class SkippingLoader(Protocol):
    """What :class:`SkippedPasses` needs of the loader."""

    def _iter(self, skip: int) -> PassIterator: ...

    def __len__(self) -> int: ...


class SkippedPasses(Iterable[Any]):
    """A loader whose passes start ``skip`` batches after where its own would start
    (``DataLoader.skip_first_batches``): each ``iter()`` is a pass of the loader, which
    ends its epoch like a whole pass. Other attributes are the loader's."""

    def __init__(self, loader: SkippingLoader, skip: int) -> None:
        self.loader = loader
        self.skip = skip

    def __iter__(self) -> PassIterator:
        return self.loader._iter(self.skip)

    def __len__(self) -> int:
        return max(0, len(self.loader) - self.skip)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("loader", "skip"):
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __repr__(self) -> str:
        return f"SkippedPasses({self.loader!r}, skip={self.skip})"
