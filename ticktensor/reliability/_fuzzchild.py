"""Child process of the fuzz phase: targets in turn, one JSON line of results per target.

``python -m ticktensor.reliability._fuzzchild SECONDS SEED DATA_DIR SAVE_DIR NAME...``.
Fuzzing in a child turns a hard crash (a segfault in a native library) into a finding
the parent reports (the target that did not print its line), instead of ending the run;
the parent then starts a new child for the remaining targets.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str]) -> int:
    from ticktensor.reliability.fuzz import fuzz
    from ticktensor.reliability.targets import make_targets

    seconds, seed, data, save, *names = argv
    for target in make_targets(Path(data) if data else None, names):
        result = fuzz(target, budget_s=float(seconds), seed=int(seed), save_dir=Path(save))
        doc = {
            "target": result.target,
            "inputs": result.inputs,
            "accepted": result.accepted,
            "rejected": result.rejected,
            "seconds": result.seconds,
            "errors": result.errors,
            "findings": [
                {"error": f.error, "path": f.path, "trace": f.trace} for f in result.findings[:20]
            ],
            "n_findings": len(result.findings),
        }
        print(json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
