"""How a segment's arrays are laid out on disk: codec and chunk length along time."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ticktensor.errors import ConfigError

from .codecs import ChunkCodec, codec_for

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

    @property
    def chunk_codec(self) -> ChunkCodec:
        """The codec object that writes and reads the layout's chunks."""
        return codec_for(self.codec.value)

    def compressors(self, typesize: int) -> list[Any] | None:
        """The zarr-python compressor list for arrays of ``typesize``-byte items."""
        return self.chunk_codec.zarr_compressors(typesize, self.level)

    def to_dict(self) -> dict[str, Any]:
        return {"codec": self.codec.value, "chunk_rows": self.chunk_rows, "level": self.level}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Layout:
        """The layout a manifest records; a codec this version does not know is a
        :class:`~ticktensor.errors.FormatVersionError` naming it."""
        codec = Codec(codec_for(d["codec"]).tag)
        return cls(codec=codec, chunk_rows=int(d["chunk_rows"]), level=d.get("level"))
