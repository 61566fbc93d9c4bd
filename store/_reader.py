"""The store's one read path for feature arrays: a chunk's stored bytes into memory, checked.

:class:`ChunkReader` (from :meth:`StoreVersion.reader`) reads the chunks a chunk map
names: a local file with ``pread`` (into the caller's buffer for a raw chunk), an object
store with one request each (ranged for a pack's shard). Every chunk is checked once, as
it is loaded, against what the store recorded for it (its CRC-32C, or with ``verify`` its
sha256), and decoded by its codec with the frame checks of :func:`decode_chunk`. Arrays
stored with codecs only zarr-python reads are read through it, behind the chunk guard.

Nothing is memory-mapped: a file cut short by another process while chunks are in use is
an error naming it when a read comes short, never a SIGBUS, and a loaded chunk is private
memory that no change of the file can alter. Every step that can take long releases the
GIL, so reads run in parallel threads. Readers outside ``store/`` (the loaders) see
:class:`StoredChunk` geometry and this class only: no location, codec or record format.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
import numpy.typing as npt
import zarr

from ticktensor.errors import StoreCorruptError
from ticktensor.kernels import read_checked

from ._blocks import FeatureBlock
from ._checksums import check_chunk
from ._chunk_map import ChunkMap, StoredChunk
from ._fetch_ahead import FetchAhead
from ._guard import decode_chunk
from ._location import Location
from ._manifest import PackRecord, SegmentRecord

if TYPE_CHECKING:
    from ._version import StoreVersion

__all__ = ["ChunkReader", "ReadTimes", "Verify"]

Bytes = npt.NDArray[np.uint8]
Stored = bytes | Bytes
"""A chunk's stored bytes: read from fsspec, or read from a local file into a buffer."""
Record = SegmentRecord | PackRecord
Verify = bool | Literal["none"]
"""``False``: check each chunk's CRC-32C (its sha256 where none is recorded); ``True``:
its sha256 always; ``"none"``: nothing (how the bench measures what the check costs)."""

_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


@dataclass
class ReadTimes:
    """Seconds one chunk's read spent fetching and decoding, and the stored bytes read."""

    fetch_s: float = 0.0
    decode_s: float = 0.0
    bytes_read: int = 0


