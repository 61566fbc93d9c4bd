"""Chunk checksums: the CRC-32C a pack records per inner chunk, and checking a chunk's bytes.

Every read checks a chunk's stored bytes once, when it is loaded: against its CRC-32C
(``chunk_crc32c``, about 12 GB/s per core) where the pack records one, else against its
sha256 (packs and segments written before ``chunk_crc32c``); readers that verify check the
sha256 always. The sha256 stays the identity of the bytes (``verify``, content addressing);
the CRC-32C is the cheap guard that no wrong byte is served by default.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import numpy as np

from ticktensor.errors import StoreCorruptError
from ticktensor.kernels import crc32c

from ._chunk_map import StoredChunk
from ._layout import Codec, Layout
from ._manifest import FileEntry
from ._zarr_write import array_files

__all__ = ["CRC_ARRAY", "check_chunk", "crc_files", "recorded_chunk_crcs"]

#: The array of a pack holding ``uint32 [arrays, chunks]``: each inner chunk's CRC-32C.
CRC_ARRAY: Final = "chunk_crc32c"

Buffer = bytes | memoryview


def crc_files(crcs: Mapping[str, Sequence[int]]) -> list[tuple[str, bytes]]:
    """The ``chunk_crc32c`` array's files (keys below it) for the CRC-32C of every inner
    chunk of each array (the arrays in ``crcs``' order, each with as many chunks)."""
    table = np.asarray(list(crcs.values()), dtype=np.uint32)
    files = list(
        array_files(
            table,
            table.shape[0],
            Layout(codec=Codec.NONE),
            dimension_names=["array", "chunk"],
            attributes={"arrays": list(crcs)},
        )
    )
    return [(f"{CRC_ARRAY}/{key}", blob) for key, blob in files]


def recorded_chunk_crcs(
    read: Callable[[str], bytes],
    files: Mapping[str, FileEntry],
    array: str,
    chunks: int,
    where: str,
) -> list[int] | None:
    """The recorded CRC-32C of each of the ``chunks`` inner chunks of ``array``, or
    ``None`` for a pack written without ``chunk_crc32c`` (its record lists no such array).

    ``read(key)`` returns a small object of the pack, checked against its record.
    """
    if f"{CRC_ARRAY}/zarr.json" not in files:
        return None
    try:
        meta: dict[str, Any] = json.loads(read(f"{CRC_ARRAY}/zarr.json"))
        names = [str(n) for n in meta["attributes"]["arrays"]]
        shape = [int(n) for n in meta["shape"]]
        dtype = meta["data_type"]
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreCorruptError(
            f"{where}: {CRC_ARRAY} metadata is malformed ({exc!r:.200})"
        ) from None
    if array not in names or shape != [len(names), chunks] or dtype != "uint32":
        raise StoreCorruptError(
            f"{where}: {CRC_ARRAY} of shape {shape} ({dtype}) holds no checksum of each of "
            f"the {chunks} chunks of {array!r}",
            [(f"{CRC_ARRAY}/zarr.json", "malformed")],
        )
    key = f"{CRC_ARRAY}/c/0/0"
    # Zarr writes no chunk of fill values alone (0 here), so all-zero checksums have no file.
    raw = read(key) if key in files else bytes(4 * len(names) * chunks)
    if len(raw) != 4 * len(names) * chunks:
        raise StoreCorruptError(
            f"{where}: {key} holds {len(raw)} bytes, expected {4 * len(names) * chunks}",
            [(key, "wrong size")],
        )
    table = np.frombuffer(raw, dtype="<u4").reshape(len(names), chunks)
    crcs: list[int] = table[names.index(array)].tolist()
    return crcs


def check_chunk(
    chunk: StoredChunk,
    stored: Buffer,
    where: str,
    *,
    sha256: bool = False,
    crc: int | None = None,
) -> None:
    """Check ``stored``, the chunk's stored bytes, against what was recorded for them.

    The recorded CRC-32C (``crc`` is the bytes' CRC-32C when the caller computed it as it
    read them), unless ``sha256`` asks for the full hash or the store records none; then
    the recorded sha256. A chunk of a store that records neither (manifests
    written before file hashes) cannot be checked: said once, as a warning. A mismatch is
    a :class:`~ticktensor.errors.StoreCorruptError` naming ``where`` (the file and the
    chunk).
    """
    if chunk.crc32c is not None and not sha256:
        found = crc32c(stored) if crc is None else crc
        if found != chunk.crc32c:
            raise StoreCorruptError(
                f"{where}: crc32c {found:08x} != {chunk.crc32c:08x} recorded when the chunk "
                "was written: its bytes changed since",
                [(chunk.rel, f"chunk {chunk.index} checksum mismatch")],
            )
        return
    if chunk.sha256 is None:
        warnings.warn(
            f"{where}: the store records no hash of this chunk (written before chunk hashes "
            "were recorded), so its bytes are not checked; `ticktensor migrate` rewrites it "
            "with them",
            stacklevel=2,
        )
        return
    digest = hashlib.sha256(stored).hexdigest()
    if digest != chunk.sha256:
        raise StoreCorruptError(
            f"{where}: sha256 {digest[:16]} != {chunk.sha256[:16]} recorded for the chunk",
            [(chunk.rel, f"chunk {chunk.index} hash mismatch")],
        )
