"""Line-by-line parsing of CSV blocks pyarrow cannot split (the reader's last resort).

pyarrow parses a block in one call and fails as a whole when a line is both malformed
and not UTF-8 (its invalid-row handler cannot even be given the text), or when a lone
``\\r`` or an unbalanced quote makes it see other line boundaries than ours. Such a
block is parsed again here, one line at a time: each line becomes a row of text fields
or a reject (``encoding``, ``unparseable``, ``field_count``) with its row number and raw
text, so nothing is lost and the row numbers stay those of the file's lines.
"""

from __future__ import annotations

import csv as pycsv

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ._rejects import Rejects

__all__ = ["parse_lines"]


def parse_lines(
    block: memoryview, names: list[str], columns: list[str], delimiter: str, rejects: Rejects
) -> tuple[pa.Table, npt.NDArray[np.int64]]:
    """Text columns ``columns`` of every well-formed line of ``block``, and their line indices.

    Blank lines give no row. Sets ``rejects.n_lines`` and records a reject per bad line.
    """
    starts, ends = rejects.spans()
    rejects.n_lines = len(starts)
    wanted = [names.index(c) for c in columns]
    values: list[list[str]] = [[] for _ in columns]
    positions: list[int] = []
    for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        raw = bytes(block[start:end]).rstrip(b"\r")
        if not raw:
            continue
        row = rejects.first_row + i
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            rejects.reject(row, "encoding", f"line is not UTF-8 text ({exc.reason})", i)
            continue
        try:
            fields = next(pycsv.reader([text], delimiter=delimiter, strict=True), [])
        except pycsv.Error as exc:
            rejects.reject(row, "unparseable", f"line is not valid CSV ({exc})", i)
            continue
        if len(fields) != len(names):
            why = f"expected {len(names)} fields, got {len(fields)}"
            rejects.reject(row, "field_count", why, i)
            continue
        for out, index in zip(values, wanted, strict=True):
            out.append(fields[index])
        positions.append(i)
    table = pa.table({c: pa.array(v, pa.string()) for c, v in zip(columns, values, strict=True)})
    return table, np.asarray(positions, dtype=np.int64)
