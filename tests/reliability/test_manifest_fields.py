"""Structured fuzzing of manifests and log entries: any field replaced by any JSON value.

Byte-level mutation mostly breaks the JSON syntax; here the document stays valid JSON
and one field (anywhere in the tree) gets a value of another type or shape. The parser
must reject it with ``StoreCorruptError`` (``FormatVersionError`` for the version
field) or accept it, and then the manifest must
serialize and parse back to itself.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import FormatVersionError, StoreCorruptError
from ticktensor.store import FeatureStats, Manifest, Store
from ticktensor.store._log import LogEntry
from ticktensor.store.testing import write_segment

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def manifest_doc() -> dict[str, Any]:
    store = Store.create("memory://tt-manifest-fields", exist_ok=True)
    ts = np.arange(20, dtype=np.int64)
    seg = write_segment(
        store,
        symbol="A",
        session="d",
        ts=ts,
        values=np.ones((20, 2), np.float32),
        feature_names=["x", "y"],
        labels=np.zeros((20, 1), np.float32),
        label_names=["z"],
    )
    import pyarrow as pa

    table = store.write_table(
        kind="trades", symbol="A", session="d", table=pa.table({"ts_event": ts})
    )
    stats = FeatureStats(("x", "y"), (0.0, 1.0), (1.0, 2.0), 20, (0, 100))
    v = store.commit(segments=[seg], tables=[table], stats=stats, attributes={"k": [1]})
    doc: dict[str, Any] = json.loads(v.manifest.to_json())
    return doc


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _mutated(original: dict[str, Any], data: st.DataObject) -> bytes:
    """``original`` as JSON with one field, anywhere in it, deleted or set to any value."""
    doc = json.loads(json.dumps(original))
    path = data.draw(st.sampled_from(_paths(doc)))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(JSON)
    return json.dumps(doc).encode()


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.data())
def test_any_field_with_any_value(manifest_doc: dict[str, Any], data: st.DataObject) -> None:
    raw = _mutated(manifest_doc, data)
    try:
        parsed = Manifest.from_json(raw, "fuzz.json")
    except (StoreCorruptError, FormatVersionError):
        return
    assert Manifest.from_json(parsed.to_json(), "again.json") == parsed


@pytest.fixture(scope="module")
def entry_doc() -> dict[str, Any]:
    """A log entry with every field filled: added and removed records and a checkpoint."""
    store = Store.create("memory://tt-log-entry-fields", exist_ok=True, checkpoint_every=2)
    ts = np.arange(20, dtype=np.int64)
    import pyarrow as pa

    for fill in (1.0, 2.0):
        seg = write_segment(
            store,
            symbol="A",
            session="d",
            ts=ts,
            values=np.full((20, 2), fill, np.float32),
            feature_names=["x", "y"],
        )
        table = store.write_table(
            kind="trades", symbol="A", session="d", table=pa.table({"ts_event": ts + int(fill)})
        )
        stats = FeatureStats(("x", "y"), (0.0, fill), (1.0, 2.0), 20, (0, 100))
        v = store.commit(segments=[seg], tables=[table], stats=stats, replace=True)
    doc: dict[str, Any] = json.loads(store.location.read_bytes(f"versions/{v.version:08d}.json"))
    assert doc["removed_segments"]
    assert doc["removed_tables"]
    assert doc["checkpoint"] is not None
    return doc


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.data())
def test_any_log_entry_field_with_any_value(entry_doc: dict[str, Any], data: st.DataObject) -> None:
    raw = _mutated(entry_doc, data)
    try:
        parsed = LogEntry.from_json(raw, "fuzz.json")
    except (StoreCorruptError, FormatVersionError):
        return
    assert LogEntry.from_json(parsed.to_json(), "again.json") == parsed
