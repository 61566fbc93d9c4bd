"""Live features: the store's feature rows computed tick by tick, bit for bit.

:class:`LiveEngine` takes a :class:`~ticktensor.schemas.FeatureSpec` (the one a store was
built with) and turns quotes and trades, pushed one at a time or in batches, into the
rows ingest would store for them, with per-symbol state in the native core. See
``docs/live.md`` for the parity contract.
"""

from ._engine import DAY_NS, LiveEngine, LiveRows
from ._events import Bar, BookUpdate, EventBatch, Quote, Trade, batch_of_tables
from ._plan import CLOCKS
from ._replay import session_events, spec_of
from ._sources import read_events
from ._verdicts import REFUSALS, Verdict

__all__ = [
    "CLOCKS",
    "DAY_NS",
    "REFUSALS",
    "Bar",
    "BookUpdate",
    "EventBatch",
    "LiveEngine",
    "LiveRows",
    "Quote",
    "Trade",
    "Verdict",
    "batch_of_tables",
    "read_events",
    "session_events",
    "spec_of",
]
