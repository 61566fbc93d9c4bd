"""A hostile store: symlinked areas, forged pack metadata, oversized JSON, forged checkpoints.

Every store here is built through the public API and then altered the way an attacker or
a careless script would; the forged files are self-consistent (the log entry and the
pointer vouch for them), so only the structural checks can stop them. Nothing outside
the store may be read, written or removed, and no reader may serve what the checks
refuse while ``verify`` says OK.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from ticktensor.cli import main
from ticktensor.errors import StoreCorruptError
from ticktensor.loaders import WindowDataset
from ticktensor.store import Layout, Store
from ticktensor.store._packs import pack_content_hash

from .conftest import write_pack_of

LAYOUT = Layout(codec="zstd", chunk_rows=64)


def _packed(root: Path, **kwargs: Any) -> Store:
    store = Store.create(str(root), layout=LAYOUT, **kwargs)
    store.commit(packs=[write_pack_of(store, 0, rows=300)])
    return store


def _vouch_for(root: Path, rel: str) -> None:
    """Make ``latest.json`` vouch for the version file ``rel`` as it is now."""
    pointer = json.loads((root / "latest.json").read_text())
    pointer["sha256"] = hashlib.sha256((root / rel).read_bytes()).hexdigest()
    (root / "latest.json").write_text(json.dumps(pointer))


def _forge_entry(root: Path, edit: Any) -> None:
    """Rewrite the latest log entry with ``edit`` and make the pointer vouch for it."""
    rel = json.loads((root / "latest.json").read_text())["manifest"]
    doc = json.loads((root / rel).read_bytes())
    edit(doc)
    (root / rel).write_bytes(json.dumps(doc, sort_keys=True).encode())
    _vouch_for(root, rel)


def _cli_verify(root: Path, *extra: str) -> int:
    return main(["verify", str(root), "--quiet", *extra])


# -- 1. repair never removes anything outside the store ------------------------------


def _victims(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = [folder / "keep-me.txt", folder / "nested" / "keep-me-too.bin"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"not the store's")
        os.utime(f, (0, 0))  # older than any grace period
    return files


@pytest.mark.parametrize("area", ["staging", "events", "packs", "versions", "segments"])
def test_repair_refuses_a_symlinked_area_and_removes_nothing_outside(
    tmp_path: Path, area: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "s"
    store = _packed(root)
    outside = tmp_path / "elsewhere"
    if (root / area).exists():  # the area's own files move out with it: same bytes
        os.rename(root / area, outside)
    victims = _victims(outside)
    os.symlink(outside, root / area)
    with pytest.raises(StoreCorruptError, match=rf"{area}.*symlink"):
        store.repair(grace_s=0)
    assert _cli_verify(root, "--repair", "--grace", "0") == 1
    assert f"{root / area}" in capsys.readouterr().err
    assert all(v.exists() for v in victims)


def test_repair_does_not_follow_a_symlinked_folder_inside_an_area(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root)
    victims = _victims(tmp_path / "elsewhere")
    (root / "staging").mkdir()
    os.symlink(tmp_path / "elsewhere", root / "staging" / "job")
    with pytest.raises(StoreCorruptError, match=r"staging/job.*symlink"):
        store.repair(grace_s=0)
    assert all(v.exists() for v in victims)


def test_repair_removes_regular_files_only(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root)
    (root / "staging").mkdir()
    os.mkfifo(root / "staging" / "pipe")
    report = store.repair(grace_s=0)
    assert report.removed == []
    assert (root / "staging" / "pipe").exists()


def test_repair_still_removes_plain_debris(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root)
    debris = root / "staging" / "job" / "part.arrow"
    debris.parent.mkdir(parents=True)
    debris.write_bytes(b"x")
    report = store.repair(grace_s=0)
    assert [rel for rel, _ in report.removed] == ["staging/job/part.arrow"]
    assert not debris.exists()
    store.verify()


# -- 3. a pack's symbol list and shard index are checked when opened -------------------


def _forge_symbols(root: Path, symbols: list[Any]) -> None:
    """Give the latest pack the symbol list ``symbols`` with every hash rewritten to match."""
    store = Store.open(str(root))
    pinned = store.version()
    pack = pinned.packs[0]
    data = pinned.read_pack(pack)
    group = root / pack.path / "zarr.json"
    meta = json.loads(group.read_bytes())
    meta["attributes"]["ticktensor"]["symbols"] = symbols
    raw = json.dumps(meta).encode()
    group.write_bytes(raw)
    content = pack_content_hash(
        pack.session,
        [str(s) for s in symbols],
        data.offsets,
        data.ts,
        data.values,
        data.labels,
        pack.feature_names,
        pack.label_names,
        LAYOUT,
    )

    def edit(doc: dict[str, Any]) -> None:
        doc["packs"][0]["files"]["zarr.json"] = [hashlib.sha256(raw).hexdigest(), len(raw)]
        doc["packs"][0]["content_hash"] = content

    _forge_entry(root, edit)


@pytest.mark.parametrize(
    ("symbols", "why"),
    [
        (["B", "A"], r"entry 1 'A' .*sorted"),
        (["A", "A"], r"entry 1 'A' .*(distinct|sorted)"),
        (["", "B"], r"entry 0 '' .*empty"),
        ([None, "B"], r"entry 0 None .*string"),
        ([7, "B"], r"entry 0 7 .*string"),
    ],
)
def test_a_forged_pack_symbol_list_is_refused_by_every_reader(
    tmp_path: Path, symbols: list[Any], why: str
) -> None:
    root = tmp_path / "s"
    _packed(root)
    _forge_symbols(root, symbols)
    pinned = Store.open(str(root)).version()
    pack = pinned.packs[0]
    named = rf"pack 2024-01-02 .*symbol list.*{why}"
    with pytest.raises(StoreCorruptError, match=named):
        pinned.pack_index(pack)
    with pytest.raises(StoreCorruptError, match=named):
        Store.open(str(root)).version().read_pack(pack, verify=True)
    with pytest.raises(StoreCorruptError, match=named):
        WindowDataset(Store.open(str(root)).version(), 8, verify=True)
    with pytest.raises(StoreCorruptError, match=named):
        WindowDataset(Store.open(str(root)).version(), 8)
    with pytest.raises(StoreCorruptError, match=named):
        Store.open(str(root)).verify()
    assert _cli_verify(root) == 1


def test_shard_index_entries_out_of_order_are_refused_at_open(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root)
    pack = store.version().packs[0]
    first, second = store.version().chunk_map(pack, "values").chunks[:2]
    shard = root / first.rel
    data = bytearray(shard.read_bytes())
    entries = [struct.pack("<QQ", c.offset, c.nbytes) for c in (first, second)]
    at = [data.rindex(e) for e in entries]  # in the index at the shard's end
    data[at[0] : at[0] + 16], data[at[1] : at[1] + 16] = entries[1], entries[0]
    shard.write_bytes(bytes(data))  # same size: the file's length is unchanged

    def edit(doc: dict[str, Any]) -> None:
        doc["packs"][0]["files"]["values/c/0/0"] = [hashlib.sha256(data).hexdigest(), len(data)]

    _forge_entry(root, edit)
    pinned = Store.open(str(root)).version()
    with pytest.raises(StoreCorruptError, match=r"values/c/0/0.*chunk 1.*(order|overlap)"):
        pinned.chunk_map(pinned.packs[0], "values")
    assert _cli_verify(root) == 1


# -- 4. JSON documents are size-limited before they are parsed -------------------------


def _peak_while(call: Any) -> tuple[BaseException, int, float]:
    tracemalloc.start()
    began = time.perf_counter()
    try:
        call()
    except BaseException as exc:
        caught = exc
    else:
        raise AssertionError("no error raised")
    finally:
        elapsed = time.perf_counter() - began
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return caught, peak, elapsed


def test_a_huge_latest_json_is_refused_before_it_is_read(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _packed(root)
    pointer = json.loads((root / "latest.json").read_text())
    pointer["padding"] = "x" * (104 << 20)
    (root / "latest.json").write_text(json.dumps(pointer))
    error, peak, elapsed = _peak_while(lambda: Store.open(str(root)).version())
    assert isinstance(error, StoreCorruptError), error
    assert "latest.json" in str(error)
    assert "bytes" in str(error)
    assert peak < 4 << 20, peak
    assert elapsed < 2.0


def test_a_huge_pointer_on_an_object_store_is_refused_after_a_bounded_read() -> None:
    import uuid

    import fsspec

    url = f"memory://hostile-{uuid.uuid4().hex}"
    Store.create(url)
    fs = fsspec.filesystem("memory")
    pointer = json.loads(fs.cat_file(f"{url}/latest.json"))
    fs.pipe_file(f"{url}/latest.json", json.dumps({**pointer, "pad": "x" * (8 << 20)}).encode())
    with pytest.raises(StoreCorruptError, match=r"latest\.json: more than 65,536 bytes"):
        Store.open(url).version()


def test_a_huge_log_entry_is_refused_before_it_is_read(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _packed(root)
    rel = json.loads((root / "latest.json").read_text())["manifest"]
    os.truncate(root / rel, 1 << 40)  # sparse: a terabyte that takes no disk
    # verify reads every file again (an open in this process finds the state it built)
    error, peak, _ = _peak_while(lambda: Store.open(str(root)).verify())
    assert isinstance(error, StoreCorruptError), error
    assert rel in str(error)
    assert peak < 4 << 20, peak
    assert _cli_verify(root) == 1


def test_a_huge_pack_group_document_is_refused_before_it_is_read(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _packed(root)
    pack = Store.open(str(root)).version().packs[0]
    group = root / pack.path / "zarr.json"
    size = 1 << 36  # sparse
    os.truncate(group, size)

    def edit(doc: dict[str, Any]) -> None:
        doc["packs"][0]["files"]["zarr.json"] = ["0" * 64, size]

    _forge_entry(root, edit)
    pinned = Store.open(str(root)).version()
    error, peak, _ = _peak_while(lambda: pinned.pack_index(pinned.packs[0]))
    assert isinstance(error, StoreCorruptError), error
    assert "zarr.json" in str(error)
    assert peak < 4 << 20, peak


# -- 5. writes never follow a link out of the store ------------------------------------


def test_a_dangling_lock_symlink_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root)
    target = tmp_path / "created-by-a-commit"
    os.unlink(root / ".lock")
    os.symlink(target, root / ".lock")
    with pytest.raises(StoreCorruptError, match=r"\.lock.*symlink"):
        store.commit(packs=[write_pack_of(store, 1, rows=100)])
    assert not target.exists()
    assert not os.path.lexists(target)


def test_a_symlinked_versions_folder_is_refused_before_writing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root)
    record = write_pack_of(store, 1, rows=100)
    outside = tmp_path / "elsewhere"
    os.rename(root / "versions", outside)
    os.symlink(outside, root / "versions")
    before = sorted(os.listdir(outside))
    with pytest.raises(StoreCorruptError, match=r"versions.*symlink"):
        store.commit(packs=[record])
    assert sorted(os.listdir(outside)) == before
    with pytest.raises(StoreCorruptError, match=r"versions.*symlink"):
        Store.open(str(root)).version(0)  # not in this process's cache of states
    with pytest.raises(StoreCorruptError, match=r"versions.*symlink"):
        Store.open(str(root)).verify()


def test_a_symlinked_events_folder_is_refused_before_writing(tmp_path: Path) -> None:
    import pyarrow as pa

    root = tmp_path / "s"
    store = _packed(root)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.symlink(outside, root / "events")
    with pytest.raises(StoreCorruptError, match=r"events.*symlink"):
        store.write_table(kind="trades", symbol="A", session="d", table=pa.table({"x": [1]}))
    assert os.listdir(outside) == []


def test_a_symlinked_packs_folder_is_refused_before_writing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = Store.create(str(root), layout=LAYOUT)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.symlink(outside, root / "packs")
    with pytest.raises(StoreCorruptError, match=r"packs.*symlink"):
        write_pack_of(store, 0, rows=300)
    assert os.listdir(outside) == []


def test_a_symlinked_pointer_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _packed(root)
    outside = tmp_path / "pointer.json"
    os.rename(root / "latest.json", outside)
    os.symlink(outside, root / "latest.json")
    with pytest.raises(StoreCorruptError, match=r"latest\.json.*symlink"):
        Store.open(str(root)).version()


# -- 6. a checkpoint must agree with the log ------------------------------------------


def _forge_checkpoint(root: Path, version: int, edit: Any, entry_rel: str | None = None) -> None:
    """Rewrite ``version``'s checkpoint and its entry's record of it; the pointer vouches
    for the entry when it is the latest (``entry_rel`` None)."""
    cp_rel = f"versions/{version:08d}.checkpoint.json"
    doc = json.loads((root / cp_rel).read_bytes())
    edit(doc)
    raw = json.dumps(doc, sort_keys=True).encode()
    (root / cp_rel).write_bytes(raw)

    def point(entry: dict[str, Any]) -> None:
        entry["checkpoint"]["file"] = [hashlib.sha256(raw).hexdigest(), len(raw)]

    if entry_rel is None:
        _forge_entry(root, point)
        return
    entry = json.loads((root / entry_rel).read_bytes())
    point(entry)
    (root / entry_rel).write_bytes(json.dumps(entry, sort_keys=True).encode())


def test_a_checkpoint_dropping_its_own_entrys_pack_is_refused_at_open(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root, checkpoint_every=2)
    store.commit(packs=[write_pack_of(store, 1, rows=100)])  # version 2: a checkpoint
    _forge_checkpoint(root, 2, lambda doc: doc["packs"].pop())
    both = r"00000002\.checkpoint\.json.*00000002\.json|00000002\.json.*00000002\.checkpoint\.json"
    with pytest.raises(StoreCorruptError, match=both):
        Store.open(str(root)).version()
    assert _cli_verify(root) == 1


def test_a_checkpoint_dropping_an_older_pack_is_refused_at_open_and_by_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "s"
    store = _packed(root, checkpoint_every=2)  # version 1: the pack of day 0
    store.commit(packs=[write_pack_of(store, 1, rows=100)])  # version 2: a checkpoint
    _forge_checkpoint(root, 2, lambda doc: doc["packs"].pop(0))
    both = r"00000002\.checkpoint\.json.*00000002\.json.*2024-01-02"
    with pytest.raises(StoreCorruptError, match=both):
        Store.open(str(root)).verify()
    assert _cli_verify(root) == 1
    err = capsys.readouterr().err
    assert "00000002.checkpoint.json" in err
    assert "00000002.json" in err
    with pytest.raises(StoreCorruptError, match=both):
        Store.open(str(root)).version()


def test_a_forged_checkpoint_below_the_latest_version_is_refused_at_open(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root, checkpoint_every=2)  # version 1: the pack of day 0
    store.commit(packs=[write_pack_of(store, 1, rows=100)])  # version 2: a checkpoint
    store.commit(packs=[write_pack_of(store, 2, rows=100)])  # version 3: an entry
    rel = "versions/00000002.json"
    _forge_checkpoint(root, 2, lambda doc: doc["packs"].pop(0), rel)
    # Entry 3 records entry 2's hash: forge it and the pointer as a whole-chain forger would.
    raw = (root / rel).read_bytes()
    _forge_entry(
        root, lambda doc: doc.__setitem__("parent_sha256", hashlib.sha256(raw).hexdigest())
    )
    with pytest.raises(StoreCorruptError, match=r"00000002\.checkpoint\.json.*2024-01-02"):
        Store.open(str(root)).version()


def test_existence_and_size_are_never_answered_through_a_link(tmp_path: Path) -> None:
    """A link in a store is refused, not followed: neither its target's size nor (for a
    dangling one) "absent" is taken as an answer about the store's file."""
    root = tmp_path / "s"
    store = _packed(root)
    location = store.version().location
    (tmp_path / "big").write_bytes(b"x" * 1000)
    pack = store.version().packs[0]
    os.symlink(tmp_path / "big", root / pack.path / "values" / "linked")
    os.symlink(tmp_path / "gone", root / pack.path / "values" / "dangling")
    for rel in (f"{pack.path}/values/linked", f"{pack.path}/values/dangling"):
        with pytest.raises(StoreCorruptError, match="symlink"):
            location.exists(rel)
        with pytest.raises(StoreCorruptError, match="symlink"):
            location.size(rel)
    assert location.exists(f"{pack.path}/values/zarr.json")
    assert not location.exists(f"{pack.path}/values/absent")
    assert location.size(f"{pack.path}/values/zarr.json") == len(
        (root / pack.path / "values" / "zarr.json").read_bytes()
    )
