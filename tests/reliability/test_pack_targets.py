"""The pack fuzz targets: they run cleanly, and each one fails when a check it relies on
is taken out of the store (a target that cannot fail checks nothing).

The inputs are made by hand from the targets' seeds: the tiny pack holds 40 rows in
inner chunks of 16, so each shard is 3 chunks followed by its index, 3 slots of
(offset, bytes) as little-endian uint64 (docs/store-format.md, "Arrays and sharding").
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from ticktensor.errors import StoreCorruptError
from ticktensor.reliability._forge import pack_store, rewrite_pack_file
from ticktensor.reliability.fuzz import fuzz, run_one
from ticktensor.reliability.targets import FuzzTarget, InvariantError
from ticktensor.store import Store

PACKS = ["pack-json", "pack-shard-none", "pack-shard-zstd", "pack-shard-lz4"]
SHARDS = PACKS[1:]
SLOTS = 3


def _group(target: FuzzTarget, edit: Callable[[dict[str, object]], None]) -> bytes:
    """``pack-json``'s input for the group's ``zarr.json`` with ``edit`` applied to its
    ``ticktensor`` attributes (the first byte picks the document: 0, the group)."""
    (seed,) = [s for s in target.seeds if s[0] == 0]
    doc = json.loads(seed[1:])
    edit(doc["attributes"]["ticktensor"])
    return bytes([0]) + json.dumps(doc).encode()


def _exchanged(shard: bytes) -> bytes:
    """The shard with inner chunks 0 and 1 exchanged and its index rewritten to match:
    well-formed, the same size, but chunk 0 now holds chunk 1's rows."""
    index = shard[-16 * SLOTS :]
    entries = [struct.unpack_from("<2Q", index, 16 * i) for i in range(SLOTS)]
    chunks = [shard[offset : offset + nbytes] for offset, nbytes in entries]
    chunks[0], chunks[1] = chunks[1], chunks[0]
    table, offset = b"", 0
    for chunk in chunks:
        table += struct.pack("<2Q", offset, len(chunk))
        offset += len(chunk)
    return b"".join(chunks) + table


def _outcome(target: FuzzTarget, data: bytes) -> str | BaseException | None:
    return run_one(target, data, timeout_s=20.0)


def test_the_pack_targets_exist(targets: dict[str, FuzzTarget]) -> None:
    assert set(PACKS) <= set(targets)
    assert all(0 < targets[name].share <= 1 for name in PACKS)


@pytest.mark.parametrize("name", PACKS)
def test_a_few_inputs_run_cleanly(targets: dict[str, FuzzTarget], name: str) -> None:
    result = fuzz(targets[name], budget_s=None, max_inputs=25, seed=2)
    assert result.findings == [], result.findings[0].trace
    assert result.accepted >= len(targets[name].seeds)  # the seeds, at least
    assert result.rejected > 0  # and mutants are refused, not all served


def test_a_target_runs_for_its_share_of_the_time() -> None:
    half = FuzzTarget("half", lambda _data: None, (b"",), share=0.5)
    assert 0.1 <= fuzz(half, budget_s=0.2).seconds < 0.2


