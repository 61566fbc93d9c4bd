"""Fuzz targets of format-2 packs: a pack's JSON documents and its shards replaced, read by
the store's own reader (the default check and ``verify=True``) and through zarr-python.

A read must give a ticktensor error, or a well-formed symbol index and the committed rows,
unless the input rewrote what vouches for them; a read with ``verify=True`` gives the
committed rows always.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator, Mapping, Set
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import zarr

from ticktensor.errors import TickTensorError
from ticktensor.kernels import crc32c
from ticktensor.store import FileEntry, Layout, PackData, PackRecord, Store, StoreVersion

from ._target import JSON_TOKENS, FuzzTarget, InvariantError

__all__ = ["pack_targets"]


#: The pack's JSON documents that ``pack-json`` replaces: an input's first byte picks one
#: (modulo their number) and the rest of the input is the document.
_PACK_DOCUMENTS: Final = (
    "zarr.json",
    "values/zarr.json",
    "ts/zarr.json",
    "labels/zarr.json",
    "chunk_sha256/zarr.json",
)
#: The shard the ``pack-shard-*`` targets replace: every inner chunk of ``values``.
_VALUES_SHARD: Final = "values/c/0/0"
#: Each pack target's share of a run's time per target: the four take two targets' time
#: (a small pack reads in a few milliseconds, so half the time still tries hundreds).
_PACK_SHARE: Final = 0.5


@dataclass
class _TinyPack:
    """A small published store on local disk holding one pack, whose objects the pack
    targets replace (its folder goes with the object).

    Three symbols, the middle one without rows; 40 rows of 3 features and 1 label in
    inner chunks of 16 rows, so each array is one shard of 3 chunks, the last padded.
    ``committed`` is what was written.
    """

    store: Store
    pinned: StoreVersion
    committed: PackData

    @classmethod
    def build(cls, codec: str) -> _TinyPack:
        folder = tempfile.mkdtemp(prefix="ticktensor-fuzz-pack-")
        layout = Layout(codec=codec, chunk_rows=16)  # type: ignore[arg-type]
        store = Store.create(folder, layout=layout)
        rng = np.random.default_rng(0)
        rows = (15, 0, 25)
        ts = [1_704_186_000 * 10**9 + np.arange(n, dtype=np.int64) * 1000 for n in rows]
        committed = PackData(
            symbols=("AAPL", "MSFT", "SPY"),
            offsets=np.cumsum([0, *rows], dtype=np.int64),
            ts=np.concatenate(ts),
            values=rng.standard_normal((sum(rows), 3)).astype(np.float32),
            labels=rng.standard_normal((sum(rows), 1)).astype(np.float32),
        )
        record = store.write_pack(
            session="2024-01-02",
            symbols=committed.symbols,
            offsets=committed.offsets,
            ts=committed.ts,
            values=committed.values,
            feature_names=("ret", "spread", "imbalance"),
            labels=committed.labels,
            label_names=("fwd_ret",),
        )
        tiny = cls(store, store.commit(packs=[record], message="fuzz"), committed)
        weakref.finalize(tiny, shutil.rmtree, folder, ignore_errors=True)
        return tiny

    @property
    def record(self) -> PackRecord:
        return self.pinned.packs[0]

    def file(self, name: str) -> bytes:
        """The stored bytes of the pack's object ``name`` (``values/c/0/0``)."""
        return self.store.location.read_bytes(f"{self.record.path}/{name}")

    @contextlib.contextmanager
    def replaced(self, files: Mapping[str, bytes]) -> Iterator[None]:
        """The pack's objects ``files`` replaced by their new bytes, then put back."""
        fs, path = self.store.location.fs, self.store.location.path
        originals = {name: self.file(name) for name in files}
        try:
            for name, data in files.items():
                fs.pipe_file(path(f"{self.record.path}/{name}"), data)
            yield
        finally:
            for name, data in originals.items():
                fs.pipe_file(path(f"{self.record.path}/{name}"), data)

    def trusting(self, files: Mapping[str, bytes]) -> StoreVersion:
        """A new view of the pinned version whose pack record vouches for ``files``: the
        recorded hash and size of each is its new bytes'.

        Models a store whose version files were rewritten with the pack, so only the
        checks below the record's hashes stand between the bytes and a reader.
        """
        record = self.record
        entries = {n: FileEntry(hashlib.sha256(d).hexdigest(), len(d)) for n, d in files.items()}
        vouched = replace(record, files={**record.files, **entries})
        manifest = self.pinned.manifest.evolve(packs=(vouched,))
        return StoreVersion(self.store.location, manifest)

    def vouching(self, shard: bytes) -> dict[str, bytes]:
        """``shard`` as the ``values`` shard, with the chunk checksums of ``values`` (the
        CRC-32C list of its ``zarr.json``, its rows of ``chunk_sha256``) rewritten to
        match the chunks the shard's own index names, so the codec decodes them.

        The index is the shard's last 16 bytes per chunk slot (docs/store-format.md,
        "Arrays and sharding"); a chunk it places outside the shard's data keeps the
        committed checksums.
        """
        index = self.pinned.pack_index(self.record)
        slots = index.shard_rows // index.chunk_rows
        data_end = len(shard) - 16 * slots
        meta = json.loads(self.file("values/zarr.json"))
        crcs = list(meta["attributes"]["chunk_crc32c"])
        names = json.loads(self.file("chunk_sha256/zarr.json"))["attributes"]["arrays"]
        table = bytearray(self.file("chunk_sha256/c/0/0/0"))
        row = 32 * len(crcs) * names.index("values")
        for k in range(len(crcs) if data_end >= 0 else 0):
            at = data_end + 16 * k
            offset, nbytes = (int.from_bytes(shard[at + i : at + i + 8], "little") for i in (0, 8))
            if offset + nbytes <= data_end:
                chunk = shard[offset : offset + nbytes]
                crcs[k] = crc32c(chunk)
                table[row + 32 * k : row + 32 * (k + 1)] = hashlib.sha256(chunk).digest()
        meta["attributes"]["chunk_crc32c"] = crcs
        return {
            _VALUES_SHARD: shard,
            "values/zarr.json": json.dumps(meta).encode(),
            "chunk_sha256/c/0/0/0": bytes(table),
        }


