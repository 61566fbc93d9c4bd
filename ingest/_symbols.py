"""Symbols as numbers: each row's symbol as its rank among the sorted symbol names."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["keyed_symbols", "ranks_of", "symbol_codes"]

#: One chunk of a symbol column: its dictionary indices, and each index's rank.
Keyed = tuple[npt.NDArray[np.integer], npt.NDArray[np.uint32]]


def symbol_codes(column: pa.ChunkedArray) -> tuple[npt.NDArray[np.uint32], list[str]]:
    """Each row's symbol as its rank among ``names``, and ``names``: the sorted symbols
    of the column's dictionaries (some may have no rows).

    A dictionary column (as staged) is ranked through its dictionaries, a few thousand
    names, instead of comparing text per row; plain text is dictionary-encoded first.
    Names sort as Python sorts text, which is Arrow's (UTF-8 byte) order too.
    """
    [keyed], names = keyed_symbols([column])
    return ranks_of(keyed), names


def ranks_of(keyed: list[Keyed]) -> npt.NDArray[np.uint32]:
    """Each row's rank, of a column's chunks as :func:`keyed_symbols` gives them."""
    parts = [
        indices.astype(np.uint32)  # the indices are the ranks
        if np.array_equal(ranks, np.arange(len(ranks)))
        else ranks[np.asarray(indices, dtype=np.intp)]
        for indices, ranks in keyed
    ]
    return np.concatenate([np.empty(0, dtype=np.uint32), *parts])


def keyed_symbols(columns: list[pa.ChunkedArray]) -> tuple[list[list[Keyed]], list[str]]:
    """Per column, per chunk: the dictionary indices of its rows and the rank of each
    dictionary entry among ``names`` (the sorted symbols of every dictionary); and
    ``names``. A row's rank is ``ranks[indices[row]]``, not computed here (see
    :func:`ticktensor.kernels.order_by_key`, which orders rows by it in one pass).

    Symbols are never null (the canonical schema says so, and validation holds to it).
    """
    chunks = [
        [c if pa.types.is_dictionary(c.type) else c.dictionary_encode() for c in column.chunks]
        for column in columns
    ]
    dictionaries = [[c.dictionary.to_pylist() for c in of_column] for of_column in chunks]
    every = [d for of_column in dictionaries for d in of_column]
    if every and _sorted_unique(every[0]) and all(d == every[0] for d in every[1:]):
        # One dictionary of sorted names (a merged block's: the session's symbols): its
        # indices are the ranks already.
        names, ranks = every[0], {}
    else:
        names = sorted({n for d in every for n in d})
        ranks = {n: i for i, n in enumerate(names)}
    identity = np.arange(len(names), dtype=np.uint32)
    keyed = [
        [
            (
                c.indices.to_numpy(zero_copy_only=False),
                np.array([ranks[n] for n in d], dtype=np.uint32) if ranks else identity,
            )
            for c, d in zip(of_column, of_dictionaries, strict=True)
        ]
        for of_column, of_dictionaries in zip(chunks, dictionaries, strict=True)
    ]
    return keyed, names


def _sorted_unique(names: list[str]) -> bool:
    return all(a < b for a, b in itertools.pairwise(names))
