"""The cross_gaps index, computed for every (symbol, session) pair at once, against a slow
per-pair reference: sources and their parts, chunks, label and timestamp rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.loaders import WindowDataset
from ticktensor.loaders._chunks import ChunkIndex, Sources
from ticktensor.loaders._index import select_sources
from ticktensor.loaders._window_index import _copy_ranges
from ticktensor.store import Layout, PackRecord, SegmentRecord, Store, StoreVersion
from ticktensor.store.testing import write_segment

Record = SegmentRecord | PackRecord

DAY_NS = 86_400 * 10**9
T0 = 1_704_186_000 * 10**9
FEATURES = ("a", "b", "c")
LABELS = ("y0", "y1")

Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]
Part = tuple[str, int, int]  # (record path, lo, hi)


def write_store(root: Path, seed: int) -> StoreVersion:
    """Random sessions, each a pack or per-symbol segments; symbols missing from some
    sessions, series shorter than a window, NaN labels, small chunks."""
    rng = np.random.default_rng(seed)
    symbols = [f"S{i:02d}" for i in range(int(rng.integers(3, 9)))]
    store = Store.create(
        str(root), layout=Layout(codec="none", chunk_rows=int(rng.choice([5, 16])))
    )
    segments: list[SegmentRecord] = []
    packs: list[PackRecord] = []
    for day in range(int(rng.integers(2, 6))):
        held = [s for s in symbols if rng.random() < 0.75] or symbols[:1]
        rows = rng.integers(1, 30, len(held))
        data = []
        for n in rows.tolist():
            seconds = np.sort(rng.choice(10_000, n, replace=False)).astype(np.int64)
            labels = rng.standard_normal((n, len(LABELS))).astype(np.float32)
            labels[rng.random(n) < 0.15, 0] = np.nan
            values = rng.standard_normal((n, len(FEATURES))).astype(np.float32)
            data.append((T0 + day * DAY_NS + seconds * 10**9, values, labels))
        session = f"2024-02-{day + 1:02d}"
        if rng.random() < 0.6:
            packs.append(
                store.write_pack(
                    session=session,
                    symbols=held,
                    offsets=np.concatenate([[0], np.cumsum(rows)]).astype(np.int64),
                    ts=np.concatenate([d[0] for d in data]),
                    values=np.concatenate([d[1] for d in data]),
                    feature_names=FEATURES,
                    labels=np.concatenate([d[2] for d in data]),
                    label_names=LABELS,
                )
            )
            continue
        segments.extend(
            write_segment(
                store,
                symbol=symbol,
                session=session,
                ts=ts,
                values=values,
                feature_names=FEATURES,
                labels=labels,
                label_names=LABELS,
            )
            for symbol, (ts, values, labels) in zip(held, data, strict=True)
        )
    return store.commit(segments=segments, packs=packs)


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> list[StoreVersion]:
    root = tmp_path_factory.mktemp("cross_gaps")
    return [write_store(root / f"store{seed}", seed) for seed in range(4)]


def reference_sources(
    version: StoreVersion,
    symbols: list[str] | None,
    start: int | None,
    end: int | None,
    window: int,
) -> list[tuple[str, int, list[Part]]]:
    """Per symbol: its parts by time (segments, then its rows of each pack), cut to the
    parts in range plus the earlier ones the first windows read; and the phase."""

    def in_range(record: Record) -> bool:
        return (start is None or record.ts_end >= start) and (end is None or record.ts_start < end)

    def time_key(record: Record) -> tuple[int, str]:
        return (record.ts_start, record.session)

    found = []
    for symbol in sorted(set(version.symbols if symbols is None else symbols)):
        parts: list[tuple[Record, int, int]] = [
            (s, 0, s.rows) for s in version.segments if s.symbol == symbol
        ]
        for pack in sorted(version.packs, key=time_key):
            index = version.pack_index(pack)
            if symbol in index.symbols:
                k = list(index.symbols).index(symbol)
                lo, hi = int(index.offsets[k]), int(index.offsets[k + 1])
                if hi > lo:
                    parts.append((pack, lo, hi))
        parts.sort(key=lambda part: time_key(part[0]))
        hits = [k for k, part in enumerate(parts) if in_range(part[0])]
        if not hits:
            continue
        first, need = hits[0], window - 1
        while first > 0 and need > 0:
            first -= 1
            need -= parts[first][2] - parts[first][1]
        phase = sum(hi - lo for _, lo, hi in parts[:first])
        kept = [(record.path, lo, hi) for record, lo, hi in parts[first : hits[-1] + 1]]
        found.append((symbol, phase, kept))
    return found


def as_lists(sources: Sources) -> list[tuple[str, int, list[Part]]]:
    """The sources as (symbol, phase, parts), as :func:`reference_sources` says them."""
    return [
        (
            str(sources.symbol[s]),
            int(sources.phase[s]),
            [(p.record.path, p.lo, p.hi) for p in sources.parts(s)],
        )
        for s in range(len(sources))
    ]


def selections(version: StoreVersion) -> list[tuple[list[str] | None, int | None, int | None]]:
    """Symbol filters and time ranges to select with: none, every other symbol, from each
    later session on, a range from inside the first session, one symbol up to a day."""
    names = list(version.symbols)
    return [
        (None, None, None),
        (names[::2], None, None),
        *((None, T0 + day * DAY_NS, T0 + (day + 2) * DAY_NS) for day in range(1, 5)),
        (None, T0 + 5_000 * 10**9, None),
        (names[-1:], None, T0 + DAY_NS),
    ]


@pytest.mark.parametrize("window", [1, 2, 3, 5, 8, 13, 21, 40])
def test_sources_match_the_per_pair_reference(versions: list[StoreVersion], window: int) -> None:
    for version in versions:
        for symbols, start, end in selections(version):
            sources = select_sources(version, symbols, start, end, window, cross_gaps=True)
            expected = reference_sources(version, symbols, start, end, window)
            assert as_lists(sources) == expected, (version.location.url, symbols, start, end)
            read = {path for _, _, parts in expected for path, _, _ in parts}
            assert {r.path for r in sources.distinct_records()[0]} == read


def test_chunks_match_the_per_part_reference(versions: list[StoreVersion]) -> None:
    for version in versions:
        sources = select_sources(version, None, None, None, 6, cross_gaps=True)
        index = ChunkIndex(version, sources)
        files, starts = [], []
        for s in range(len(sources)):
            at, source_starts = 0, []
            for part in sources.parts(s):
                for stored in version.chunk_map(part.record, "values").covering(part.lo, part.hi):
                    lo = max(stored.row_start, part.lo)
                    hi = min(stored.row_start + stored.rows, part.hi)
                    files.append((stored.rel, stored.index, lo - stored.row_start, hi - lo))
                    source_starts.append(at + lo - part.lo)
                at += part.rows
            starts.append(source_starts)
        assert [(f.rel, f.index, f.skip, f.rows) for f in index.files] == files
        assert [s.tolist() for s in index.chunk_starts] == starts
        loads = list(dict.fromkeys((rel, chunk) for rel, chunk, _, _ in files))
        assert [(f.rel, f.index, f.skip, f.rows) for f in index.loads] == [
            (rel, chunk, 0, index.loads[k].stored.rows) for k, (rel, chunk) in enumerate(loads)
        ]
        assert index.load_of.tolist() == [loads.index(f[:2]) for f in files]


def test_rows_match_the_records_read_whole(versions: list[StoreVersion]) -> None:
    for version in versions:
        names = list(version.symbols)
        ds = WindowDataset(
            version, 4, cross_gaps=True, symbols=names[1:], start=T0 + DAY_NS, threads=2
        )
        whole: dict[str, tuple[Int64s, Floats]] = {}
        for pack in version.packs:
            data = version.read_pack(pack)
            assert data.labels is not None
            whole[pack.path] = (data.ts, data.labels)
        for segment in version.segments:
            arrays = version.open_segment(segment)
            whole[segment.path] = (arrays.ts[...], arrays.labels[...])
        for s, parts in enumerate(ds.source_parts):
            ts = np.concatenate([whole[p.record.path][0][p.lo : p.hi] for p in parts])
            labels = np.concatenate([whole[p.record.path][1][p.lo : p.hi] for p in parts])
            np.testing.assert_array_equal(ds.ts_sources[s], ts)
            np.testing.assert_array_equal(ds.labels_sources[s], labels)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.integers(0, 700), max_size=12),
    gaps=st.lists(st.integers(0, 5), min_size=12, max_size=12),
    columns=st.integers(0, 2),
)
def test_copy_ranges_copies_like_slices(rows: list[int], gaps: list[int], columns: int) -> None:
    counts = np.asarray(rows, dtype=np.int64)
    lo = np.cumsum(counts) - counts
    at = np.cumsum(counts + gaps[: len(rows)]) - counts
    shape = (int(counts.sum()), columns) if columns else (int(counts.sum()),)
    src = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    size = int((counts + gaps[: len(rows)]).sum())
    dst = np.full((size, *shape[1:]), -1, dtype=np.float32)
    expected = dst.copy()
    for first, n, to in zip(lo.tolist(), rows, at.tolist(), strict=True):
        expected[to : to + n] = src[first : first + n]
    _copy_ranges(src, lo, dst, at, counts)
    np.testing.assert_array_equal(dst, expected)
