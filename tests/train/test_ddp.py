"""Real torchrun jobs on gloo: sharding, fault recovery, elastic resume, a dp x tp mesh.

Every run trains the same tiny model on the same tiny store with the same global batch,
so a run that was killed and restarted, or resumed with another number of processes,
must take the very same optimizer steps over the very same samples as the uninterrupted
run: the sample logs are compared step by step, the losses to float precision.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ticktensor.cli import main
from ticktensor.train import loss_curve, read_jsonlines

from .conftest import ROOT, add_day, build_store, cli_env, torchrun

pytestmark = pytest.mark.slow

EPOCHS = 2
STEPS_PER_EPOCH = 37  # 2,330 training windows in global batches of 64


def args(store: str, out: Path, *extra: str) -> list[str]:
    return [
        "--store",
        store,
        "--out",
        str(out),
        "--window",
        "32",
        "--batch-size",
        "64",
        "--epochs",
        str(EPOCHS),
        "--checkpoint-every",
        "10",
        "--horizon-s",
        "10",
        "--hidden",
        "16",
        "--sample-log",
        *extra,
    ]


def committed_steps(out: Path) -> tuple[dict[int, dict[str, Any]], int]:
    """Per global step, the samples that count (work lost to a failure is dropped), and
    how many steps were lost. A launch that resumed at step S discards the records of
    earlier launches after S: their model updates were rolled back with the restart."""
    starts = [r for r in read_jsonlines(out / "metrics.jsonl") if r["event"] == "start"]
    records = [r for p in sorted(out.glob("samples-rank*.jsonl")) for r in read_jsonlines(p)]
    kept: dict[tuple[int, int], dict[str, Any]] = {}
    lost: set[int] = set()
    for start in starts:
        resumed = (start.get("resumed") or {}).get("step", 0)
        for key in [k for k in kept if k[0] > resumed]:
            lost.add(key[0])
            del kept[key]
        for r in records:
            if r["launch"] == start["launch"] and r["tp_rank"] == 0:
                kept[r["step"], r["dp_rank"]] = r
    steps: dict[int, dict[str, Any]] = {}
    for (step, _), r in sorted(kept.items()):
        entry = steps.setdefault(step, {"epoch": r["epoch"], "ids": [], "per_rank": []})
        entry["ids"].extend(r["ids"])
        entry["per_rank"].append(len(r["ids"]))
    return steps, len(lost)


def epoch_records(out: Path) -> list[dict[str, Any]]:
    return [r for r in read_jsonlines(out / "metrics.jsonl") if r["event"] == "epoch"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_store(tmp_path_factory.mktemp("ddp") / "store")


@pytest.fixture(scope="module")
def reference(store: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted two-process run."""
    out = tmp_path_factory.mktemp("reference") / "run"
    torchrun(2, *args(store, out))
    return out


def assert_same_training(run: Path, reference: Path) -> None:
    ours, _ = committed_steps(run)
    theirs, _ = committed_steps(reference)
    assert sorted(ours) == sorted(theirs) == list(range(1, EPOCHS * STEPS_PER_EPOCH + 1))
    for step, entry in theirs.items():
        assert sorted(ours[step]["ids"]) == sorted(entry["ids"]), f"step {step}"
    ours_curve = loss_curve(run / "metrics.jsonl")
    theirs_curve = loss_curve(reference / "metrics.jsonl")
    assert [p.step for p in ours_curve] == [p.step for p in theirs_curve] == [0, 37, 74]
    for a_point, b_point in zip(ours_curve, theirs_curve, strict=True):
        assert a_point.samples_seen == b_point.samples_seen
        assert a_point.valid_loss == pytest.approx(b_point.valid_loss, rel=1e-5)
    for a, b in zip(epoch_records(run)[-EPOCHS:], epoch_records(reference), strict=True):
        assert a["epoch"] == b["epoch"]
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["valid_loss"] == pytest.approx(b["valid_loss"], rel=1e-5)


