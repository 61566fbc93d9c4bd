"""``ticktensor migrate``, ``info`` and ``verify`` on a store whose sessions become packs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ticktensor.cli import main
from ticktensor.store import Codec, Layout, Store
from ticktensor.store.testing import write_segment

FIXTURES = Path(__file__).parents[1] / "fixtures"
EXE = Path(sys.executable).parent / "ticktensor"


@pytest.fixture
def v1_store(tmp_path: Path) -> Path:
    root = tmp_path / "store-v1"
    shutil.copytree(FIXTURES / "store-v1", root)
    return root


def test_dry_run_then_migrate_then_nothing_left(v1_store: Path) -> None:
    """As users run it: the installed command, in its own process."""

    def tt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(EXE), *args], capture_output=True, text=True, timeout=300, check=False
        )

    dry = tt("migrate", str(v1_store), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would pack 2023-11-14: 2 segment(s), 300 rows (26 files" in dry.stdout
    assert "would write 1 pack(s) replacing 2 segment(s) (300 rows) of version 2" in dry.stdout
    assert "nothing written" in dry.stdout
    assert Store.open(str(v1_store)).latest_version() == 2
    assert not (v1_store / "packs").exists()

    run = tt("migrate", str(v1_store), "--quiet")
    assert run.returncode == 0, run.stderr
    assert "packed 2023-11-14: 2 segment(s), 300 rows" in run.stdout
    assert "-> 1 pack (9 files" in run.stdout
    assert "migrated 1 session(s): 2 segment(s) -> 1 pack(s), 300 rows" in run.stdout
    assert "version(s) 3. Versions 0..2 still read the segments" in run.stdout
    assert "event tables are unchanged" in run.stdout

    again = tt("migrate", str(v1_store))
    assert again.returncode == 0, again.stderr
    assert "nothing to migrate: version 3" in again.stdout
    assert "(1 session(s) already packs); no version written" in again.stdout
    assert Store.open(str(v1_store)).latest_version() == 3

    ok = tt("verify", str(v1_store), "--quiet")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("OK: version 3")


def test_info_shows_packs(v1_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", str(v1_store), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["info", str(v1_store)]) == 0
    text = capsys.readouterr().out
    assert "rows      300 in 1 packs, 3 features, 1 labels" in text
    assert "packs     1 sessions (2023-11-14 .. 2023-11-14), 2 symbols, 300 rows in 9 files" in text
    assert "symbols   2: AAA, B/B" in text
    assert " 0 segments   1 packs " in text  # the version list counts packs too
    assert main(["info", str(v1_store), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["segments"] == 0
    assert info["sessions"] == ["2023-11-14"]
    assert info["pack_symbols"] == 2
    (pack,) = info["packs"]
    assert {k: pack[k] for k in ("session", "symbols", "rows", "files", "codec")} == {
        "session": "2023-11-14",
        "symbols": 2,
        "rows": 300,
        "files": 9,
        "codec": "none",
    }
    assert pack["path"].startswith("packs/2023-11-14-")
    assert info["pack_bytes"] == pack["bytes"]
    assert info["ts_start"] == pack["ts_start"]
    assert [(v["segments"], v["packs"]) for v in info["versions"]] == [
        (0, 0),
        (1, 0),
        (2, 0),
        (0, 1),
    ]
    assert main(["info", str(v1_store), "--version", "2"]) == 0
    assert "packs " not in capsys.readouterr().out.split("versions")[0]


def test_verify_names_the_damaged_chunk_of_a_migrated_session(
    v1_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["migrate", str(v1_store), "--quiet"]) == 0
    v = Store.open(str(v1_store)).version()
    (pack,) = v.packs
    chunk = v.chunk_map(pack, "values").chunks[2]
    path = v1_store / chunk.rel
    data = bytearray(path.read_bytes())
    data[chunk.offset + 3] ^= 0x01
    path.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["verify", str(v1_store), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert (
        f"pack 2023-11-14 values chunk 2 (bytes {chunk.offset}+{chunk.nbytes} of {chunk.rel}): "
        "content hash mismatch"
    ) in err
    assert main(["verify", str(v1_store), "--quiet", "--version", "2"]) == 0  # the segments


def test_sessions_layout_and_commit_every(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store-v2"
    shutil.copytree(FIXTURES / "store-v2", root)
    code = main(["migrate", str(root), "--session", "2031-01-01"])
    assert code == 1
    assert "ticktensor migrate: error: " in capsys.readouterr().err
    args = ["migrate", str(root), "--codec", "zstd", "--chunk-rows", "32", "--commit-every", "1"]
    assert main([*args, "--session", "2023-11-14", "--quiet"]) == 0
    assert "version(s) 5." in capsys.readouterr().out
    pack = Store.open(str(root)).version().pack("2023-11-14")
    assert dict(pack.layout) == {"codec": "zstd", "chunk_rows": 32, "level": None}


def test_one_layout_flag_keeps_the_segments_other_field(tmp_path: Path) -> None:
    """--chunk-rows alone keeps the segments' codec (and --codec alone their chunk rows),
    not the store's default."""
    store = Store.create(str(tmp_path / "s"))  # default: codec none
    segs = [
        write_segment(
            store,
            symbol=s,
            session="2024-01-02",
            ts=np.arange(100, dtype=np.int64),
            values=np.ones((100, 2), np.float32),
            feature_names=["a", "b"],
            layout=Layout(codec=Codec.ZSTD, chunk_rows=50),
        )
        for s in ("A", "B")
    ]
    store.commit(segments=segs)
    assert main(["migrate", str(tmp_path / "s"), "--chunk-rows", "64", "--quiet"]) == 0
    (pack,) = Store.open(str(tmp_path / "s")).version().packs
    assert dict(pack.layout) == {"codec": "zstd", "chunk_rows": 64, "level": None}


def test_segments_read_through_zarr_python_are_announced(
    v1_store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ticktensor.store._migrate as migration

    # As for a segment an older ticktensor wrote in another form than this one's.
    monkeypatch.setattr(migration, "read_checked_segment", lambda location, record: None)
    assert main(["migrate", str(v1_store), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "note: 2 segment(s) were not in the form this ticktensor writes" in out
    assert main(["verify", str(v1_store)]) == 0
