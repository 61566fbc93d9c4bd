"""WindowDataset over packs against a slow per-symbol reference, and over mixed versions."""

from __future__ import annotations

import pickle
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch

from ticktensor import DataLoader
from ticktensor.errors import StoreCorruptError
from ticktensor.kernels import ThreadPool
from ticktensor.loaders import WindowDataset
from ticktensor.store import FeatureStats, Layout, Store, StoreVersion
from ticktensor.store.testing import write_segment

FEATURES = ("f0", "f1", "f2", "f3")
LABELS = ("y0", "y1")
SYMBOLS = ("AAA", "BBB", "C/C", "DDD", "EEE")
SESSIONS = ("2024-01-02", "2024-01-03", "2024-01-04")
DAY_NS = 86_400 * 10**9
T0 = 1_704_186_000 * 10**9  # 2024-01-02 09:00 UTC
SEC = 10**9
HORIZON = 3  # the last HORIZON rows of a symbol's session have no label
CHUNK_ROWS = 16
WINDOW = 6
STATS = FeatureStats(
    names=FEATURES,
    mean=(1.0, 2.0, 3.0, 4.0),
    std=(2.0, 4.0, 0.0, 8.0),
    count=1,
    period=(T0, T0 + DAY_NS),
)

Floats = npt.NDArray[np.float32]
Int64s = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Series:
    ts: Int64s
    values: Floats
    labels: Floats


def series(si: int, day: int) -> Series | None:
    """One symbol's rows of one session; values are integers that name (symbol, day, row,
    feature) exactly. DDD has no rows on the second day; EEE has fewer rows than a window."""
    if SYMBOLS[si] == "DDD" and day == 1:
        return None
    rng = np.random.default_rng([si, day])
    rows = 4 if SYMBOLS[si] == "EEE" and day == 0 else 20 + 7 * si + 5 * day
    seconds = np.sort(rng.choice(2 * rows, rows, replace=False))
    ts = (T0 + day * DAY_NS + seconds * SEC).astype(np.int64)
    row = np.arange(rows, dtype=np.float32)[:, None]
    values = (((si * 8 + day) * 512 + row) * 8 + np.arange(len(FEATURES))).astype(np.float32)
    labels = np.stack([row[:, 0] + 0.5, -row[:, 0]], axis=1).astype(np.float32)
    labels[rows - HORIZON :, :] = np.nan
    labels[np.arange(rows) % 11 == 5, 1] = np.nan  # one label missing: no sample either
    return Series(ts, values, labels)


def write_store(path: Path | str, codec: str, packed: tuple[bool, ...]) -> StoreVersion:
    """The same data with session ``d`` as a pack where ``packed[d]``, else as segments."""
    store = Store.create(str(path), layout=Layout(codec=codec, chunk_rows=CHUNK_ROWS))
    segments, packs = [], []
    for day, session in enumerate(SESSIONS):
        held = [(s, data) for s, data in enumerate(map(series, range(len(SYMBOLS)), [day] * 5))]
        held = [(s, data) for s, data in held if data is not None]
        if packed[day]:
            counts = [data.ts.shape[0] for _, data in held]
            packs.append(
                store.write_pack(
                    session=session,
                    symbols=[SYMBOLS[s] for s, _ in held],
                    offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                    ts=np.concatenate([data.ts for _, data in held]),
                    values=np.concatenate([data.values for _, data in held]),
                    feature_names=FEATURES,
                    labels=np.concatenate([data.labels for _, data in held]),
                    label_names=LABELS,
                )
            )
            continue
        for s, data in held:
            segments.append(
                write_segment(
                    store,
                    symbol=SYMBOLS[s],
                    session=session,
                    ts=data.ts,
                    values=data.values,
                    feature_names=FEATURES,
                    labels=data.labels,
                    label_names=LABELS,
                )
            )
    return store.commit(segments=segments, packs=packs, stats=STATS, message="packs test")


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> StoreVersion:
    return write_store(tmp_path_factory.mktemp("packs") / "store", "none", (True, True, True))


