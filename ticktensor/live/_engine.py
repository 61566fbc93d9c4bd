"""The live feature engine: a feature spec's rows computed tick by tick, per symbol."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor import _native
from ticktensor.errors import ConfigError
from ticktensor.schemas import EventKind, FeatureSpec
from ticktensor.store import FeatureStats, StoreVersion

from ._events import (
    BAR,
    BOOK,
    QUOTE,
    TRADE,
    Bar,
    BookUpdate,
    EventBatch,
    Quote,
    Trade,
    batch_of_tables,
)
from ._plan import plan_of
from ._replay import spec_of
from ._verdicts import Verdict

__all__ = ["LiveEngine", "LiveRows"]

_STATE_FORMAT = "ticktensor.live.state/1"
DAY_NS = 86_400 * 1_000_000_000
"""Ingest's sessions: UTC days of ``ts_event``."""


class LiveRows(NamedTuple):
    """The rows a batch of events gave, in event order."""

    symbols: tuple[str, ...]
    """The engine's symbols, by number."""
    symbol: npt.NDArray[np.uint32]
    """Each row's symbol number (``symbols[symbol[i]]`` is its name)."""
    ts: npt.NDArray[np.int64]
    """Each row's time (its event's ``ts``)."""
    values: npt.NDArray[np.float32]
    """``[m, F]`` as the store holds them."""
    values64: npt.NDArray[np.float64]
    """``[m, F]`` before the cast to float32."""
    event: npt.NDArray[np.int64]
    """The index of each row's event in the batch."""
    verdicts: npt.NDArray[np.uint8]
    """Every event's :class:`Verdict`."""


