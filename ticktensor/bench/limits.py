"""The physical limits a loader is held against: memcpy, codec decode, sequential read."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numcodecs
import numcodecs.blosc
import numpy as np

from ticktensor.store import Codec, StoreVersion

__all__ = [
    "chunk_payloads",
    "decode_gbps",
    "evict",
    "h2d_gbps",
    "memcpy_gbps",
    "resident_fraction",
    "sequential_read_gbps",
]


def memcpy_gbps(mib: int, threads: int = 1, repeats: int = 3) -> float:
    """Best of ``repeats`` copies of ``mib`` MiB with ``np.copyto``, split over ``threads``.

    Returns bytes copied per second, in GB/s (each byte is read once and written once).
    ``np.copyto`` releases the GIL, so the threads copy in parallel.
    """
    src = np.ones(mib * 2**20 // 4, dtype=np.float32)
    dst = np.zeros_like(src)
    parts = np.array_split(np.arange(src.size), threads)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts if p.size]

    def copy(bound: tuple[int, int]) -> None:
        np.copyto(dst[bound[0] : bound[1]], src[bound[0] : bound[1]])

    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeats):
            started = time.perf_counter()
            list(pool.map(copy, bounds))
            best = min(best, time.perf_counter() - started)
    return src.nbytes / best / 1e9


def h2d_gbps(mib: int = 256, repeats: int = 3) -> float | None:
    """Best host-to-device copy rate (GB/s) from pinned memory, timed with CUDA events.

    ``None`` where torch sees no CUDA device.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    src = torch.empty(mib * 2**20, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty_like(src, device="cuda")
    best = float("inf")
    for _ in range(repeats + 1):  # the first copy warms up the driver
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return src.numel() / best / 1e9


def chunk_payloads(version: StoreVersion, limit_bytes: int = 64 << 20) -> list[bytes]:
    """Encoded feature chunks of ``version`` as stored, up to ``limit_bytes`` decoded."""
    payloads: list[bytes] = []
    decoded = 0
    for record in version.segments:
        chunk_rows = int(record.layout["chunk_rows"])
        row_bytes = 4 * len(record.feature_names)
        folder = Path(version.location.path(record.path))
        for rel in sorted(r for r in record.files if r.startswith("values/c/")):
            payloads.append((folder / rel).read_bytes())
            decoded += chunk_rows * row_bytes
            if decoded >= limit_bytes:
                return payloads
    return payloads


def _decoder(codec: Codec) -> Callable[[bytes], bytes]:
    if codec is Codec.ZSTD:
        decode: Callable[[bytes], bytes] = numcodecs.Zstd().decode
        return decode
    if codec in (Codec.LZ4, Codec.BLOSC):
        decode = numcodecs.Blosc().decode
        return decode
    raise ValueError(f"codec {codec.value} has no decode step")


def decode_gbps(
    codec: Codec | str, payloads: Sequence[bytes], threads: int = 1, seconds: float = 0.5
) -> float:
    """Decoded bytes per second (GB/s) of numcodecs on ``payloads``, over ``threads`` threads.

    Blosc's own internal threads are switched off while measuring, so one thread is one
    core: a rate ``x threads`` is then comparable with a loader using that many threads.
    """
    decode = _decoder(Codec(codec))
    sizes = [np.frombuffer(decode(p), dtype=np.uint8).nbytes for p in payloads]
    per_pass = sum(sizes)
    saved = numcodecs.blosc.use_threads
    numcodecs.blosc.use_threads = False
    try:
        with ThreadPoolExecutor(threads) as pool:
            done, started = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - started) < seconds or done == 0:
                if threads == 1:
                    for p in payloads:
                        decode(p)
                else:
                    list(pool.map(decode, payloads))
                done += per_pass
    finally:
        numcodecs.blosc.use_threads = saved
    return done / elapsed / 1e9


def evict(paths: Sequence[Path]) -> None:
    """Drop ``paths`` from the page cache (``fdatasync``, then ``POSIX_FADV_DONTNEED``)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_fraction(paths: Sequence[Path]) -> float | None:
    """Share of the bytes of ``paths`` in the page cache (``mincore``); ``None`` if unknown."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name, use_errno=True)
    page = mmap.PAGESIZE
    resident = total = 0
    for path in paths:
        size = path.stat().st_size
        if size == 0:
            continue
        with path.open("rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as m:
            pages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * pages)()
            anchor = ctypes.c_char.from_buffer(m)
            try:
                failed = libc.mincore(
                    ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size), vec
                )
            finally:
                del anchor
            if failed:
                return None
            resident += sum(v & 1 for v in vec) * page
            total += pages * page
    return resident / total if total else None


def sequential_read_gbps(paths: Sequence[Path], block: int = 8 << 20) -> float:
    """Bytes per second (GB/s) reading ``paths`` one after another, in ``block``-byte reads."""
    buffer = bytearray(block)
    view = memoryview(buffer)
    done, started = 0, time.perf_counter()
    for path in paths:
        with path.open("rb", buffering=0) as f:
            while n := f.readinto(view):
                done += n
    return done / (time.perf_counter() - started) / 1e9
