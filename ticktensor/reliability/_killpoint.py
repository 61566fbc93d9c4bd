"""Child process of the SIGKILL faults: ingest, killing itself at the N-th storage step.

``python -m ticktensor.reliability._killpoint STORE KILL_AT FILE...`` counts every step
that changes the store (an atomic write, a streamed file, a Zarr chunk or metadata
write, a rename, a tree removal) and sends itself SIGKILL just before step ``KILL_AT``
(0: never). It prints ``steps N`` and, when it finishes, the job's row counts as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _install(kill_at: int) -> Callable[[], int]:
    import zarr.storage

    from ticktensor.store import Location

    steps = 0

    def step() -> None:
        nonlocal steps
        steps += 1
        if steps == kill_at:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def hooked(*args: Any, **kwargs: Any) -> Any:
            step()
            return original(*args, **kwargs)

        setattr(owner, name, hooked)

    set_chunk = zarr.storage.LocalStore.set

    async def hooked_set(self: Any, key: str, value: Any) -> None:
        step()
        await set_chunk(self, key, value)

    zarr.storage.LocalStore.set = hooked_set  # type: ignore[method-assign]
    for name in ("write_atomic", "open_atomic", "remove_tree"):
        wrap(Location, name)
    wrap(os, "replace")
    return lambda: steps


def main(argv: list[str]) -> int:
    store, kill_at, files = argv[0], int(argv[1]), argv[2:]
    count = _install(kill_at)
    from ticktensor.reliability.workload import Workload

    result = Workload.ingest(store, [Path(f) for f in files])
    print(f"steps {count()}")
    rows = {
        "read": result.rows_read,
        "stored": result.rows_stored,
        "quarantined": result.rows_quarantined,
        "version": result.version.version,
    }
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
