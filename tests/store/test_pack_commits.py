"""Commits of packs and segments: a model of random commit sequences, and racing writers."""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import VersionConflictError
from ticktensor.store import Layout, Store

from .conftest import make_series, write_pack_of, write_series

# ("seg", symbol, day, seed): one segment; ("pack", symbols, day, seed): a pack of the day.
SEGMENT = st.tuples(st.just("seg"), st.sampled_from("ABC"), st.integers(0, 2), st.integers(0, 2))
PACK = st.tuples(
    st.just("pack"), st.sampled_from(["A", "AB", "BC", "ABC"]), st.integers(0, 2), st.integers(0, 1)
)
STEP = st.lists(st.one_of(SEGMENT, PACK), min_size=1, max_size=3)

Model = tuple[dict[tuple[str, str], str], dict[str, str]]


def _session(day: int) -> str:
    return make_series("A", day).session


@settings(max_examples=30, deadline=None, derandomize=True)
@given(every=st.integers(1, 4), steps=st.lists(STEP, min_size=1, max_size=8))
def test_every_version_equals_a_model_of_segment_and_pack_commits(
    every: int, steps: list[list[tuple[str, str, int, int]]]
) -> None:
    """Each step commits its segments and packs at once with replace=True, against a
    model: a pack replaces its session's segments, and a segment of a packed session
    (or of a session packed in the same step) is a conflict that changes nothing.
    Every version is then read back cold and verified."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.create(f"{tmp}/s", layout=Layout(chunk_rows=4), checkpoint_every=every)
        segments: dict[tuple[str, str], str] = {}
        packs: dict[str, str] = {}
        expected: list[Model] = [({}, {})]
        for step in steps:
            seg_records, pack_records = [], []
            for op, what, day, seed in step:
                if op == "seg":
                    series = make_series(what, day, rows=3, seed=seed)
                    seg_records.append(write_series(store, series))
                else:
                    pack_records.append(write_pack_of(store, day, what, rows=3, seed=seed))
            new_segs = {r.key: r.content_hash for r in seg_records}
            new_packs = {r.session: r.content_hash for r in pack_records}
            changed = {k: h for k, h in new_segs.items() if segments.get(k) != h}
            if any(session in packs or session in new_packs for _, session in changed):
                with pytest.raises(VersionConflictError, match="is stored as a pack"):
                    store.commit(segments=seg_records, packs=pack_records, replace=True)
                continue
            version = store.commit(segments=seg_records, packs=pack_records, replace=True)
            segments.update(changed)
            for session in new_packs:
                segments = {k: h for k, h in segments.items() if k[1] != session}
            packs.update(new_packs)
            if (segments, packs) != expected[-1]:
                expected.append((dict(segments), dict(packs)))
            assert version.version == len(expected) - 1
        shutil.copytree(f"{tmp}/s", f"{tmp}/cold")  # another URL: nothing cached
        cold = Store.open(f"{tmp}/cold")
        for version, (segs, pks) in enumerate(expected):
            v = cold.version(version)
            assert {s.key: s.content_hash for s in v.segments} == segs, version
            assert {p.session: p.content_hash for p in v.packs} == pks, version
            assert not {s.session for s in v.segments} & {p.session for p in v.packs}
        cold.verify()
        latest = cold.version()
        for pack in latest.packs:
            latest.read_pack(pack, verify=True)


def _two(root: Path) -> tuple[Store, Store]:
    first = Store.create(str(root), layout=Layout(chunk_rows=32))
    first.commit(segments=[write_series(first, make_series("A", 0))])
    return first, Store.open(str(root))


def test_two_writers_on_one_base_version_one_wins_the_other_retries(tmp_path: Path) -> None:
    first, second = _two(tmp_path / "s")
    base = first.latest_version()
    mine, theirs = write_pack_of(first, 1), write_pack_of(second, 2)
    first.commit(packs=[mine], base_version=base)
    with pytest.raises(VersionConflictError, match="based on version 1 but the latest is 2"):
        second.commit(packs=[theirs], base_version=base)
    second.commit(packs=[theirs], base_version=second.latest_version())
    assert [p.session for p in Store.open(str(tmp_path / "s")).version().packs] == [
        _session(1),
        _session(2),
    ]


def test_two_writers_packing_one_session_differently(tmp_path: Path) -> None:
    first, second = _two(tmp_path / "s")
    first.commit(packs=[write_pack_of(first, 1, seed=1)])
    other = write_pack_of(second, 1, seed=2)
    with pytest.raises(VersionConflictError, match=r"2024-01-03 already exists in version 2"):
        second.commit(packs=[other])
    assert second.commit(packs=[other], replace=True).version == 3  # a correction


def test_a_segment_for_a_session_another_writer_packed_conflicts(tmp_path: Path) -> None:
    first, second = _two(tmp_path / "s")
    late = write_series(second, make_series("B", 0))  # written before the session is packed
    first.commit(packs=[write_pack_of(first, 0)], replace=True)  # migrates session 0
    with pytest.raises(VersionConflictError, match="session 2024-01-02 is stored as a pack"):
        second.commit(segments=[late])
    assert first.version().segments == ()


def test_a_pack_over_another_writers_segments_needs_replace(tmp_path: Path) -> None:
    first, second = _two(tmp_path / "s")
    with pytest.raises(VersionConflictError, match="has 1 segment"):
        second.commit(packs=[write_pack_of(second, 0)])
    assert first.version().packs == ()


def test_racing_writer_threads_lose_no_pack(tmp_path: Path) -> None:
    first, second = _two(tmp_path / "s")
    barrier = threading.Barrier(2)
    outcomes: dict[int, str] = {}

    def write(i: int, store: Store) -> None:
        record = write_pack_of(store, i + 1)
        base = store.latest_version()
        barrier.wait()
        try:
            store.commit(packs=[record], base_version=base)
            outcomes[i] = "won"
        except VersionConflictError:
            store.commit(packs=[record], base_version=store.latest_version())
            outcomes[i] = "retried"

    threads = [threading.Thread(target=write, args=(i, s)) for i, s in enumerate((first, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes.values()) == ["retried", "won"]
    final = Store.open(str(tmp_path / "s"))
    assert final.latest_version() == 3
    assert [p.session for p in final.version().packs] == [_session(1), _session(2)]
    final.verify()