@dataclass
class Reference:
    """Windows cut by hand, in the order the dataset should hold them."""

    symbol: list[str]
    first_ts: list[int]
    last_ts: list[int]
    x: list[Floats]
    y: list[Floats]


def reference(
    version: StoreVersion,
    window: int,
    *,
    stride: int = 1,
    symbols: tuple[str, ...] | None = None,
    start: int | None = None,
    end: int | None = None,
    cross_gaps: bool = False,
    features: tuple[str, ...] = FEATURES,
    normalize: bool = False,
) -> Reference:
    """Every valid window, from packs read whole by zarr-python (``read_pack``) and
    segments read whole; per (session, symbol) in session order, or per symbol over all
    its sessions with ``cross_gaps``."""
    rows: dict[tuple[str, str], tuple[Int64s, Floats, Floats]] = {}
    for pack in version.packs:
        data = version.read_pack(pack)
        assert data.labels is not None
        for i, symbol in enumerate(data.symbols):
            lo, hi = int(data.offsets[i]), int(data.offsets[i + 1])
            rows[(pack.session, symbol)] = (data.ts[lo:hi], data.values[lo:hi], data.labels[lo:hi])
    for segment in version.segments:
        seg = version.read_segment(segment)
        assert seg.labels is not None
        rows[(segment.session, segment.symbol)] = (seg.ts, seg.values, seg.labels)
    columns = [FEATURES.index(f) for f in features]
    if cross_gaps:
        series_of = {
            symbol: [rows[(d, symbol)] for d in SESSIONS if (d, symbol) in rows]
            for symbol in sorted({s for _, s in rows})
        }
        runs = [
            (symbol, *(np.concatenate(parts) for parts in zip(*runs, strict=True)))
            for symbol, runs in series_of.items()
        ]
    else:
        runs = [(symbol, *rows[(d, symbol)]) for d, symbol in sorted(rows)]
    out = Reference([], [], [], [], [])
    for symbol, ts, values, labels in runs:
        if symbols is not None and symbol not in symbols:
            continue
        x = values[:, columns]
        if normalize:
            mean = np.asarray(STATS.mean, np.float32)[columns]
            std = np.asarray(STATS.std, np.float32)[columns]
            x = (x - mean) / np.where(std > 0, std, np.float32(1))
        for s in range(0, ts.shape[0] - window + 1, stride):
            last = s + window - 1
            if np.isnan(labels[last]).any():
                continue
            if (start is not None and ts[last] < start) or (end is not None and ts[last] >= end):
                continue
            out.symbol.append(symbol)
            out.first_ts.append(int(ts[s]))
            out.last_ts.append(int(ts[last]))
            out.x.append(x[s : s + window])
            out.y.append(labels[last])
    return out


def assert_same_windows(ds: WindowDataset, ref: Reference, *, ordered: bool = True) -> None:
    """The dataset holds exactly the reference's windows (in its order when ``ordered``)."""
    assert len(ds) == len(ref.x) > 0
    x, y = ds.get_batch(np.arange(len(ds)))
    symbols = np.asarray(ds.symbols)[ds.sample_symbol]
    if ordered:
        np.testing.assert_array_equal(x, np.stack(ref.x))
        np.testing.assert_array_equal(y, np.stack(ref.y))
        assert symbols.tolist() == ref.symbol
        assert ds.sample_first_ts.tolist() == ref.first_ts
        assert ds.sample_ts.tolist() == ref.last_ts
        return
    mine = np.lexsort((ds.sample_first_ts, symbols))
    theirs = np.lexsort((np.asarray(ref.first_ts), np.asarray(ref.symbol)))
    np.testing.assert_array_equal(x[mine], np.stack(ref.x)[theirs])
    np.testing.assert_array_equal(y[mine], np.stack(ref.y)[theirs])
    assert ds.sample_ts[mine].tolist() == np.asarray(ref.last_ts)[theirs].tolist()


