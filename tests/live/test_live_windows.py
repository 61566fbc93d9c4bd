"""Live windows are the windows WindowDataset cuts at the same row, normalization included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from ticktensor.ingest import IngestOptions, ingest
from ticktensor.live import LiveEngine, session_events
from ticktensor.loaders import WindowDataset
from ticktensor.schemas import EventKind, FeatureSpec

from .conftest import FEATURES, assert_bits_equal, market

WINDOW = 8


def test_the_latest_window_is_the_datasets_last_sample(tmp_path: Path) -> None:
    events = market()
    files = []
    for kind in (EventKind.QUOTES, EventKind.TRADES):
        files.append(str(tmp_path / f"{kind.value}.parquet"))
        pq.write_table(events[kind], files[-1])
    ts = events[EventKind.QUOTES].column("ts_event").cast("int64").to_numpy()
    spec = FeatureSpec(
        FEATURES["quotes"], version=2, stats_period=(int(ts.min()), int(ts.max()) + 1)
    )
    options = IngestOptions(spec=spec, workers=1)
    version = ingest(files, str(tmp_path / "store"), options, progress=False).version
    (pack,) = version.packs
    engine = LiveEngine.for_version(version, history=WINDOW)
    engine.replay(session_events(version, pack.session))
    for normalize in (False, True):
        ds = WindowDataset(version, window=WINDOW, normalize=normalize)
        for k, symbol in enumerate(ds.symbols):
            last = int(np.flatnonzero(ds.sample_symbol == k).max())
            expected = ds[last][0].numpy()
            got = engine.window(symbol, WINDOW, normalize=normalize)
            assert_bits_equal(got, expected, spec.features)
