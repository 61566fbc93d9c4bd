"""Symbols as numbers: each row's symbol as its rank among the sorted symbol names."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["ranked_symbols", "symbol_codes"]


def symbol_codes(column: pa.ChunkedArray) -> tuple[npt.NDArray[np.uint32], list[str]]:
    """Each row's symbol as its rank among ``names``, and ``names``: the sorted symbols
    of the column's dictionaries (some may have no rows).

    A dictionary column (as staged) is ranked through its dictionaries, a few thousand
    names, instead of comparing text per row; plain text is dictionary-encoded first.
    Names sort as Python sorts text, which is Arrow's (UTF-8 byte) order too.
    """
    [codes], names = ranked_symbols([column])
    return codes, names


def ranked_symbols(
    columns: list[pa.ChunkedArray],
) -> tuple[list[npt.NDArray[np.uint32]], list[str]]:
    """:func:`symbol_codes` of several columns against one list of names: the sorted
    symbols of all their dictionaries."""
    chunks = [
        [c if pa.types.is_dictionary(c.type) else c.dictionary_encode() for c in column.chunks]
        for column in columns
    ]
    dictionaries = [[c.dictionary.to_pylist() for c in of_column] for of_column in chunks]
    names = sorted({n for of_column in dictionaries for d in of_column for n in d})
    rank = {n: i for i, n in enumerate(names)}
    codes = [
        np.concatenate(
            [np.empty(0, dtype=np.uint32)]
            + [
                np.array([rank[n] for n in d], dtype=np.uint32)[
                    np.asarray(c.indices.to_numpy(zero_copy_only=False), dtype=np.intp)
                ]
                for c, d in zip(of_column, of_dictionaries, strict=True)
            ]
        )
        for of_column, of_dictionaries in zip(chunks, dictionaries, strict=True)
    ]
    return codes, names
