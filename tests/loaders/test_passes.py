"""The pass state machine: where each pass starts, when an epoch ends, which pass moves it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticktensor.errors import ConfigError
from ticktensor.loaders._passes import PassState


def test_a_pass_starts_the_epoch_and_its_end_moves_to_the_next() -> None:
    state = PassState(seed=1)
    first = state.begin()
    assert (first.epoch, first.start_sample) == (0, 0)
    first.consumed(32)
    assert state.state_dict() == {"epoch": 0, "seed": 1, "samples_consumed": 32}
    second = state.begin()  # abandons the first: same epoch, from its start
    assert (second.epoch, second.start_sample) == (0, 0)
    first.consumed(64)  # a stale pass moves nothing
    first.finish()
    assert state.state_dict()["samples_consumed"] == 0
    second.consumed(16)
    second.finish()
    assert state.state_dict() == {"epoch": 1, "seed": 1, "samples_consumed": 0}
    second.finish()  # once only
    assert state.epoch == 1


def test_load_resumes_the_next_pass_only() -> None:
    state = PassState(seed=0)
    state.load({"epoch": 3, "seed": 0, "samples_consumed": 48})
    assert state.resuming
    assert state.next_start() == 48
    state.set_epoch(3)  # the epoch it is in: the resume stays
    resumed = state.begin()
    assert (resumed.epoch, resumed.start_sample) == (3, 48)
    assert not state.resuming
    again = state.begin()
    assert (again.epoch, again.start_sample) == (3, 0)


def test_an_abandoned_pass_leaves_the_next_start() -> None:
    state = PassState(seed=0)
    state.load({"epoch": 1, "seed": 0, "samples_consumed": 40})
    resumed = state.begin()
    resumed.consumed(56)
    assert state.state_dict()["samples_consumed"] == 56  # running: its position
    resumed.abandon()
    assert state.state_dict() == {"epoch": 1, "seed": 0, "samples_consumed": 0}
    assert state.begin().start_sample == 0
    resumed.consumed(64)  # gone: moves nothing
    assert state.state_dict()["samples_consumed"] == 0


def test_set_epoch_drops_a_pending_resume_and_stales_passes() -> None:
    state = PassState(seed=0)
    running = state.begin()
    state.load({"epoch": 0, "seed": 0, "samples_consumed": 8})
    running.consumed(100)  # the pass began before load(): stale
    assert state.state_dict()["samples_consumed"] == 8
    state.set_epoch(5)
    assert not state.resuming
    assert state.begin().start_sample == 0
    with pytest.raises(ConfigError, match="epoch: expected an integer >= 0"):
        state.set_epoch(-1)
    with pytest.raises(ConfigError, match="seed 4"):
        state.load({"epoch": 0, "seed": 4, "samples_consumed": 0})


ACTIONS = ["begin", "consume", "finish", "abandon", "load", "epoch"]


@given(st.lists(st.sampled_from(ACTIONS), max_size=30))
def test_only_the_newest_pass_moves_the_position(actions: list[str]) -> None:
    """Against a model: a position that only the newest pass (begun after the last
    load/set_epoch) moves, which restarts at 0 unless a load came since the last begin;
    abandoning that pass puts it back at 0 (where the next pass starts)."""
    state = PassState(seed=0)
    model = {"epoch": 0, "seed": 0, "samples_consumed": 0}
    resume = False
    newest = None
    live = False  # whether `newest` may still move the position
    for step, action in enumerate(actions):
        if action == "begin":
            newest = state.begin()
            if not resume:
                model["samples_consumed"] = 0
            resume, live = False, True
        elif action == "consume" and newest is not None:
            newest.consumed(step + 1)
            if live:
                model["samples_consumed"] = step + 1
        elif action == "finish" and newest is not None:
            newest.finish()
            if live:
                model["epoch"] += 1
                model["samples_consumed"] = 0
                live = False
        elif action == "abandon" and newest is not None:
            newest.abandon()
            if live:
                model["samples_consumed"] = 0
                live = False
        elif action == "load":
            saved = {"epoch": 2, "seed": 0, "samples_consumed": 7}
            state.load(saved)
            model, resume, live = dict(saved), True, False
        elif action == "epoch":
            target = model["epoch"] + 1
            state.set_epoch(target)
            model = {"epoch": target, "seed": 0, "samples_consumed": 0}
            resume, live = False, False
        assert state.state_dict() == model
