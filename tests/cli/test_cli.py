"""The ``ticktensor`` command, run as users run it: a real process on the installed entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

EXE = Path(sys.executable).parent / "ticktensor"
SMALL = ["--symbols", "2", "--days", "2", "--quotes-per-day", "3000", "--quiet"]


def tt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EXE), *args], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "demo"
    result = tt("demo", "--out", str(out), "--codec", "zstd", "--chunk-rows", "1024", *SMALL)
    assert result.returncode == 0, result.stderr
    assert "verified  version 2" in result.stdout
    assert "bit-identical" in result.stdout
    assert "symbols   2: SYNA, SYNB" in result.stdout
    assert "ingested " in result.stdout
    assert "same first batch: True" in result.stdout
    assert "2 epochs of" in result.stdout
    return out


def test_info_json(demo_store: Path) -> None:
    result = tt("info", str(demo_store), "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["version"] == info["latest_version"] == 2
    assert info["symbols"] == ["SYNA", "SYNB"]
    assert info["codecs"] == ["zstd"]
    assert len(info["sessions"]) == 2
    assert info["segments"] == 0  # the ingest writes a pack per session
    assert [(p["session"], p["symbols"]) for p in info["packs"]] == [
        ("2024-01-02", 2),
        ("2024-01-03", 2),
    ]
    assert info["rows"] > 0
    assert info["tables"]["quotes"]["rows"] == info["rows"]
    assert info["stats_period"] is not None
    assert [v["version"] for v in info["versions"]] == [0, 1, 2]
    text = tt("info", str(demo_store), "--version", "1")
    assert text.returncode == 0
    assert "version   1 of 2" in text.stdout


def test_demo_rerun_is_a_no_op(demo_store: Path) -> None:
    result = tt("demo", "--out", str(demo_store), "--codec", "zstd", "--chunk-rows", "1024", *SMALL)
    assert result.returncode == 0, result.stderr
    assert "nothing new written" in result.stdout
    assert json.loads(tt("info", str(demo_store), "--json").stdout)["latest_version"] == 2


def test_verify_passes_then_names_a_flipped_chunk(demo_store: Path, tmp_path: Path) -> None:
    ok = tt("verify", str(demo_store), "--quiet")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("OK: version 2")

    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(demo_store, damaged)
    manifest = json.loads((damaged / "versions" / "00000002.json").read_text())
    (pack,) = manifest["packs"]  # the version's new session
    attrs = json.loads((damaged / pack["path"] / "zarr.json").read_text())
    per_shard = attrs["attributes"]["ticktensor"]["shard_rows"] // 1024
    path = damaged / pack["path"] / "values/c/0/0"  # the one shard of the values
    data = bytearray(path.read_bytes())
    flipped = len(data) // 2
    data[flipped] ^= 0xFF
    path.write_bytes(bytes(data))
    index = np.frombuffer(bytes(data[-16 * per_shard :]), "<u8").reshape(per_shard, 2)
    (chunk,) = [k for k, (at, n) in enumerate(index.tolist()) if at <= flipped < at + n]
    bad = tt("verify", str(damaged), "--quiet")
    assert bad.returncode == 1
    assert f"pack {pack['session']} values chunk {chunk} (bytes " in bad.stderr
    assert os.fspath(path) in bad.stderr


def test_errors_are_one_line_not_tracebacks(tmp_path: Path) -> None:
    result = tt("info", str(tmp_path))
    assert result.returncode == 1
    assert "no ticktensor store here" in result.stderr
    assert "Traceback" not in result.stderr
    missing = tt("info", str(tmp_path / "nope"), "--version", "3")
    assert missing.returncode == 1
