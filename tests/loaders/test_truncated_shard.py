"""No signal kills a reader: a shard truncated by another process during an epoch is a clear
error naming the file, never SIGBUS."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from ticktensor.store import Layout, Store

SYMBOLS = ("AAA", "BBB", "CCC", "DDD")
ROWS = 100_000
FEATURES = ("f0", "f1", "f2", "f3")
CHUNK_ROWS = 128

# Runs in a child process: an epoch over the store in shuffled order; after the first
# batch the values shard is cut to a tenth of its size, as another process might.
EPOCH = textwrap.dedent(
    """
    import os, sys
    from ticktensor import DataLoader
    from ticktensor.errors import StoreCorruptError
    from ticktensor.loaders import WindowDataset
    from ticktensor.store import Store

    root, shard = sys.argv[1], sys.argv[2]
    version = Store.open(root).version()
    ds = WindowDataset(version, 16, threads=2)
    batches = 0
    try:
        for x, _ in DataLoader(ds, batch_size=64, shuffle=True):
            batches += 1
            if batches == 1:
                os.truncate(shard, os.path.getsize(shard) // 10)
    except StoreCorruptError as exc:
        print("StoreCorruptError:", exc)
        sys.exit(0)
    print(f"no error after {batches} batches")
    sys.exit(1)
    """
)


def _store(root: Path) -> Path:
    """A raw pack of 4 symbols x 100,000 rows; its values shard's path."""
    store = Store.create(str(root), layout=Layout(codec="none", chunk_rows=CHUNK_ROWS))
    rows = len(SYMBOLS) * ROWS
    record = store.write_pack(
        session="2024-01-02",
        symbols=list(SYMBOLS),
        offsets=np.arange(len(SYMBOLS) + 1, dtype=np.int64) * ROWS,
        ts=np.tile(np.arange(ROWS, dtype=np.int64) * 10**9, len(SYMBOLS)),
        values=np.arange(rows * len(FEATURES), dtype=np.float32).reshape(rows, -1),
        feature_names=FEATURES,
    )
    store.commit(packs=[record])
    (pack,) = store.version().packs
    return root / store.version().chunk_map(pack, "values").chunks[0].rel


def test_a_shard_truncated_during_an_epoch_is_an_error_naming_it(tmp_path: Path) -> None:
    shard = _store(tmp_path / "s")
    done = subprocess.run(
        [sys.executable, "-c", EPOCH, str(tmp_path / "s"), str(shard)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode >= 0, f"the reader died by signal {-done.returncode}: {done.stderr}"
    assert done.returncode == 0, done.stdout + done.stderr
    assert str(shard) in done.stdout