@pytest.mark.parametrize("codec", ["none", "zstd", "lz4"])
def test_every_codec_gives_the_reference_windows(tmp_path: Path, codec: str) -> None:
    version = write_store(tmp_path / "store", codec, (True, True, True))
    ds = WindowDataset(version, WINDOW, threads=2)
    assert_same_windows(ds, reference(version, WINDOW))
    assert ds.n_sources == len(SESSIONS)  # one source per pack
    assert ds.records == [(version.block(session),) for session in SESSIONS]
    assert ds.symbols == SYMBOLS
    # Each inner chunk of a pack is one chunk, loaded once for every symbol in it.
    assert ds.chunks.one_to_one
    assert ds.cache_stats()["loads"] == len(ds.chunks_of(np.arange(len(ds))))


@pytest.mark.parametrize(
    "options",
    [
        {"stride": 3},
        {"symbols": ("C/C", "DDD")},
        {"start": T0 + DAY_NS + 20 * SEC, "end": T0 + 2 * DAY_NS + 30 * SEC},
        {"features": ("f3", "f1"), "normalize": True},
        {"stride": 2, "symbols": ("BBB",), "start": T0 + 10 * SEC},
    ],
    ids=["stride", "symbols", "time-range", "features-normalize", "combined"],
)
def test_options_select_the_reference_windows(packed: StoreVersion, options: dict) -> None:
    ds = WindowDataset(packed, WINDOW, threads=2, pool=ThreadPool(2), **options)
    assert_same_windows(ds, reference(packed, WINDOW, **options))
    if "symbols" in options:
        assert ds.symbols == tuple(sorted(options["symbols"]))


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.parametrize("stride", [1, 4])
def test_cross_gaps_join_a_symbols_rows_across_packs(
    tmp_path: Path, codec: str, stride: int
) -> None:
    version = write_store(tmp_path / "store", codec, (True, True, True))
    ds = WindowDataset(version, WINDOW, cross_gaps=True, stride=stride, threads=2)
    assert_same_windows(ds, reference(version, WINDOW, cross_gaps=True, stride=stride))
    assert ds.n_sources == len(SYMBOLS)
    assert [tuple(r.session for r in records) for records in ds.records][:1] == [SESSIONS]
    # A symbol's rows start inside the pack's chunks: several chunks share a stored chunk,
    # which is loaded once for all of them.
    assert not ds.chunks.one_to_one
    crossing = (ds.sample_first_ts - T0) // DAY_NS != (ds.sample_ts - T0) // DAY_NS
    assert crossing.any()
    stats = ds.cache_stats()
    assert stats["loads"] == len(ds.chunks.loads) < len(ds.chunks)


def test_cross_gaps_with_a_time_range_keeps_the_stride_grid(packed: StoreVersion) -> None:
    options = {"start": T0 + 2 * DAY_NS, "stride": 3}
    ds = WindowDataset(packed, WINDOW, cross_gaps=True, threads=2, **options)
    assert_same_windows(ds, reference(packed, WINDOW, cross_gaps=True, **options))


def test_a_small_cache_evicts_shared_chunks_and_stays_exact(tmp_path: Path) -> None:
    version = write_store(tmp_path / "store", "lz4", (True, True, True))
    budget = 3 * CHUNK_ROWS * len(FEATURES) * 4  # three stored chunks
    ds = WindowDataset(version, WINDOW, cross_gaps=True, cache_bytes=budget, threads=2)
    ref = reference(version, WINDOW, cross_gaps=True)
    order = np.random.default_rng(0).permutation(len(ds))
    for lo in range(0, len(ds), 7):
        idx = order[lo : lo + 7]
        x, y = ds.get_batch(idx)
        np.testing.assert_array_equal(x, np.stack([ref.x[i] for i in idx]))
        np.testing.assert_array_equal(y, np.stack([ref.y[i] for i in idx]))
    stats = ds.cache_stats()
    assert stats["evictions"] > 0
    assert ds.cache.used_bytes <= budget or stats["over_budget"] > 0


