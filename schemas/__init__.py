"""What the data is: canonical event schemas, validation rules and feature specs.

Examples
--------
>>> from ticktensor.schemas import EventKind, schema_for, validate
>>> schema_for(EventKind.QUOTES).names[:4]
['ts_event', 'ts_recv', 'symbol', 'venue']
"""

from __future__ import annotations

from ._conform import cast_columns, conform, null_column
from ._events import (
    ACTIONS,
    MBP_DEPTH,
    REFERENCE_KINDS,
    SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    EventKind,
    schema_for,
)
from ._features import (
    BarRule,
    Clock,
    FeatureSpec,
    LabelKind,
    LabelSpec,
    parse_bar_rule,
    parse_duration_ns,
)
from ._rules import RULES
from ._validate import (
    VIOLATION_SCHEMA,
    ValidationResult,
    Violation,
    validate,
)

__all__ = [
    "ACTIONS",
    "MBP_DEPTH",
    "REFERENCE_KINDS",
    "RULES",
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_KEY",
    "VIOLATION_SCHEMA",
    "BarRule",
    "Clock",
    "EventKind",
    "FeatureSpec",
    "LabelKind",
    "LabelSpec",
    "ValidationResult",
    "Violation",
    "cast_columns",
    "conform",
    "null_column",
    "parse_bar_rule",
    "parse_duration_ns",
    "schema_for",
    "validate",
]
