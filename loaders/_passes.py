"""Passes over epochs: where each ``iter()`` starts, and when an epoch is finished.

The rules a training client relies on (torch's, plus resumption):

- each pass starts the current epoch from its beginning, unless :meth:`PassState.load`
  was called since the last pass began: then that one pass resumes at the saved position;
- a pass that hands out its last batch finishes the epoch, whether or not the consumer
  asks for one more: the next pass belongs to the next epoch;
- an abandoned pass (``break``, an exception, a newer ``iter()``) does not finish it;
- :meth:`PassState.set_epoch` moves to another epoch (the same epoch keeps a pending
  resume, so ``set_epoch(e)`` at the top of every epoch loop does not undo one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ticktensor.errors import ConfigError

from . import _accelerate
from .batch_source import BatchSource
from .sharding import EpochState, ShardPlan

__all__ = ["Pass", "PassIterator", "PassState"]


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


class PassIterator(Iterator[Any]):
    """The batches of one pass, moving its :class:`Pass` as they are handed out.

    :attr:`indices` are the dataset's sample indices of the batch handed out last, for
    consumers that log or check which samples they trained on.
    """

    _step: int | None = None

    def __init__(
        self,
        handle: Pass,
        plan: ShardPlan,
        source: BatchSource,
        *,
        receive: Callable[[torch.Tensor, torch.Tensor, Any], None] | None = None,
        transform: Callable[[tuple[torch.Tensor, torch.Tensor]], Any] | None = None,
        on_halfway: Callable[[], None] | None = None,
        index_map: npt.NDArray[np.int64] | None = None,
    ) -> None:
        self._pass = handle
        self._plan = plan
        self._source = source
        self._receive = receive
        self._transform = transform
        self._on_halfway = on_halfway
        self._index_map = index_map
        self._last = plan.num_steps - 1
        self._accelerate = _accelerate.accelerate_link(plan, self)
        if plan.num_steps == 0:
            handle.finish()  # an empty pass is complete as it starts, as with torch

    def __next__(self) -> Any:
        try:
            step, _, x, y, event = next(self._source)
        except StopIteration:
            if self._accelerate is not None:
                _accelerate.end(self._accelerate)
            raise
        if self._receive is not None:
            self._receive(x, y, event)
        self._step = step
        handle = self._pass
        if step == self._last:
            handle.finish()
            if self._accelerate is not None:
                _accelerate.last_batch(self._accelerate)
        else:
            handle.consumed(self._plan.samples_consumed(step + 1))
            if step == self._plan.num_steps // 2 and self._on_halfway is not None:
                self._on_halfway()
        if self._transform is not None:
            return self._transform((x, y))
        return x, y

    @property
    def indices(self) -> npt.NDArray[np.int64] | None:
        """The loader's ``dataset`` indices of the batch handed out last (``None`` before)."""
        if self._step is None:
            return None
        batch = self._plan.batch(self._step)
        return batch if self._index_map is None else self._index_map[batch]

    def close(self) -> None:
        """Stop assembling; the position stays after the last batch handed out."""
        self._source.close()
        if self._accelerate is not None:
            _accelerate.end(self._accelerate)

    def __len__(self) -> int:
        return self._plan.num_steps