def _check_pack(committed: PackData, data: PackData, may_differ: Set[str], what: str) -> None:
    """``data`` must have the pack's shape and structure (symbols sorted and distinct,
    offsets rising from 0 to its rows) and equal ``committed`` but in ``may_differ``."""
    rows = committed.ts.shape[0]
    symbols, offsets = data.symbols, data.offsets
    problems = []
    names_ok = all(isinstance(s, str) and s for s in symbols)
    if not (symbols and names_ok and list(symbols) == sorted(set(symbols))):
        problems.append(f"symbols {symbols!r:.80} are not non-empty, distinct and sorted")
    if (
        offsets.dtype != np.int64
        or offsets.shape != (len(symbols) + 1,)
        or offsets[0] != 0
        or offsets[-1] != rows
        or (np.diff(offsets) < 0).any()
    ):
        problems.append(f"offsets {offsets!r:.80} do not rise from 0 to the {rows} rows")
    arrays = (
        ("ts", data.ts, committed.ts),
        ("values", data.values, committed.values),
        ("labels", data.labels, committed.labels),
    )
    for name, array, expected in arrays:
        if array is None or expected is None:
            problems.append(f"{name} is {array}, committed {expected}")
        elif array.shape != expected.shape or array.dtype != expected.dtype:
            problems.append(f"{name} is {array.dtype} {array.shape}")
        elif name not in may_differ and not np.array_equal(array, expected):
            problems.append(f"{name} differs from the committed rows")
    if "symbols" not in may_differ and symbols != committed.symbols:
        problems.append(f"symbols {symbols!r:.80} differ from the committed ones")
    if "offsets" not in may_differ and not np.array_equal(offsets, committed.offsets):
        problems.append(f"offsets {offsets!r:.80} differ from the committed ones")
    if problems:
        raise InvariantError(f"{what}: {'; '.join(problems)}")


