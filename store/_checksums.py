"""Chunk checksums: checking a chunk's stored bytes against what was recorded for them.

Every read checks a chunk's stored bytes once, when it is loaded: against its CRC-32C
(about 12 GB/s per core) where the store records one (the attribute ``chunk_crc32c`` of
the array's ``zarr.json``, in packs and segments alike), else against its sha256 (arrays
written before CRC-32C were recorded); readers that verify check the sha256 always.
The sha256 stays the identity of the bytes (``verify``, content addressing); the CRC-32C
is the cheap guard that no wrong byte is served by default.
"""

from __future__ import annotations

import hashlib
import warnings

from ticktensor.errors import StoreCorruptError
from ticktensor.kernels import crc32c

from ._chunk_map import StoredChunk

__all__ = ["check_chunk"]

Buffer = bytes | memoryview


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
