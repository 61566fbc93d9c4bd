"""Feature chunks of a window dataset: where each one is stored and how it is loaded."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numcodecs
import numpy as np
import numpy.typing as npt
import zarr

from ticktensor._memory import fresh_buffer
from ticktensor.errors import StoreCorruptError
from ticktensor.kernels import map_file
from ticktensor.store import SegmentRecord, StoreVersion

__all__ = ["ChunkFile", "ChunkIndex", "ChunkLoader", "LoadTimes", "read_array"]

Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]
Stored = bytes | npt.NDArray[np.uint8]
"""A chunk's stored bytes: read from fsspec, or a read-only mapping of a local file."""

_LITTLE_ENDIAN: Final = sys.byteorder == "little"
_EMPTY: Final = np.empty(0, dtype=np.uint8)
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


@dataclass(frozen=True)
class ChunkFile:
    """One stored chunk of a segment's ``values`` array.

    ``rows`` of its ``stored_rows`` belong to the segment (Zarr stores the last chunk of an
    array at full size); ``codec`` is ``"raw"``, ``"zstd"``, ``"blosc"``, ``"fill"`` for a
    chunk of NaN that Zarr did not write, or ``"zarr"`` when the array uses codecs read
    only through zarr-python.
    """

    segment: SegmentRecord = field(repr=False)
    rel: str
    index: int
    rows: int
    stored_rows: int
    n_features: int
    codec: str
    sha256: str | None

    @property
    def nbytes(self) -> int:
        """Bytes of the decoded stored chunk."""
        return self.stored_rows * self.n_features * 4


class ChunkIndex:
    """The chunks of every source of a dataset, numbered source by source.

    A source is one segment, or several segments of one symbol joined end to end; its
    chunks are those of its segments in order.

    Parameters
    ----------
    version
        The store version the segments belong to.
    runs
        Per source, its segments.
    """

    def __init__(self, version: StoreVersion, runs: Sequence[Sequence[SegmentRecord]]) -> None:
        self.files: list[ChunkFile] = []
        self.chunk_starts: list[Int64s] = []
        rows = []
        for run in runs:
            starts: list[int] = []
            offset = 0
            for record in run:
                for file in _segment_chunks(version, record):
                    starts.append(offset + file.index * file.stored_rows)
                    self.files.append(file)
                offset += record.rows
            self.chunk_starts.append(np.asarray(starts, dtype=np.int64))
            rows.append(offset)
        self.source_rows: Int64s = np.asarray(rows, dtype=np.int64)
        counts = [s.shape[0] for s in self.chunk_starts]
        self.first_chunk: Int64s = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._row_base = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
        # Chunk starts as rows of all sources laid end to end: one searchsorted finds any chunk.
        self._global_starts = np.concatenate(
            [base + s for base, s in zip(self._row_base, self.chunk_starts, strict=True)]
            or [np.empty(0, np.int64)]
        )
        self.nbytes: Int64s = np.asarray([f.nbytes for f in self.files], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.files)

    def chunk_of(self, source_ids: npt.ArrayLike, rows: npt.ArrayLike) -> Int64s:
        """The chunk holding row ``rows[b]`` of source ``source_ids[b]``, for every ``b``."""
        global_rows = self._row_base[np.asarray(source_ids, dtype=np.int64)] + np.asarray(
            rows, dtype=np.int64
        )
        chunks: Int64s = np.searchsorted(self._global_starts, global_rows, side="right") - 1
        return chunks

    def chunks_of(self, source_ids: npt.ArrayLike, starts: npt.ArrayLike, window: int) -> Int64s:
        """The sorted, distinct chunks read by the windows ``(source_ids[b], starts[b])``."""
        first = self.chunk_of(source_ids, starts)
        last = self.chunk_of(source_ids, np.asarray(starts, dtype=np.int64) + (window - 1))
        if first.size == 0:
            return first.astype(np.int64)
        span = int((last - first).max())
        if span == 0:
            return np.unique(first)
        # Windows longer than a chunk read every chunk between their first and last.
        steps = np.arange(span + 1, dtype=np.int64)
        every = first[:, None] + steps[None, :]
        return np.unique(np.minimum(every, last[:, None]))