def _check_pack_reads(
    committed: PackData,
    pinned: StoreVersion,
    may_differ: Set[str],
    what: str,
    *,
    through_zarr: bool = False,
) -> TickTensorError | None:
    """Read the pack of ``pinned`` with the reader's default check and with
    ``verify=True`` (and with ``through_zarr`` by zarr-python behind the chunk guard,
    :meth:`StoreVersion.open_pack`).

    Each read ends in a ticktensor error or gives the pack as committed (see
    :func:`_check_pack`); a default read may differ in ``may_differ`` (what the input
    rewrote the checksums of), a read with ``verify=True`` in nothing (the record's
    content hash covers every part). Returns the first error.
    """
    record = pinned.packs[0]
    first: TickTensorError | None = None
    for verify in (False, True):
        try:
            data = pinned.read_pack(record, verify=verify)
        except TickTensorError as exc:
            first = first or exc
            continue
        _check_pack(committed, data, set() if verify else may_differ, f"{what}, verify={verify}")
    if not through_zarr:
        return first
    try:
        index = pinned.pack_index(record)
        group = pinned.open_pack(record)
        nodes = [group[name] for name in ("ts", "values", "labels")]
        arrays = [np.asarray(node[:]) for node in nodes if isinstance(node, zarr.Array)]
    except TickTensorError as exc:
        return first or exc
    if len(arrays) != len(nodes):
        raise InvariantError(f"{what}: zarr-python opens a group in place of an array")
    data = PackData(index.symbols, index.offsets, *arrays)
    _check_pack(committed, data, may_differ, f"{what}, through zarr-python")
    return first


def pack_targets() -> list[FuzzTarget]:
    raw, zstd, lz4 = _TinyPack.build("none"), _TinyPack.build("zstd"), _TinyPack.build("lz4")

    def documents(data: bytes) -> None:
        """The first byte picks the document; the record vouches for its new bytes."""
        name = _PACK_DOCUMENTS[data[0] % len(_PACK_DOCUMENTS)] if data else "zarr.json"
        files = {name: data[1:]}
        with raw.replaced(files):
            # Only the group names symbols and offsets; the rows' checksums are intact.
            error = _check_pack_reads(
                raw.committed, raw.trusting(files), {"symbols", "offsets"}, f"pack {name}"
            )
        if error is not None:
            raise error

    def shard(tiny: _TinyPack) -> Callable[[bytes], None]:
        """The shard as stored, then vouched for by the record, then with its chunk
        checksums rewritten too: only then may the default read serve other values.

        zarr-python reads it behind the chunk guard while the chunk checksums are the
        committed ones (the guard must stop any change); chunks that forged checksums
        vouch for are zarr's own decoders' to refuse, in zarr's own errors.
        """

        def run(data: bytes) -> None:
            files = {_VALUES_SHARD: data}
            with tiny.replaced(files):
                errors = [
                    _check_pack_reads(
                        tiny.committed, tiny.trusting({}), set(), "shard", through_zarr=True
                    ),
                    _check_pack_reads(
                        tiny.committed,
                        tiny.trusting(files),
                        set(),
                        "shard, hash rewritten",
                        through_zarr=True,
                    ),
                ]
            vouched = tiny.vouching(data)
            with tiny.replaced(vouched):
                errors.append(
                    _check_pack_reads(
                        tiny.committed,
                        tiny.trusting(vouched),
                        {"values"},
                        "shard, hash and chunk checksums rewritten",
                    )
                )
            error = next((e for e in errors if e is not None), None)
            if error is not None:
                raise error

        return run

    def shard_tokens(tiny: _TinyPack, *magic: bytes) -> tuple[bytes, ...]:
        index = tiny.file(_VALUES_SHARD)[-48:]  # 3 slots of (offset, bytes), uint64 each
        entries = [index[i : i + 16] for i in (0, 16, 32)]
        others = (tiny.file("ts/c/0"), tiny.file("labels/c/0/0"))
        return (*magic, *entries, *others, b"\xff" * 8, b"\x00" * 8)

    def seed(name: str) -> bytes:
        return bytes([_PACK_DOCUMENTS.index(name)]) + raw.file(name)

    return [
        FuzzTarget(
            "pack-json",
            documents,
            tuple(seed(name) for name in _PACK_DOCUMENTS),
            (*JSON_TOKENS, b'"zstd"', b'"blosc"', b'"crc32c"', b'"start"', b'"int32"'),
            share=_PACK_SHARE,
        ),
        *(
            FuzzTarget(
                f"pack-shard-{codec}",
                shard(tiny),
                (tiny.file(_VALUES_SHARD),),
                shard_tokens(tiny, *magic),
                share=_PACK_SHARE,
            )
            # Each codec's frame magic among the tokens: zstd's, lz4's block header.
            for codec, tiny, magic in (
                ("none", raw, ()),
                ("zstd", zstd, (b"\x28\xb5\x2f\xfd",)),
                ("lz4", lz4, (b"\x02\x01",)),
            )
        ),
    ]
