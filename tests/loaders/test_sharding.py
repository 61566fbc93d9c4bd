"""Sharding: equal work per rank, disjoint steps, and exact resumption across world sizes."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import ConfigError
from ticktensor.loaders import EpochState, ShardPlan, rank_batches, world_from_env


def all_ranks(plan_args: dict[str, object], world_size: int) -> list[ShardPlan]:
    return [ShardPlan(**plan_args, world_size=world_size, rank=r) for r in range(world_size)]  # type: ignore[arg-type]


@pytest.mark.parametrize(("drop_last", "pad"), [(False, True), (False, False), (True, True)])
@pytest.mark.parametrize("n", [0, 1, 7, 24, 25, 31])
def test_steps_are_equal_and_disjoint(n: int, drop_last: bool, pad: bool) -> None:
    order = np.random.default_rng(n).permutation(n)
    plans = all_ranks(
        {"num_samples_or_order": order, "batch_size": 3, "drop_last": drop_last, "pad": pad}, 4
    )
    steps = {p.num_steps for p in plans}
    assert len(steps) == 1  # equal work per rank
    (n_steps,) = steps
    seen: list[int] = []
    for step in range(n_steps):
        batches = [p.batch(step) for p in plans]
        in_step = np.concatenate(batches).tolist()
        if not (pad and not drop_last):
            assert len(in_step) == len(set(in_step))  # no sample on two ranks in a step
        if drop_last or pad:
            assert all(b.size == 3 for b in batches)
        seen.extend(in_step)
    if drop_last:
        assert n_steps == n // 12
        assert seen == order[: n_steps * 12].tolist()
    elif pad:
        assert n_steps == -(-n // 12)
        assert seen[:n] == order.tolist()
        assert seen[n:] == np.resize(order, len(seen) - n).tolist()  # wraps from the start
    else:
        assert sorted(seen) == sorted(order.tolist())
        assert Counter(seen) == Counter(order.tolist())


def test_examples_and_iteration() -> None:
    assert [b.tolist() for b in ShardPlan(10, 2, 2, 0)] == [[0, 1], [4, 5], [8, 9]]
    assert [b.tolist() for b in ShardPlan(10, 2, 2, 1)] == [[2, 3], [6, 7], [0, 1]]
    assert [b.tolist() for b in ShardPlan(10, 2, 2, 1, pad=False)] == [[2, 3], [6, 7], [9]]
    assert [b.tolist() for b in ShardPlan(10, 2, 2, 1, drop_last=True)] == [[2, 3], [6, 7]]
    order = np.arange(100, 110)
    resumed = rank_batches(order, 2, 3, 2, start_sample=3)
    assert [b.tolist() for b in resumed] == [[107, 108], [103, 104]]  # 10 -> 0, ...
    plan = ShardPlan(10, 2, 2, 0, start_sample=4)
    assert len(plan) == 2
    assert plan.samples_consumed(1) == 8
    assert plan.samples_consumed(2) == 10  # clipped at the end of the order
    with pytest.raises(IndexError):
        plan.batch(2)


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="rank 2 is not below world_size 2"):
        ShardPlan(10, 2, 2, 2)
    with pytest.raises(ConfigError, match="batch_size"):
        ShardPlan(10, 0, 1, 0)
    with pytest.raises(ConfigError, match="start_sample 11"):
        ShardPlan(10, 2, 1, 0, start_sample=11)
    with pytest.raises(ConfigError, match="1-D integer"):
        ShardPlan(np.zeros((2, 2), dtype=np.int64), 2)


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(0, 400),
    seed=st.integers(0, 2**32 - 1),
    batch_size=st.integers(1, 9),
    world_before=st.integers(1, 6),
    world_after=st.integers(1, 6),
    batch_after=st.integers(1, 9),
    stop_fraction=st.floats(0, 1),
    pad=st.booleans(),
)
def test_resume_with_another_world_size_sees_the_same_samples(
    n: int,
    seed: int,
    batch_size: int,
    world_before: int,
    world_after: int,
    batch_after: int,
    stop_fraction: float,
    pad: bool,
) -> None:
    order = np.random.default_rng([seed, 0]).permutation(n)
    state = EpochState(epoch=0, seed=seed)
    before = [state.plan(order, batch_size, world_before, r, pad=pad) for r in range(world_before)]
    stop = int(stop_fraction * before[0].num_steps)
    seen_before: list[int] = []
    for step in range(stop):
        for plan in before:
            seen_before.extend(plan.batch(step).tolist())
        state.advance(min(batch_size * world_before, n - state.samples_consumed))
    assert state.samples_consumed == before[0].samples_consumed(stop)

    # Save (JSON round trip: plain ints), restore into a new world of another size.
    restored = EpochState.from_state_dict(json.loads(json.dumps(state.state_dict())))
    assert restored == state
    after = [restored.plan(order, batch_after, world_after, r, pad=pad) for r in range(world_after)]
    assert len({p.num_steps for p in after}) == 1
    seen_after = [i for p in after for b in p for i in b.tolist()]

    if not pad:
        uninterrupted = [
            i
            for r in range(world_before)
            for b in ShardPlan(order, batch_size, world_before, r, pad=False)
            for i in b.tolist()
        ]
        assert (
            Counter(seen_before + seen_after) == Counter(uninterrupted) == Counter(order.tolist())
        )
    else:
        # Padding repeats samples from the start of the order, only in the epoch's last step.
        consumed = restored.samples_consumed
        tail = order[consumed:].tolist()
        if stop < before[0].num_steps:
            assert Counter(seen_before) == Counter(order[:consumed].tolist())
            wrapped = np.resize(order, len(seen_after) - len(tail)).tolist()
            assert Counter(seen_after) == Counter(tail + wrapped)
            assert len(seen_after) - len(tail) < batch_after * world_after
        else:
            assert seen_after == []
            wrapped = np.resize(order, len(seen_before) - n).tolist()
            assert Counter(seen_before) == Counter(order.tolist() + wrapped)
            assert len(seen_before) - n < batch_size * world_before


def test_epoch_state_round_trip_and_errors() -> None:
    state = EpochState(epoch=2, seed=7, extra={"world_size": 4})
    state.advance(96)
    saved = state.state_dict()
    assert saved == {"world_size": 4, "epoch": 2, "seed": 7, "samples_consumed": 96}
    other = EpochState()
    other.load_state_dict(saved)
    assert other == state
    other.next_epoch()
    assert (other.epoch, other.samples_consumed) == (3, 0)
    with pytest.raises(ConfigError, match="lacks"):
        other.load_state_dict({"epoch": 1})
    with pytest.raises(ConfigError, match="samples_consumed"):
        other.load_state_dict({"epoch": 1, "seed": 0, "samples_consumed": -1})


def test_world_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert world_from_env() == (0, 1)
    assert world_from_env(rank=2, world_size=3) == (2, 3)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert world_from_env() == (1, 4)
    assert world_from_env(0, 2) == (0, 2)  # explicit arguments win
    with pytest.raises(ConfigError, match="both"):
        world_from_env(rank=1)
    with pytest.raises(ConfigError, match="not below"):
        world_from_env(3, 3)
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ConfigError, match="RANK='x' is not an integer"):
        world_from_env()


_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2"}, (1, 2)),  # Lightning
        ({"LOCAL_RANK": "1", "WORLD_SIZE": "2"}, (1, 2)),
        (
            {"LOCAL_RANK": "1", "NODE_RANK": "2", "LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "16"},
            (9, 16),
        ),
        ({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}, (5, 8)),  # torchrun: RANK wins
        ({"LOCAL_RANK": "0"}, (0, 1)),  # no world size: a single process
        ({"WORLD_SIZE": "1"}, (0, 1)),
    ],
)
def test_world_from_launcher_env(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: tuple[int, int]
) -> None:
    for name in _LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert world_from_env() == expected


@pytest.mark.parametrize(
    "env",
    [
        {"WORLD_SIZE": "2"},
        {"LOCAL_RANK": "1", "NODE_RANK": "1", "WORLD_SIZE": "4"},  # node size unknown
    ],
)
def test_a_world_without_this_rank_is_an_error(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    for name in _LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match="rank is unknown"):
        world_from_env()