class ChunkReader:
    """Reads a store version's chunks into memory, each checked once as it is loaded.

    Parameters
    ----------
    version
        The store version the chunks belong to.
    verify
        See :data:`Verify`.
    """

    def __init__(self, version: StoreVersion, verify: Verify = False) -> None:
        if verify not in (False, True, "none"):
            raise ValueError(f"verify: expected True, False or 'none', got {verify!r}")
        self._version = version
        self._location: Location = version.location
        self._verify: Verify = verify
        self._arrays: dict[tuple[str, str], zarr.Array[Any]] = {}
        self._scratch = threading.local()  # each thread's buffer for compressed bytes
        self._ahead = self._fetch_ahead()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_arrays"] = {}  # zarr arrays are opened again where needed
        del state["_scratch"], state["_ahead"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._scratch = threading.local()
        self._ahead = self._fetch_ahead()

    def _fetch_ahead(self) -> FetchAhead | None:
        if self._location.is_local:
            return None
        return FetchAhead(self._request, _request_size)

    @property
    def verify(self) -> Verify:
        return self._verify

    def read_chunk(self, chunk: StoredChunk, out: Bytes) -> ReadTimes:
        """Decode the stored chunk into ``out``: all of its ``stored_rows x columns``
        items (C order), exactly ``out``'s bytes; a chunk never written holds NaN."""
        if not chunk.decoded_here:
            started = time.perf_counter()
            self._through_zarr(chunk, out)
            return ReadTimes(decode_s=time.perf_counter() - started)
        if not chunk.written:  # Zarr writes no chunk of NaN alone (floats only)
            out.view(np.float32).fill(np.nan)
            return ReadTimes()
        return self._read(chunk, out)

    def read_array(
        self, stored: FeatureBlock | Record, array: str, out: npt.NDArray[Any] | None = None
    ) -> npt.NDArray[Any]:
        """A block's (a segment's or pack's) whole ``array``, read chunk by chunk.

        ``ts`` is ``int64 [rows]``, ``values`` and ``labels`` ``float32 [rows, n]``; full
        chunks are decoded straight into the result (``out`` when given).
        """
        return self.read_mapped(self._version.chunk_map(stored, array), out)

    def read_mapped(
        self, chunk_map: ChunkMap, out: npt.NDArray[Any] | None = None
    ) -> npt.NDArray[Any]:
        """The whole array ``chunk_map`` describes (see :meth:`read_array`)."""
        dtype = np.int64 if chunk_map.array == "ts" else np.float32
        columns = chunk_map.chunks[0].columns if chunk_map.chunks else 0
        shape = (chunk_map.rows,) if chunk_map.array == "ts" else (chunk_map.rows, columns)
        if out is None:
            out = np.empty(shape, dtype=dtype)
        elif out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
            raise ValueError(f"out: expected C-contiguous {np.dtype(dtype)} {shape}")
        self.fetch_ahead(chunk_map.chunks)  # an object store's requests all go out now
        for chunk in chunk_map.chunks:
            part = out[chunk.row_start : chunk.row_start + chunk.rows]
            if chunk.rows == chunk.stored_rows:
                self.read_chunk(chunk, part.reshape(-1).view(np.uint8))
            else:  # the last chunk, stored full-size
                full = np.empty((chunk.stored_rows, *shape[1:]), dtype=dtype)
                self.read_chunk(chunk, full.reshape(-1).view(np.uint8))
                part[...] = full[: chunk.rows]
        return out

    def fetch_ahead(self, chunks: Iterable[StoredChunk]) -> None:
        """Chunks that will be read soon, in that order: on an object store their
        requests go out now, many at once within a byte budget (:class:`FetchAhead`);
        a local store reads each when it is loaded."""
        if self._ahead is not None:
            self._ahead.hint(chunk for chunk in chunks if chunk.decoded_here and chunk.written)

    def stop(self) -> None:
        """Stop fetching ahead: forget the hints, end the requests' threads."""
        if self._ahead is not None:
            self._ahead.stop()

    @property
    def fetching(self) -> bool:
        """Whether requests ahead have I/O threads up (until :meth:`stop`)."""
        return self._ahead is not None and self._ahead.running

    @property
    def requests_ahead(self) -> int:
        """Requests made ahead of need so far (0 on a local store)."""
        return 0 if self._ahead is None else self._ahead.requests

    def advise(self, chunk: StoredChunk) -> None:
        """A chunk that will be needed a little later: a local one's reading starts in
        the kernel (no memory used), an object store's request is fetched ahead."""
        if self._ahead is not None:
            self.fetch_ahead((chunk,))
            return
        if not hasattr(os, "posix_fadvise"):
            return
        try:
            fd = os.open(self._location.path(chunk.rel), os.O_RDONLY | _NOFOLLOW)
        except OSError:
            return  # the read itself reports a missing file or a link, with its name
        try:
            length = 0 if chunk.whole_file else chunk.nbytes or 0
            os.posix_fadvise(fd, chunk.offset, length, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)

    def where(self, chunk: StoredChunk) -> str:
        """The chunk's file (and byte range, in a shard), for messages."""
        where = self._location.display(chunk.rel)
        if chunk.whole_file:
            return where
        what = f"{chunk.array} chunk {chunk.index} of {chunk.owner}"
        return f"{where} bytes {chunk.offset}+{chunk.nbytes} ({what})"

    # -- reading and decoding ------------------------------------------------------------

    def _read(self, chunk: StoredChunk, out: Bytes) -> ReadTimes:
        """Fetch the stored bytes, check them, decode them into ``out``."""
        times = ReadTimes()
        started = time.perf_counter()
        where = self.where(chunk)
        stored, crc = self._fetch(chunk, where, out)
        times.bytes_read = len(stored)
        times.fetch_s = time.perf_counter() - started
        if self._verify != "none":
            check_chunk(chunk, _buffer(stored), where, sha256=self._verify is True, crc=crc)
        decoded = time.perf_counter()
        if stored is not out:
            if chunk.stored_as_decoded:
                _check_size(len(stored), chunk, out.nbytes, where)
            decode_chunk(chunk, _buffer(stored), out, out.nbytes, where)
        times.decode_s = time.perf_counter() - decoded
        return times

    def _fetch(self, chunk: StoredChunk, where: str, out: Bytes) -> tuple[Stored, int | None]:
        """The chunk's stored bytes (``out`` itself when a raw chunk was read straight into
        it, else bytes still to decode into ``out``), and their CRC-32C when it was
        computed as they were read (local files)."""
        if self._ahead is None:
            return self._read_local(chunk, where, out)
        data = self._ahead.take(chunk)
        return (self._request(chunk) if data is None else data), None

    def _request(self, chunk: StoredChunk) -> bytes:
        """An object store's chunk: one request (ranged in a pack's shard)."""
        try:
            if chunk.whole_file or chunk.nbytes is None:
                return self._location.read_bytes(chunk.rel)
            end = chunk.offset + chunk.nbytes
            data = self._location.read_range(chunk.rel, chunk.offset, end)
        except FileNotFoundError as exc:
            raise _missing(chunk, self.where(chunk)) from exc
        if len(data) != chunk.nbytes:
            raise _short(chunk, self.where(chunk), chunk.offset + len(data))
        return data

    def _read_local(self, chunk: StoredChunk, where: str, out: Bytes) -> tuple[Bytes, int | None]:
        """A local chunk read with ``pread`` (:func:`read_checked`: its CRC-32C computed as
        it is read, when the check wants it): a raw one into ``out``, a compressed one into
        this thread's scratch buffer. A symlink is refused (a store holds plain files), a
        missing file named, and so is a file shorter than the chunk, also one cut short
        while it is read."""
        try:
            fd = os.open(self._location.path(chunk.rel), os.O_RDONLY | _NOFOLLOW)
        except FileNotFoundError as exc:
            raise _missing(chunk, where) from exc
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise StoreCorruptError(
                f"{where} is a symlink; a store holds plain files only (rule: store_relative_path)",
                [(chunk.rel, "symlink")],
            ) from exc
        try:
            size = os.fstat(fd).st_size
            if chunk.whole_file or chunk.nbytes is None:
                offset, length = 0, size
                if chunk.stored_as_decoded:
                    _check_size(size, chunk, out.nbytes, where)
                else:
                    chunk.check_stored_size(size, out.nbytes, where)
            else:
                offset, length = chunk.offset, chunk.nbytes
                if size < offset + length:
                    raise _short(chunk, where, size)
            into = out if chunk.stored_as_decoded else self._scratch_bytes(length)
            checksum = self._verify is False and chunk.crc32c is not None
            done, crc = read_checked(fd, offset, into, checksum=checksum)
            if done < length:
                raise _short(chunk, where, offset + done)
            return into, crc if checksum else None
        finally:
            os.close(fd)

    def _scratch_bytes(self, nbytes: int) -> Bytes:
        """This thread's buffer for a compressed chunk's stored bytes (grown as needed)."""
        buffer: Bytes | None = getattr(self._scratch, "buffer", None)
        if buffer is None or buffer.shape[0] < nbytes:
            buffer = np.empty(max(nbytes, 1 << 16), dtype=np.uint8)
            self._scratch.buffer = buffer
        return buffer[:nbytes]

    # -- codecs only zarr-python reads ---------------------------------------------------

    def _through_zarr(self, chunk: StoredChunk, out: Bytes) -> None:
        """The chunk's rows read by zarr-python (behind the store's chunk guard), padded
        to ``stored_rows`` with the fill value."""
        array = self._zarr_array(chunk)
        values = out.view(np.dtype(array.dtype)).reshape(chunk.stored_rows, -1)
        rows = array[chunk.row_start : chunk.row_start + chunk.rows]
        values[: chunk.rows] = np.asarray(rows).reshape(chunk.rows, -1)
        values[chunk.rows :] = array.fill_value if array.fill_value is not None else 0

    def _zarr_array(self, chunk: StoredChunk) -> zarr.Array[Any]:
        record = chunk.record
        if record is None:
            raise ValueError(f"{chunk.rel}: the chunk names no segment or pack to open")
        key = (record.path, chunk.array)
        found = self._arrays.get(key)
        if found is not None:
            return found
        opened: zarr.Array[Any] | None
        if isinstance(record, SegmentRecord):
            opened = getattr(self._version.open_segment(record), chunk.array)
        else:  # behind the pack's guard, as every reader of a pack
            node = self._version.open_pack(record, verify=self._verify is True).get(chunk.array)
            opened = node if isinstance(node, zarr.Array) else None
        if opened is None:
            raise StoreCorruptError(f"{chunk.owner} has no array {chunk.array!r}")
        self._arrays[key] = opened
        return opened


def _request_size(chunk: StoredChunk) -> int:
    """The stored bytes a chunk's request brings: recorded, or at most its decoded size
    (a segment's file listed without one)."""
    if chunk.nbytes is not None:
        return chunk.nbytes
    return chunk.stored_rows * chunk.columns * (8 if chunk.array == "ts" else 4)


def _buffer(stored: Stored) -> bytes | memoryview:
    return stored if isinstance(stored, bytes) else stored.data


def _check_size(size: int, chunk: StoredChunk, expected: int, where: str) -> None:
    if size != expected:
        kind = "int64 values" if chunk.array == "ts" else "float32 features"
        raise StoreCorruptError(
            f"{where}: raw chunk of {size} bytes, expected {expected} "
            f"({chunk.stored_rows} rows x {chunk.columns} {kind})",
            [(chunk.rel, "wrong size")],
        )


def _missing(chunk: StoredChunk, where: str) -> StoreCorruptError:
    what = f"chunk {chunk.index} of {chunk.owner}" if chunk.whole_file else "the shard"
    return StoreCorruptError(f"{where}: {what} is missing", [(chunk.rel, "missing")])


def _short(chunk: StoredChunk, where: str, size: int) -> StoreCorruptError:
    what = "file" if chunk.whole_file else "shard"
    return StoreCorruptError(
        f"{where}: the {what} ends at byte {size:,}, before the chunk does (cut short, "
        "possibly while being read)",
        [(chunk.rel, f"{what} too short")],
    )
