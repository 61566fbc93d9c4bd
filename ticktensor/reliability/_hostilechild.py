"""Child process of the hostile-store cases: each case in turn, each under a memory cap.

``python -m ticktensor.reliability._hostilechild ROOT NAME...`` imports the store, the
loader and the CLI, then runs each case ``NAME`` in a fresh ``ROOT/NAME`` with its address
space capped at what the process holds when the case starts plus the case's
``memory_mib``. It prints one JSON line per point and ``{"case_done": NAME}`` after each
case. A case that ends by a signal (a reader killed by SIGBUS) ends this process; the
parent reports it and starts another child for the cases left.
"""

from __future__ import annotations

import importlib
import json
import resource
import shutil
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

    root, *names = argv
    for module in ("ticktensor.cli", "ticktensor.loaders", "torch"):
        importlib.import_module(module)  # before any cap: a cap bounds what a case adds
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    for name in names:
        case = CASES[name]
        cap = _address_space() + (case.memory_mib << 20)
        resource.setrlimit(
            resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard)
        )
        folder = Path(root) / name
        shutil.rmtree(folder, ignore_errors=True)  # a work folder given again: start afresh
        try:
            for outcome in case.run(folder):
                print(json.dumps(asdict(outcome)), flush=True)
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
        print(json.dumps({"case_done": name}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
