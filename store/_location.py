"""Where a store lives: a local directory or any fsspec URL, with atomic small writes."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import fsspec
from fsspec.implementations.local import LocalFileSystem
from zarr.abc.store import Store as ZarrStore
from zarr.storage import FsspecStore, LocalStore

from ticktensor.errors import StoreCorruptError, StoreError, TickTensorError

from ._nofollow import (
    SymlinkError,
    find_link,
    open_below,
    open_folder,
    regular_files,
    unlink_below,
)
from ._object_errors import object_store_error

__all__ = ["Location", "check_relative", "safe_component", "start_writeback"]


def safe_component(name: str) -> str:
    """Encode ``name`` (a symbol or session) as one path component.

    Symbols such as ``BTC/USDT`` or ``ES H4`` must not create directories or
    spaces in object keys; ``%``-encoding keeps the mapping reversible.
    """
    if not name:
        raise ValueError("a symbol or session name must not be empty")
    encoded = quote(name, safe="-_.~+=@")
    if encoded in {".", ".."}:
        encoded = encoded.replace(".", "%2E")
    return encoded


def check_relative(rel: object, where: str, *, prefix: str = "") -> str:
    """``rel`` if it is a safe relative path inside a store (below ``prefix``), else raise.

    Paths come from manifests, which are data: one must not name a file outside the
    store (absolute paths, ``..``, backslashes, NUL) or outside its area (``segments/``,
    ``events/``). Raises :class:`~ticktensor.errors.StoreCorruptError` naming ``where``.
    """
    parts = rel.split("/") if isinstance(rel, str) else []
    bad = (
        not parts
        or not isinstance(rel, str)
        or rel.startswith("/")
        or "\\" in rel
        or "\0" in rel
        or ":" in parts[0]
        or any(p in {"", ".", ".."} for p in parts)
        or not rel.startswith(prefix)
    )
    if bad:
        area = f" below {prefix!r}" if prefix else ""
        raise StoreCorruptError(
            f"{where}: path {rel!r} is not a relative path inside the store{area} "
            "(rule: store_relative_path)"
        )
    return str(rel)


@dataclass(frozen=True)
class Location:
    """A store root: a filesystem and a path on it.

    Parameters
    ----------
    url
        A local path, ``file://`` URL or any fsspec URL (``memory://``, ``s3://`` ...).
    storage_options
        Passed to fsspec when the filesystem is created.
    """

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    root: str = field(init=False)
    _local: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        url = os.fspath(self.url)
        fs, root = fsspec.core.url_to_fs(url, **self.storage_options)
        object.__setattr__(self, "url", url)
        object.__setattr__(self, "root", root.rstrip("/") or "/")
        object.__setattr__(self, "_owned_fs", (os.getpid(), fs))
        object.__setattr__(self, "_local", isinstance(fs, LocalFileSystem))

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The fsspec filesystem, created in this process.

        A filesystem made before ``fork()`` is unusable in the child (s3fs and other
        async filesystems hold the parent's event loop and connections), so a process
        that did not create it, or a location that was unpickled, makes its own on first
        use; fsspec's instance cache is keyed by process id and never hands back the
        parent's instance.
        """
        owned: tuple[int, fsspec.AbstractFileSystem] | None = self.__dict__.get("_owned_fs")
        pid = os.getpid()
        if owned is not None and owned[0] == pid:
            return owned[1]
        fs, _ = fsspec.core.url_to_fs(self.url, **self.storage_options)
        object.__setattr__(self, "_owned_fs", (pid, fs))
        return fs

    def __getstate__(self) -> dict[str, Any]:
        # The filesystem is made again where the location is unpickled.
        return {k: v for k, v in self.__dict__.items() if k != "_owned_fs"}

    @property
    def is_local(self) -> bool:
        """True when the store is on the local filesystem (mmap and file locks work)."""
        return self._local

    def path(self, rel: str) -> str:
        """The filesystem path of ``rel`` (a ``/``-separated path inside the store)."""
        return f"{self.root}/{rel}" if rel else self.root

    def refuse_links(self, rel: str, *, below: bool = False, where: str | None = None) -> None:
        """On a local store, refuse ``rel`` when it or a folder on its way from the root
        is a symlink (with ``below``, when anything inside the folder ``rel`` is one).

        A store holds plain files in plain folders, so nothing read, written or removed
        leads out of it. Raises :class:`~ticktensor.errors.StoreCorruptError` naming the
        link (and ``where``). Object stores have no links.
        """
        if not self.is_local:
            return
        link = find_link(self.root, rel, below=below)
        if link is not None:
            raise SymlinkError(self.root, link, where)

    def display(self, rel: str) -> str:
        """``rel`` as a URL a user can paste (used in error messages)."""
        full = self.path(rel)
        return full if self.is_local else str(self.fs.unstrip_protocol(full))

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` exists. On a local store a symlink at ``rel`` or on its way is
        a :class:`~ticktensor.errors.StoreCorruptError` (never an answer about the link's
        target, nor "absent" for a dangling one)."""
        if self.is_local:
            self.refuse_links(rel)
            return os.path.lexists(self.path(rel))
        with self.talking():
            return bool(self.fs.exists(self.path(rel)))

    def read_bytes(self, rel: str, *, limit: int | None = None) -> bytes:
        """The bytes of ``rel``; a local file is opened without following links.

        With ``limit``, a file larger than ``limit`` bytes is a
        :class:`~ticktensor.errors.StoreCorruptError` before it is read (a local file's
        size is looked up first; an object store reads at most ``limit + 1`` bytes), so
        a document of absurd size never reaches memory or a parser.
        """
        if self.is_local:
            fd = open_below(self.root, rel, os.O_RDONLY)
            with open(fd, "rb", closefd=True) as f:
                if limit is not None:
                    self._check_size(rel, os.fstat(fd).st_size, limit)
                return f.read()
        with self.talking():
            if limit is None:
                data: bytes = self.fs.cat_file(self.path(rel))
            else:
                data = self.fs.cat_file(self.path(rel), start=0, end=limit + 1)
                self._check_size(rel, len(data), limit)
        return data

    def _check_size(self, rel: str, size: int, limit: int) -> None:
        if size > limit:
            shown = f"{size:,}" if self.is_local else f"more than {limit:,}"
            raise StoreCorruptError(
                f"{self.display(rel)}: {shown} bytes; a file of this kind holds at most "
                f"{limit:,}, so it is not read (rule: document_size)",
                [(rel, "too large")],
            )

    def read_range(self, rel: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``rel`` (one ranged request on an object store; a
        local file is opened without following links)."""
        if self.is_local:
            fd = open_below(self.root, rel, os.O_RDONLY)
            try:
                return os.pread(fd, max(0, end - start), start)
            finally:
                os.close(fd)
        with self.talking():
            data: bytes = self.fs.cat_file(self.path(rel), start=start, end=end)
        return data

    def size(self, rel: str) -> int:
        """Bytes of the file ``rel`` (a local one opened without following links)."""
        if self.is_local:
            fd = open_below(self.root, rel, os.O_RDONLY)
            try:
                return os.fstat(fd).st_size
            finally:
                os.close(fd)
        with self.talking():
            return int(self.fs.size(self.path(rel)))

    def find(self, rel: str) -> list[str]:
        """Every file below ``rel``, as sorted paths relative to ``rel``.

        On a local store only regular files count and no link is followed: a symlink
        below ``rel`` (or on its way) is a :class:`~ticktensor.errors.StoreCorruptError`.
        """
        if self.is_local:
            return sorted(name for name, _ in regular_files(self.root, rel))
        base = self.path(rel).rstrip("/") + "/"
        with self.talking():
            found = self.fs.find(self.path(rel))
        stripped = (self.fs._strip_protocol(p) for p in found)
        return sorted(p[len(base) :] for p in stripped if p.startswith(base))

    def write_content_addressed(
        self, rel: str, data: bytes | Sequence[bytes | memoryview], sha256: str, *, exists: bool
    ) -> bool:
        """Write a file of a content-addressed folder (a segment or a pack); ``False`` when
        it is already there with these bytes (``sha256``) and was left as it is.

        ``exists`` says the folder was there before this write. Such a folder is never
        removed: it may belong to an older version (the same content written again), or
        be what an interrupted write left, whose files are then the same bytes. A file
        there with other bytes (another writer's encoding) is a ``StoreError``: a
        published file is never rewritten.
        """
        if exists and self.exists(rel):
            parts = [data] if isinstance(data, bytes | bytearray | memoryview) else list(data)
            size = sum(len(p) for p in parts)
            if not self._holds(rel, size, sha256):
                raise self._other_bytes(rel)
            return False
        self.write_atomic(rel, data, durable=False)  # flushed at the commit
        return True

    def _holds(self, rel: str, size: int, sha256: str) -> bool:
        """Whether the file ``rel`` holds ``size`` bytes of sha256 ``sha256``."""
        return self.size(rel) == size and hashlib.sha256(self.read_bytes(rel)).hexdigest() == sha256

    def _other_bytes(self, rel: str) -> StoreError:
        return StoreError(
            f"{self.display(rel)} exists with other bytes than this write's; it may belong "
            "to a published version (written by another ticktensor version): write with "
            "another layout, or remove it with `ticktensor verify --repair` if no version "
            "refers to it"
        )

    def move_content_addressed(self, src: str, rel: str, sha256: str, *, exists: bool) -> bool:
        """Move the finished file ``src`` (of this local store) to ``rel`` of a
        content-addressed folder; ``False`` when ``rel`` is already there with these bytes
        (``sha256``), and ``src`` is then removed. The rules of
        :meth:`write_content_addressed` hold: a file at ``rel`` with other bytes is a
        ``StoreError``, and a folder that was there (``exists``) is never removed.
        """
        if not self.is_local:
            raise StoreError(f"{self.display(src)}: files move within a local store only")
        if exists and self.exists(rel):
            if not self._holds(rel, os.path.getsize(self.path(src)), sha256):
                raise self._other_bytes(rel)
            unlink_below(self.root, src)
            return False
        self.refuse_links(src)  # this writer's own file: its path is checked, then moved
        folder, _, name = rel.rpartition("/")
        with self.writing(rel), self._folder(folder) as to:
            os.replace(self.path(src), name, dst_dir_fd=to)
        return True

    def create_local(self, rel: str) -> str:
        """Create the empty local file ``rel`` (and its folders) following no link, and
        return its path, for a writer that opens it by name (pyarrow, a shard writer).

        The file is created exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``): a name
        that exists, a symlink at it or on its way is refused, so the writer's later
        open by path writes into the store. Working files have random names.
        """
        with self.writing(rel):
            os.close(open_below(self.root, rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        return self.path(rel)

    @contextlib.contextmanager
    def _folder(self, rel: str, *, create: bool = True) -> Iterator[int]:
        """A descriptor of the local folder ``rel``, opened (and made) following no link."""
        fd = open_folder(self.root, rel, create=create)
        try:
            yield fd
        finally:
            os.close(fd)

    def remove_tree(self, rel: str) -> None:
        """Remove the folder ``rel`` and everything in it (never through a link)."""
        if self.is_local:
            self.refuse_links(rel)  # rmtree itself neither follows nor removes inner links
        if self.exists(rel):
            with self.talking():
                self.fs.rm(self.path(rel), recursive=True)

    def makedirs(self, rel: str) -> None:
        if self.is_local:
            with self._folder(rel):
                return
        with self.talking():
            self.fs.makedirs(self.path(rel), exist_ok=True)

    @contextlib.contextmanager
    def talking(self) -> Iterator[None]:
        """Turn an object store's failure to answer (no endpoint, credentials or bucket)
        into one :class:`~ticktensor.errors.StoreError` naming the setting to fix."""
        try:
            yield
        except TickTensorError:
            raise
        except Exception as exc:
            error = (
                None
                if self.is_local
                else object_store_error(exc, self.display(""), self.storage_options)
            )
            if error is None:
                raise
            raise error from exc

    def write_atomic(
        self, rel: str, data: bytes | Sequence[bytes | memoryview], *, durable: bool = True
    ) -> None:
        """Write ``data`` (bytes, or parts written back to back) to ``rel`` so that readers
        see the old or the new bytes, never a mix.

        Local files are written to a temporary sibling, flushed to disk (unless
        ``durable=False``, for scratch files) and renamed over the target (POSIX rename
        is atomic). Object stores publish a single PUT atomically (``pipe_file``).
        """
        parts = [data] if isinstance(data, bytes | bytearray | memoryview) else list(data)
        if not self.is_local:
            with self.talking():
                self.fs.pipe_file(self.path(rel), b"".join(parts))
            return
        with self._new_file(rel, durable=durable) as f:
            f.writelines(parts)  # no joined copy of a shard's chunks
            f.flush()
            if durable:
                os.fsync(f.fileno())

    @contextlib.contextmanager
    def _new_file(self, rel: str, *, durable: bool = False) -> Iterator[Any]:
        """A new local temporary file beside ``rel``, renamed over ``rel`` when the block
        ends without an error (the rename made durable with ``durable``), else removed.

        The folders on the way are opened (and made) without following links, and the
        temporary file is created exclusively (``O_EXCL | O_NOFOLLOW``): nothing that
        was planted under its name is written through.
        """
        folder, _, name = rel.rpartition("/")
        tmp = f"{name}.tmp-{uuid.uuid4().hex}"
        with self.writing(rel), self._folder(folder) as at:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                with open(os.open(tmp, flags, 0o644, dir_fd=at), "wb", closefd=True) as f:
                    yield f
                os.replace(tmp, name, src_dir_fd=at, dst_dir_fd=at)
                if durable:
                    os.fsync(at)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=at)

    def flush(self) -> None:
        """Make every file written to this store so far durable, renames included.

        The commit calls it once before it writes the manifest, instead of an fsync per
        data file (a wide universe writes hundreds of tables and segment files). Local
        stores: one ``syncfs(2)`` of the store's filesystem (``os.sync()`` where the
        platform has no ``syncfs``). Object stores store each PUT durably already.
        """
        if not self.is_local:
            return
        if _SYNCFS is None:
            os.sync()
            return
        fd = os.open(self.path(""), os.O_RDONLY)
        try:
            if _SYNCFS(fd) != 0:
                errno = ctypes.get_errno()
                raise StoreError(errno, f"{os.strerror(errno)} (flushing)", self.display(""))
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def open_atomic(self, rel: str) -> Iterator[Any]:
        """A binary file to stream into; it appears at ``rel`` whole, or not at all.

        For scratch data (no fsync): local files are renamed into place on success,
        object stores publish the upload when it is closed.
        """
        target = self.path(rel)
        if not self.is_local:
            with self.talking():
                f = self.fs.open(target, "wb")
            try:
                yield f
            except BaseException:
                # Closing would publish the partial upload (or, in memory, it is already
                # visible): abort it and remove whatever appeared at the target.
                self._abandon(f, target)
                raise
            with self.talking():
                f.close()
            return
        with self._new_file(rel) as f:
            yield f

    @contextlib.contextmanager
    def writing(self, rel: str) -> Iterator[None]:
        """Writing ``rel``: OS errors (ENOSPC, EIO ...) that name no file name it."""
        try:
            yield
        except StoreError:
            raise
        except OSError as exc:
            if exc.filename is not None or exc.errno is None:
                raise
            raise StoreError(exc.errno, f"{exc.strerror} (writing)", self.display(rel)) from exc

    def _abandon(self, f: Any, target: str) -> None:
        with contextlib.suppress(Exception):
            discard = getattr(f, "discard", None)
            if callable(discard):
                discard()
            f.closed = True  # buffered fsspec files would otherwise flush on __del__
        with contextlib.suppress(Exception):
            if self.fs.exists(target):
                self.fs.rm_file(target)

    @contextlib.contextmanager
    def lock(self, rel: str) -> Iterator[None]:
        """Serialize writers on a local store with an exclusive ``flock``.

        Object stores have no portable lock; there the commit relies on the
        version check done under this (no-op) lock, see docs/store-format.md. A symlink
        at ``rel`` or on its way is a :class:`~ticktensor.errors.StoreCorruptError`.
        """
        if not self.is_local:
            yield
            return
        # No link is followed: a dangling ``.lock`` link must not create its target.
        fd = open_below(self.root, rel, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def zarr_store(self, rel: str, *, read_only: bool) -> ZarrStore:
        """A zarr-python store rooted at ``rel``."""
        if self.is_local:
            return LocalStore(self.path(rel), read_only=read_only)
        url = str(self.fs.unstrip_protocol(self.path(rel)))
        return FsspecStore.from_url(
            url, storage_options=self.storage_options or None, read_only=read_only
        )


def _libc(name: str) -> Any:
    """libc's function ``name`` (Linux), or ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    return function


_SYNCFS = _libc("syncfs")
_SYNC_FILE_RANGE = _libc("sync_file_range")
if _SYNC_FILE_RANGE is not None:
    _SYNC_FILE_RANGE.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int) -> None:
    """Ask the kernel to start writing the dirty pages of the file open as ``fd`` to disk,
    without waiting for them (Linux ``sync_file_range``; elsewhere nothing).

    The commit's :meth:`Location.flush` makes every new file durable at once; a file
    written over seconds (a pack's shard, a session's table) whose pages start on their
    way as it grows leaves that flush little to wait for. Durability is unchanged: the
    flush still waits for every page. A failure is ignored for the same reason.
    """
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)
