"""The ``none`` codec: a chunk is stored as its raw little-endian bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from .chunk_codec import Buffer, ChunkCodec

__all__ = ["NoCodec"]


class NoCodec(ChunkCodec):
    """Raw chunks: memory-mappable, read straight into place, nothing to decode."""

    tag: ClassVar[str] = "none"
    stores_decoded: ClassVar[bool] = True

    def metadata(self, typesize: int, level: int | None) -> list[dict[str, Any]]:
        return []

    def zarr_compressors(self, typesize: int, level: int | None) -> list[Any] | None:
        return None

    def matches(self, entries: list[Any]) -> bool:
        return not entries

    def encoder(self, typesize: int, level: int | None) -> Callable[[Buffer], Buffer]:
        return _stored_as_is

    def frame_problem(self, stored: Buffer, limit: int, *, exact: bool = False) -> str | None:
        if len(stored) > limit or (exact and len(stored) != limit):
            return f"raw chunk of {len(stored):,} bytes, a chunk holds {limit:,}"
        return None

    def decode_into(self, stored: Buffer, out: Any) -> None:
        np.frombuffer(out, dtype=np.uint8)[:] = np.frombuffer(stored, dtype=np.uint8)

    def max_stored(self, decoded: int) -> int:
        return decoded


def _stored_as_is(raw: Buffer) -> Buffer:
    return raw
