"""Chunk codecs: one class per codec, one shared object each, found by tag or metadata.

The writer and every reader use the same objects: a layout's codec
(:attr:`Layout.chunk_codec <ticktensor.store.Layout.chunk_codec>`) writes the Zarr codec
list and encodes the chunks; a reader finds the codec again from the list
(:func:`codec_of_chain`), checks a frame before decoding it and decodes it into place.
"""

from .blosc import BloscCodec, Lz4Codec
from .chunk_codec import Buffer, ChunkCodec
from .none import NoCodec
from .registry import CODECS, codec_for, codec_of_chain
from .zstd import ZstdCodec

__all__ = [
    "CODECS",
    "BloscCodec",
    "Buffer",
    "ChunkCodec",
    "Lz4Codec",
    "NoCodec",
    "ZstdCodec",
    "codec_for",
    "codec_of_chain",
]
