"""Zarr v3 groups and arrays written directly, byte for byte as zarr-python writes them.

A segment is a handful of small files; through zarr-python each array costs a trip
through its event loop (15-30 ms per segment, whatever its size), which dominated the
conversion of a wide universe (hundreds of (symbol, day) segments of a few thousand
rows). The metadata documents and chunk files here are the ones zarr-python 3 writes
for the same arrays (tested byte for byte), so stores stay readable by any Zarr v3
reader and a rerun reproduces the same file hashes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from numcodecs import Blosc, Zstd

from ._layout import Layout

__all__ = ["array_files", "group_file"]

Files = Iterator[tuple[str, bytes]]
Buffer = bytes | memoryview
"""Stored bytes: a ``bytes`` object, or a flat byte view of an array (no copy)."""


def _document(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, indent=2).encode()


def group_file(attributes: dict[str, Any]) -> bytes:
    """The ``zarr.json`` of a group with ``attributes``."""
    return _document({"attributes": attributes, "zarr_format": 3, "node_type": "group"})


_SHUFFLE: Final = {
    "noshuffle": Blosc.NOSHUFFLE,
    "shuffle": Blosc.SHUFFLE,
    "bitshuffle": Blosc.BITSHUFFLE,
}


def _codecs(layout: Layout, typesize: int) -> tuple[list[dict[str, Any]], Any]:
    """The array's codec list and the numcodecs compressor that encodes its chunks.

    The compressor's settings are the layout's zarr-python codec (:meth:`Layout.compressors`,
    the one place they are decided), as it writes them in the metadata.
    """
    codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    compressors = layout.compressors(typesize) or []
    if not compressors:
        return codecs, None
    (compressor,) = compressors
    entry = json.loads(json.dumps(compressor.to_dict()))  # plain str, int and bool values
    codecs.append(entry)
    config = dict(entry["configuration"])
    if entry["name"] == "zstd":
        return codecs, Zstd(**config)
    config["shuffle"] = _SHUFFLE[config["shuffle"]]
    return codecs, Blosc(**config)


def array_files(
    data: npt.NDArray[Any],
    chunk_rows: int,
    layout: Layout,
    *,
    dimension_names: Sequence[str],
    attributes: dict[str, Any] | None = None,
) -> Files:
    """``(key, bytes)`` of an array chunked along its first axis only: its ``zarr.json``,
    then one file per chunk (the last one padded to full size with the fill value, as
    zarr-python stores it). A chunk holding only the fill value is not written, as
    zarr-python does not write it either (0 for integers, NaN for floats)."""
    data = np.ascontiguousarray(data)
    floating = data.dtype.kind == "f"
    fill: Any = np.nan if floating else 0
    codecs, compressor = _codecs(layout, data.dtype.itemsize)
    chunk_shape = [chunk_rows, *data.shape[1:]]
    yield (
        "zarr.json",
        _document(
            {
                "shape": list(data.shape),
                "data_type": data.dtype.name,
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk_shape}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "fill_value": "NaN" if floating else 0,
                "codecs": codecs,
                "attributes": attributes or {},
                "dimension_names": list(dimension_names),
                "zarr_format": 3,
                "node_type": "array",
                "storage_transformers": [],
            }
        ),
    )
    little = data.astype(data.dtype.newbyteorder("<"), copy=False)
    suffix = "/0" * (data.ndim - 1)
    for index, lo in enumerate(range(0, data.shape[0], chunk_rows)):
        chunk = little[lo : lo + chunk_rows]
        if chunk.shape[0] < chunk_rows:
            padded = np.full((chunk_rows, *data.shape[1:]), fill, dtype=little.dtype)
            padded[: chunk.shape[0]] = chunk
            chunk = padded
        if np.isnan(chunk).all() if floating else not chunk.any():
            continue
        raw = chunk.tobytes()
        yield f"c/{index}{suffix}", raw if compressor is None else bytes(compressor.encode(raw))


#: An index entry of a sharded array's inner chunk that was not written.
_ABSENT: Final = (1 << 64) - 1


def sharding_document(
    data: npt.NDArray[Any],
    chunk_rows: int,
    shard_rows: int,
    layout: Layout,
    *,
    dimension_names: Sequence[str],
    attributes: dict[str, Any] | None = None,
) -> bytes:
    """The ``zarr.json`` of ``data`` stored with the core ``sharding_indexed`` codec.

    Shards of ``shard_rows`` rows (each one object) hold inner chunks of ``chunk_rows``
    rows encoded with the layout's codec, and end with an index of ``(offset, nbytes)``
    little-endian ``uint64`` pairs, one per inner chunk (no checksum: every inner
    chunk's sha256 is recorded by the pack).
    """
    floating = data.dtype.kind == "f"
    codecs, _ = _codecs(layout, data.dtype.itemsize)
    tail = list(data.shape[1:])
    return _document(
        {
            "shape": list(data.shape),
            "data_type": data.dtype.name,
            "chunk_grid": {
                "name": "regular",
                "configuration": {"chunk_shape": [shard_rows, *tail]},
            },
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": "NaN" if floating else 0,
            "codecs": [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [chunk_rows, *tail],
                        "codecs": codecs,
                        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                        "index_location": "end",
                    },
                }
            ],
            "attributes": attributes or {},
            "dimension_names": list(dimension_names),
            "zarr_format": 3,
            "node_type": "array",
            "storage_transformers": [],
        }
    )


def encode_chunks(
    data: npt.NDArray[Any], chunk_rows: int, layout: Layout, pool: Any = None
) -> list[Buffer]:
    """Every ``chunk_rows``-row chunk of ``data`` encoded with the layout's codec, the last
    one padded to full size with the fill value; ``pool`` (an executor) encodes them in
    parallel (the codecs release the GIL). Uncompressed full chunks are views of
    ``data`` (no copy): keep ``data`` unchanged while they are in use."""
    data = np.ascontiguousarray(data)
    little = data.astype(data.dtype.newbyteorder("<"), copy=False)
    fill: Any = np.nan if data.dtype.kind == "f" else 0
    _, compressor = _codecs(layout, data.dtype.itemsize)

    def encode(lo: int) -> Buffer:
        chunk = little[lo : lo + chunk_rows]
        if chunk.shape[0] < chunk_rows:
            padded = np.full((chunk_rows, *data.shape[1:]), fill, dtype=little.dtype)
            padded[: chunk.shape[0]] = chunk
            chunk = padded
        if compressor is None:
            return chunk.data.cast("B")  # one flat byte view of the rows: len() is its size
        return bytes(compressor.encode(chunk.tobytes()))

    starts = range(0, data.shape[0], chunk_rows)
    if compressor is None or pool is None:
        return list(map(encode, starts))
    return list(pool.map(encode, starts))


def shard_objects(
    encoded: Sequence[Buffer], per_shard: int, ndim: int
) -> Iterator[tuple[str, list[Buffer]]]:
    """``(key, parts)`` of each shard holding ``encoded`` inner chunks, ``per_shard`` at a
    time: the chunks back to back, then the index (absent chunks past the array's end
    marked ``2**64 - 1``). The parts joined are the object's bytes."""
    suffix = "/0" * (ndim - 1)
    for shard, first in enumerate(range(0, len(encoded), per_shard)):
        parts = list(encoded[first : first + per_shard])
        index = np.full((per_shard, 2), _ABSENT, dtype="<u8")
        sizes = np.array([len(p) for p in parts], dtype=np.uint64)
        index[: len(parts), 1] = sizes
        index[: len(parts), 0] = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.uint64)
        yield f"c/{shard}{suffix}", [*parts, index.tobytes()]