class LiveEngine:
    """Features of ``spec`` computed event by event, equal bit for bit to what ingest stores.

    Parameters
    ----------
    spec
        The feature spec the store was built with (clocks ``quotes`` and ``trades``).
    symbols
        Symbols known from the start; others are added when their first event comes.
    history
        Rows kept per symbol for :meth:`window` (0: none).
    stats
        The store's feature statistics, for normalized windows.
    session
        How sessions are cut, as the store's partition: ``"day"`` (UTC days of
        ``ts_event``, ingest's default), ``"month"``, ``"year"``, ``"all"`` (one
        session), or a length in ns (0: one session). A symbol's state restarts with
        its first event of a new session.

    Examples
    --------
    >>> from ticktensor.schemas import FeatureSpec
    >>> engine = LiveEngine(FeatureSpec(("mid", "spread_bps", "volume_1s")), history=4)
    >>> engine.push(Trade("X", 1_000, price=10.0, size=2.0, side=1)) is None
    True
    >>> engine.push(Quote("X", 2_000, 9.99, 10.01, 5.0, 7.0)).tolist()
    [10.0, 20.0, 2.0]
    """

    def __init__(
        self,
        spec: FeatureSpec,
        symbols: Iterable[str] = (),
        *,
        history: int = 0,
        stats: FeatureStats | None = None,
        session: str | int = "day",
    ) -> None:
        if history < 0:
            raise ConfigError(f"history must be >= 0 rows, got {history}")
        self.spec = spec
        self.history = int(history)
        self.stats = stats
        kinds = {"day": (DAY_NS, 0), "month": (0, 1), "year": (0, 2), "all": (0, 0)}
        if isinstance(session, str) and session not in kinds:
            raise ConfigError(f"session {session!r} is not one of {list(kinds)} or a length in ns")
        if not isinstance(session, str) and session < 0:
            raise ConfigError(f"session length must be >= 0 ns, got {session}")
        self.session = session
        session_ns, session_kind = kinds[session] if isinstance(session, str) else (session, 0)
        self._scale = None if stats is None else stats.scale(spec.features)
        plan = plan_of(spec)
        self._native = _native.LiveEngine(
            plan.clock,
            plan.ops,
            plan.windows,
            plan.sizes,
            self.history,
            session_ns,
            session_kind,
            plan.bar_ns,
            plan.bar_kind,
            plan.bar_threshold,
            0,
        )
        self._symbols: dict[str, int] = {}
        for name in symbols:
            self.symbol_id(name)
        self._row = np.empty(len(spec.features), dtype=np.float64)

    @classmethod
    def for_version(cls, version: StoreVersion, *, history: int = 0) -> LiveEngine:
        """An engine for the spec, statistics and partition (sessions) ``version`` was
        built with."""
        partition = str(version.manifest.attributes.get("partition", "day"))
        return cls(
            spec_of(version),
            version.symbols,
            history=history,
            stats=version.stats,
            session=partition,
        )

    @property
    def symbols(self) -> tuple[str, ...]:
        """The known symbols, by number."""
        return tuple(self._symbols)

    def symbol_id(self, name: str) -> int:
        """The engine's number of ``name``, added if new."""
        number = self._symbols.get(name)
        if number is None:
            number = self._symbols[name] = int(self._native.add_symbol())
        return number

    def push(self, event: Quote | Trade | Bar | BookUpdate) -> npt.NDArray[np.float32] | None:
        """Take one event; its feature row (float32) if it gave one, else None.

        A refused event changes nothing; :meth:`counts` counts it by rule.
        """
        values = np.array(event.values(), dtype=np.float64)
        levels = None
        if isinstance(event, Bar):
            kind, ts = BAR, event.close_ts
        elif isinstance(event, BookUpdate):
            kind, ts, levels = BOOK, event.ts, event.levels()
        else:
            kind, ts = (QUOTE if isinstance(event, Quote) else TRADE), event.ts
        symbol = self.symbol_id(event.symbol)
        verdict = self._native.push(kind, symbol, ts, values, event.key, self._row, levels)
        return self._row.astype(np.float32) if verdict == Verdict.ROW else None

    def push_batch(self, batch: EventBatch) -> LiveRows:
        """Take a batch of events in order (one native call, the GIL released)."""
        ids = np.fromiter(
            (self.symbol_id(s) for s in batch.symbols), dtype=np.uint32, count=len(batch.symbols)
        )
        n = len(batch)
        rows = np.empty((n, len(self.spec.features)), dtype=np.float64)
        event = np.empty(n, dtype=np.int64)
        row_ts = np.empty(n, dtype=np.int64)
        verdicts = np.empty(n, dtype=np.uint8)
        symbol = ids[batch.symbol] if ids.size else batch.symbol
        m = self._native.push_batch(
            np.ascontiguousarray(batch.kind, dtype=np.uint8),
            np.ascontiguousarray(symbol, dtype=np.uint32),
            np.ascontiguousarray(batch.ts, dtype=np.int64),
            np.ascontiguousarray(batch.values, dtype=np.float64),
            np.ascontiguousarray(batch.key, dtype=np.uint64),
            rows,
            event,
            row_ts,
            verdicts,
            batch.levels,
        )
        event = event[:m]
        with np.errstate(over="ignore"):
            values = rows[:m].astype(np.float32)
        return LiveRows(self.symbols, symbol[event], row_ts[:m], values, rows[:m], event, verdicts)

    def flush(self) -> LiveRows:
        """The bars clock: close every open bar, as the end of a session's data does in
        ingest (a bar's row otherwise comes with the first event at or after its close).
        Rows by symbol number; ``event`` is -1. Other clocks: no rows."""
        n = len(self._symbols)
        rows = np.empty((n, len(self.spec.features)), dtype=np.float64)
        symbol = np.empty(n, dtype=np.uint32)
        ts = np.empty(n, dtype=np.int64)
        m = self._native.flush(rows, symbol, ts)
        with np.errstate(over="ignore"):
            values = rows[:m].astype(np.float32)
        empty = np.empty(0, dtype=np.uint8)
        events = np.full(m, -1, np.int64)
        return LiveRows(self.symbols, symbol[:m], ts[:m], values, rows[:m], events, empty)

    def push_timed(self, batch: EventBatch) -> npt.NDArray[np.int64]:
        """Take a batch as :meth:`push_batch` does, but event by event through the C++
        API, returning each push's time in ns (the rows are not kept): latency figures."""
        ids = np.fromiter(
            (self.symbol_id(s) for s in batch.symbols), dtype=np.uint32, count=len(batch.symbols)
        )
        ns = np.empty(len(batch), dtype=np.int64)
        self._native.push_timed(
            np.ascontiguousarray(batch.kind, dtype=np.uint8),
            np.ascontiguousarray(ids[batch.symbol] if ids.size else batch.symbol),
            np.ascontiguousarray(batch.ts, dtype=np.int64),
            np.ascontiguousarray(batch.values, dtype=np.float64),
            np.ascontiguousarray(batch.key, dtype=np.uint64),
            ns,
            batch.levels,
        )
        return ns

    def replay(self, events: Mapping[EventKind, pa.Table], *, flush: bool = True) -> LiveRows:
        """Replay canonical event tables (a stored session's, or a reader's) in the order
        of :func:`~ticktensor.live.batch_of_tables`; with ``flush``, the data ends there
        (the bars clock closes its open bars, see :meth:`flush`)."""
        rows = self.push_batch(batch_of_tables(events, self.spec.clock))
        if not flush or self.spec.clock != "bars":
            return rows
        last = self.flush()
        return LiveRows(
            self.symbols,
            np.concatenate([rows.symbol, last.symbol]),
            np.concatenate([rows.ts, last.ts]),
            np.concatenate([rows.values, last.values]),
            np.concatenate([rows.values64, last.values64]),
            np.concatenate([rows.event, last.event]),
            rows.verdicts,
        )

    def counts(self) -> dict[str, int]:
        """How many events got each verdict so far, by verdict name (lower case)."""
        counts = self._native.counts()
        return {v.name.lower(): int(counts[v]) for v in Verdict}

    def rows(self, symbol: str) -> int:
        """Rows emitted for ``symbol`` so far."""
        return int(self._native.rows(self.symbol_id(symbol)))

    def window(self, symbol: str, window: int, *, normalize: bool = False) -> np.ndarray:
        """The last ``window`` rows of ``symbol``, ``[W, F]`` float32, oldest first: the
        window ``WindowDataset`` cuts ending at the latest row (``normalize``: minus the
        statistics' mean, divided by their std, as ``WindowDataset(normalize=True)``)."""
        out = np.empty((window, len(self.spec.features)), dtype=np.float32)
        self._native.window(self.symbol_id(symbol), out)
        if normalize:
            if self._scale is None:
                raise ConfigError("normalize=True needs the store's statistics (stats=...)")
            out -= self._scale[0]
            out /= self._scale[1]
        return out

    def state(self) -> dict[str, np.ndarray]:
        """Everything the engine holds, as plain numpy arrays (no pickle): save it with
        ``np.savez`` and restore with :meth:`from_state` (``np.load(allow_pickle=False)``)."""
        ints, floats = [], []
        for number in self._symbols.values():
            i, f = self._native.save(number)
            ints.append(i)
            floats.append(f)
        meta = {
            "format": _STATE_FORMAT,
            "spec": self.spec.to_dict(),
            "history": self.history,
            "session": self.session,
            "symbols": list(self._symbols),
            "counts": [int(c) for c in self._native.counts()],
        }
        state: dict[str, np.ndarray] = {
            "meta": np.array(json.dumps(meta)),
            "int_offsets": np.cumsum([0, *(i.size for i in ints)], dtype=np.int64),
            "ints": np.concatenate([np.empty(0, np.int64), *ints]),
            "float_offsets": np.cumsum([0, *(f.size for f in floats)], dtype=np.int64),
            "floats": np.concatenate([np.empty(0, np.float64), *floats]),
        }
        if self.stats is not None:
            stats = self.stats
            state |= {
                "stats_names": np.array(stats.names, dtype=str),
                "stats_mean": np.array(stats.mean, dtype=np.float64),
                "stats_std": np.array(stats.std, dtype=np.float64),
                "stats_count_period": np.array([stats.count, *stats.period], dtype=np.int64),
            }
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> LiveEngine:
        """An engine that continues exactly where the one that saved ``state`` stood."""
        meta = json.loads(str(state["meta"][()]))
        if meta.get("format") != _STATE_FORMAT:
            raise ConfigError(f"not a live engine state: format {meta.get('format')!r}")
        stats = None
        if "stats_names" in state:
            count, start, end = (int(x) for x in state["stats_count_period"])
            stats = FeatureStats(
                tuple(str(n) for n in state["stats_names"]),
                tuple(float(x) for x in state["stats_mean"]),
                tuple(float(x) for x in state["stats_std"]),
                count,
                (start, end),
            )
        engine = cls(
            FeatureSpec.from_dict(meta["spec"]),
            meta["symbols"],
            history=int(meta["history"]),
            stats=stats,
            session=meta["session"],
        )
        ints, floats = state["ints"], state["floats"]
        io, fo = state["int_offsets"], state["float_offsets"]
        for k, number in enumerate(engine._symbols.values()):
            engine._native.load(
                number,
                np.ascontiguousarray(ints[io[k] : io[k + 1]], dtype=np.int64),
                np.ascontiguousarray(floats[fo[k] : fo[k + 1]], dtype=np.float64),
            )
        engine._native.set_counts(meta["counts"])
        return engine
