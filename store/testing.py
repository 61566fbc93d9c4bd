"""Writers of the legacy format-1 layout, for compatibility tests and benchmarks.

Stores hold new data as packs: one session of every symbol in a few objects, written
with :meth:`~ticktensor.store.Store.write_pack` or
:meth:`~ticktensor.store.Store.pack_writer`. Older ticktensor versions wrote one
segment per (symbol, session) instead, and every reader still reads them (a store
may mix segments and packs; :func:`~ticktensor.store.migrate` packs them). This module
writes such segments on purpose, as :mod:`numpy.testing` helps test numpy: for tests
of format-1 reading, of ``migrate`` and of mixed stores, for the format fixtures, and
for benchmark stores whose figures stay comparable with earlier runs. Nothing else
should write segments.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ._layout import Layout
from ._manifest import SegmentRecord, SourceFile
from ._segments import segment_content_hash, segment_path
from ._segments import write_segment as _write_segment
from ._store import Store

__all__ = ["write_segment"]


def write_segment(
    store: Store,
    *,
    symbol: str,
    session: str,
    ts: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    feature_names: Sequence[str],
    labels: npt.NDArray[np.float32] | None = None,
    label_names: Sequence[str] = (),
    layout: Layout | None = None,
    sources: Sequence[SourceFile] = (),
) -> SegmentRecord:
    """Write one (symbol, session) segment of ``store`` in the legacy format-1 layout.

    The segment becomes visible when its record is committed
    (``store.commit(segments=[...])``). Writing content identical to a segment of the
    latest version writes nothing and returns the published record, so reruns are
    idempotent and published files are never rewritten; the check is one lookup by
    (symbol, session) in the latest state, which the store handle keeps.

    Examples
    --------
    >>> import numpy as np
    >>> from ticktensor.store import Store
    >>> from ticktensor.store.testing import write_segment
    >>> store = Store.create("memory://legacy-segment-example", exist_ok=True)
    >>> seg = write_segment(
    ...     store, symbol="AAPL", session="2024-01-02",
    ...     ts=np.arange(4, dtype=np.int64), values=np.ones((4, 2), np.float32),
    ...     feature_names=["ret", "spread"])
    >>> version = store.commit(segments=[seg], message="a format-1 day")
    >>> [(s.symbol, s.rows) for s in version.segments], version.packs
    ([('AAPL', 4)], ())
    """
    layout = layout or store.layout
    content_hash = segment_content_hash(
        symbol, session, ts, values, labels, feature_names, label_names, layout
    )
    try:
        published: SegmentRecord | None = store.version().segment(symbol, session)
    except KeyError:
        published = None
    if (
        published is not None
        and published.path == segment_path(symbol, session, content_hash)
        and published.content_hash == content_hash
    ):
        return published
    return _write_segment(
        store.location,
        symbol=symbol,
        session=session,
        ts=ts,
        values=values,
        labels=labels,
        feature_names=feature_names,
        label_names=label_names,
        layout=layout,
        sources=sources,
    )
