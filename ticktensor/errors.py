"""The error hierarchy: every error ticktensor raises on purpose is one of these.

Each error subclasses a builtin too, so callers that catch ``ValueError`` or
``OSError`` keep working. Messages name what was expected and what came:
the file, row or chunk, column, value and the rule that failed.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigError",
    "FormatVersionError",
    "InputError",
    "SchemaError",
    "SlowPathWarning",
    "StoreCorruptError",
    "StoreError",
    "StoreNotFoundError",
    "TickTensorError",
    "ValidationError",
    "VersionConflictError",
    "VersionNotFoundError",
]


class TickTensorError(Exception):
    """Base class of every error ticktensor raises deliberately."""


class ConfigError(TickTensorError, ValueError):
    """An option or spec has a value outside what it accepts."""


class CheckpointError(TickTensorError, ValueError):
    """A training checkpoint cannot be resumed here: another store version, another model
    configuration, or no readable file."""


class SchemaError(TickTensorError, ValueError):
    """Data does not have the columns, types or shape its schema requires."""


class ValidationError(SchemaError):
    """A row broke a validation rule (raised in strict mode)."""


class InputError(TickTensorError, OSError):
    """An input file cannot be read: corrupt, truncated or not in the format claimed."""


class StoreError(TickTensorError, OSError):
    """Base class of store problems."""


class StoreNotFoundError(StoreError, FileNotFoundError):
    """No ticktensor store exists at the given location."""


class FormatVersionError(StoreError):
    """The store or manifest was written by a format version this code cannot read."""


class StoreCorruptError(StoreError):
    """Stored bytes do not match the content hashes recorded in the manifest.

    ``problems`` lists ``(path, reason)`` for every damaged or missing file found.
    """

    def __init__(self, message: str, problems: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.problems: list[tuple[str, str]] = list(problems or [])


class VersionNotFoundError(StoreError, LookupError):
    """The requested store version does not exist."""


class VersionConflictError(StoreError):
    """A commit was based on a version that is no longer the latest, or clashes with it."""


class SlowPathWarning(UserWarning):
    """A window dataset goes through torch's per-sample path (or a torch option has no
    effect on the fast path): the message names the hook, the reason and the fast
    alternative."""
