"""The symlink rule of a local store: its files are opened, listed and removed without
following a link below the store root.

A store holds plain files in plain folders. A symlink anywhere below the root (an area
such as ``packs/``, a record's folder, a chunk, ``.lock``) could lead a read, a write or
a removal out of the store, so every path is opened from the root following no link: in
one ``openat2(2)`` with ``RESOLVE_NO_SYMLINKS`` where Linux has it, else (and whenever
that call fails) walked one folder at a time with ``O_NOFOLLOW`` (``openat``), and a link
met on the way is a :class:`~ticktensor.errors.StoreCorruptError` naming it. The root
itself may be a link (the user chose it). Opening through folder descriptors also leaves
no window between a check and the use of a path.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import stat
import sys
from collections.abc import Iterator
from typing import Any

from ticktensor.errors import StoreCorruptError

__all__ = [
    "SymlinkError",
    "find_link",
    "open_below",
    "open_folder",
    "regular_files",
    "unlink_below",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FOLDER = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_SYS_OPENAT2 = 437  # on x86-64 and arm64 (the unified table; Linux 5.6 on)
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08  # nothing above the folder either (".." never leads out)
_UNIFIED = frozenset({"x86_64", "aarch64", "arm64"})


def _syscall() -> Any:
    """libc's ``syscall`` on Linux on x86-64 or arm64, else ``None``."""
    if not sys.platform.startswith("linux") or platform.machine() not in _UNIFIED:
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.argtypes = [
        ctypes.c_long,
        ctypes.c_long,
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.c_size_t,
    ]
    function.restype = ctypes.c_long
    return function


_SYSCALL = _syscall()
_OPENAT2 = {"works": _SYSCALL is not None}


def _open_resolved(folder: int, rel: str, flags: int, mode: int = 0) -> int | None:
    """``rel`` below the folder open as ``folder``, opened in one ``openat2(2)`` that
    refuses a symlink anywhere on the way (``RESOLVE_NO_SYMLINKS``); ``None`` when that
    fails for any reason (a link, a missing file or folder, a kernel without the call).
    The callers then walk the path a folder at a time, which names the link or the
    missing folder, and makes missing folders: the answer is the walk's either way."""
    if not _OPENAT2["works"]:
        return None
    how = _OpenHow(
        flags | _NOFOLLOW | _CLOEXEC,
        mode if flags & os.O_CREAT else 0,
        _RESOLVE_NO_SYMLINKS | _RESOLVE_BENEATH,
    )
    fd = int(_SYSCALL(_SYS_OPENAT2, folder, rel.encode(), ctypes.byref(how), ctypes.sizeof(how)))
    if fd >= 0:
        return fd
    if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM):  # no openat2 here (or seccomp)
        _OPENAT2["works"] = False
    return None


class SymlinkError(StoreCorruptError):
    """A symlink below the store root; ``rel`` is its path relative to the root."""

    def __init__(self, root: str, rel: str, where: str | None = None) -> None:
        prefix = f"{where}: " if where else ""
        super().__init__(
            f"{prefix}{root.rstrip('/')}/{rel} is a symlink; a store holds plain files and "
            "folders only, and nothing is read, written or removed through a link (it could "
            "lead outside the store root; rule: store_relative_path)",
            [(rel, "symlink")],
        )
        self.rel = rel


def _is_link(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=folder).st_mode)
    except OSError:
        return False


def open_folder(root: str, rel: str, *, create: bool = False) -> int:
    """A descriptor of the folder ``rel`` below ``root`` (``""``: the root), each folder
    on the way opened without following a link; missing ones are made with ``create``.

    Raises :class:`SymlinkError` naming the link
    when a folder on the way is a symlink, ``FileNotFoundError`` when one is missing.
    """
    try:
        fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except OSError:
        if not create:
            raise
        os.makedirs(root, exist_ok=True)  # the root is the user's choice: links allowed
        fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    path = "/".join(p for p in rel.split("/") if p)
    if path:
        found = _open_resolved(fd, path, os.O_RDONLY | _DIRECTORY)
        if found is not None:
            os.close(fd)
            return found
    done: list[str] = []
    try:
        for name in [p for p in rel.split("/") if p]:
            done.append(name)
            try:
                nxt = os.open(name, _FOLDER, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    missing = f"{root}/{'/'.join(done)}"
                    raise FileNotFoundError(
                        errno.ENOENT, os.strerror(errno.ENOENT), missing
                    ) from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
                nxt = os.open(name, _FOLDER, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(name, fd):
                    raise SymlinkError(root, "/".join(done)) from None
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_below(root: str, rel: str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of the file ``rel`` below ``root`` with ``flags``, following no link
    (the file's folders are made when ``flags`` has ``O_CREAT``). Raises
    :class:`SymlinkError` when the file or a folder on its way is a symlink."""
    if "/" in rel and not rel.startswith("/"):  # in a folder: one openat2 when it works
        top = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        try:
            found = _open_resolved(top, rel, flags, mode)
        finally:
            os.close(top)
        if found is not None:
            return found
    folder, _, name = rel.rpartition("/")
    fd = open_folder(root, folder, create=bool(flags & os.O_CREAT))
    try:
        return os.open(name, flags | _NOFOLLOW | _CLOEXEC, mode, dir_fd=fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP or _is_link(name, fd):
            raise SymlinkError(root, rel) from None
        raise type(exc)(exc.errno, exc.strerror, f"{root}/{rel}") from None
    finally:
        os.close(fd)


def find_link(root: str, rel: str, *, below: bool = False) -> str | None:
    """The first symlink on the way from ``root`` to ``rel`` (``rel`` included), or with
    ``below`` inside the folder ``rel`` too; ``None`` when there is none (or ``rel``
    does not exist)."""
    parts = [p for p in rel.split("/") if p]
    for i in range(1, len(parts) + 1):
        path = os.path.join(root, *parts[:i])
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(mode):
            return "/".join(parts[:i])
    if below:
        top = os.path.join(root, *parts)
        for base, dirs, files in os.walk(top):  # never descends into a link
            for name in dirs + files:
                full = os.path.join(base, name)
                if os.path.islink(full):
                    return os.path.relpath(full, root)
    return None


def regular_files(root: str, rel: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every regular file below the folder ``rel`` (paths relative to ``rel``, sorted
    within each folder) with its ``lstat``; a symlink met is :class:`SymlinkError`, other
    kinds of files (FIFOs, sockets) are skipped. A missing ``rel`` holds none."""
    link = find_link(root, rel)
    if link is not None:
        raise SymlinkError(root, link)
    top = os.path.join(root, rel)
    if not os.path.isdir(top):
        return
    for base, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(dirs + files):
            full = os.path.join(base, name)
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                raise SymlinkError(root, os.path.relpath(full, root))
            if stat.S_ISREG(info.st_mode):
                yield os.path.relpath(full, top), info


def unlink_below(root: str, rel: str) -> bool:
    """Remove ``rel`` below ``root`` if it is a regular file in plain folders; ``False``
    when it is gone already. A link or anything but a regular file is never removed."""
    folder, _, name = rel.rpartition("/")
    try:
        fd = open_folder(root, folder)
    except FileNotFoundError:
        return False
    try:
        info = os.lstat(name, dir_fd=fd)
        if stat.S_ISLNK(info.st_mode):
            raise SymlinkError(root, rel)
        if not stat.S_ISREG(info.st_mode):
            raise StoreCorruptError(f"{root}/{rel}: not a regular file; left as it is")
        os.unlink(name, dir_fd=fd)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)
