"""Shared helpers for training tests: a tiny store whose label is learnable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ticktensor.store import FeatureStats, Layout, Store

ROOT = Path(__file__).parents[2]
FEATURES = ("x", "noise", "abs_x")
HORIZON = 5  # rows; one row per second


def build_store(path: Path, symbols: int = 2, rows: int = 1500, seed: int = 0) -> str:
    """An AR(1) feature per symbol; the label is the mean of its next ``HORIZON`` values,
    so recent rows predict it well (R^2 about 0.7) and a model's loss falls fast."""
    store = Store.create(str(path), layout=Layout(chunk_rows=512))
    values, labels = [], []
    rng = np.random.default_rng(seed)
    for _ in range(symbols):
        x = np.zeros(rows + HORIZON)
        for t in range(1, x.size):
            x[t] = 0.9 * x[t - 1] + rng.standard_normal()
        fwd = np.lib.stride_tricks.sliding_window_view(x[1:], HORIZON).mean(axis=1)[:rows]
        values.append(np.stack([x[:rows], rng.standard_normal(rows), np.abs(x[:rows])], axis=1))
        labels.append(fwd[:, None])
    pack = store.write_pack(
        session="2024-01-02",
        symbols=[f"S{s:03d}" for s in range(symbols)],
        offsets=np.arange(symbols + 1) * rows,
        ts=np.tile((1_704_186_000 + np.arange(rows, dtype=np.int64)) * 10**9, symbols),
        values=np.concatenate(values).astype(np.float32),
        feature_names=FEATURES,
        labels=np.concatenate(labels).astype(np.float32),
        label_names=("fwd_mean_5",),
    )
    stats = FeatureStats(
        names=FEATURES,
        mean=(0.0, 0.0, 1.8),
        std=(2.3, 1.0, 1.4),
        count=symbols * rows,
        period=(0, 2**62),
    )
    store.commit(packs=[pack], message="train tests", stats=stats)
    return str(path)


def add_day(url: str) -> int:
    """Append one more session to the store (a new version, as a daily job does)."""
    store = Store.open(url)
    rows = 100
    pack = store.write_pack(
        session="2024-01-03",
        symbols=["S000"],
        offsets=[0, rows],
        ts=(1_704_272_400 + np.arange(rows, dtype=np.int64)) * 10**9,
        values=np.ones((rows, len(FEATURES)), dtype=np.float32),
        feature_names=FEATURES,
        labels=np.ones((rows, 1), dtype=np.float32),
        label_names=("fwd_mean_5",),
    )
    return store.commit(packs=[pack], message="another day").version


@pytest.fixture(scope="session")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_store(tmp_path_factory.mktemp("train-store") / "store")


def cli_env() -> dict[str, str]:
    """Environment for child processes: one thread each, no inherited torchrun variables."""
    env = {k: v for k, v in os.environ.items() if k not in _DIST_VARS}
    env |= {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return env


_DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def torchrun(nproc: int, *args: str, max_restarts: int = 0, timeout: float = 120) -> str:
    """Run ``ticktensor train ARGS`` under torchrun with ``nproc`` local processes (gloo)."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "--monitor-interval=0.5",
        "-m",
        "ticktensor.cli",
        "train",
        *args,
    ]
    done = subprocess.run(
        cmd, cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    return output
