"""``ticktensor`` against an S3 API server (moto on 127.0.0.1): ingest, info, verify and a
loader pass over ``s3://``, and one-line errors when the server cannot be used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch

from ticktensor import DataLoader
from ticktensor.cli import main
from ticktensor.loaders import WindowDataset
from ticktensor.store import open_store

if TYPE_CHECKING:
    from tests.conftest import S3Bucket

EXE = Path(sys.executable).parent / "ticktensor"
SYMBOLS = ("AAA", "BBB")
ROWS_PER_DAY = 400


@pytest.fixture(scope="module")
def trades_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two symbols x two days of trades, one every ~0.5 s from 14:30 UTC."""
    rng = np.random.default_rng(7)
    lines = ["ts_event,symbol,price,size"]
    open_ns = 1_704_205_800 * 10**9  # 2024-01-02 14:30 UTC
    for symbol in SYMBOLS:
        for day in range(2):
            gaps = rng.integers(10**8, 10**9, ROWS_PER_DAY)
            ts = open_ns + day * 86_400 * 10**9 + np.cumsum(gaps)
            prices = 100 + np.cumsum(rng.standard_normal(ROWS_PER_DAY)) * 0.01
            sizes = rng.integers(1, 100, ROWS_PER_DAY)
            lines += [
                f"{t},{symbol},{p:.2f},{s}" for t, p, s in zip(ts, prices, sizes, strict=True)
            ]
    path = tmp_path_factory.mktemp("object-store") / "trades.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def ingest_args(csv: Path, out: str) -> list[str]:
    return ["ingest", str(csv), "--out", out, "--schema", "trades", "--quiet", "--workers", "2"]


def one_error_line(stderr: str, command: str) -> str:
    """The message of a CLI error that must be a single line."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    prefix = f"ticktensor {command}: error: "
    assert lines[0].startswith(prefix), stderr
    return lines[0][len(prefix) :]


def test_ingest_info_verify_and_load_on_s3(
    s3_bucket: S3Bucket,
    trades_csv: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_bucket.endpoint)  # the CLI's recipe
    url = s3_bucket.url("store")
    args = [*ingest_args(trades_csv, url), "--codec", "zstd", "--chunk-rows", "64"]
    assert main(args) == 0, capsys.readouterr().err
    assert "store version 1 published: 2 packs (4 symbol-sessions)" in capsys.readouterr().out
    assert main(["info", url]) == 0
    info = capsys.readouterr().out
    assert f"store     {url}" in info
    assert "symbols   2: AAA, BBB" in info
    assert main(["verify", url]) == 0
    assert capsys.readouterr().out.startswith(f"OK: version 1 of {url}: ")

    # The Python API's recipe: the endpoint in storage_options.
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    version = open_store(url, storage_options=s3_bucket.storage_options)
    dataset = WindowDataset(version, 16, threads=2)
    loader = DataLoader(dataset, batch_size=32)
    seen = 0
    for i, (x, y) in enumerate(loader):
        expected_x, expected_y = dataset.get_batch(np.arange(i * 32, i * 32 + len(x)))
        assert torch.equal(x, torch.from_numpy(expected_x))
        assert torch.equal(y, torch.from_numpy(expected_y))
        seen += len(x)
    assert seen == len(dataset) > 0


def test_missing_bucket_is_one_line(
    s3_bucket: S3Bucket,
    trades_csv: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_bucket.endpoint)
    missing = f"{s3_bucket.name}-missing"
    assert main(ingest_args(trades_csv, f"s3://{missing}/store")) == 1
    message = one_error_line(capsys.readouterr().err, "ingest")
    assert f"bucket '{missing}' does not exist at {s3_bucket.endpoint}" in message


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The command in a new process: S3 clients read the environment once per process."""
    return subprocess.run(
        [str(EXE), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_unreachable_endpoint_is_one_line(
    s3_bucket: S3Bucket, trades_csv: Path, closed_endpoint: str
) -> None:
    env = dict(os.environ, AWS_ENDPOINT_URL=closed_endpoint, AWS_MAX_ATTEMPTS="1")
    result = run_cli(ingest_args(trades_csv, s3_bucket.url("store")), env)
    assert result.returncode == 1
    message = one_error_line(result.stderr, "ingest")
    assert f"cannot reach the object store at {closed_endpoint}" in message
    assert "set AWS_ENDPOINT_URL=" in message


def test_missing_credentials_are_one_line(
    s3_bucket: S3Bucket, trades_csv: Path, tmp_path: Path
) -> None:
    nowhere = str(tmp_path / "no-such-file")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    env |= {
        "AWS_ENDPOINT_URL": s3_bucket.endpoint,
        "AWS_SHARED_CREDENTIALS_FILE": nowhere,
        "AWS_CONFIG_FILE": nowhere,
    }
    result = run_cli(["info", s3_bucket.url("store")], env)
    assert result.returncode == 1
    message = one_error_line(result.stderr, "info")
    assert "no object store credentials found" in message
    assert "AWS_ACCESS_KEY_ID" in message
