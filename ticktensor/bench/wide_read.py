"""Reading a wide store: the time to open it as a dataset, and the loader over it (W1's read rows).

``open_dataset`` opens the store and builds a ``WindowDataset`` in a fresh process, so
nothing the writer kept in memory (the store's cached state, the page tables of its
arrays) shortens it; once as it is, once with ``cross_gaps=True``. ``loader_wide`` and
``loader_narrow`` are ``ticktensor.DataLoader`` (shuffled batches) over the wide store and
over the same bytes stored as one long series of one symbol, with the same window:
each dataset's chunks are loaded first, untimed (:func:`warm`), so that both rows measure
shuffled reading from a loaded cache, not how far a 2-second repetition got with loading
(a first epoch is ``bench loader``'s compressed and cold rows); repetitions take turns, the
median counts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ticktensor.store import Store, StoreVersion

from .measure import Rep, endless, timed
from .wide_append import MINUTE_NS, T0, SessionData

__all__ = ["loader_rates", "open_seconds", "warm", "write_narrow"]


def open_seconds(
    url: str, window: int, repeats: int, *, cross_gaps: bool = False
) -> dict[str, Any]:
    """Median seconds of ``open_store(url)`` + ``WindowDataset(version, window,
    cross_gaps=cross_gaps)``, each in a fresh process; also the (symbol, session) pairs and
    windows of the dataset.

    Raises
    ------
    RuntimeError
        With the child's last error line, when the dataset cannot be built.
    """
    runs = []
    for _ in range(max(1, repeats)):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                __name__,
                url,
                "--window",
                str(window),
                *(["--cross-gaps"] if cross_gaps else []),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
            raise RuntimeError(f"open_store + WindowDataset in a fresh process: {lines[-1]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    seconds = [float(r["seconds"]) for r in runs]
    return {**runs[-1], "seconds": statistics.median(seconds), "runs_seconds": seconds}


def _open_once(url: str, window: int, cross_gaps: bool) -> dict[str, Any]:
    from ticktensor.loaders import WindowDataset
    from ticktensor.store import open_store

    start = time.perf_counter()
    version = open_store(url)
    dataset = WindowDataset(version, window, cross_gaps=cross_gaps)
    seconds = time.perf_counter() - start
    pairs = sum(p.symbols for p in version.packs) + len(version.segments)
    return {"seconds": seconds, "pairs": pairs, "windows": len(dataset)}


def write_narrow(root: Path, make: Callable[[int], SessionData], sessions: int) -> StoreVersion:
    """A store of one symbol whose one series, a pack of one session, holds every row of
    ``make(1..sessions)``."""
    store = Store.create(str(root))
    first = make(1)
    per_session = first.ts.shape[0]
    rows = per_session * sessions
    values = np.empty((rows, first.values.shape[1]), np.float32)
    labels = np.empty((rows, first.labels.shape[1]), np.float32)
    for day in range(1, sessions + 1):
        data = first if day == 1 else make(day)
        part = slice((day - 1) * per_session, day * per_session)
        values[part], labels[part] = data.values, data.labels
    record = store.write_pack(
        session="all",
        symbols=["NARROW"],
        offsets=[0, rows],
        ts=T0 + np.arange(rows, dtype=np.int64) * MINUTE_NS,
        values=values,
        feature_names=first.feature_names,
        labels=labels,
        label_names=first.label_names,
    )
    return store.commit(packs=[record], message="one long series")


def _shuffled(dataset: Any, batch: int) -> Callable[[int], tuple[Iterator[int], Any]]:
    from ticktensor import DataLoader

    def batches(rep: int) -> tuple[Iterator[int], Callable[[], Mapping[str, Any]]]:
        loader = DataLoader(dataset, batch_size=batch, shuffle=True)
        return endless(lambda: loader), loader.stats

    return batches


def warm(dataset: Any, batch: int = 4096) -> bool:
    """Load every chunk ``dataset`` (a ``WindowDataset``) reads, a batch of windows at a
    time (the first and the last window starting in each chunk); returns whether its cache
    then holds them all (not when they exceed its budget)."""
    chunk = np.asarray(dataset.sample_chunk)
    firsts = np.unique(chunk, return_index=True)[1]
    lasts = chunk.size - 1 - np.unique(chunk[::-1], return_index=True)[1]
    samples = np.unique(np.concatenate([firsts, lasts])).astype(np.int64)
    for start in range(0, samples.size, batch):
        dataset.get_batch(samples[start : start + batch])
    return bool(dataset.cache.complete)


def loader_rates(
    datasets: Mapping[str, Any], batch: int, seconds: float, repeats: int
) -> dict[str, list[Rep]]:
    """Repetitions of a shuffled ``ticktensor.DataLoader`` over each dataset, taking turns,
    once each dataset is :func:`warm`."""
    for dataset in datasets.values():
        warm(dataset)
    measures = {name: timed(_shuffled(ds, batch), seconds) for name, ds in datasets.items()}
    reps: dict[str, list[Rep]] = {name: [] for name in datasets}
    for rep in range(max(1, repeats)):
        for name, measure in measures.items():
            reps[name].append(measure(rep))
    return reps


def main(argv: list[str] | None = None) -> int:
    """The child side of :func:`open_seconds`: print the figures of one open as JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--window", type=int, required=True)
    parser.add_argument("--cross-gaps", action="store_true")
    args = parser.parse_args(argv)
    import ticktensor.loaders  # noqa: F401  (imports are not part of opening a store)

    print(json.dumps(_open_once(args.url, args.window, args.cross_gaps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