def test_pack_json_needs_the_symbol_list_check(
    targets: dict[str, FuzzTarget], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = targets["pack-json"]
    unsorted = _group(target, lambda attrs: attrs.update(symbols=["MSFT", "AAPL", "SPY"]))
    assert _outcome(target, unsorted) == "StoreCorruptError"
    monkeypatch.setattr("ticktensor.store._packs._symbol_list", lambda value, _where: tuple(value))
    found = _outcome(target, unsorted)
    assert isinstance(found, InvariantError), found
    assert "are not non-empty, distinct and sorted" in str(found)


def test_pack_json_needs_the_content_hash_of_a_verified_read(
    targets: dict[str, FuzzTarget], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Other offsets that still tile the rows pass every structure check: the record's
    # hash vouches for the document, so the default read serves them; verify=True must not.
    target = targets["pack-json"]
    moved = _group(target, lambda attrs: attrs.update(offsets=[0, 10, 15, 40]))
    assert _outcome(target, moved) == "StoreCorruptError"
    _skip_the_content_hash(monkeypatch)
    found = _outcome(target, moved)
    assert isinstance(found, InvariantError), found
    assert "verify=True: offsets" in str(found)


@pytest.mark.parametrize("name", SHARDS)
@pytest.mark.parametrize(
    ("check", "where"),
    [
        ("ticktensor.store._reader.check_chunk", "verify=False"),
        ("ticktensor.store._guard.GuardedPackStore.check_chunk", "through zarr-python"),
    ],
    ids=["reader", "guard"],
)
def test_a_pack_shard_target_needs_the_per_chunk_checksum(
    targets: dict[str, FuzzTarget],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    check: str,
    where: str,
) -> None:
    target = targets[name]
    (seed,) = target.seeds
    exchanged = _exchanged(seed)
    assert exchanged != seed
    assert len(exchanged) == len(seed)
    assert _outcome(target, exchanged) == "StoreCorruptError"
    monkeypatch.setattr(check, lambda *args, **kwargs: None)
    found = _outcome(target, exchanged)
    assert isinstance(found, InvariantError), found
    assert f"shard, {where}: values differs from the committed rows" in str(found)


@pytest.mark.parametrize("name", SHARDS)
def test_a_pack_shard_target_needs_the_content_hash_of_a_verified_read(
    targets: dict[str, FuzzTarget], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # With the chunk checksums rewritten to vouch for the exchanged chunks, the default
    # read serves them; only the content hash of a verified read is left to refuse them.
    target = targets[name]
    (seed,) = target.seeds
    exchanged = _exchanged(seed)
    assert _outcome(target, exchanged) == "StoreCorruptError"
    _skip_the_content_hash(monkeypatch)
    found = _outcome(target, exchanged)
    assert isinstance(found, InvariantError), found
    assert "checksums rewritten, verify=True: values differs" in str(found)


class _AnyHash(str):
    """A content hash equal to every other one."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False


def _skip_the_content_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    """``read_pack(verify=True)`` without its last check: the decoded rows hashed again
    and compared with the record's content hash."""
    monkeypatch.setattr(
        "ticktensor.store._version.pack_content_hash", lambda *_args, **_kw: _AnyHash()
    )


@pytest.mark.parametrize(
    "case",
    [
        "malformed",
        "not-an-object",
        "attributes-a-list",
        "shape-off-its-table",
        "table-short",
        "too-few-hashes",
    ],
)
def test_a_malformed_chunk_hash_document_is_a_store_error(tmp_path: Path, case: str) -> None:
    # The pack's record rewritten to vouch for the document (an attacker with write
    # access, or a writer bug): the reader must say the store is corrupt. Each case was
    # another exception (JSONDecodeError, AttributeError, ValueError, IndexError) before.
    store = pack_store(tmp_path / "s", rows=40, chunk_rows=16)
    (record,) = store.version().packs
    meta = json.loads((tmp_path / "s" / record.path / "chunk_sha256/zarr.json").read_bytes())
    arrays, chunks = meta["shape"][0], meta["shape"][1]
    document = {
        "malformed": b"{",
        "not-an-object": b"[]",
        "attributes-a-list": json.dumps({**meta, "attributes": []}).encode(),
        "shape-off-its-table": json.dumps({**meta, "shape": [arrays, chunks + 1, 32]}).encode(),
        "table-short": None,
        "too-few-hashes": json.dumps({**meta, "shape": [arrays, chunks - 1, 32]}).encode(),
    }[case]
    if case == "table-short":
        rewrite_pack_file(tmp_path / "s", record.path, "chunk_sha256/c/0/0/0", b"\x07" * 64)
    elif case == "too-few-hashes":
        size = arrays * (chunks - 1) * 32  # a table that matches the smaller shape
        rewrite_pack_file(tmp_path / "s", record.path, "chunk_sha256/c/0/0/0", b"\x07" * size)
    if document is not None:
        rewrite_pack_file(tmp_path / "s", record.path, "chunk_sha256/zarr.json", document)
    version = Store.open(str(tmp_path / "s")).version()
    with pytest.raises(StoreCorruptError, match="chunk_sha256"):
        version.read_pack(version.packs[0])


@pytest.mark.parametrize("shape", ["[1e999, 1]", "[]", "[40, -1]"], ids=["inf", "empty", "neg"])
@pytest.mark.parametrize("array", ["values", "ts", "labels"])
def test_a_malformed_array_shape_is_a_store_error(tmp_path: Path, array: str, shape: str) -> None:
    # Found by pack-json: 1e999 parses as infinity, which int() cannot convert (an
    # OverflowError; seed 0), and an empty shape had no first dimension (an IndexError;
    # seed 5), where a StoreCorruptError is due.
    store = pack_store(tmp_path / "s", rows=40, chunk_rows=16)
    (record,) = store.version().packs
    name = f"{array}/zarr.json"
    meta = json.loads((tmp_path / "s" / record.path / name).read_bytes())
    document = json.dumps(meta).replace(json.dumps(meta["shape"]), shape, 1)
    rewrite_pack_file(tmp_path / "s", record.path, name, document.encode())
    version = Store.open(str(tmp_path / "s")).version()
    with pytest.raises(StoreCorruptError):
        version.read_pack(version.packs[0])
