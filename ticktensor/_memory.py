"""Host buffers whose pages are in place before the hot loops write them."""

from __future__ import annotations

import mmap
from typing import Any, Final

import numpy as np
import numpy.typing as npt

__all__ = ["POPULATE", "fresh_buffer"]


# Linux: map fresh buffers with their pages in place. Faulting 4 KiB pages one by one costs
# more than decoding into them on a VM (measured: 0.3-0.5 GB/s by faults, 2.4-3 GB/s at
# once), and numpy asks for transparent huge pages on large arrays, whose faults compact
# memory here (0.35 GB/s).
POPULATE: Final = getattr(mmap, "MAP_POPULATE", 0)


_SMALL: Final = 2**20  # below this, one mapping per buffer is not worth it


def fresh_buffer(
    shape: tuple[int, ...], dtype: type[np.generic] = np.float32, *, page_aligned: bool = False
) -> npt.NDArray[Any]:
    """A private, writable, C-contiguous array whose pages are in place.

    From 1 MiB: anonymous memory, mapped with ``MAP_POPULATE`` where the platform has it
    (page-aligned; its base is the ``mmap``, and the pages are freed when the last view
    goes). Smaller buffers come from ``numpy.empty`` (each mapping counts against the
    kernel's limit on mappings per process), aligned to a page when ``page_aligned``.
    """
    itemsize = np.dtype(dtype).itemsize
    nbytes = int(np.prod(shape)) * itemsize
    if nbytes < _SMALL:
        if not page_aligned:
            return np.empty(shape, dtype=dtype)
        page = mmap.PAGESIZE
        raw = np.empty(nbytes + page, dtype=np.uint8)
        skip = -raw.ctypes.data % page
        return raw[skip : skip + nbytes].view(dtype).reshape(shape)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | POPULATE
    region = mmap.mmap(-1, nbytes, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    return np.ndarray(shape, dtype=dtype, buffer=region)  # base: the region
