"""Structured fuzzing of Zarr array metadata behind a manifest that vouches for it.

One field of ``values/zarr.json`` (anywhere in its tree) gets another JSON value, and
the manifest's hash is updated to match (the attacker rewrote both). Reading must end in
``StoreCorruptError``, or succeed with exactly the data that was written.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import StoreCorruptError
from ticktensor.reliability.targets import _TinyStore

from .test_manifest_fields import JSON, _paths


@pytest.fixture(scope="module", params=["none", "zstd"])
def tiny(request: pytest.FixtureRequest) -> _TinyStore:
    return _TinyStore.build(request.param)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(data=st.data())
def test_any_array_metadata_field(tiny: _TinyStore, data: st.DataObject) -> None:
    seg = tiny.pinned.segments[0]
    rel = f"{seg.path}/values/zarr.json"
    expected = tiny.pinned.read_segment(seg).values
    doc: dict[str, Any] = json.loads(tiny.file(rel))
    path = data.draw(st.sampled_from(_paths(doc)))
    parent: Any = doc
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(JSON)
    forged = json.dumps(doc).encode()
    restore = tiny.swap(rel, forged)
    try:
        pinned = tiny.trusting(rel, forged)
        try:
            got = pinned.read_segment(pinned.segments[0]).values
        except StoreCorruptError:
            return
        np.testing.assert_array_equal(got, expected)
    finally:
        restore()
