"""A local folder served as a slow object store: a fixed latency per request, a shared byte rate.

``slowfile:///path`` is an fsspec filesystem (registered when this module is imported) that
reads the local folder ``/path`` the way a client reads an object store over a network
link: every request (``cat_file`` with a byte range, ``info``, ``ls``, a read of an open
file) first waits ``latency_s``, then its bytes cross the link, whose ``bandwidth`` all
requests in flight share. Requests overlap as an object store's do (``cat_ranges`` issues
its ranges concurrently, as s3fs does), so a reader that keeps enough bytes in flight is
bound by the bandwidth, and one that waits for each request in turn by the latency::

    import ticktensor.bench.slow_link
    from ticktensor.store import open_store

    version = open_store(
        "slowfile:///data/store", storage_options={"latency_s": 0.02, "bandwidth": 1e9}
    )

Filesystems made with the same ``latency_s`` and ``bandwidth`` share one :class:`Link`
(fsspec makes several per store: a synchronous one, and an asynchronous one for
zarr-python), so the cap holds for the whole process; :func:`link_of` gives it, with its
counts of requests, bytes and requests in flight. The filesystem is read-only.
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import fsspec
from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.local import make_path_posix
from fsspec.spec import AbstractBufferedFile

__all__ = ["PROTOCOL", "Link", "LinkCounts", "SlowFileSystem", "link_of"]

PROTOCOL = "slowfile"
#: Bytes that cross the link in one reservation: requests in flight take turns at this size.
SLICE_BYTES = 1 << 18


@dataclass(frozen=True)
class LinkCounts:
    """What crossed a :class:`Link` since it was made or last reset.

    Parameters
    ----------
    requests
        Requests answered (byte ranges, whole files, listings and lookups).
    range_requests
        Of those, reads of bytes (``cat_file`` and reads of open files).
    bytes
        Bytes carried (the payloads of the reads).
    max_in_flight
        The most requests waiting or transferring at one time.
    max_bytes_in_flight
        The most bytes requested by reads in flight at one time.
    busy_s
        Seconds the link spent carrying bytes (``bytes / bandwidth``).
    """

    requests: int
    range_requests: int
    bytes: int
    max_in_flight: int
    max_bytes_in_flight: int
    busy_s: float


class Link:
    """A network link: ``latency_s`` before each request's first byte, then ``bandwidth``
    bytes per second shared by every request in flight.

    The bytes go through a virtual clock (a token bucket holding at most one slice): each
    slice of :data:`SLICE_BYTES` reserves the link for ``slice / bandwidth`` seconds after
    the reservations before it, and its request sleeps until then. Requests in flight
    interleave slice by slice, so together they never exceed the bandwidth, and one alone
    gets all of it. Safe to use from several event loops and threads at once.
    """

    def __init__(self, latency_s: float, bandwidth: float) -> None:
        if not latency_s >= 0:
            raise ValueError(f"latency_s: expected >= 0, got {latency_s}")
        if not bandwidth > 0:
            raise ValueError(f"bandwidth: expected > 0 bytes/s, got {bandwidth}")
        self.latency_s = float(latency_s)
        self.bandwidth = float(bandwidth)
        self._lock = threading.Lock()
        self._free_at = 0.0
        self.reset()

    def reset(self) -> None:
        """Zero the counts (requests in flight now stay counted as in flight)."""
        with self._lock:
            self._requests = self._range_requests = self._bytes = 0
            in_flight = getattr(self, "_in_flight", 0)
            bytes_in_flight = getattr(self, "_bytes_in_flight", 0)
            self._in_flight, self._bytes_in_flight = in_flight, bytes_in_flight
            self._max_in_flight, self._max_bytes_in_flight = in_flight, bytes_in_flight

    def counts(self) -> LinkCounts:
        """The counts so far."""
        with self._lock:
            return LinkCounts(
                requests=self._requests,
                range_requests=self._range_requests,
                bytes=self._bytes,
                max_in_flight=self._max_in_flight,
                max_bytes_in_flight=self._max_bytes_in_flight,
                busy_s=self._bytes / self.bandwidth,
            )

    def seconds(self, nbytes: int) -> float:
        """Seconds the link needs to carry ``nbytes`` (its limit, latency aside)."""
        return nbytes / self.bandwidth

    async def wait(self, requested: int | None = None) -> None:
        """Start a request (a read of ``requested`` bytes, or a lookup when ``None``):
        counted in flight, then the latency."""
        with self._lock:
            self._requests += 1
            self._range_requests += requested is not None
            self._in_flight += 1
            self._bytes_in_flight += requested or 0
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            self._max_bytes_in_flight = max(self._max_bytes_in_flight, self._bytes_in_flight)
        await asyncio.sleep(self.latency_s)

    async def carry(self, nbytes: int) -> None:
        """Carry ``nbytes`` across the link, sharing it with the other requests in flight."""
        left = nbytes
        while left > 0:
            piece = min(left, SLICE_BYTES)
            with self._lock:
                now = time.monotonic()
                # A slice's worth of credit: a lone request that wakes a little late from
                # its sleep does not lose the link's time.
                start = max(self._free_at, now - SLICE_BYTES / self.bandwidth)
                self._free_at = start + piece / self.bandwidth
                done_at = self._free_at
                self._bytes += piece
            await asyncio.sleep(max(0.0, done_at - now))
            left -= piece

    def done(self, requested: int | None = None) -> None:
        """End a request started with :meth:`wait`."""
        with self._lock:
            self._in_flight -= 1
            self._bytes_in_flight -= requested or 0


_LINKS: dict[tuple[float, float], Link] = {}
_LINKS_LOCK = threading.Lock()


def _shared_link(latency_s: float, bandwidth: float) -> Link:
    """The process's link of these settings (made on first use)."""
    key = (float(latency_s), float(bandwidth))
    with _LINKS_LOCK:
        link = _LINKS.get(key)
        if link is None:
            link = _LINKS[key] = Link(latency_s, bandwidth)
        return link


