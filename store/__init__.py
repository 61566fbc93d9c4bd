"""The store format: versioned, content-hashed Zarr v3 feature segments and Parquet events.

The store is the contract between :mod:`ticktensor.ingest` (which writes) and
:mod:`ticktensor.loaders` (which reads). See ``docs/store-format.md``.
"""

from ._layout import Codec, Layout
from ._location import Location
from ._manifest import (
    FORMAT_VERSION,
    FeatureStats,
    FileEntry,
    Manifest,
    SegmentRecord,
    SourceFile,
    TableRecord,
)
from ._repair import RepairReport
from ._segments import SegmentArrays
from ._store import Store
from ._verify import VerifyReport
from ._version import SegmentData, StoreVersion

__all__ = [
    "FORMAT_VERSION",
    "Codec",
    "FeatureStats",
    "FileEntry",
    "Layout",
    "Location",
    "Manifest",
    "RepairReport",
    "SegmentArrays",
    "SegmentData",
    "SegmentRecord",
    "SourceFile",
    "Store",
    "StoreVersion",
    "TableRecord",
    "VerifyReport",
    "open_store",
]


def open_store(url: str, version: int | None = None) -> StoreVersion:
    """Open ``url`` read-only, pinned to ``version`` (default: the latest)."""
    return Store.open(url).version(version)
