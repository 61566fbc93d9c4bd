"""The validator: every row of an event table checked against the rules, vectorized."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import ConfigError, ValidationError

from ._conform import cast_columns
from ._events import EventKind, event_kind
from ._rules import RULES, Check, run_checks

__all__ = ["VIOLATION_SCHEMA", "ValidationResult", "Violation", "validate"]

VIOLATION_SCHEMA = pa.schema(
    [
        pa.field("row", pa.int64(), nullable=False),
        pa.field("column", pa.string(), nullable=False),
        pa.field("value", pa.string(), nullable=False),
        pa.field("rule", pa.string(), nullable=False),
        pa.field("message", pa.string(), nullable=False),
    ]
)
"""Schema of :attr:`ValidationResult.violations` (also the quarantine's reason columns)."""


@dataclass(frozen=True)
class Violation:
    """One row that broke one rule in one column.

    ``row`` is the 0-based row index in the validated table; ``column`` is ``"*"``
    for whole-row rules (``duplicate``, whose ``value`` is the earlier row index).
    """

    row: int
    column: str
    value: str
    rule: str
    message: str


@dataclass(frozen=True)
class ValidationResult:
    """Every violation found in a table, sorted by row (stable in rule order).

    Attributes
    ----------
    violations
        A table with :data:`VIOLATION_SCHEMA`; one row per (row, column, rule).
    n_rows
        Number of rows in the validated table.
    """

    violations: pa.Table
    n_rows: int

    @property
    def ok(self) -> bool:
        """True when no row broke any rule."""
        return int(self.violations.num_rows) == 0

    def __len__(self) -> int:
        return int(self.violations.num_rows)

    def __iter__(self) -> Iterator[Violation]:
        for record in self.violations.to_pylist():
            yield Violation(**record)

    def bad_rows(self) -> npt.NDArray[np.int64]:
        """Sorted unique indices of the rows with at least one violation."""
        rows = self.violations.column("row").to_numpy()
        return np.unique(rows).astype(np.int64)

    def valid_mask(self) -> npt.NDArray[np.bool_]:
        """Boolean mask over the table's rows, True where a row broke no rule."""
        mask = np.ones(self.n_rows, dtype=bool)
        mask[self.bad_rows()] = False
        return mask

    def counts(self) -> dict[str, int]:
        """Number of violations per rule name (rules with none are left out)."""
        if self.ok:
            return {}
        grouped = self.violations.group_by("rule").aggregate([("row", "count")])
        return dict(zip(grouped["rule"].to_pylist(), grouped["row_count"].to_pylist(), strict=True))

    def raise_first(self, source: str) -> None:
        """Raise :class:`ValidationError` for the first violation; do nothing if ok.

        Parameters
        ----------
        source
            What was validated, e.g. a file name; it opens the message, as in
            ``"trades.csv row 1204: price -3.5 is not positive (rule positive_price: ...)"``.
        """
        if self.ok:
            return
        first = next(iter(self))
        more = len(self) - 1
        tail = f" [and {more} more violation(s) in {len(self.bad_rows())} row(s)]" if more else ""
        raise ValidationError(f"{source} {first.message}{tail}")


def _to_table(check: Check) -> pa.Table:
    n = check.rows.size
    rows = pa.array(check.rows, pa.int64())
    parts: list[pa.Array | str] = ["row ", pc.cast(rows, pa.string()), ": ", check.before]
    if check.show_value:
        parts.append(check.values)
    parts.append(check.after)
    if check.other is not None:
        parts.append(check.other)
    parts.append(f" (rule {check.rule}: {RULES[check.rule]})")
    message = pc.binary_join_element_wise(*parts, "")
    return pa.Table.from_arrays(
        [
            rows,
            pa.array([check.column] * n, pa.string()),
            check.values,
            pa.array([check.rule] * n, pa.string()),
            message,
        ],
        schema=VIOLATION_SCHEMA,
    )


def validate(
    table: pa.Table,
    kind: EventKind | str,
    *,
    ts_range: tuple[int, int] | None = None,
    check_duplicates: bool = True,
) -> ValidationResult:
    """Check every row of an event table against the rules in :data:`RULES`.

    The table needs the canonical column names of ``kind`` with castable types
    (see :func:`conform`); required columns may hold nulls, which are reported.

    Parameters
    ----------
    table
        The events to check.
    kind
        Which canonical schema and rules apply.
    ts_range
        ``(start, end)`` in ns since the epoch; rows with ``ts_event`` outside
        ``[start, end)`` break rule ``ts_range``. None skips the rule.
    check_duplicates
        Whether to flag rows identical in every column to an earlier row.

    Returns
    -------
    ValidationResult

    Raises
    ------
    SchemaError
        If columns are missing or do not cast to the schema.
    ConfigError
        If ``ts_range`` has ``start >= end``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"ts_event": [1, 2], "symbol": ["X", "X"], "price": [1.0, -3.5],
    ...               "size": [1.0, 1.0], "side": [1, -1]})
    >>> [v.message for v in validate(t, "trades")]
    ['row 1: price -3.5 is not positive (rule positive_price: a price, where present, must be > 0)']
    """
    kind = event_kind(kind)
    if ts_range is not None and not ts_range[0] < ts_range[1]:
        raise ConfigError(f"ts_range start {ts_range[0]} must be before end {ts_range[1]}")
    cast = cast_columns(table, kind)
    pieces = [_to_table(check) for check in run_checks(cast, kind, ts_range, check_duplicates)]
    if not pieces:
        return ValidationResult(VIOLATION_SCHEMA.empty_table(), table.num_rows)
    violations = pa.concat_tables(pieces)
    order = pc.sort_indices(violations, sort_keys=[("row", "ascending")])
    return ValidationResult(violations.take(order), table.num_rows)
