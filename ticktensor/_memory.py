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


def fresh_buffer(shape: tuple[int, ...], dtype: type[np.generic] = np.float32) -> npt.NDArray[Any]:
    """A private, writable, C-contiguous, page-aligned array, its pages mapped.

    Anonymous memory, mapped with ``MAP_POPULATE`` where the platform has it; its base is
    the ``mmap``, and the pages are freed when the last view goes.
    """
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if nbytes == 0:
        return np.empty(shape, dtype=dtype)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | POPULATE
    region = mmap.mmap(-1, nbytes, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    return np.ndarray(shape, dtype=dtype, buffer=region)  # base: the region
