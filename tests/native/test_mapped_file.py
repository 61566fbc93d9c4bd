"""map_file: a read-only mapping that holds no file descriptor."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from ticktensor.kernels import map_file


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
def test_mappings_hold_no_descriptor_and_outlive_it(tmp_path: Path) -> None:
    data = np.arange(10_000, dtype=np.float32)
    paths = []
    for i in range(50):
        path = tmp_path / f"chunk{i}"
        (data + i).tofile(path)
        paths.append(path)
    before = _open_fds()
    views = []
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            views.append(map_file(fd, os.fstat(fd).st_size, populate=True, willneed=True))
        finally:
            os.close(fd)
    assert _open_fds() == before  # Python's mmap would hold 50 more
    for i, view in enumerate(views):
        assert not view.flags.writeable
        np.testing.assert_array_equal(view.view(np.float32), data + i)


def test_errors_are_os_errors_with_errno() -> None:
    with pytest.raises(OSError, match="mmap of descriptor 987654") as info:
        map_file(987_654, 4096)  # not an open descriptor
    assert info.value.errno == errno.EBADF
    with pytest.raises(ValueError, match="size"):
        map_file(0, 0)