def _segment_chunks(
    version: StoreVersion, record: SegmentRecord, array: str = "values"
) -> list[ChunkFile]:
    """The chunks of one of ``record``'s 2-D float32 arrays, from its Zarr metadata."""
    location = version.location
    rel = f"{record.path}/{array}"
    location.check_inside(rel)  # a symlinked segment must not lead out of the store
    try:
        meta = json.loads(location.read_bytes(f"{rel}/zarr.json"))
        shape = [int(n) for n in meta["shape"]]
        chunk_rows = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise StoreCorruptError(
            f"{location.display(rel + '/zarr.json')}: unreadable array metadata ({exc})"
        ) from exc
    if shape[0] != record.rows or len(shape) != 2 or chunk_rows < 1:
        raise StoreCorruptError(
            f"{location.display(rel)}: array of shape {shape} in chunks of {chunk_rows} rows, "
            f"manifest says {record.rows} rows"
        )
    codec = _codec_of(meta)
    separator = meta.get("chunk_key_encoding", {}).get("configuration", {}).get("separator", "/")
    # Zarr writes no chunk that holds only the fill value (NaN): the manifest, which lists
    # every file written, tells such a chunk from a lost one. Old manifests list none.
    fill = codec != "zarr" and bool(record.files) and _is_nan(meta.get("fill_value"))
    files = []
    for k in range(-(-record.rows // chunk_rows)):
        name = f"{array}/c{separator}{k}{separator}0"
        entry = record.files.get(name)
        files.append(
            ChunkFile(
                segment=record,
                rel=f"{record.path}/{name}",
                index=k,
                rows=min(chunk_rows, record.rows - k * chunk_rows),
                stored_rows=chunk_rows,
                n_features=shape[1],
                codec="fill" if fill and entry is None else codec,
                sha256=None if entry is None else entry.sha256,
            )
        )
    return files


def _is_nan(fill_value: Any) -> bool:
    return fill_value == "NaN" or (isinstance(fill_value, float) and np.isnan(fill_value))


def _codec_of(meta: dict[str, Any]) -> str:
    """How a chunk of this array is decoded here; ``"zarr"`` hands it to zarr-python."""
    codecs = meta.get("codecs", [])
    names = [c.get("name") for c in codecs]
    key = meta.get("chunk_key_encoding", {}).get("name")
    little = bool(codecs) and codecs[0].get("configuration", {}).get("endian") == "little"
    if meta.get("data_type") != "float32" or key != "default" or not (little and _LITTLE_ENDIAN):
        return "zarr"
    if names == ["bytes"]:
        return "raw"
    if names in (["bytes", "zstd"], ["bytes", "blosc"]):
        return str(names[1])
    return "zarr"


def read_array(
    loader: ChunkLoader, version: StoreVersion, record: SegmentRecord, array: str
) -> Floats | None:
    """A segment's whole 2-D float32 ``array``, read chunk by chunk through ``loader``.

    Full chunks are decoded straight into the result. ``None`` where zarr-python should
    read the array (codecs only it reads).
    """
    files = _segment_chunks(version, record, array)
    if not files or any(f.codec == "zarr" for f in files):
        return None
    out = np.empty((record.rows, files[0].n_features), dtype=np.float32)
    for file in files:
        lo = file.index * file.stored_rows
        part = out[lo : lo + file.rows]
        values, _ = loader.load(file, part if file.rows == file.stored_rows else None)
        if values is not part:  # mapped, or the last, partial chunk
            part[...] = values[: file.rows]
    return out


@dataclass
class LoadTimes:
    """Seconds one load spent per stage, and the stored bytes it read."""

    fetch_s: float = 0.0
    decode_s: float = 0.0
    prepare_s: float = 0.0
    bytes_read: int = 0


class ChunkLoader:
    """Loads one chunk as a C-contiguous float32 ``[stored_rows, features]`` array.

    Raw chunks of a local store are memory-mapped (read-only, with readahead advice);
    other chunks are read (local files mapped too, other fsspec URLs with one request
    each) and decoded, into a recycled buffer when the caller
    passes one (fresh memory costs a page fault per 4 KiB, which on a VM is as slow as
    decoding). Then the selected feature columns are kept and the normalization applied,
    never writing into a mapped file. Every step that can take long releases the GIL, so
    loads run in parallel threads.

    Parameters
    ----------
    version
        The store version the chunks belong to.
    columns
        Feature columns to keep, in order (``None``: all).
    scale
        ``(mean, std)`` per kept column to apply, or ``None``.
    verify
        Hash every chunk's stored bytes and compare with the manifest.
    """

    def __init__(
        self,
        version: StoreVersion,
        columns: Int64s | None,
        scale: tuple[Floats, Floats] | None,
        verify: bool = False,
    ) -> None:
        self._version = version
        self._location = version.location
        self._columns = columns
        self._scale = scale
        self._verify = verify
        self._arrays: dict[str, zarr.Array[Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_arrays"] = {}  # zarr arrays are opened again where needed
        return state

    def nbytes(self, file: ChunkFile) -> int:
        """Bytes the loaded chunk holds (memory-mapped or private)."""
        kept = file.n_features if self._columns is None else int(self._columns.shape[0])
        return file.stored_rows * kept * 4

    def load(self, file: ChunkFile, out: Floats | None = None) -> tuple[Floats, LoadTimes]:
        """The chunk's rows, ready to gather from, and what loading them cost.

        ``out`` is a spare C-contiguous float32 buffer of ``file.nbytes`` bytes to decode
        into (ignored for memory-mapped chunks, or when it does not fit).
        """
        times = LoadTimes()
        started = time.perf_counter()
        where = self._location.display(file.rel)
        mapped = False
        if file.codec == "zarr":
            values = self._through_zarr(file)
            times.decode_s = time.perf_counter() - started
        elif file.codec == "fill":
            values = _target(out, file)
            values.fill(np.nan)
        elif file.codec == "raw" and self._location.is_local and not self._verify:
            values = self._map(file, where)
            mapped = True
            times.bytes_read = file.nbytes
            times.fetch_s = time.perf_counter() - started
        else:
            stored = self._read(file, where)
            times.bytes_read = len(stored)
            times.fetch_s = time.perf_counter() - started
            if self._verify and file.sha256 is not None:
                raw = stored if isinstance(stored, bytes) else stored.data
                digest = hashlib.sha256(raw).hexdigest()
                if digest != file.sha256:
                    raise StoreCorruptError(
                        f"{where}: sha256 {digest[:16]} != {file.sha256[:16]} in the manifest",
                        [(file.rel, "hash mismatch")],
                    )
            decoded = time.perf_counter()
            values = self._decode(file, stored, where, out)
            times.decode_s = time.perf_counter() - decoded
        prepared = time.perf_counter()
        values = self._prepare(values, private=not mapped)
        times.prepare_s = time.perf_counter() - prepared
        return values, times

    def advise(self, file: ChunkFile) -> None:
        """Ask the kernel to start reading a local chunk file that will be needed soon."""
        if not self._location.is_local or not hasattr(os, "posix_fadvise"):
            return
        try:
            fd = os.open(self._location.path(file.rel), os.O_RDONLY)
        except OSError:
            return  # the load itself reports a missing file, with its name
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)

    def _map(self, file: ChunkFile, where: str) -> Floats:
        # Pages are faulted in by the gather, only those windows touch; the kernel is asked
        # to read the whole file ahead so that cold pages are on their way.
        mapped = self._map_local(file, where, check_size=True, populate=False)
        # The array keeps the mapping alive (and no descriptor); it goes with the last view.
        return mapped.view(np.float32).reshape(file.stored_rows, file.n_features)

    def _read(self, file: ChunkFile, where: str) -> Stored:
        """The chunk's stored bytes; a local file is mapped, its pages in place.

        Decoding straight from the page cache saves copying every stored byte into a
        buffer first (``read`` did: 9% of the CPU of an lz4 epoch). The mapping goes when
        the caller drops it.
        """
        if not self._location.is_local:
            try:
                return self._location.read_bytes(file.rel)
            except FileNotFoundError as exc:
                raise _missing(file, where) from exc
        return self._map_local(file, where, check_size=False, populate=True)

    def _map_local(
        self, file: ChunkFile, where: str, *, check_size: bool, populate: bool
    ) -> npt.NDArray[np.uint8]:
        """A local chunk file mapped read-only; a symlink is refused (a store holds plain
        files), a missing file named. ``populate`` maps every page now, else the kernel is
        asked to read the file ahead."""
        try:
            fd = os.open(self._location.path(file.rel), os.O_RDONLY | _NOFOLLOW)
        except FileNotFoundError as exc:
            raise _missing(file, where) from exc
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise StoreCorruptError(
                f"{where} is a symlink; a store holds plain files only (rule: store_relative_path)",
                [(file.rel, "symlink")],
            ) from exc
        try:
            size = os.fstat(fd).st_size
            if check_size:
                _check_size(size, file, where)
            if size == 0:
                return _EMPTY
            return map_file(fd, size, populate=populate, willneed=not populate)
        finally:
            os.close(fd)

    def _decode(self, file: ChunkFile, stored: Stored, where: str, out: Floats | None) -> Floats:
        out = _target(out, file)
        if file.codec == "raw":
            _check_size(len(stored), file, where)
            out.reshape(-1).view(np.uint8)[:] = np.frombuffer(stored, dtype=np.uint8)
            return out
        codec = numcodecs.Zstd() if file.codec == "zstd" else numcodecs.Blosc()
        try:
            size = _decoded_size(file.codec, stored)
            if size != file.nbytes:
                raise ValueError(f"it decodes to {size} bytes, expected {file.nbytes}")
            codec.decode(stored, out=out)  # numcodecs releases the GIL while decoding
        except (RuntimeError, ValueError, TypeError) as exc:
            raise StoreCorruptError(
                f"{where}: cannot decode this {file.codec} chunk: {exc}",
                [(file.rel, f"undecodable {file.codec} chunk")],
            ) from exc
        return out

    def _through_zarr(self, file: ChunkFile) -> Floats:
        array = self._arrays.get(file.segment.path)
        if array is None:
            array = self._version.open_segment(file.segment).values
            self._arrays[file.segment.path] = array
        lo = file.index * file.stored_rows
        out = np.full((file.stored_rows, file.n_features), np.nan, dtype=np.float32)
        out[: file.rows] = array[lo : lo + file.rows]
        return out

    def _prepare(self, values: Floats, *, private: bool) -> Floats:
        """Feature subset and normalization; ``private`` says ``values`` may be written."""
        if self._columns is not None:
            kept = fresh_buffer((values.shape[0], int(self._columns.shape[0])))
            values = np.take(values, self._columns, axis=1, out=kept)
            private = True
        if self._scale is not None:
            if not private or not values.flags.writeable:
                values = values.copy()  # never write into a mapped file
            values -= self._scale[0]
            values /= self._scale[1]
        return np.ascontiguousarray(values, dtype=np.float32)


def _target(out: Floats | None, file: ChunkFile) -> Floats:
    """Where ``file``'s chunk is decoded: ``out`` when it fits, else a fresh buffer."""
    shape = (file.stored_rows, file.n_features)
    if out is None or out.nbytes != file.nbytes or not out.flags.c_contiguous:
        return fresh_buffer(shape)
    return out if out.shape == shape else out.reshape(shape)


def _decoded_size(codec: str, stored: Stored) -> int:
    """The size a compressed chunk says it decodes to, read from its header (no decoding)."""
    if codec == "blosc":
        if len(stored) < 16:
            raise ValueError(f"a blosc frame has a 16-byte header, got {len(stored)} bytes")
        return int.from_bytes(bytes(stored[4:8]), "little")
    size = _zstd_content_size(stored)
    if size is None:
        raise ValueError("the zstd frame does not record its content size")
    return size


def _zstd_content_size(frame: Stored) -> int | None:
    """Content size from a zstd frame header (RFC 8878, section 3.1.1.1)."""
    if len(frame) < 6 or bytes(frame[:4]) != b"\x28\xb5\x2f\xfd":
        raise ValueError("not a zstd frame (bad magic number)")
    descriptor = int(frame[4])
    size_flag = descriptor >> 6
    single_segment = (descriptor >> 5) & 1
    dict_bytes = (0, 1, 2, 4)[descriptor & 3]
    offset = 5 + (0 if single_segment else 1) + dict_bytes
    width = (1 if single_segment else 0, 2, 4, 8)[size_flag]
    if width == 0:
        return None
    if len(frame) < offset + width:
        raise ValueError("truncated zstd frame header")
    size = int.from_bytes(bytes(frame[offset : offset + width]), "little")
    return size + 256 if width == 2 else size


def _check_size(size: int, file: ChunkFile, where: str) -> None:
    if size != file.nbytes:
        raise StoreCorruptError(
            f"{where}: raw chunk of {size} bytes, expected {file.nbytes} "
            f"({file.stored_rows} rows x {file.n_features} float32 features)",
            [(file.rel, "wrong size")],
        )


def _missing(file: ChunkFile, where: str) -> StoreCorruptError:
    return StoreCorruptError(
        f"{where}: chunk {file.index} of segment {file.segment.symbol}/{file.segment.session} "
        "is missing",
        [(file.rel, "missing")],
    )
