"""Point-in-time joins of a version's instrument definitions to samples (symbol, time).

A definition is known from the moment it was received (``ts_recv``), so a sample at
time ``t`` sees the latest definition of its symbol with ``ts_recv <= t`` and never
one received later, even if the exchange dated it (``ts_event``) earlier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ticktensor.errors import ConfigError

from ._query import table_dataset
from ._version import StoreVersion

__all__ = ["definitions_asof"]

_DAY_NS = 86_400 * 10**9
_KEYS = ("symbol", "ts_recv", "ts_event")
_HEADER = ("ts_event", "ts_recv", "symbol", "venue")
_SAMPLE, _TS = "__sample", "__ts"


def _definitions(version: StoreVersion, symbols: list[str], columns: list[str]) -> pl.DataFrame:
    """The definitions of ``symbols``, as ``(symbol, __ts, columns...)`` sorted by time.

    Ties in ``ts_recv`` keep the later ``ts_event``, then the later row: the last one wins.
    """
    dataset = table_dataset(version, "definitions")
    missing = sorted(set(columns) - set(dataset.schema.names))
    if missing:
        raise ConfigError(
            f"definitions of store version {version.version} have no column(s) {missing}; "
            f"they have {dataset.schema.names}"
        )
    wanted = list(dict.fromkeys([*_KEYS, "update_action", *columns]))
    table = dataset.to_table(columns=wanted, filter=ds.field("symbol").isin(symbols))
    table = table.filter(pc.is_valid(table.column("ts_recv")))  # never placeable in time
    frame = cast(pl.DataFrame, pl.from_arrow(table)).with_row_index("__row")
    frame = frame.sort(["ts_recv", "ts_event", "__row"], nulls_last=False)
    return frame.with_columns(pl.col("ts_recv").dt.epoch("ns").alias(_TS)).drop("__row")


def definitions_asof(
    version: StoreVersion,
    symbols: Sequence[str] | npt.ArrayLike,
    ts: npt.ArrayLike,
    columns: Sequence[str] = ("expiration", "strike_price", "instrument_class"),
) -> pa.Table:
    """The definition in force for each sample: the latest with ``ts_recv <= ts``.

    Point-in-time: a definition received after a sample's time is never used, so a
    contract listed (or re-defined) later cannot leak into earlier samples. A sample
    whose symbol has no definition by then, or whose latest one deletes the
    instrument (``update_action == "delete"``), gets nulls.

    Parameters
    ----------
    version
        The store version whose ``definitions`` tables are read (see
        :func:`~ticktensor.store.table_dataset`).
    symbols
        The symbol of each sample, e.g. ``np.asarray(ds.symbols)[ds.sample_symbol]``
        for a :class:`~ticktensor.loaders.WindowDataset` ``ds``.
    ts
        The time of each sample in ns since the UNIX epoch (``ds.sample_ts``: the last
        row of its window), ``int64`` or ``datetime64``.
    columns
        Definition columns to return (see ``docs/schemas.md``).

    Returns
    -------
    pyarrow.Table
        One row per sample, in sample order: ``definition_ts_recv`` (when the
        definition used was received), ``columns``, and ``days_to_expiry``
        (``(expiration - ts)`` in days, fractional; null without an expiration).

    Raises
    ------
    ConfigError
        If the version has no definitions, a column is unknown, or ``symbols`` and
        ``ts`` differ in length.

    Examples
    --------
    A call listed (received) at t = 10 s, expiring 2 days after the epoch:

    >>> import pyarrow as pa
    >>> from ticktensor.schemas import conform
    >>> from ticktensor.store import Store, definitions_asof
    >>> store = Store.create("memory://doc-definitions-asof", exist_ok=True)
    >>> call = conform(pa.table({"ts_event": [10**10], "ts_recv": [10**10], "symbol": ["C1"],
    ...                          "expiration": [2 * 86_400 * 10**9], "strike_price": [95.0]}),
    ...                "definitions")
    >>> rec = store.write_table(kind="definitions", symbol="C1", session="1970-01-01",
    ...                         table=call)
    >>> out = definitions_asof(store.commit(tables=[rec]), ["C1", "C1"], [0, 86_400 * 10**9],
    ...                        columns=["strike_price"])
    >>> out.column("strike_price").to_pylist(), out.column("days_to_expiry").to_pylist()
    ([None, 95.0], [None, 1.0])
    """
    names = np.asarray(symbols, dtype=object).reshape(-1)
    times = np.asarray(ts)
    if times.dtype.kind == "M":
        times = times.astype("datetime64[ns]").view(np.int64)
    times = times.astype(np.int64).reshape(-1)
    if len(names) != len(times):
        raise ConfigError(f"{len(names)} symbols for {len(times)} sample times: one each")
    wanted = [c for c in dict.fromkeys(columns) if c not in _HEADER]
    fetched = list(dict.fromkeys([*wanted, "expiration"]))
    reference = _definitions(version, sorted({str(s) for s in names}), fetched)
    right = reference.select(["symbol", _TS, "ts_recv", "update_action", *fetched])
    samples = pl.DataFrame(
        {
            _SAMPLE: np.arange(len(names), dtype=np.int64),
            "symbol": pl.Series(names.tolist(), dtype=pl.String),
            _TS: times,
        }
    )
    joined = (
        samples.sort(_TS)
        .join_asof(
            right.rename({"ts_recv": "definition_ts_recv"}),
            on=_TS,
            by="symbol",
            strategy="backward",
            check_sortedness=False,  # both sides are sorted by time just above
        )
        .sort(_SAMPLE)
    )
    kept = ["definition_ts_recv", *fetched]
    deleted = pl.col("update_action").fill_null("") == "delete"
    joined = joined.with_columns(
        pl.when(deleted).then(None).otherwise(pl.col(c)).alias(c) for c in kept
    )
    days = (pl.col("expiration").dt.epoch("ns") - pl.col(_TS)) / _DAY_NS
    out = joined.select([*kept[: len(wanted) + 1], days.alias("days_to_expiry")])
    return out.to_arrow()
