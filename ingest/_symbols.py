"""Symbols as numbers: each row's symbol as its rank among the sorted symbol names."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["symbol_codes"]


def symbol_codes(column: pa.ChunkedArray) -> tuple[npt.NDArray[np.uint32], list[str]]:
    """Each row's symbol as its rank among ``names``, and ``names``: the sorted symbols
    of the column's dictionaries (some may have no rows).

    A dictionary column (as staged) is ranked through its dictionaries, a few thousand
    names, instead of comparing text per row; plain text is dictionary-encoded first.
    Names sort as Python sorts text, which is Arrow's (UTF-8 byte) order too.
    """
    chunks = [c if pa.types.is_dictionary(c.type) else c.dictionary_encode() for c in column.chunks]
    names = sorted({n for c in chunks for n in c.dictionary.to_pylist()})
    rank = {n: i for i, n in enumerate(names)}
    parts = [
        np.array([rank[n] for n in c.dictionary.to_pylist()], dtype=np.uint32)[
            np.asarray(c.indices.to_numpy(zero_copy_only=False), dtype=np.intp)
        ]
        for c in chunks
    ]
    codes = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint32)
    return codes, names
