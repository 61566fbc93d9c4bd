"""An fsspec filesystem that fails on purpose: ``ttfaulty://`` (in memory).

Every byte written (``pipe_file`` or a file opened for writing) is charged against
:attr:`FaultyFileSystem.budget`; the write that would exceed it raises
``OSError(ENOSPC)`` naming the file, as a full disk does. Reading a path listed in
:attr:`FaultyFileSystem.broken` raises ``OSError(EIO)``, as a bad sector does. Data
lives in memory, private to this class.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.memory import MemoryFileSystem

__all__ = ["FaultyFileSystem"]


class FaultyFileSystem(MemoryFileSystem):  # type: ignore[misc]
    """In-memory filesystem with a byte budget (``None``: unlimited) and broken paths."""

    protocol = ("ttfaulty",)
    root_marker = "/"
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    budget: ClassVar[int | None] = None
    written: ClassVar[int] = 0
    broken: ClassVar[set[str]] = set()

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith("ttfaulty://"):
            path = "/" + path[len("ttfaulty://") :].lstrip("/")
        return super()._strip_protocol(path)

    @classmethod
    @contextlib.contextmanager
    def limit(cls, budget: int | None) -> Iterator[None]:
        """Allow ``budget`` more bytes to be written inside the block."""
        cls.budget, cls.written = budget, 0
        try:
            yield
        finally:
            cls.budget, cls.written = None, 0

    def _charge(self, path: str, n: int) -> None:
        cls = type(self)
        if cls.budget is not None and cls.written + n > cls.budget:
            raise OSError(errno.ENOSPC, "No space left on device (injected)", path)
        cls.written += n

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        self._charge(path, len(value))
        super().pipe_file(path, value, *args, **kwargs)

    def cat_file(self, path: str, *args: Any, **kwargs: Any) -> Any:
        self._check_read(path)
        return super().cat_file(path, *args, **kwargs)

    def _check_read(self, path: str) -> None:
        if self._strip_protocol(path) in type(self).broken:
            raise OSError(errno.EIO, "Input/output error (injected)", path)

    def _open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if "r" in mode:
            self._check_read(path)
        f = super()._open(path, mode, *args, **kwargs)
        if "w" in mode or "a" in mode:
            write = f.write

            def charged(data: Any) -> int:
                self._charge(path, len(data))
                return int(write(data))

            f.write = charged
        return f


fsspec.register_implementation("ttfaulty", FaultyFileSystem, clobber=True)
