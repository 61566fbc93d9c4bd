"""A store of one session written as one pack, the shape the loader, client and
conformance tests share: symbol ``S<s>`` holds ``rows[s]`` rows one second apart."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ticktensor.store import FeatureStats, Layout, Store, StoreVersion

Floats = npt.NDArray[np.float32]


def one_pack_store(
    path: Path,
    rows: Sequence[int],
    values_of: Callable[[int, Floats], npt.ArrayLike],
    labels_of: Callable[[Floats], npt.ArrayLike],
    feature_names: Sequence[str],
    label_names: Sequence[str],
    *,
    chunk_rows: int = 16,
    stats: FeatureStats | None = None,
    message: str,
) -> StoreVersion:
    """The committed version; ``values_of(s, r)`` and ``labels_of(r)`` give symbol ``s``'s
    ``[n, F]`` features and ``[n, L]`` labels from its row numbers ``r`` (float32), called
    in symbol order; ``stats`` are committed with it."""
    store = Store.create(str(path), layout=Layout(chunk_rows=chunk_rows))
    numbers = [np.arange(n, dtype=np.float32) for n in rows]
    pack = store.write_pack(
        session="2024-01-02",
        symbols=[f"S{s}" for s in range(len(rows))],
        offsets=np.cumsum([0, *rows]),
        ts=np.concatenate([np.arange(n, dtype=np.int64) * 10**9 for n in rows]),
        values=np.concatenate([values_of(s, r) for s, r in enumerate(numbers)]).astype(np.float32),
        feature_names=tuple(feature_names),
        labels=np.concatenate([labels_of(r) for r in numbers]).astype(np.float32),
        label_names=tuple(label_names),
    )
    return store.commit(packs=[pack], stats=stats, message=message)
