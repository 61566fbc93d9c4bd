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
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ticktensor.kernels import crc32c

from ._layout import Layout

__all__ = ["array_files", "group_file"]

Files = Iterator[tuple[str, bytes]]
Buffer = bytes | memoryview
"""Stored bytes: a ``bytes`` object, or a flat byte view of an array (no copy)."""


def _document(fields: dict[str, Any]) -> bytes:
    text = json.dumps(fields)  # one line: json's C encoder (an indent takes its Python one)
    # Indented for people to read, unless long: a pack's group lists every symbol, and
    # indenting its 100-200 KB took 5 ms, on the session's critical path, against 0.5.
    return (text if len(text) > _INDENT_UP_TO else json.dumps(fields, indent=2)).encode()


#: Documents up to this many characters are indented.
_INDENT_UP_TO = 16_384


def group_file(attributes: dict[str, Any]) -> bytes:
    """The ``zarr.json`` of a group with ``attributes``."""
    return _document({"attributes": attributes, "zarr_format": 3, "node_type": "group"})


def _codecs(layout: Layout, typesize: int) -> list[dict[str, Any]]:
    """The array's Zarr codec list: ``bytes`` (little-endian), then the layout's codec."""
    return [
        {"name": "bytes", "configuration": {"endian": "little"}},
        *layout.chunk_codec.metadata(typesize, layout.level),
    ]


def array_files(
    data: npt.NDArray[Any],
    chunk_rows: int,
    layout: Layout,
    *,
    dimension_names: Sequence[str],
    attributes: dict[str, Any] | None = None,
    checksums: bool = False,
) -> Files:
    """``(key, bytes)`` of an array chunked along its first axis only: its ``zarr.json``,
    then one file per chunk (the last one padded to full size with the fill value, as
    zarr-python stores it). A chunk holding only the fill value is not written, as
    zarr-python does not write it either (0 for integers, NaN for floats).

    With ``checksums`` the attribute ``chunk_crc32c`` lists the CRC-32C of every chunk
    file (``None`` for a chunk not written), so that readers check each chunk cheaply;
    the chunks are then encoded before the metadata is made."""
    data = np.ascontiguousarray(data)
    floating = data.dtype.kind == "f"
    codecs = _codecs(layout, data.dtype.itemsize)
    encode = layout.chunk_codec.encoder(data.dtype.itemsize, layout.level)
    chunk_shape = [chunk_rows, *data.shape[1:]]
    chunks: Iterable[tuple[int, tuple[str, bytes]]] = _chunk_files(data, chunk_rows, encode)
    if checksums:
        chunks = list(chunks)
        crcs: list[int | None] = [None] * -(-data.shape[0] // chunk_rows)
        for index, (_, blob) in chunks:
            crcs[index] = crc32c(blob)
        attributes = {**(attributes or {}), "chunk_crc32c": crcs}
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
    for _, file in chunks:
        yield file


def _chunk_files(
    data: npt.NDArray[Any], chunk_rows: int, encode: Callable[[Buffer], Buffer]
) -> Iterator[tuple[int, tuple[str, bytes]]]:
    """Each chunk file of ``data`` (C-contiguous) with its chunk's number; a chunk holding
    only the fill value has none."""
    floating = data.dtype.kind == "f"
    little = data.astype(data.dtype.newbyteorder("<"), copy=False)
    suffix = "/0" * (data.ndim - 1)
    for index, lo in enumerate(range(0, data.shape[0], chunk_rows)):
        chunk = padded_chunk(little[lo : lo + chunk_rows], chunk_rows)
        if np.isnan(chunk).all() if floating else not chunk.any():
            continue
        yield index, (f"c/{index}{suffix}", bytes(encode(chunk.tobytes())))


def padded_chunk(rows: npt.NDArray[Any], chunk_rows: int) -> npt.NDArray[Any]:
    """``rows`` as a chunk of ``chunk_rows`` rows: padded with the fill value (NaN; 0 for
    integers) when short, as Zarr stores an array's partial last chunk."""
    if rows.shape[0] == chunk_rows:
        return rows
    fill: Any = np.nan if rows.dtype.kind == "f" else 0
    padded = np.full((chunk_rows, *rows.shape[1:]), fill, dtype=rows.dtype)
    padded[: rows.shape[0]] = rows
    return padded


#: An index entry of a sharded array's inner chunk that was not written.
_ABSENT: Final = (1 << 64) - 1


def sharding_document(
    shape: Sequence[int],
    dtype: np.dtype[Any],
    chunk_rows: int,
    shard_rows: int,
    layout: Layout,
    *,
    dimension_names: Sequence[str],
    attributes: dict[str, Any] | None = None,
) -> bytes:
    """The ``zarr.json`` of an array of ``shape`` and ``dtype`` stored with the core
    ``sharding_indexed`` codec.

    Shards of ``shard_rows`` rows (each one object) hold inner chunks of ``chunk_rows``
    rows encoded with the layout's codec, and end with an index of ``(offset, nbytes)``
    little-endian ``uint64`` pairs, one per inner chunk (no checksum: every inner
    chunk's sha256 is recorded by the pack).
    """
    floating = dtype.kind == "f"
    codecs = _codecs(layout, dtype.itemsize)
    tail = list(shape[1:])
    return _document(
        {
            "shape": list(shape),
            "data_type": dtype.name,
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


def chunk_codec(layout: Layout, itemsize: int) -> Callable[[npt.NDArray[Any]], Buffer]:
    """The layout's encoding of one inner chunk (a C-contiguous little-endian array of
    ``itemsize``-byte items) into its stored bytes; with no compressor, a flat byte view
    of the chunk (no copy: keep the rows unchanged while it is in use)."""
    encode = layout.chunk_codec.encoder(itemsize, layout.level)
    return lambda chunk: encode(chunk.data.cast("B"))


def shard_key(shard: int, ndim: int) -> str:
    """The key of shard ``shard`` of an array of ``ndim`` dimensions, sharded along its
    first axis only (Zarr v3's default chunk key encoding)."""
    return f"c/{shard}" + "/0" * (ndim - 1)


def shard_index(sizes: Sequence[int], per_shard: int) -> bytes:
    """The index that ends a shard of ``per_shard`` chunk slots holding chunks of
    ``sizes`` bytes back to back from byte 0: ``(offset, nbytes)`` little-endian
    ``uint64`` pairs, slots past the array's end marked ``2**64 - 1`` (absent)."""
    index = np.full((per_shard, 2), _ABSENT, dtype="<u8")
    nbytes = np.array(sizes, dtype=np.uint64)
    index[: len(sizes), 1] = nbytes
    index[: len(sizes), 0] = np.concatenate([[0], np.cumsum(nbytes)[:-1]]).astype(np.uint64)
    return index.tobytes()
