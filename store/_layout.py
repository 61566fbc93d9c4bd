"""How a segment's arrays are laid out on disk: codec and chunk length along time."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Literal

from zarr.codecs import BloscCodec, ZstdCodec

from ticktensor.errors import ConfigError

__all__ = ["Codec", "Layout"]


class Codec(enum.StrEnum):
    """Compression of feature chunks. Every choice is a core Zarr v3 codec.

    ``none``  raw little-endian chunks: memory-mappable, the default for local disks.
    ``lz4``   Blosc framing with LZ4 and no shuffle: cheap decode.
    ``zstd``  the Zarr v3 ``zstd`` codec: best ratio, slower decode.
    ``blosc`` Blosc with LZ4 and byte shuffle: helps on smooth series (book levels).
    """

    NONE = "none"
    LZ4 = "lz4"
    ZSTD = "zstd"
    BLOSC = "blosc"


@dataclass(frozen=True)
class Layout:
    """Codec and chunking of one segment.

    Parameters
    ----------
    codec
        See :class:`Codec`.
    chunk_rows
        Rows per chunk along time. With 32 features, 32,768 rows is 4 MiB.
    level
        Compression level (ignored for ``none``); ``None`` picks a fast level.
    """

    codec: Codec = Codec.NONE
    chunk_rows: int = 32_768
    level: int | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "codec", Codec(self.codec))
        except ValueError:
            choices = ", ".join(c.value for c in Codec)
            raise ConfigError(f"codec {self.codec!r} is not one of: {choices}") from None
        if not isinstance(self.chunk_rows, int) or self.chunk_rows < 1:
            raise ConfigError(f"chunk_rows must be a positive integer, got {self.chunk_rows!r}")
        if self.level is not None and not 0 <= self.level <= 22:
            raise ConfigError(f"level must be in [0, 22], got {self.level}")

    def compressors(self, typesize: int) -> list[Any] | None:
        """The zarr-python compressor list for arrays of ``typesize``-byte items."""
        if self.codec is Codec.NONE:
            return None
        if self.codec is Codec.ZSTD:
            # The frame checksum: a zstd chunk whose bytes changed fails to decode.
            return [ZstdCodec(level=1 if self.level is None else self.level, checksum=True)]
        shuffle: Literal["shuffle", "noshuffle"] = (
            "shuffle" if self.codec is Codec.BLOSC else "noshuffle"
        )
        level = 5 if self.level is None else min(self.level, 9)
        return [BloscCodec(cname="lz4", clevel=level, shuffle=shuffle, typesize=typesize)]

    def to_dict(self) -> dict[str, Any]:
        return {"codec": self.codec.value, "chunk_rows": self.chunk_rows, "level": self.level}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Layout:
        return cls(codec=Codec(d["codec"]), chunk_rows=int(d["chunk_rows"]), level=d.get("level"))
