"""Forging stores: small pack stores built through the API, and rewrites that keep every hash.

What an attacker with write access (or a careful bug) does: change a stored file, then
rewrite the records that vouch for it (a pack's file entry in every version file and
checkpoint that lists it, each log entry's ``parent_sha256``, a checkpoint's reference,
the pointer's ``sha256``) so that only structural checks can stop the change. The
format these helpers rewrite is the documented one (docs/store-format.md): JSON
version files, Zarr v3 metadata and sharded chunks whose index (an offset and a length,
two little-endian uint64, per inner chunk) ends the shard.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ticktensor.store import Layout, Store

__all__ = [
    "SYMBOLS",
    "ShardIndex",
    "add_session",
    "pack_store",
    "rechain",
    "rewrite_pack_file",
    "shard_index",
]

_DAY0_NS = 1_704_186_000 * 10**9  # 2024-01-02 09:00 UTC
_DAY_NS = 86_400 * 10**9
SYMBOLS = ("AAA", "BBB")


def pack_store(
    root: Path,
    codec: str = "none",
    *,
    sessions: int = 1,
    rows: int = 2000,
    features: int = 4,
    chunk_rows: int = 256,
    checkpoint_every: int = 100,
) -> Store:
    """A store of ``sessions`` packs of two symbols, ``rows`` rows each, one commit apiece."""
    layout = Layout(codec=codec, chunk_rows=chunk_rows)  # type: ignore[arg-type]
    store = Store.create(str(root), layout=layout, checkpoint_every=checkpoint_every)
    for day in range(sessions):
        add_session(store, day, rows=rows, features=features)
    return store


def add_session(store: Store, day: int, *, rows: int = 2000, features: int = 4) -> None:
    """Write and commit the pack of session ``day`` (2024-01-02 plus ``day`` days)."""
    rng = np.random.default_rng(day)
    one = _DAY0_NS + day * _DAY_NS + np.arange(rows, dtype=np.int64) * 10**9
    n = rows * len(SYMBOLS)
    record = store.write_pack(
        session=f"2024-01-{2 + day:02d}",
        symbols=SYMBOLS,
        offsets=np.arange(len(SYMBOLS) + 1, dtype=np.int64) * rows,
        ts=np.concatenate([one] * len(SYMBOLS)),
        values=rng.standard_normal((n, features)).astype(np.float32),
        feature_names=[f"f{i}" for i in range(features)],
        labels=rng.standard_normal((n, 1)).astype(np.float32),
        label_names=["y"],
    )
    store.commit(packs=[record], message=f"session {day}")


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def rechain(root: Path) -> None:
    """Make every hash that vouches for a version file agree with the bytes on disk.

    Version files are rewritten oldest first: each log entry records its parent's new
    hash, each checkpoint its entry's parent and the entry the checkpoint's new hash,
    and ``latest.json`` the latest file's hash.
    """
    pointer_path = root / "latest.json"
    pointer = json.loads(pointer_path.read_bytes())
    parent: str | None = None
    for v in range(int(pointer["version"]) + 1):
        path = root / "versions" / f"{v:08d}.json"
        doc = json.loads(path.read_bytes())
        if doc.get("parent_sha256") is not None:
            doc["parent_sha256"] = parent
        ref = doc.get("checkpoint")
        if isinstance(ref, dict):
            cpath = root / ref["path"]
            checkpoint = json.loads(cpath.read_bytes())
            checkpoint["parent_sha256"] = doc.get("parent_sha256")
            cdata = _dumps(checkpoint)
            cpath.write_bytes(cdata)
            ref["file"] = [_sha(cdata), len(cdata)]
        data = _dumps(doc)
        path.write_bytes(data)
        parent = _sha(data)
    pointer["sha256"] = parent
    pointer_path.write_bytes(_dumps(pointer))


def rewrite_pack_file(root: Path, pack_path: str, name: str, data: bytes) -> None:
    """Replace file ``name`` of the pack at ``pack_path`` and every record of its hash."""
    (root / pack_path / name).write_bytes(data)
    entry = [_sha(data), len(data)]
    for path in sorted((root / "versions").glob("*.json")):
        doc = json.loads(path.read_bytes())
        packs = doc.get("packs") or []
        hit = [p for p in packs if isinstance(p, dict) and p.get("path") == pack_path]
        for record in hit:
            record["files"][name] = entry
        if hit:
            path.write_bytes(_dumps(doc))
    rechain(root)


class ShardIndex:
    """The inner chunks of one shard: ``entries[i] = (offset, nbytes)``, and where the
    index sits in the file (``start``), read as the array's metadata describes it."""

    def __init__(self, shard: Path, meta: dict[str, Any]) -> None:
        (sharding,) = meta["codecs"]
        config = sharding["configuration"]
        per_shard = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
        count = -(-per_shard // config["chunk_shape"][0])
        crc = any(c["name"] == "crc32c" for c in config["index_codecs"])
        size = 16 * count + (4 if crc else 0)
        if config.get("index_location", "end") != "end":
            raise ValueError(f"{shard}: only shards indexed at the end are forged")
        self.path = shard
        self.start = shard.stat().st_size - size
        raw = shard.read_bytes()[self.start : self.start + 16 * count]
        pairs = struct.unpack(f"<{2 * count}Q", raw)
        self.entries = [(pairs[2 * i], pairs[2 * i + 1]) for i in range(count)]

    def swap(self, a: int, b: int) -> None:
        """Swap the index entries of inner chunks ``a`` and ``b`` (the file keeps its size)."""
        data = bytearray(self.path.read_bytes())
        for i, (off, n) in ((a, self.entries[b]), (b, self.entries[a])):
            data[self.start + 16 * i : self.start + 16 * (i + 1)] = struct.pack("<2Q", off, n)
        self.path.write_bytes(bytes(data))


def shard_index(pack_dir: Path, array: str = "values") -> ShardIndex:
    """The index of the first shard of ``array`` in the pack at ``pack_dir``."""
    meta = json.loads((pack_dir / array / "zarr.json").read_bytes())
    first = pack_dir / array / "c" / "0" / "0"
    return ShardIndex(first if first.is_file() else pack_dir / array / "c" / "0", meta)
