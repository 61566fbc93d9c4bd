"""The codec registry: each codec by its tag, and by the Zarr codec list a reader finds."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from ticktensor.errors import FormatVersionError

from .blosc import BloscCodec, Lz4Codec
from .chunk_codec import ChunkCodec
from .none import NoCodec
from .zstd import ZstdCodec

__all__ = ["CODECS", "codec_for", "codec_of_chain"]

#: Every codec, by tag, in the layout's order.
CODECS: Final[Mapping[str, ChunkCodec]] = MappingProxyType(
    {c.tag: c for c in (NoCodec(), Lz4Codec(), ZstdCodec(), BloscCodec())}
)


def codec_for(tag: str) -> ChunkCodec:
    """The codec named ``tag`` (a layout's ``codec``, as manifests record it).

    An unknown tag is a :class:`~ticktensor.errors.FormatVersionError` naming it: the
    store was written by a ticktensor that knows codecs this one does not.
    """
    codec = CODECS.get(tag) if isinstance(tag, str) else None
    if codec is None:
        raise FormatVersionError(
            f"codec {tag!r:.60} is not one this ticktensor reads ({', '.join(CODECS)}); "
            "the store was written by a newer version"
        )
    return codec


def codec_of_chain(entries: Any) -> ChunkCodec | None:
    """The codec whose chunks an array's Zarr v3 codec list ``entries`` (``bytes``
    little-endian first, as ticktensor writes) describes; ``None`` when it is no codec
    here (another serializer or byte order, codecs only zarr-python knows)."""
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        return None
    first: dict[str, Any] = entries[0]
    config = first.get("configuration")
    endian = config.get("endian") if isinstance(config, dict) else None
    if first.get("name") != "bytes" or endian != "little":
        return None
    rest = entries[1:]
    return next((codec for codec in CODECS.values() if codec.matches(rest)), None)
