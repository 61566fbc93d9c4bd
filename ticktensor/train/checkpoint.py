"""Training checkpoints: atomic files in one folder, the latest readable one found at start."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ticktensor.errors import CheckpointError
from ticktensor.store import StoreVersion

__all__ = ["FORMAT", "Checkpoints", "StoreIdentity"]

FORMAT = "ticktensor.train.checkpoint/1"
_NAME = re.compile(r"^step-(\d{9,})\.pt$")


@dataclass(frozen=True)
class StoreIdentity:
    """Which data a run trained on: the store version and a hash of its manifest.

    The hash covers every segment's content hash, so a store rebuilt at the same path
    with the same version number is still told apart.
    """

    url: str
    version: int
    manifest_sha256: str

    @classmethod
    def of(cls, version: StoreVersion) -> StoreIdentity:
        """The identity of a pinned store version."""
        digest = hashlib.sha256(version.manifest.to_json()).hexdigest()
        return cls(version.location.url, version.version, digest)

    def to_dict(self) -> dict[str, Any]:
        """Plain values for a checkpoint."""
        return asdict(self)

    def check_resumable(self, saved: Mapping[str, Any], where: str) -> None:
        """Raise :class:`CheckpointError` unless ``saved`` is this same store version."""
        version, digest = int(saved["version"]), str(saved["manifest_sha256"])
        if version != self.version:
            raise CheckpointError(
                f"{where} was trained on store version {version} of {saved['url']}, but "
                f"{self.url} opens at version {self.version}: resuming would change the "
                f"data mid-run. Pin the checkpoint's data with --store-version {version}, "
                "or start a new run in another --out folder"
            )
        if digest != self.manifest_sha256:
            raise CheckpointError(
                f"{where} was trained on store version {version} with manifest sha256 "
                f"{digest[:12]}..., but version {self.version} of {self.url} has "
                f"{self.manifest_sha256[:12]}...: another store with the same version "
                "number (rebuilt or replaced). Start a new run in another --out folder"
            )


class Checkpoints:
    """A folder of checkpoints ``step-000000123.pt``, written atomically.

    :meth:`save` writes a temporary file in the same folder, flushes it to disk and
    renames it into place, so a process killed at any moment leaves either the previous
    set or the new file complete, never a torn one. :meth:`latest` returns the newest
    file that loads; unreadable ones (damaged by hand, a full disk) are skipped with a
    warning. Files hold tensors, ints, floats, strings and containers of them, and are
    read with ``torch.load(weights_only=True)``: no arbitrary unpickling.

    Parameters
    ----------
    folder
        Where the checkpoints are (created on the first save).
    keep
        How many of the newest checkpoints to keep; older ones are deleted after a save.
    """

    def __init__(self, folder: str | os.PathLike[str], keep: int = 3) -> None:
        if keep < 1:
            raise CheckpointError(f"keep: expected an integer >= 1, got {keep!r}")
        self.folder = Path(folder)
        self.keep = int(keep)

    def paths(self) -> list[Path]:
        """Checkpoint files, newest (highest step) first."""
        if not self.folder.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.folder.iterdir() if (m := _NAME.match(p.name))]
        return [p for _, p in sorted(found, reverse=True)]

    def save(self, state: Mapping[str, Any], step: int) -> Path:
        """Write ``state`` as the checkpoint of ``step``, atomically; returns its path."""
        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.folder / f"step-{step:09d}.pt"
        tmp = self.folder / f".{final.name}.{os.getpid()}.tmp"
        try:
            with tmp.open("wb") as f:
                torch.save({"format": FORMAT, **state}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        _fsync_dir(self.folder)
        for old in self.paths()[self.keep :]:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()
        return final

    def load(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Read one checkpoint; :class:`CheckpointError` if it is not one."""
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises several types for torn or foreign files
            raise CheckpointError(f"{path}: not a readable checkpoint ({exc})") from exc
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise CheckpointError(f"{path}: not a {FORMAT} file")
        return state

    def latest(self) -> tuple[Path, dict[str, Any]] | None:
        """The newest readable checkpoint and its state, or ``None`` when there is none."""
        for path in self.paths():
            try:
                return path, self.load(path)
            except CheckpointError as exc:
                warnings.warn(f"skipping {exc}", RuntimeWarning, stacklevel=2)
        return None

    def remove_temporaries(self) -> list[Path]:
        """Delete temporary files left by a process killed while saving; returns them."""
        if not self.folder.is_dir():
            return []
        stale = [p for p in self.folder.iterdir() if p.name.startswith(".") and p.suffix == ".tmp"]
        for path in stale:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        return stale


def _fsync_dir(folder: Path) -> None:
    # The rename is durable only once the directory entry is on disk (POSIX).
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
