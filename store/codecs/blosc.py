"""The Blosc codecs: Zarr v3's core ``blosc`` with LZ4, without (``lz4``) or with
(``blosc``) byte shuffle."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar, Final, Literal

import numcodecs
from zarr.codecs import BloscCodec as ZarrBlosc

from .chunk_codec import Buffer, ChunkCodec

__all__ = ["BloscCodec", "Lz4Codec"]

_DEFAULT_LEVEL: Final = 5
_SHUFFLES: Final = {
    "noshuffle": numcodecs.Blosc.NOSHUFFLE,
    "shuffle": numcodecs.Blosc.SHUFFLE,
    "bitshuffle": numcodecs.Blosc.BITSHUFFLE,
}
_DECODER: Final = numcodecs.Blosc()


class _Blosc(ChunkCodec):
    """Blosc frames of LZ4 blocks; the two codecs differ only in their shuffle."""

    shuffle: ClassVar[Literal["noshuffle", "shuffle"]]

    def metadata(self, typesize: int, level: int | None) -> list[dict[str, Any]]:
        clevel = _DEFAULT_LEVEL if level is None else min(level, 9)
        return [
            {
                "name": "blosc",
                "configuration": {
                    "typesize": typesize,
                    "cname": "lz4",
                    "clevel": clevel,
                    "shuffle": self.shuffle,
                    "blocksize": 0,
                },
            }
        ]

    def zarr_compressors(self, typesize: int, level: int | None) -> list[Any] | None:
        clevel = _DEFAULT_LEVEL if level is None else min(level, 9)
        return [ZarrBlosc(cname="lz4", clevel=clevel, shuffle=self.shuffle, typesize=typesize)]

    def matches(self, entries: list[Any]) -> bool:
        if len(entries) != 1 or not isinstance(entries[0], dict):
            return False
        config = entries[0].get("configuration")
        shuffle = config.get("shuffle") if isinstance(config, dict) else None
        return entries[0].get("name") == "blosc" and (shuffle == "noshuffle") == (
            self.shuffle == "noshuffle"
        )

    def encoder(self, typesize: int, level: int | None) -> Callable[[Buffer], Buffer]:
        (entry,) = self.metadata(typesize, level)
        config = {**entry["configuration"], "shuffle": _SHUFFLES[self.shuffle]}
        compressor = numcodecs.Blosc(**config)
        return lambda raw: bytes(compressor.encode(raw))

    def frame_problem(self, stored: Buffer, limit: int, *, exact: bool = False) -> str | None:
        if len(stored) < 16:
            return f"Blosc chunk of {len(stored)} bytes is shorter than its 16-byte header"
        nbytes, _, cbytes = struct.unpack_from("<III", stored, 4)
        if nbytes > limit or (exact and nbytes != limit):
            return f"Blosc chunk decodes to {nbytes:,} bytes, a chunk holds {limit:,}"
        if cbytes != len(stored):
            return f"Blosc header says {cbytes:,} compressed bytes, the chunk has {len(stored):,}"
        return None

    def decode_into(self, stored: Buffer, out: Any) -> None:
        _DECODER.decode(stored, out=out)  # numcodecs releases the GIL while decoding


class Lz4Codec(_Blosc):
    """Blosc with LZ4 and no shuffle: cheap decode."""

    tag: ClassVar[str] = "lz4"
    shuffle: ClassVar[Literal["noshuffle", "shuffle"]] = "noshuffle"


class BloscCodec(_Blosc):
    """Blosc with LZ4 and byte shuffle: helps on smooth series (book levels). Reads any
    shuffled Blosc chunk (the frame says how it was shuffled)."""

    tag: ClassVar[str] = "blosc"
    shuffle: ClassVar[Literal["noshuffle", "shuffle"]] = "shuffle"
