"""The store format: versioned, content-hashed Zarr v3 feature packs/segments and Parquet events.

The store is the contract between :mod:`ticktensor.ingest` (which writes) and
:mod:`ticktensor.loaders` (which reads). See ``docs/store-format.md``. New data is
written as packs (:meth:`Store.write_pack`, :meth:`Store.pack_writer`); the legacy
format-1 segments are written only by :mod:`ticktensor.store.testing`, for compatibility
tests and benchmarks.
"""

from collections.abc import Mapping
from typing import Any

from ._blocks import FeatureBlock, SymbolRows
from ._checksums import check_chunk
from ._chunk_map import ChunkMap, StoredChunk
from ._guard import decode_chunk
from ._layout import Codec, Layout
from ._location import Location, safe_component
from ._log import LogEntry
from ._manifest import (
    ALL_SYMBOLS,
    FORMAT_VERSION,
    FeatureStats,
    FileEntry,
    Manifest,
    PackRecord,
    SegmentRecord,
    SourceFile,
    TableRecord,
)
from ._migrate import MigrateReport, SessionMigration, migrate
from ._object_errors import object_store_error
from ._pack_writer import PackWriter
from ._packs import PackData, PackIndex
from ._query import duckdb_relation, table_dataset, table_files
from ._reader import ChunkReader, ReadTimes, Verify
from ._reference import definitions_asof
from ._repair import RepairReport
from ._segments import SegmentArrays
from ._store import Store
from ._tables import TableEncoder
from ._verify import VerifyReport
from ._version import SegmentData, StoreVersion

__all__ = [
    "ALL_SYMBOLS",
    "FORMAT_VERSION",
    "ChunkMap",
    "ChunkReader",
    "Codec",
    "FeatureBlock",
    "FeatureStats",
    "FileEntry",
    "Layout",
    "Location",
    "LogEntry",
    "Manifest",
    "MigrateReport",
    "PackData",
    "PackIndex",
    "PackRecord",
    "PackWriter",
    "ReadTimes",
    "RepairReport",
    "SegmentArrays",
    "SegmentData",
    "SegmentRecord",
    "SessionMigration",
    "SourceFile",
    "Store",
    "StoreVersion",
    "StoredChunk",
    "SymbolRows",
    "TableEncoder",
    "TableRecord",
    "Verify",
    "VerifyReport",
    "check_chunk",
    "decode_chunk",
    "definitions_asof",
    "duckdb_relation",
    "migrate",
    "object_store_error",
    "open_store",
    "safe_component",
    "table_dataset",
    "table_files",
]


def open_store(
    url: str,
    version: int | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> StoreVersion:
    """Open ``url`` read-only, pinned to ``version`` (default: the latest).

    Parameters
    ----------
    url
        A local path or fsspec URL (``s3://bucket/store`` ...).
    version
        The version to pin; ``None`` for the latest.
    storage_options
        Passed to fsspec, e.g. an S3-compatible server's endpoint:
        ``{"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}`` (see
        ``docs/store-format.md``, "Object stores").
    """
    return Store.open(url, storage_options=storage_options).version(version)
