"""Shared helpers for the client tests: a small store whose samples name themselves.

Feature 0 of row ``r`` of symbol ``s`` is ``1000 * s + r``, so ``x[:, 0, 0]`` (the first
row of each window) is the id of every sample in a batch. Three symbols of different
lengths give 64 windows of 4 rows: 8 batches of 8, or 4 per rank with 2 ranks, with no
padding or short batch to allow for.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.one_pack import one_pack_store
from ticktensor.store import StoreVersion, open_store

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
WINDOW = 4
ROWS = (36, 27, 10)  # 33 + 24 + 7 = 64 windows of WINDOW rows
BATCH = 8
ALL_IDS = frozenset(1000 * s + r for s, rows in enumerate(ROWS) for r in range(rows - WINDOW + 1))
# What the launchers set (and where Ray connects); a child process starts without them.
_DIST_VARS = (
    "RAY_ADDRESS",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def build_store(path: Path) -> str:
    """The store described above; returns its URL."""
    one_pack_store(
        path,
        ROWS,
        lambda s, r: np.stack([1000 * s + r, np.sin(r), r / r.size], axis=1),
        lambda r: np.cos(r)[:, None],
        ("id", "sin", "frac"),
        ("y",),
        message="client tests",
    )
    return str(path)


@pytest.fixture(scope="session")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_store(tmp_path_factory.mktemp("clients") / "store")


@pytest.fixture(scope="session")
def version(store_url: str) -> StoreVersion:
    return open_store(store_url)


def ids(x: torch.Tensor) -> list[int]:
    """The sample ids of a batch ``x [B, W, F]``."""
    return [int(v) for v in x[:, 0, 0].tolist()]


def child_env() -> dict[str, str]:
    """Environment for a child process: no launcher variables of ours, one thread each."""
    env = {k: v for k, v in os.environ.items() if k not in _DIST_VARS}
    return env | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run_script(args: list[str], timeout: float = 180) -> str:
    """Run a command from the repository root; fail with its output unless it exits 0.

    The command runs in a session of its own: on a timeout the whole session is killed,
    so launched ranks stuck in a collective do not outlive the test.
    """
    child = subprocess.Popen(
        args,
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):  # gone in the meantime
            os.killpg(child.pid, signal.SIGKILL)
        output, _ = child.communicate()
        pytest.fail(f"{args[1:]} did not finish in {timeout} s:\n{output[-8000:]}")
    assert child.returncode == 0, output[-8000:]
    return output


def read_ids(path: Path) -> list[int]:
    """Ids written one per line by a child process (empty file: no ids)."""
    return [int(line) for line in path.read_text().split()]
