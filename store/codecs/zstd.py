"""The ``zstd`` codec: Zarr v3's core ``zstd``, each frame with its content checksum."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Final

import numcodecs
import zstandard
from zarr.codecs import ZstdCodec as ZarrZstd

from .chunk_codec import Buffer, ChunkCodec

__all__ = ["ZstdCodec"]

_MAGIC: Final = b"\x28\xb5\x2f\xfd"
_DEFAULT_LEVEL: Final = 1
_DECODER: Final = numcodecs.Zstd()


class ZstdCodec(ChunkCodec):
    """Best ratio, slower decode. Frames record their decoded size (zarr's writer always
    does) and a checksum of their content, so a changed byte fails to decode."""

    tag: ClassVar[str] = "zstd"

    def metadata(self, typesize: int, level: int | None) -> list[dict[str, Any]]:
        chosen = _DEFAULT_LEVEL if level is None else level
        return [{"name": "zstd", "configuration": {"level": chosen, "checksum": True}}]

    def zarr_compressors(self, typesize: int, level: int | None) -> list[Any] | None:
        return [ZarrZstd(level=_DEFAULT_LEVEL if level is None else level, checksum=True)]

    def matches(self, entries: list[Any]) -> bool:
        (entry,) = entries if len(entries) == 1 else (None,)
        return isinstance(entry, dict) and entry.get("name") == "zstd"

    def encoder(self, typesize: int, level: int | None) -> Callable[[Buffer], Buffer]:
        (entry,) = self.metadata(typesize, level)
        compressor = numcodecs.Zstd(**entry["configuration"])
        return lambda raw: bytes(compressor.encode(raw))

    def frame_problem(self, stored: Buffer, limit: int, *, exact: bool = False) -> str | None:
        if bytes(stored[:4]) != _MAGIC:
            return "not a zstd frame"
        try:
            size = zstandard.frame_content_size(stored)
        except zstandard.ZstdError as exc:
            return f"bad zstd frame header ({exc})"
        if size < 0:
            return "zstd frame does not record its decoded size"
        if size > limit or (exact and size != limit):
            return f"zstd frame decodes to {size:,} bytes, a chunk holds {limit:,}"
        return None

    def decode_into(self, stored: Buffer, out: Any) -> None:
        _DECODER.decode(stored, out=out)  # numcodecs releases the GIL while decoding
