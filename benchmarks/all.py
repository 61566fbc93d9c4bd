"""Every benchmark in one run, the reference for the README: ``ticktensor bench all``.

    python benchmarks/all.py --quick --json benchmarks/results/bench-all-quick-DATE.json \
        --plot benchmarks/results/bench-all-quick-DATE.png
    ticktensor bench report benchmarks/results/bench-all-quick-DATE.json --readme README.md \
        --readme-plot benchmarks/results/bench-all-quick-DATE.png
"""

from __future__ import annotations

import sys

from ticktensor.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", "all", *sys.argv[1:]]))
