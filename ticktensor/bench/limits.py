"""The physical limits a loader is held against: memcpy, codec decode, sequential read."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numcodecs
import numcodecs.blosc
import numpy as np

from ticktensor._memory import fresh_buffer
from ticktensor.store import Codec, StoreVersion

__all__ = [
    "chunk_payloads",
    "decode_gbps",
    "evict",
    "first_epoch_gbps",
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


def chunk_files(version: StoreVersion) -> list[tuple[Path, int]]:
    """Every encoded feature chunk file of ``version``'s segments, with its decoded size."""
    files: list[tuple[Path, int]] = []
    for record in version.segments:
        decoded = int(record.layout["chunk_rows"]) * 4 * len(record.feature_names)
        folder = Path(version.location.path(record.path))
        files += [(folder / r, decoded) for r in sorted(record.files) if r.startswith("values/c/")]
    return files


def chunk_payloads(version: StoreVersion, limit_bytes: int = 64 << 20) -> list[bytes]:
    """Encoded feature chunks of ``version`` as stored, up to ``limit_bytes`` decoded."""
    payloads: list[bytes] = []
    decoded = 0
    for path, size in chunk_files(version):
        payloads.append(path.read_bytes())
        decoded += size
        if decoded >= limit_bytes:
            break
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


def first_epoch_gbps(codec: Codec | str, files: Sequence[tuple[Path, int]], threads: int) -> float:
    """Decoded bytes per second (GB/s) of the work any first epoch from open does, on
    ``threads`` threads: each chunk file read with ``pread`` into a reused buffer, decoded
    by numcodecs into fresh memory that is kept (as a chunk cache keeps it: its pages are
    mapped and zeroed by the kernel once), and copied out once (as a batch hands each row
    out once). No checksum, no windows, no Python per sample: a loader can only approach it.

    Unlike :func:`decode_gbps`, whose output buffers are recycled (their pages stay
    mapped), this counts the cost of the memory a first epoch fills.
    """
    decode = _decoder_into(Codec(codec))
    largest = max(size for _, size in files)
    stored_largest = max(path.stat().st_size for path, _ in files)
    local = threading.local()

    def work(file: tuple[Path, int]) -> np.ndarray:
        path, size = file
        if not hasattr(local, "stored"):
            local.stored = np.empty(stored_largest, dtype=np.uint8)
            local.batch = np.empty(largest, dtype=np.uint8)
        fd = os.open(path, os.O_RDONLY)
        try:
            n = os.preadv(fd, [local.stored], 0)
        finally:
            os.close(fd)
        out = fresh_buffer((size,), np.uint8)
        decode(local.stored[:n], out)
        np.copyto(local.batch[:size], out)
        return out

    saved = numcodecs.blosc.use_threads
    numcodecs.blosc.use_threads = False
    try:
        with ThreadPoolExecutor(threads) as pool:
            started = time.perf_counter()
            kept = list(pool.map(work, files))
            elapsed = time.perf_counter() - started
    finally:
        numcodecs.blosc.use_threads = saved
    del kept
    return sum(size for _, size in files) / elapsed / 1e9


def _decoder_into(codec: Codec) -> Callable[[np.ndarray, np.ndarray], None]:
    if codec is Codec.ZSTD:
        zstd = numcodecs.Zstd()
        return lambda stored, out: zstd.decode(stored, out=out)
    if codec in (Codec.LZ4, Codec.BLOSC):
        blosc = numcodecs.Blosc()
        return lambda stored, out: blosc.decode(stored, out=out)
    raise ValueError(f"codec {codec.value} has no decode step")


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
