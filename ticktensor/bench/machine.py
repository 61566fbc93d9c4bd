"""Where a benchmark ran: machine, library versions, git commit and the exact command."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["cpu_model", "describe_run", "gpu_name", "memory_bytes"]

_LIBRARIES = (
    "ticktensor",
    "numpy",
    "torch",
    "zarr",
    "numcodecs",
    "pyarrow",
    "matplotlib",
    "spdl",
    "litdata",
    "mosaicml-streaming",
)


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else :func:`platform.processor`)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def memory_bytes() -> int | None:
    """Physical memory in bytes, or ``None`` where the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def gpu_name() -> str | None:
    """The first CUDA device's name when torch is importable and sees one."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_name(0))


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def describe_run(argv: list[str] | None = None) -> dict[str, Any]:
    """Everything needed to reproduce and compare a result file.

    Parameters
    ----------
    argv
        The command line as run (default: :data:`sys.argv`).

    Returns
    -------
    dict
        ``command`` (shell-quoted), ``date`` (UTC, ISO 8601), ``machine`` (CPU model,
        cores, memory, GPU, platform, load average), ``versions`` (Python and
        libraries) and ``git`` (commit, and whether the work tree had changes).
    """
    argv = list(sys.argv if argv is None else argv)
    status = _git("status", "--porcelain", "--untracked-files=no")
    memory = memory_bytes()
    return {
        "command": shlex.join(argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "memory_gib": None if memory is None else round(memory / 2**30, 1),
            "gpu": gpu_name(),
            "platform": platform.platform(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
        "versions": _versions(),
        "git": {
            "commit": _git("rev-parse", "HEAD"),
            "dirty": bool(status) if status is not None else None,
        },
    }
