"""Query one version's event tables: their files, a ``pyarrow.dataset`` and a duckdb relation.

A store's ``events/`` folder holds every table ever written: tables that later versions
superseded (``--replace``), tables of ingests whose commit was refused, and quarantine
tables beside event tables. A glob such as ``STORE/events/**/*.parquet`` reads all of
them. The helpers here read exactly the tables one version lists, of one kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow.dataset as ds

from ticktensor.errors import ConfigError

from ._manifest import TableRecord
from ._version import StoreVersion

if TYPE_CHECKING:
    import duckdb

__all__ = ["duckdb_relation", "table_dataset", "table_files"]

#: Characters duckdb's ``read_parquet`` expands as a glob in a file name.
_GLOB_CHARACTERS = frozenset("*?[{")


def _records(version: StoreVersion, kind: str) -> tuple[TableRecord, ...]:
    records = version.tables_of(kind)
    if not records:
        kinds = sorted({t.kind for t in version.tables})
        raise ConfigError(
            f"store version {version.version} has no tables of kind {kind!r}; "
            f"it has {', '.join(map(repr, kinds)) if kinds else 'no tables'}"
        )
    return records


def _local_paths(version: StoreVersion, records: tuple[TableRecord, ...]) -> list[str]:
    """Paths of ``records`` on a local store, refusing a symlink that leads outside it."""
    location = version.location
    for record in records:
        location.refuse_links(record.path)
    return [location.path(t.path) for t in records]


def table_files(version: StoreVersion, kind: str) -> tuple[str, ...]:
    """Paths (local stores) or URLs of the Parquet files of ``version``'s ``kind`` tables.

    Exactly the tables the version lists, in key order (symbol, session): never a
    table another version superseded, nor one an unpublished commit left behind. Pass
    them to any Parquet reader, e.g. ``polars.scan_parquet(list(files))``.

    Raises :class:`~ticktensor.errors.ConfigError` naming the kinds the version has when
    it has no table of ``kind`` (``trades``, ``quotes``, ``mbp10``, ``mbo``, ``ohlcv``,
    ``quarantine`` ...).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from ticktensor.store import Store, table_files
    >>> store = Store.create("memory://doc-query-files", exist_ok=True)
    >>> rec = store.write_table(kind="trades", symbol="AAPL", session="2024-01-02",
    ...                         table=pa.table({"ts_event": [1, 2], "price": [1.0, 2.0]}))
    >>> version = store.commit(tables=[rec])
    >>> (file,) = table_files(version, "trades")
    >>> file.startswith("memory:///doc-query-files/events/trades/AAPL/2024-01-02-")
    True
    """
    return tuple(version.file_url(t.path) for t in _records(version, kind))


def table_dataset(version: StoreVersion, kind: str) -> ds.Dataset:
    """A ``pyarrow.dataset.Dataset`` over the ``kind`` tables of ``version``, and no others.

    The files are those of :func:`table_files`, read lazily with column projection
    and filter pushdown; the schema is the first table's (every table of a kind has its
    kind's canonical schema). Files are read as they are: ``ticktensor verify`` checks
    their hashes.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from ticktensor.store import Store, table_dataset
    >>> store = Store.create("memory://doc-query-dataset", exist_ok=True)
    >>> rec = store.write_table(kind="trades", symbol="AAPL", session="2024-01-02",
    ...                         table=pa.table({"ts_event": [1, 2], "price": [1.0, 2.0]}))
    >>> table_dataset(store.commit(tables=[rec]), "trades").count_rows()
    2
    """
    records = _records(version, kind)
    location = version.location
    if location.is_local:
        return ds.dataset(_local_paths(version, records), format="parquet")
    return ds.dataset(
        [location.path(t.path) for t in records], format="parquet", filesystem=location.fs
    )


def duckdb_relation(
    version: StoreVersion,
    kind: str,
    connection: duckdb.DuckDBPyConnection | None = None,
) -> duckdb.DuckDBPyRelation:
    """A duckdb relation over the ``kind`` tables of ``version`` (needs ``duckdb``).

    Local stores are read by duckdb's own Parquet reader over the files of
    :func:`table_files`; other stores through :func:`table_dataset` (fsspec, with the
    store's storage options). ``connection`` defaults to duckdb's default connection,
    the one ``duckdb.sql`` uses, so a query can name the relation's Python variable.

    Examples
    --------
    >>> import duckdb, pyarrow as pa
    >>> from ticktensor.store import Store, duckdb_relation
    >>> store = Store.create("memory://doc-query-duckdb", exist_ok=True)
    >>> rec = store.write_table(kind="trades", symbol="AAPL", session="2024-01-02",
    ...                         table=pa.table({"ts_event": [1, 2], "price": [1.0, 2.0]}))
    >>> trades = duckdb_relation(store.commit(tables=[rec]), "trades")
    >>> duckdb.sql("SELECT count(*), max(price) FROM trades").fetchall()
    [(2, 2.0)]
    """
    try:
        import duckdb
    except ImportError as exc:
        raise ImportError(
            "duckdb_relation needs duckdb, which is not installed: pip install duckdb "
            "(table_dataset gives a pyarrow dataset without it)"
        ) from exc
    con = duckdb.default_connection() if connection is None else connection
    if version.location.is_local:
        files = _local_paths(version, _records(version, kind))
        # duckdb expands globs in each name; a root such as "runs[1]/store" goes via arrow
        if not any(_GLOB_CHARACTERS.intersection(f) for f in files):
            return con.read_parquet(files)
    return con.from_arrow(table_dataset(version, kind))
