"""Every registered chunk codec against one conformance suite, and the registry itself."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr

from ticktensor.errors import FormatVersionError, StoreCorruptError
from ticktensor.store import Codec, Layout, Store, StoredChunk, decode_chunk
from ticktensor.store.codecs import CODECS, ChunkCodec, codec_for, codec_of_chain

from .conftest import write_pack_of

EVERY = list(CODECS.values())
BYTES = {"name": "bytes", "configuration": {"endian": "little"}}

#: The codec entries ticktensor writes after ``bytes`` (float32 arrays, default level):
#: a store written today must read the same to every Zarr v3 reader tomorrow.
EXPECTED_FLOAT32: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "zstd": [{"name": "zstd", "configuration": {"level": 1, "checksum": True}}],
    "lz4": [
        {
            "name": "blosc",
            "configuration": {
                "typesize": 4,
                "cname": "lz4",
                "clevel": 5,
                "shuffle": "noshuffle",
                "blocksize": 0,
            },
        }
    ],
    "blosc": [
        {
            "name": "blosc",
            "configuration": {
                "typesize": 4,
                "cname": "lz4",
                "clevel": 5,
                "shuffle": "shuffle",
                "blocksize": 0,
            },
        }
    ],
}

#: numcodecs encoders with those settings spelled out: the stored bytes must be theirs.
REFERENCE_ENCODERS: dict[str, Any] = {
    "zstd": numcodecs.Zstd(level=1, checksum=True),
    "lz4": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.NOSHUFFLE, typesize=4),
    "blosc": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE, typesize=4),
}


def _chunk(rows: int = 256, columns: int = 3, seed: int = 0) -> np.ndarray:
    """A float32 chunk that compresses (a smooth series) with a few NaN."""
    rng = np.random.default_rng(seed)
    data = np.cumsum(rng.normal(size=(rows, columns)), axis=0).astype("<f4")
    data[::17, 1] = np.nan
    return data


def _stored(codec: ChunkCodec, raw: np.ndarray, typesize: int = 4) -> bytes:
    return bytes(codec.encoder(typesize, None)(raw.data.cast("B")))


def _entry(codec: ChunkCodec, nbytes: int) -> StoredChunk:
    return StoredChunk(
        rel="packs/p/values/c/0/0",
        offset=0,
        nbytes=nbytes,
        index=3,
        row_start=0,
        rows=256,
        stored_rows=256,
        columns=3,
        codec=codec,
        sha256=None,
    )


def test_the_registry_holds_every_layout_codec() -> None:
    assert list(CODECS) == [c.value for c in Codec]
    for tag, codec in CODECS.items():
        assert codec.tag == tag
        assert codec_for(tag) is codec
        assert Layout(codec=Codec(tag)).chunk_codec is codec


@pytest.mark.parametrize("codec", EVERY, ids=lambda c: c.tag)
@pytest.mark.parametrize("dtype", ["<f4", "<i8"])
def test_round_trip(codec: ChunkCodec, dtype: str) -> None:
    raw = _chunk().astype(dtype) if dtype == "<f4" else np.arange(-500, 500, dtype=dtype)
    stored = _stored(codec, raw, raw.dtype.itemsize)
    assert codec.frame_problem(stored, raw.nbytes, exact=True) is None
    assert len(stored) <= codec.max_stored(raw.nbytes)
    out = np.full(raw.nbytes, 0xEE, dtype=np.uint8)
    codec.decode_into(stored, out)
    assert out.tobytes() == raw.tobytes()
    assert (len(stored) == raw.nbytes) is codec.stores_decoded


@pytest.mark.parametrize("codec", EVERY, ids=lambda c: c.tag)
def test_a_frame_larger_than_its_chunk_is_refused_before_decoding(codec: ChunkCodec) -> None:
    raw = _chunk()
    stored = _stored(codec, raw)
    why = codec.frame_problem(stored, raw.nbytes - 4)
    assert why is not None
    assert f"{raw.nbytes - 4:,}" in why
    exact = codec.frame_problem(stored, raw.nbytes + 4, exact=True)
    assert exact is not None
    assert f"{raw.nbytes + 4:,}" in exact
    out = np.empty(raw.nbytes - 4, dtype=np.uint8)
    with pytest.raises(StoreCorruptError, match=f"values chunk 3: .*{codec.tag}|raw chunk of"):
        decode_chunk(_entry(codec, len(stored)), stored, out, out.nbytes, "values chunk 3")


#: Raw bytes of the right size are any values (the CRC-32C guards those): only cut short.
DAMAGED = [
    (c, d) for c in EVERY for d in ("truncated", "garbage") if d == "truncated" or c.tag != "none"
]


@pytest.mark.parametrize(("codec", "damage"), DAMAGED, ids=lambda x: getattr(x, "tag", x))
def test_corrupt_input_is_named(codec: ChunkCodec, damage: str) -> None:
    raw = _chunk()
    stored = _stored(codec, raw)
    bad = stored[: len(stored) // 2] if damage == "truncated" else bytes(len(stored))
    out = np.empty(raw.nbytes, dtype=np.uint8)
    with pytest.raises(StoreCorruptError, match=r"^pack p values chunk 3: ") as info:
        decode_chunk(_entry(codec, len(bad)), bad, out, raw.nbytes, "pack p values chunk 3")
    what = "raw chunk of" if codec.stores_decoded else f"this {codec.tag} chunk"
    assert what in str(info.value)
    assert info.value.problems[0][0] == "packs/p/values/c/0/0"


def test_a_zstd_frame_carries_its_checksum() -> None:
    """A byte changed inside a zstd chunk fails to decode, whatever it decoded to."""
    codec = codec_for("zstd")
    raw = np.random.default_rng(1).normal(size=(256, 3)).astype("<f4")  # incompressible
    stored = bytearray(_stored(codec, raw))
    assert stored[4] & 0x04, "the frame header's checksum flag"
    stored[len(stored) // 2] ^= 0x01
    out = np.empty(raw.nbytes, dtype=np.uint8)
    with pytest.raises(StoreCorruptError, match="cannot decode this zstd chunk"):
        decode_chunk(_entry(codec, len(stored)), bytes(stored), out, raw.nbytes, "zstd chunk")


@pytest.mark.parametrize("codec", EVERY, ids=lambda c: c.tag)
@pytest.mark.parametrize("typesize", [4, 8])
@pytest.mark.parametrize("level", [None, 3])
def test_metadata_round_trip_through_the_registry(
    codec: ChunkCodec, typesize: int, level: int | None
) -> None:
    entries = codec.metadata(typesize, level)
    assert codec_of_chain([BYTES, *entries]) is codec
    assert codec_of_chain(json.loads(json.dumps([BYTES, *entries]))) is codec
    zarr_entries = [c.to_dict() for c in codec.zarr_compressors(typesize, level) or []]
    assert json.loads(json.dumps(zarr_entries)) == entries  # zarr-python's form says the same
    assert pickle.loads(pickle.dumps(codec)) is codec


@pytest.mark.parametrize("codec", EVERY, ids=lambda c: c.tag)
def test_stored_bytes_are_the_reference_encoders(codec: ChunkCodec) -> None:
    assert codec.metadata(4, None) == EXPECTED_FLOAT32[codec.tag]
    raw = _chunk()
    reference = REFERENCE_ENCODERS.get(codec.tag)
    expected = raw.tobytes() if reference is None else bytes(reference.encode(raw.tobytes()))
    assert _stored(codec, raw) == expected


@pytest.mark.parametrize(
    "chain",
    [
        [],
        [{"name": "bytes", "configuration": {"endian": "big"}}],
        [BYTES, {"name": "gzip", "configuration": {"level": 1}}],
        [BYTES, {"name": "zstd"}, {"name": "crc32c"}],
        [{"name": "vlen-bytes"}, {"name": "zstd"}],
        "bytes",
    ],
)
def test_chains_no_codec_reads_are_left_to_zarr_python(chain: Any) -> None:
    assert codec_of_chain(chain) is None


@pytest.mark.parametrize("codec", EVERY, ids=lambda c: c.tag)
def test_a_pack_writes_the_expected_codec_block_and_zarr_python_reads_it(
    tmp_path: Path, codec: ChunkCodec
) -> None:
    store = Store.create(str(tmp_path / "s"), layout=Layout(codec=Codec(codec.tag), chunk_rows=64))
    record = write_pack_of(store, 0, rows=300)
    version = store.commit(packs=[record])
    meta = json.loads((tmp_path / "s" / record.path / "values/zarr.json").read_text())
    (sharding,) = meta["codecs"]
    assert sharding["configuration"]["codecs"] == [BYTES, *EXPECTED_FLOAT32[codec.tag]]
    assert {c.codec for c in version.chunk_map(record, "values").chunks} == {codec}
    group = zarr.open_group(str(tmp_path / "s" / record.path), mode="r")
    np.testing.assert_array_equal(group["values"][:], version.read_pack(record).values)


def test_an_unknown_codec_tag_is_named() -> None:
    with pytest.raises(FormatVersionError, match="codec 'brotli' is not one"):
        codec_for("brotli")
    with pytest.raises(FormatVersionError, match="codec 'brotli' is not one"):
        Layout.from_dict({"codec": "brotli", "chunk_rows": 64, "level": None})


def test_a_store_recording_an_unknown_codec_tag_says_so(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = Store.create(str(root), layout=Layout(codec=Codec.ZSTD, chunk_rows=64))
    store.commit(packs=[write_pack_of(store, 0, rows=300)])
    pointer = json.loads((root / "latest.json").read_text())
    path = root / pointer["manifest"]
    doc = json.loads(path.read_bytes())
    doc["packs"][0]["layout"]["codec"] = "brotli"
    data = json.dumps(doc, sort_keys=True).encode()
    path.write_bytes(data)
    pointer["sha256"] = hashlib.sha256(data).hexdigest()
    (root / "latest.json").write_text(json.dumps(pointer))
    with pytest.raises(FormatVersionError, match="codec 'brotli' is not one"):
        _read_every_pack(root)


def _read_every_pack(root: Path) -> None:
    version = Store.open(str(root)).version()
    for pack in version.packs:
        version.read_pack(pack)
