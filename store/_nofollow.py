"""The symlink rule of a local store: its files are opened, listed and removed without
following a link below the store root.

A store holds plain files in plain folders. A symlink anywhere below the root (an area
such as ``packs/``, a record's folder, a chunk, ``.lock``) could lead a read, a write or
a removal out of the store, so every path is walked from the root one folder at a time
with ``O_NOFOLLOW`` (``openat``), and a link met on the way is a
:class:`~ticktensor.errors.StoreCorruptError` naming it. The root itself may be a link
(the user chose it). Opening through folder descriptors also leaves no window between a
check and the use of a path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

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
    if create:
        os.makedirs(root, exist_ok=True)  # the root is the user's choice: links allowed
    fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
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
