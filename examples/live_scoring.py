"""Train on a store with ticktensor.DataLoader, then score live windows tick by tick.

    python examples/live_scoring.py [WORKDIR]

Builds a store of two generated sessions (feature spec version 2, statistics over the
first), trains a small model on its normalized windows, then replays the second session's
quotes and trades through a ``LiveEngine`` as a live feed: after every quote the engine
gives the newest window ``[W, F]``, normalized as ``WindowDataset`` does, and the model
(TorchScript) scores it. Prints the end-to-end latency per tick (push + window + model)
and checks that the live windows are the dataset's windows, bit for bit.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from ticktensor import DataLoader
from ticktensor.ingest import IngestOptions, SyntheticMarket, generate_day, ingest
from ticktensor.live import LiveEngine, Quote, Trade, session_events
from ticktensor.loaders import WindowDataset
from ticktensor.schemas import EventKind, FeatureSpec, LabelSpec
from ticktensor.store import open_store

WINDOW = 32
FEATURES = (
    "mid_log_return", "spread_bps", "imbalance", "log1p_bid_sz", "log1p_ask_sz",
    "volatility_20", "signed_volume_1s", "trade_count_100", "vwap_distance_1s", "time_of_day",
)  # fmt: skip


def build_store(root: Path) -> tuple[str, FeatureSpec]:
    market = SyntheticMarket(symbols=("AAA", "BBB"), quotes_per_day=4_000, trades_per_day=800)
    files = []
    for d, day in enumerate(market.days[:2]):
        for kind in (EventKind.QUOTES, EventKind.TRADES):
            table = pa.concat_tables(generate_day(market, s, day)[kind] for s in market.symbols)
            files.append(str(root / f"{kind.value}-{d}.parquet"))
            pq.write_table(table, files[-1])
    first = pq.read_table(files[0]).column("ts_event").cast(pa.int64()).to_numpy()
    spec = FeatureSpec(
        FEATURES,
        (LabelSpec("mid_fwd_log_return_10", "mid", horizon_rows=10),),
        stats_period=(int(first.min()), int(first.max()) + 1),
        version=2,  # volatility summed in the order the live engine repeats
    )
    ingest(files, str(root / "store"), IngestOptions(spec=spec, workers=1), progress=False)
    return str(root / "store"), spec


def train(dataset: WindowDataset) -> torch.nn.Module:
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(WINDOW * len(FEATURES), 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 1),
    )  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for windows, labels in DataLoader(dataset, batch_size=256, shuffle=True):
        x, y = torch.nan_to_num(windows), torch.nan_to_num(labels)
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y[:, 0] * 1e4)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="ticktensor-live-"))
    root.mkdir(parents=True, exist_ok=True)
    store, _ = build_store(root)
    torch.set_num_threads(1)  # one core per tick: the latency of a serving process
    dataset = WindowDataset(open_store(store), window=WINDOW, normalize=True)
    scripted = torch.jit.script(train(dataset))
    version = dataset.version
    engine = LiveEngine.for_version(version, history=WINDOW)
    session = version.packs[-1].session
    feed = session_events(version, session)
    # A live feed in time order, trades first at equal times (docs/live.md).
    events: list[Quote | Trade] = [
        Trade(r["symbol"], r["ts_event"].value, r["price"], r["size"], r["side"])
        for r in feed[EventKind.TRADES].to_pandas().to_dict("records")
    ] + [
        Quote(r["symbol"], r["ts_event"].value, r["bid_px"], r["ask_px"], r["bid_sz"], r["ask_sz"])
        for r in feed[EventKind.QUOTES].to_pandas().to_dict("records")
    ]
    events.sort(key=lambda e: (e.ts, isinstance(e, Quote)))
    latencies, features_ns, scores = [], [], []
    by_time: dict[tuple[str, int], np.ndarray] = {}  # each symbol's window as of each time
    with torch.inference_mode():
        for event in events:
            start = time.perf_counter_ns()
            if engine.push(event) is None or engine.rows(event.symbol) < WINDOW:
                continue
            window = engine.window(event.symbol, WINDOW, normalize=True)
            features_ns.append(time.perf_counter_ns() - start)
            score = scripted(torch.from_numpy(np.nan_to_num(window))[None])
            latencies.append(time.perf_counter_ns() - start)
            scores.append(float(score))
            by_time[(event.symbol, event.ts)] = window
    us = np.asarray(latencies) / 1e3
    print(f"{len(us)} live ticks scored; end to end per tick (push + window + TorchScript):")
    print(f"  p50 {np.percentile(us, 50):.1f} us, p99 {np.percentile(us, 99):.1f} us")
    us = np.asarray(features_ns) / 1e3
    print(f"  of which push + normalized window: p50 {np.percentile(us, 50):.1f} us, "
          f"p99 {np.percentile(us, 99):.1f} us")  # fmt: skip
    # The dataset's last sample of each symbol is the live window at its time.
    for k, symbol in enumerate(dataset.symbols):
        last = int(np.flatnonzero(dataset.sample_symbol == k).max())
        live = by_time[(symbol, int(dataset.sample_ts[last]))]
        same = np.array_equal(live, dataset[last][0].numpy(), equal_nan=True)
        print(f"  {symbol}: the live window equals the dataset's sample {last}: {same}")
    print(f"engine verdicts: {engine.counts()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
