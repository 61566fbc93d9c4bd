"""Layout hints: the ``--delimiter`` and ``--no-header`` a text file's first line asks for.

A text file read with the wrong delimiter shows up as one wide column; one read as if it
had a header when it has none shows up as a header of numbers. Each text reader adds
:func:`layout_hint` of the file's first line to the error it raises, so the message names
the flags that read the file.
"""

from __future__ import annotations

import csv
import re

__all__ = ["layout_hint", "shell_quoted"]

_DELIMITERS = (",", "|", ";", "\t")
_NUMBER = re.compile(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$")
#: Fields that start like a date or time (2024-01-02, 20240102 10:00, 01/02/2024 ...).
_TIME = re.compile(r"^\s*\d{1,4}[-./: ]\d{1,2}[-./: ]\d{1,4}")


def shell_quoted(delimiter: str) -> str:
    """``delimiter`` as a user types it after ``--delimiter``."""
    return "$'\\t'" if delimiter == "\t" else f"'{delimiter}'"


def _fields(line: str, delimiter: str) -> list[str]:
    """``line`` split as CSV; a line the csv module refuses (a carriage return inside it, a
    field past its size limit) is split at each ``delimiter``: a hint never fails a read."""
    try:
        return next(csv.reader([line], delimiter=delimiter), [])
    except csv.Error:
        return line.split(delimiter)


def _looks_like_data(fields: list[str]) -> bool:
    """Whether every field is a number or a time (a data line, not column names)."""
    return bool(fields) and all(_NUMBER.match(f) or _TIME.match(f) for f in fields if f.strip())


def layout_hint(first_line: str, delimiter: str, header: bool) -> str:
    """The flags that would read a file whose first line is ``first_line``, as a clause
    to append to an error (empty when the flags given look right).

    Examples
    --------
    >>> layout_hint("1704067200000|42000|42010|41990", ",", True).endswith(
    ...     "pass --delimiter '|' --no-header)")
    True
    >>> layout_hint("time,price,size", ",", True)
    ''
    """
    line = first_line.strip("\r\n\ufeff")
    if not line.strip():
        return ""
    given = _fields(line, delimiter)
    best = delimiter
    if len(given) <= 1:
        counts = {d: len(_fields(line, d)) for d in _DELIMITERS if d != delimiter}
        other = max(counts, key=lambda d: counts[d]) if counts else delimiter
        if counts.get(other, 0) >= 2:
            best = other
    fields = _fields(line, best)
    data = header and _looks_like_data(fields)
    if best == delimiter and not data:
        return ""
    flags = ([f"--delimiter {shell_quoted(best)}"] if best != delimiter else []) + (
        ["--no-header"] if data else []
    )
    said = (
        [f"its first line splits into {len(fields)} fields on {shell_quoted(best)}"]
        if best != delimiter
        else []
    ) + (["is data, not a header" if best != delimiter else "its first line is data, not a header"])
    said = said if data else said[:1]
    return f" ({', and '.join(said)}: pass {' '.join(flags)})"
