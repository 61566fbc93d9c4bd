"""Small text formatting helpers shared by the subcommands."""

from __future__ import annotations

__all__ = ["human_bytes", "ns_to_iso"]

from datetime import UTC, datetime


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def ns_to_iso(ns: int) -> str:
    """ns since the UNIX epoch (UTC) as ISO 8601 with microseconds."""
    dt = datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{(ns % 1_000_000_000) // 1000:06d}Z"