def link_of(fs: fsspec.AbstractFileSystem) -> Link:
    """The :class:`Link` behind a ``slowfile://`` filesystem."""
    if not isinstance(fs, SlowFileSystem):
        raise TypeError(f"expected a {PROTOCOL}:// filesystem, got {type(fs).__name__}")
    return fs.link


def _read_range(path: str, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        return os.pread(f.fileno(), max(0, end - start), start)


class SlowFileSystem(AsyncFileSystem):  # type: ignore[misc]
    """The local folder behind ``slowfile://`` URLs, through a :class:`Link`.

    Parameters
    ----------
    latency_s
        Seconds every request waits before its first byte (20 ms: an object store
        across a region).
    bandwidth
        Bytes per second of the link, shared by all requests in flight.
    """

    protocol: ClassVar[tuple[str, ...]] = (PROTOCOL,)
    root_marker = "/"

    def __init__(self, latency_s: float = 0.02, bandwidth: float = 1e9, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.link = _shared_link(latency_s, bandwidth)

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        if isinstance(path, list):
            raise TypeError("one path at a time")
        text = str(path)
        if text.startswith(f"{PROTOCOL}://"):
            text = text[len(PROTOCOL) + 3 :]
        return str(make_path_posix(text)).rstrip("/") or "/"

    def unstrip_protocol(self, name: str) -> str:
        return f"{PROTOCOL}://{self._strip_protocol(name)}"

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        await self.link.wait()
        try:
            return self._stat(path)
        finally:
            self.link.done()

    @staticmethod
    def _stat(path: str) -> dict[str, Any]:
        found = os.stat(path)
        kind = "directory" if stat.S_ISDIR(found.st_mode) else "file"
        return {"name": path, "size": found.st_size, "type": kind}

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        await self.link.wait()
        try:
            if not os.path.isdir(path):
                entries = [self._stat(path)]
            else:
                names = sorted(os.listdir(path))
                entries = [self._stat(f"{path.rstrip('/')}/{name}") for name in names]
        finally:
            self.link.done()
        return entries if detail else [e["name"] for e in entries]

    async def _cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        path = self._strip_protocol(path)
        size = os.path.getsize(path)
        lo = 0 if start is None else start if start >= 0 else max(0, size + start)
        hi = size if end is None else end if end >= 0 else max(0, size + end)
        lo, hi = min(lo, size), min(hi, size)
        requested = max(0, hi - lo)
        await self.link.wait(requested)
        try:
            data = await asyncio.to_thread(_read_range, path, lo, hi)
            await self.link.carry(len(data))
        finally:
            self.link.done(requested)
        return data

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | str | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> AbstractBufferedFile:
        if mode != "rb":
            raise PermissionError(f"{PROTOCOL}:// is read-only; cannot open {path!r} as {mode!r}")
        return _SlowFile(
            self,
            path,
            mode,
            block_size="default" if block_size is None else block_size,
            cache_options=cache_options,
            **kwargs,
        )


class _SlowFile(AbstractBufferedFile):  # type: ignore[misc]
    """A file opened for reading: each fetch of its buffer is one ranged request."""

    def _fetch_range(self, start: int, end: int) -> bytes:
        data: bytes = self.fs.cat_file(self.path, start=start, end=end)
        return data


fsspec.register_implementation(PROTOCOL, SlowFileSystem, clobber=True)
