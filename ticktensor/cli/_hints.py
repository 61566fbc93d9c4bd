"""Error hints in command-line words: the flag or the command where the API names a keyword.

The library's errors tell Python callers what to pass (``replace=True``); a user of
``ticktensor ingest`` needs the flag (``--replace``). The command rewrites the hint of
the errors it knows and leaves the rest of the message as the library wrote it.
"""

from __future__ import annotations

from ticktensor.errors import VersionConflictError

__all__ = ["INGEST_HINTS", "in_cli_words"]

#: (what the library says, what ``ticktensor ingest`` says instead).
INGEST_HINTS = (
    ("pass replace=True to supersede it", "pass --replace to supersede it"),
    ("reopen and redo the change", "another job published a version meanwhile: run this again"),
)


def in_cli_words(
    error: VersionConflictError, hints: tuple[tuple[str, str], ...]
) -> VersionConflictError:
    """``error`` with each library hint of ``hints`` replaced by its command-line words.

    Examples
    --------
    >>> error = VersionConflictError("AAA/2024-01-02 differs; pass replace=True to supersede it")
    >>> str(in_cli_words(error, INGEST_HINTS))
    'AAA/2024-01-02 differs; pass --replace to supersede it'
    """
    message = str(error)
    for library, cli in hints:
        message = message.replace(library, cli)
    return VersionConflictError(message)
