"""Append-only JSON-lines logs: one record per line, flushed as written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

__all__ = ["JsonLines", "read_jsonlines"]


class JsonLines:
    """Appends records to ``path``; each line is complete once :meth:`write` returns.

    A process killed mid-write can leave a torn last line, which
    :func:`read_jsonlines` skips.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"{self.path}: log is closed")
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_jsonlines(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The complete records of ``path`` (a torn last line is skipped); ``[]`` if missing."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
