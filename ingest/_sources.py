"""Input files: expand paths, globs and fsspec URLs; open them decompressed and hashed."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import io
import mmap
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, cast

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ticktensor._memory import POPULATE
from ticktensor.errors import ConfigError, InputError

__all__ = ["COMPRESSIONS", "Input", "MappedFile", "Window", "expand_inputs"]

COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2"}
_GLOB_CHARS = set("*?[")


@dataclass
class Input:
    """One input file: where it is, how it is compressed, and (after reading) its hash.

    ``url`` is what the user can paste back; ``name`` the file name without the
    compression suffix (``trades.csv`` for ``trades.csv.zst``), used for detection.
    """

    url: str
    fs: fsspec.AbstractFileSystem = field(repr=False)
    path: str
    size: int
    sha256: str | None = None

    @property
    def compression(self) -> str | None:
        return COMPRESSIONS.get(os.path.splitext(self.path)[1].lower())

    @property
    def name(self) -> str:
        base = os.path.basename(self.path)
        return os.path.splitext(base)[0] if self.compression else base

    @contextlib.contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        """The decompressed bytes, streamed. The raw bytes are hashed on the way.

        On exit the rest of the raw file is read (if the reader stopped early) so that
        ``sha256`` always covers the whole file.
        """
        with self.fs.open(self.path, "rb") as raw:
            hashing = _HashingReader(raw)
            stream = _decompress(hashing, self.compression, self.url)
            try:
                yield stream
            finally:
                hashing.drain()
                self.sha256 = hashing.hexdigest()

    @contextlib.contextmanager
    def open_mapped(self) -> Iterator[IO[bytes]]:
        """A local uncompressed file as a :class:`MappedFile` (read, or sliced without a
        copy); any other input as :meth:`open` gives it. Either way ``sha256`` covers
        the raw bytes of the whole file on exit."""
        if self.compression is not None or not isinstance(self.fs, LocalFileSystem):
            with self.open() as stream:
                yield stream
            return
        mapped = MappedFile(self.path)
        try:
            yield cast(IO[bytes], mapped)
        finally:
            try:
                self.sha256 = mapped.hexdigest()
            finally:
                mapped.close()

    @contextlib.contextmanager
    def open_seekable(self) -> Iterator[IO[bytes]]:
        """A seekable binary file, for formats with a footer (Parquet, Arrow IPC files).

        An uncompressed file is opened as it is and hashed in a second pass on exit; a
        compressed one is first decompressed into a temporary file. Either way
        ``sha256`` covers the raw bytes of the whole file.
        """
        if self.compression is not None:
            with tempfile.TemporaryFile() as tmp:
                with self.open() as stream:
                    shutil.copyfileobj(stream, tmp, 1 << 20)
                tmp.seek(0)
                yield tmp
            return
        with self.fs.open(self.path, "rb") as file:
            try:
                yield file
            finally:
                self.sha256 = self._hash_raw()

    def _hash_raw(self) -> str:
        digest = hashlib.sha256()
        with self.fs.open(self.path, "rb") as raw:
            while chunk := raw.read(1 << 20):
                digest.update(chunk)
        return digest.hexdigest()

    def head(self, n: int = 4096) -> bytes:
        """The first ``n`` decompressed bytes (for format detection)."""
        with self.fs.open(self.path, "rb") as raw:
            stream = _decompress(raw, self.compression, self.url)
            return stream.read(n)  # a corrupt archive raises InputError naming the file


class MappedFile(io.RawIOBase):
    """A local file read as a stream, or through memory-mapped windows (:meth:`window`)
    whose bytes are not copied.

    Reading a file into fresh buffers costs, besides the copy, the kernel clearing every
    new page first; a mapping shares the page cache's pages (W1's 84 MB CSV: 5 ms to
    map against about 45 ms to fill buffers). Each window is a mapping of its own,
    unmapped with its last view, so the process maps only the blocks in use, whatever
    the file's size. The file is hashed whole from the start, a window at a time, on a
    thread of its own when it is large, so that :meth:`hexdigest` covers every byte
    however much of it was read. A file truncated by another program while it is read
    ends the process with SIGBUS, as with any memory-mapped reader (pyarrow's and
    polars' among them).
    """

    _THREAD_MIN = 4 << 20  # smaller files are hashed on the caller's thread
    _HASH_WINDOW = 16 << 20

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size
        self._pos = 0
        self._hash = hashlib.sha256()
        self._failed: BaseException | None = None
        self._hasher: threading.Thread | None = None
        if self.size >= self._THREAD_MIN:
            self._hasher = threading.Thread(target=self._hash_all, name="ticktensor-hash")
            self._hasher.start()
        else:
            self._hash_all()

    def window(self, start: int, end: int) -> Window:
        """Bytes ``[start, end)`` of the file, mapped with their pages in place."""
        return Window(self._fd, start, end)

    def _hash_all(self) -> None:
        try:
            for lo in range(0, self.size, self._HASH_WINDOW):
                hi = min(self.size, lo + self._HASH_WINDOW)
                self._hash.update(self.window(lo, hi).view(0, hi - lo))
        except BaseException as exc:  # raised by hexdigest, on the caller's thread
            self._failed = exc

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = os.pread(self._fd, min(len(buffer), self.size - self._pos), self._pos)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def tell(self) -> int:
        return self._pos

    def hexdigest(self) -> str:
        """The sha256 of the whole file (waits for the hashing thread)."""
        if self._hasher is not None:
            self._hasher.join()
        if self._failed is not None:
            raise self._failed
        return self._hash.hexdigest()

    def close(self) -> None:
        # Windows hold descriptors of their own: they stay valid after this one closes.
        if self._hasher is not None:
            self._hasher.join()
        if not self.closed:
            os.close(self._fd)
        super().close()


class Window:
    """Bytes ``[start, end)`` of a file, memory-mapped read-only (a mapping of their
    own, unmapped when the window and every view of it are gone); positions are
    relative to ``start``."""

    def __init__(self, fd: int, start: int, end: int) -> None:
        if not 0 <= start <= end:
            raise ValueError(f"a window needs 0 <= start <= end, got {start}, {end}")
        self.length = end - start
        base = start - start % mmap.ALLOCATIONGRANULARITY  # mappings start on that grid
        self._skip = start - base
        self._map = None
        if self.length:
            flags = mmap.MAP_PRIVATE | POPULATE
            self._map = mmap.mmap(fd, end - base, flags=flags, prot=mmap.PROT_READ, offset=base)

    def view(self, lo: int, hi: int) -> memoryview:
        """Bytes ``[lo, hi)`` of the window, not copied."""
        if self._map is None:
            return memoryview(b"")
        return memoryview(self._map)[self._skip + lo : self._skip + hi]

    def find(self, sub: bytes, lo: int = 0) -> int:
        """The first position of ``sub`` from ``lo`` on, or -1."""
        if self._map is None:
            return -1
        found = self._map.find(sub, self._skip + lo)
        return found - self._skip if found >= 0 else -1

    def rfind(self, sub: bytes) -> int:
        """The last position of ``sub``, or -1."""
        if self._map is None:
            return -1
        found = self._map.rfind(sub, self._skip)
        return found - self._skip if found >= 0 else -1


class _HashingReader(io.RawIOBase):
    """A read-only binary stream that hashes every byte read through it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._hash = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        readinto = getattr(self._raw, "readinto", None)
        if readinto is not None:  # straight into the caller's buffer: no extra copy
            n = int(readinto(buffer) or 0)
            self._hash.update(memoryview(buffer)[:n])
            return n
        data = self._raw.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self._hash.update(data)
        return n

    def drain(self) -> None:
        while chunk := self._raw.read(1 << 20):
            self._hash.update(chunk)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def _decompress(
    raw: IO[bytes] | io.RawIOBase, compression: str | None, url: str = "<input>"
) -> IO[bytes]:
    """``raw`` decompressed (a buffered binary stream; read-only, forward only).

    Decoder failures, and a compressed stream that ends before its end marker, raise
    :class:`~ticktensor.errors.InputError` naming ``url``.
    """
    if compression is None:
        return io.BufferedReader(raw) if isinstance(raw, io.RawIOBase) else raw
    decoded: IO[bytes]
    if compression == "gzip":
        decoded = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
    elif compression == "bz2":
        decoded = cast(IO[bytes], bz2.BZ2File(raw, mode="rb"))
    else:
        decoded = cast(IO[bytes], _ZstdReader(cast(IO[bytes], raw)))
    return io.BufferedReader(_Guarded(decoded, f"{url}: cannot decompress {compression}"))


class _ZstdReader(io.RawIOBase):
    """Streaming zstd decoder over any number of frames that notices a truncated frame.

    Input is fed to the decoder ``_SLICE`` bytes at a time, so one step decodes at most
    about ``_SLICE`` x 43,690 bytes (zstd's largest ratio, RLE blocks): a decompression
    bomb streams through bounded memory instead of being expanded at once.
    """

    _SLICE = 1024

    def __init__(self, raw: IO[bytes]) -> None:
        import zstandard

        self._raw = raw
        self._new = zstandard.ZstdDecompressor().decompressobj
        self._obj = self._new()
        self._pending = b""
        self._input = b""
        self._pos = 0
        self._started = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            if self._pos >= len(self._input):
                self._input, self._pos = self._raw.read(1 << 20), 0
                if not self._input:
                    if self._started and not self._obj.eof:
                        raise EOFError("the stream ends inside a frame (truncated file)")
                    return 0
            piece = self._input[self._pos : self._pos + self._SLICE]
            self._pos += len(piece)
            self._started = True
            out = []
            while piece:
                out.append(self._obj.decompress(piece))
                if self._obj.eof:  # next frame, if any, starts in unused_data
                    piece = self._obj.unused_data
                    self._obj = self._new()
                    self._started = bool(piece)
                else:
                    piece = b""
            self._pending = b"".join(out)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


class _Guarded(io.RawIOBase):
    """Turns a decoder's exceptions into ``InputError`` with context."""

    def __init__(self, stream: IO[bytes], context: str) -> None:
        self._stream = stream
        self._context = context

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            return self._stream.readinto(buffer)  # type: ignore[attr-defined, no-any-return]
        except InputError:
            raise
        except Exception as exc:  # zstd, zlib, bz2 and EOF errors differ per codec
            raise InputError(f"{self._context}: {exc} (the file is corrupt or truncated)") from exc


def expand_inputs(
    inputs: Sequence[str], storage_options: dict[str, Any] | None = None
) -> list[Input]:
    """Resolve paths, globs and fsspec URLs to a sorted, de-duplicated list of files.

    A directory expands to the files below it. Raises ``ConfigError`` naming any input
    that matches nothing.
    """
    out: dict[str, Input] = {}
    for spec in inputs:
        fs, path = fsspec.core.url_to_fs(os.fspath(spec), **(storage_options or {}))
        if _GLOB_CHARS & set(path):
            paths = sorted(fs.glob(path))
        elif fs.isdir(path):
            paths = sorted(fs.find(path))
        elif fs.exists(path):
            paths = [path]
        else:
            paths = []
        files = [p for p in paths if not fs.isdir(p)]
        if not files:
            raise ConfigError(f"input {spec!r} matches no file")
        for p in files:
            url = p if "://" not in spec else str(fs.unstrip_protocol(p))
            out.setdefault(url, Input(url=url, fs=fs, path=p, size=int(fs.size(p))))
    return sorted(out.values(), key=lambda i: i.url)