@pytest.mark.parametrize("cross_gaps", [False, True])
def test_a_mixed_version_reads_as_the_same_data_in_segments(
    tmp_path: Path, cross_gaps: bool
) -> None:
    mixed = write_store(tmp_path / "mixed", "zstd", (True, False, True))
    assert len(mixed.packs) == 2
    assert {s.session for s in mixed.segments} == {SESSIONS[1]}
    segments = write_store(tmp_path / "segments", "zstd", (False, False, False))
    options = {"cross_gaps": cross_gaps, "stride": 2, "features": ("f2", "f0")}
    ds = WindowDataset(mixed, WINDOW, threads=2, **options)
    plain = WindowDataset(segments, WINDOW, threads=2, **options)
    ref = reference(segments, WINDOW, **options)
    # Segments are in symbol order; the reference (like packs) in session order, unless
    # sessions are joined.
    assert_same_windows(plain, ref, ordered=cross_gaps)
    assert_same_windows(ds, ref, ordered=cross_gaps)
    assert ds.symbols == plain.symbols
    if cross_gaps:  # one source per symbol, joining its segments and its rows of packs
        kinds = {block.symbol is None for blocks in ds.records for block in blocks}
        assert kinds == {True, False}  # packs and segments


def test_the_dataloader_yields_every_window_once(packed: StoreVersion) -> None:
    ds = WindowDataset(packed, WINDOW, stride=2, threads=2)
    ref = reference(packed, WINDOW, stride=2)
    seen_x, seen_y = [], []
    for x, y in DataLoader(ds, batch_size=16, shuffle=True):
        seen_x.append(x.numpy())
        seen_y.append(y.numpy())
    x, y = np.concatenate(seen_x), np.concatenate(seen_y)
    expected = np.stack(ref.x)
    # The first value of a window names its (symbol, session, first row).
    mine, theirs = np.argsort(x[:, 0, 0]), np.argsort(expected[:, 0, 0])
    assert not np.array_equal(x, expected)  # shuffled
    np.testing.assert_array_equal(x[mine], expected[theirs])
    np.testing.assert_array_equal(y[mine], np.stack(ref.y)[theirs])


def test_verify_names_an_inner_chunk_flipped_inside_a_shard(tmp_path: Path) -> None:
    version = write_store(tmp_path / "store", "none", (True, True, True))
    pack = version.pack(SESSIONS[1])
    chunk = version.chunk_map(pack, "values").chunks[2]
    assert chunk.offset > 0
    assert chunk.nbytes is not None
    path = Path(version.file_url(chunk.rel))
    data = bytearray(path.read_bytes())
    data[chunk.offset + chunk.nbytes // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    WindowDataset(version, WINDOW).get_batch(np.arange(10))  # raw bytes carry no checksum
    ds = WindowDataset(version, WINDOW, verify=True, threads=1)
    with pytest.raises(
        StoreCorruptError, match=rf"chunk 2 of pack {SESSIONS[1]}\): sha256"
    ) as info:
        ds.get_batch(np.arange(len(ds)))
    assert f"bytes {chunk.offset}+{chunk.nbytes}" in str(info.value)
    assert any(f"while loading chunk 2 of pack {SESSIONS[1]}" in n for n in info.value.__notes__)


def test_a_damaged_compressed_chunk_and_a_short_shard_are_named(tmp_path: Path) -> None:
    version = write_store(tmp_path / "store", "zstd", (True, True, True))
    pack = version.pack(SESSIONS[0])
    chunk = version.chunk_map(pack, "values").chunks[1]
    assert chunk.nbytes is not None
    path = Path(version.file_url(chunk.rel))
    data = bytearray(path.read_bytes())
    data[chunk.offset + 4 : chunk.offset + chunk.nbytes] = bytes(chunk.nbytes - 4)
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError, match=r"chunk 1 of pack 2024-01-02\): crc32c \w+ !="):
        WindowDataset(version, WINDOW).get_batch(np.arange(40))
    # A shard cut short after the dataset was opened (opening reads the shard's index at
    # its end, and would notice) is named when a read comes short.
    ds = WindowDataset(version, WINDOW)
    path.write_bytes(bytes(data[: chunk.offset + 1]))
    with pytest.raises(StoreCorruptError, match=r"the shard ends at byte [\d,]+, before"):
        ds.get_batch(np.arange(40))


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_an_object_store_pack_is_read_by_ranged_requests(codec: str) -> None:
    version = write_store(f"memory://packs-{uuid.uuid4().hex}/store", codec, (True, False, True))
    ds = WindowDataset(version, WINDOW, threads=2)
    assert_same_windows(ds, reference(version, WINDOW), ordered=False)