def test_two_ranks_see_disjoint_samples_and_learn(reference: Path) -> None:
    steps, lost = committed_steps(reference)
    assert lost == 0
    assert len(steps) == EPOCHS * STEPS_PER_EPOCH
    per_rank: Counter[int] = Counter()
    for p in reference.glob("samples-rank*.jsonl"):
        per_rank[int(p.stem[-1])] = len(read_jsonlines(p))
    assert per_rank == {0: len(steps), 1: len(steps)}  # equal step counts
    for epoch in range(EPOCHS):
        seen = Counter(i for s in steps.values() if s["epoch"] == epoch for i in s["ids"])
        assert set(seen.values()) == {1}  # disjoint over ranks, every sample once
        assert len(seen) == 2330
    evals = [r for r in read_jsonlines(reference / "metrics.jsonl") if r["event"] == "eval"]
    assert evals[0]["step"] == 0
    assert evals[-1]["step"] == EPOCHS * STEPS_PER_EPOCH
    assert evals[-1]["valid_loss"] < 0.8 * evals[0]["valid_loss"]
    epochs = epoch_records(reference)
    assert epochs[1]["train_loss"] < epochs[0]["train_loss"]
    assert all(r["samples_per_s"] > 0 and 0 <= r["stall_pct"] <= 100 for r in epochs)
    assert all({"wall_s", "samples_seen", "valid_loss"} <= set(r) for r in evals)


def test_sigkill_of_a_rank_restarts_from_the_checkpoint(
    store: str, reference: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    output = torchrun(
        2, *args(store, out, "--kill-at-step", "15", "--kill-rank", "1"), max_restarts=1
    )
    assert "fault drill: rank 1 kills itself (SIGKILL) after step 15" in output
    assert "resumed from" in output
    assert "at step 10" in output
    starts = [r for r in read_jsonlines(out / "metrics.jsonl") if r["event"] == "start"]
    assert [s["attempt"] for s in starts] == [0, 1]
    assert starts[1]["replayed"] == {"steps": 5, "samples": 5 * 64}  # reported gap
    _, lost = committed_steps(out)
    assert lost == 5  # steps 11..15 trained again: less than the checkpoint interval
    assert_same_training(out, reference)


def run_on(nproc: int, store: str, out: Path, *extra: str) -> str:
    """``ticktensor train`` on ``nproc`` processes: torchrun for several, plain for one."""
    if nproc > 1:
        return torchrun(nproc, *args(store, out, *extra))
    done = subprocess.run(
        [sys.executable, "-m", "ticktensor.cli", "train", *args(store, out, *extra)],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def test_resume_on_another_number_of_processes(store: str, reference: Path, tmp_path: Path) -> None:
    """2 processes to step 20, 1 process to step 50 (across the epoch boundary), then 2
    to the end: the same steps over the same samples as the uninterrupted run."""
    out = tmp_path / "run"
    run_on(2, store, out, "--max-steps", "20")
    assert max(committed_steps(out)[0]) == 20
    assert "saved by 2 ranks; now 1" in run_on(1, store, out, "--max-steps", "50")
    assert "saved by 1 ranks; now 2" in run_on(2, store, out)
    steps, lost = committed_steps(out)
    assert lost == 0
    per_rank = {step: steps[step]["per_rank"] for step in (20, 21, 50, 51)}
    assert per_rank == {20: [32, 32], 21: [64], 50: [64], 51: [32, 32]}
    assert_same_training(out, reference)


def test_tp_peers_receive_identical_batches(store: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    torchrun(4, *args(store, out, "--tp", "2", "--epochs", "1", "--max-steps", "12"))
    logs = {int(p.stem[-1]): read_jsonlines(p) for p in out.glob("samples-rank*.jsonl")}
    assert {r: (recs[0]["dp_rank"], recs[0]["tp_rank"]) for r, recs in logs.items()} == {
        0: (0, 0),
        1: (0, 1),
        2: (1, 0),
        3: (1, 1),
    }
    strip = [[(r["step"], r["ids"]) for r in logs[rank]] for rank in range(4)]
    assert strip[0] == strip[1]  # same dp index: identical batches, identical order
    assert strip[2] == strip[3]
    assert len(strip[0]) == 12
    for (s0, a), (s2, b) in zip(strip[0], strip[2], strict=True):
        assert s0 == s2
        assert not set(a) & set(b)
        assert len(a) == len(b) == 32


def test_resume_refuses_another_store_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = build_store(tmp_path / "store", rows=400)
    out = tmp_path / "run"
    flags = ["train", "--store", url, "--out", str(out), "--window", "16", "--batch-size", "32"]
    flags += ["--horizon-s", "10", "--max-steps", "3", "--hidden", "8"]
    assert main(flags) == 0
    add_day(url)
    capsys.readouterr()
    assert main(flags) == 1
    err = capsys.readouterr().err
    assert "was trained on store version 1" in err
    assert "opens at version 2" in err
    assert "--store-version 1" in err
    assert main([*flags, "--store-version", "1", "--max-steps", "5"]) == 0
    assert "resumed from" in capsys.readouterr().out
