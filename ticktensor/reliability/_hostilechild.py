"""Child process of a hostile-store case: one JSON line per point, under a memory cap.

``python -m ticktensor.reliability._hostilechild NAME FOLDER MEMORY_MIB`` imports the
store, the loader and the CLI, caps its address space at what it holds then plus
``MEMORY_MIB``, and runs case ``NAME`` below ``FOLDER``. A case that ends by a signal
(a reader killed by SIGBUS) ends this process; the parent reports it.
"""

from __future__ import annotations

import importlib
import json
import resource
import sys
from dataclasses import asdict
from pathlib import Path

__all__ = ["main"]


def _address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv: list[str]) -> int:
    from ticktensor.reliability.hostile import CASES

    name, folder, memory_mib = argv
    for module in ("ticktensor.cli", "ticktensor.loaders", "torch"):
        importlib.import_module(module)  # before the cap: it bounds what a case adds
    cap = _address_space() + (int(memory_mib) << 20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    for outcome in CASES[name].run(Path(folder)):
        print(json.dumps(asdict(outcome)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