def test_a_pack_dataset_pickles_and_reads_in_spawned_workers(packed: StoreVersion) -> None:
    ds = WindowDataset(packed, WINDOW, stride=5, threads=1, pool=ThreadPool(1))
    back = pickle.loads(pickle.dumps(ds))
    idx = np.arange(len(ds))
    np.testing.assert_array_equal(back.get_batch(idx)[0], ds.get_batch(idx)[0])
    np.testing.assert_array_equal(back.sample_symbol, ds.sample_symbol)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=32, num_workers=2, multiprocessing_context="spawn"
    )
    x = torch.cat([batch for batch, _ in loader]).numpy()
    np.testing.assert_array_equal(x, ds.get_batch(idx)[0])


def test_sample_chunk_is_the_inner_chunk_of_the_first_row(packed: StoreVersion) -> None:
    for cross_gaps in (False, True):
        ds = WindowDataset(packed, WINDOW, cross_gaps=cross_gaps, threads=1)
        files = ds.chunks.files
        for i in range(0, len(ds), 7):
            file = files[int(ds.sample_chunk[i])]
            source = int(ds.sample_segment[i])
            first = int(ds.chunks.first_chunk[source])
            local = int(ds.sample_start[i]) - int(
                ds.chunks.chunk_starts[source][int(ds.sample_chunk[i]) - first]
            )
            assert 0 <= local < file.rows
            # The chunk's rows hold the window's first row: its first value names it.
            row = ds.load_chunk(int(ds.sample_chunk[i]))[local]
            np.testing.assert_array_equal(row, ds.get_batch(np.array([i]))[0][0, 0])


def test_datasets_of_other_symbols_of_the_same_packs_concatenate(packed: StoreVersion) -> None:
    a = WindowDataset(packed, WINDOW, symbols=["AAA"], threads=1)
    b = WindowDataset(packed, WINDOW, symbols=["C/C", "EEE"], threads=1)
    merged = WindowDataset.concat([a, b])
    assert merged.n_sources == len(SESSIONS)  # the packs, each once
    assert merged.symbols == ("AAA", "C/C", "EEE")
    x = merged.get_batch(np.arange(len(merged)))[0]
    np.testing.assert_array_equal(
        x, np.concatenate([a.get_batch(np.arange(len(a)))[0], b.get_batch(np.arange(len(b)))[0]])
    )
    names = np.asarray(merged.symbols)[merged.sample_symbol]
    assert names.tolist() == [*(["AAA"] * len(a)), *np.asarray(b.symbols)[b.sample_symbol]]
    np.testing.assert_array_equal(merged.sample_ts, np.concatenate([a.sample_ts, b.sample_ts]))


def test_a_symbol_filter_loads_only_the_chunks_holding_its_rows(packed: StoreVersion) -> None:
    ds = WindowDataset(packed, WINDOW, symbols=["AAA"], threads=1)
    assert not ds.cache.complete
    ds.get_batch(np.arange(len(ds)))
    # Every chunk a sample reads is loaded: the fast path needs no more planning, although
    # the packs' chunks of other symbols never are.
    assert ds.cache.complete
    assert ds.cache.loaded_count == len(ds.chunks_of(np.arange(len(ds))))
    assert ds.cache.loaded_count < len(ds.chunks.loads)
    assert_same_windows(ds, reference(packed, WINDOW, symbols=("AAA",)))
