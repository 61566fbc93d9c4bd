"""SIGKILL in the middle of a commit leaves the previous version intact, and a retry lands.

Each case runs the commit in a child process that kills itself (SIGKILL, no cleanup)
at one point of the commit protocol, then checks the store from the outside. The child
commits segments and a table, a pack and a table, or migrates the store's segments to
a pack (a commit that removes segments and adds a pack).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ticktensor.store import Layout, Store

from .conftest import make_series, write_series

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    from ticktensor.store import Store, _location

    url, crash_at, arg, kind = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

    def die():
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    writes = 0  # files of segments or packs stored so far (metadata, chunks, shards)

    orig_write = _location.Location.write_atomic
    def write_atomic(self, rel, data, **options):
        global writes
        if rel.startswith(("segments/", "packs/")):
            writes += 1
            if crash_at == "chunk" and writes == arg:
                die()
        if crash_at == "table" and rel.startswith("events/"):
            die()
        checkpoint = rel.endswith(".checkpoint.json")
        if crash_at == ("checkpoint" if checkpoint else "manifest") and rel.startswith("versions/"):
            self.fs.pipe_file(self.path(rel), data[: len(data) // 2])  # torn write
            die()
        if crash_at == "pointer" and rel == "latest.json":
            die()
        return orig_write(self, rel, data, **options)
    _location.Location.write_atomic = write_atomic

    orig_replace = os.replace
    def replace(src, dst, **folders):  # names in folders opened without following links
        global writes
        if ".writing-" in str(src):  # a shard a local pack wrote as it went, moved in
            writes += 1
            if crash_at == "chunk" and writes == arg:
                die()
        if crash_at == "table" and str(src).endswith(".writing.parquet"):  # a table, moved in
            die()
        if crash_at == "rename" and str(dst).endswith("latest.json"):
            die()
        return orig_replace(src, dst, **folders)
    os.replace = replace

    from ticktensor.store import _pack_writer
    orig_spill = _pack_writer._Spill.writer
    def spill_writer(self, array):
        write = orig_spill(self, array)
        def dying_write(shard, data):
            write(shard, data)
            if crash_at == "spill":
                die()
        return dying_write
    _pack_writer._Spill.writer = spill_writer
    if crash_at == "spill":  # a pack larger than a writer holds in memory
        _pack_writer.SPILL_BYTES = 0

    import pyarrow as pa
    from ticktensor.store import migrate
    from ticktensor.store.testing import write_segment
    rng = np.random.default_rng(7)
    store = Store.open(url)
    if kind == "migrate":
        print("committed", *migrate(store).versions)
        sys.exit()
    names = {"feature_names": ("ret", "spread", "imbalance"), "label_names": ("fwd_ret",)}
    n = 700
    ts = np.arange(n, dtype=np.int64) * 1000 + 10**18
    values = rng.standard_normal((2 * n, 3)).astype(np.float32)
    labels = rng.standard_normal((2 * n, 1)).astype(np.float32)
    segs, packs = [], []
    if kind == "pack":
        packs.append(store.write_pack(
            session="2024-01-03", symbols=["AAPL", "MSFT"], offsets=[0, n, 2 * n],
            ts=np.concatenate([ts, ts]), values=values, labels=labels, **names))
    for i, sym in enumerate(("AAPL", "MSFT") if kind == "segments" else ()):
        segs.append(write_segment(
            store, symbol=sym, session="2024-01-03", ts=ts, values=values[i * n:(i + 1) * n],
            labels=labels[i * n:(i + 1) * n], **names))
    table = pa.table({"ts_event": pa.array([1, 2], pa.timestamp("ns", tz="UTC"))})
    rec = store.write_table(kind="trades", symbol="AAPL", session="2024-01-03", table=table)
    v = store.commit(segments=segs, packs=packs, tables=[rec], message="day 1")
    print("committed", v.version)
    """
)


