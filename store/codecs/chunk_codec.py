"""The chunk codec: how one chunk's decoded bytes become its stored bytes, and back."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

__all__ = ["Buffer", "ChunkCodec"]

Buffer = bytes | memoryview
"""Stored bytes: a ``bytes`` object, or a flat byte view (of an array, a mapped file)."""


class ChunkCodec(ABC):
    """One codec of feature chunks, for the writer and every reader alike.

    A codec is named by its ``tag`` (the layout's :class:`~ticktensor.store.Codec`
    value, recorded in manifests) and written as a list of Zarr v3 codecs after
    ``bytes`` (:meth:`metadata`); readers find it again from that list
    (:func:`~ticktensor.store.codecs.codec_of_metadata`). Codecs hold no state: each is
    one shared object, safe to use from any thread.
    """

    tag: ClassVar[str]
    """The layout's name for it: ``none``, ``lz4``, ``zstd`` or ``blosc``."""
    stores_decoded: ClassVar[bool] = False
    """Whether a chunk's stored bytes are its decoded bytes (read straight into place)."""

    @abstractmethod
    def metadata(self, typesize: int, level: int | None) -> list[dict[str, Any]]:
        """The Zarr v3 codec entries that follow ``bytes`` for arrays of ``typesize``-byte
        items at compression ``level`` (``None``: the codec's default level)."""

    @abstractmethod
    def zarr_compressors(self, typesize: int, level: int | None) -> list[Any] | None:
        """The same codecs as zarr-python objects (``create_array(compressors=...)``)."""

    @abstractmethod
    def matches(self, entries: list[Any]) -> bool:
        """Whether the Zarr codec entries after ``bytes`` are this codec's (any settings)."""

    @abstractmethod
    def encoder(self, typesize: int, level: int | None) -> Callable[[Buffer], Buffer]:
        """The function encoding one chunk's little-endian bytes into its stored bytes."""

    def frame_problem(self, stored: Buffer, limit: int, *, exact: bool = False) -> str | None:
        """Why ``stored`` may not be decoded, or ``None`` if it may: the frame must not
        declare more than ``limit`` decoded bytes (no decompression bombs); with
        ``exact``, exactly ``limit`` (a chunk is stored full-size)."""
        return None

    @abstractmethod
    def decode_into(self, stored: Buffer, out: Any) -> None:
        """Decode ``stored`` into ``out``, a writable buffer of the chunk's decoded size
        (call :meth:`frame_problem` first). Failures raise ``ValueError`` or
        ``RuntimeError``; the GIL is released while decoding."""

    def max_stored(self, decoded: int) -> int:
        """The most bytes a stored chunk of ``decoded`` bytes may take (incompressible
        data takes a little over its raw size in any frame)."""
        return decoded + decoded // 64 + 4096

    def __repr__(self) -> str:
        return f"<codec {self.tag}>"

    def __reduce__(self) -> str | tuple[Any, ...]:
        # One shared object per codec, also in the processes a loader is pickled into.
        from .registry import codec_for

        return codec_for, (self.tag,)