def _run_child(
    url: str, crash_at: str, arg: int = 0, kind: str = "segments"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, url, crash_at, str(arg), kind],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _snapshot(store: Store) -> tuple[bytes, list[np.ndarray]]:
    v = store.version()
    manifest = store.location.read_bytes(f"versions/{v.version:08d}.json")
    arrays = []
    for seg in v.segments:
        data = v.read_segment(seg)
        arrays += [data.ts, data.values]
    for pack in v.packs:
        packed = v.read_pack(pack, verify=True)
        arrays += [packed.ts, packed.values]
    return manifest, arrays


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "crash_at", "arg", "every"),
    [
        ("segments", "chunk", 1, 10),
        ("segments", "chunk", 9, 10),
        ("segments", "chunk", 20, 10),
        ("segments", "table", 0, 10),
        ("segments", "manifest", 0, 10),
        ("segments", "pointer", 0, 10),
        ("segments", "rename", 0, 10),
        # Version 2 of a store with a checkpoint every 2 versions writes one.
        ("segments", "checkpoint", 0, 2),
        ("segments", "manifest", 0, 2),
        ("segments", "pointer", 0, 2),
        # A pack is 9 objects: the group, 3 arrays and chunk_sha256, each zarr.json + shard;
        # a large pack's shards are written as the rows come ("spill"), then moved into
        # its folder; a small one's are written there at the end.
        ("pack", "spill", 0, 10),
        ("pack", "chunk", 1, 10),
        ("pack", "chunk", 2, 10),
        ("pack", "chunk", 5, 10),
        ("pack", "chunk", 9, 10),
        ("pack", "table", 0, 10),
        ("pack", "manifest", 0, 10),
        ("pack", "rename", 0, 10),
        ("pack", "checkpoint", 0, 2),
        ("migrate", "chunk", 4, 10),
        ("migrate", "manifest", 0, 10),
        ("migrate", "pointer", 0, 10),
        ("migrate", "checkpoint", 0, 2),
    ],
)
def test_sigkill_mid_commit_keeps_previous_version(
    tmp_path: Path, kind: str, crash_at: str, arg: int, every: int
) -> None:
    url = str(tmp_path / "store")
    layout = Layout(codec="zstd", chunk_rows=256)
    store = Store.create(url, layout=layout, checkpoint_every=every)
    s = make_series("AAPL", 0)
    store.commit(segments=[write_series(store, s)])
    before = _snapshot(store)

    crashed = _run_child(url, crash_at, arg, kind)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert "committed" not in crashed.stdout

    after = Store.open(url)
    assert after.latest_version() == 1
    manifest, arrays = _snapshot(after)
    assert manifest == before[0]
    for a, b in zip(arrays, before[1], strict=True):
        np.testing.assert_array_equal(a, b)
    after.verify()

    retry = _run_child(url, "none", 0, kind)
    assert retry.returncode == 0, retry.stderr
    assert "committed 2" in retry.stdout
    final = Store.open(url)
    final.verify()
    final.verify(1)
    v2 = final.version()
    expected = {
        "segments": ([("AAPL", "2024-01-02"), ("AAPL", "2024-01-03"), ("MSFT", "2024-01-03")], []),
        "pack": ([("AAPL", "2024-01-02")], ["2024-01-03"]),
        "migrate": ([], ["2024-01-02"]),
    }[kind]
    assert ([seg.key for seg in v2.segments], [p.session for p in v2.packs]) == expected
    for pack in v2.packs:
        v2.read_pack(pack, verify=True)
    if kind == "migrate":
        _, migrated = _snapshot(final)
        for a, b in zip(migrated, before[1], strict=True):
            np.testing.assert_array_equal(a, b)
    assert len(v2.tables_of("trades")) == (kind != "migrate")
    leftovers = [p for p in os.listdir(tmp_path / "store") if ".tmp-" in p]
    assert leftovers == [] or crash_at == "rename"
    checkpoints = sorted(
        p for p in os.listdir(tmp_path / "store" / "versions") if "checkpoint" in p
    )
    assert checkpoints == (["00000002.checkpoint.json"] if every == 2 else [])
