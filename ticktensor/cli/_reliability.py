"""``ticktensor reliability [--quick]``: fuzz, inject faults, race, soak; print the figures."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "reliability",
        help="fuzz inputs, inject faults, race writers, soak the loader; print the figures",
        description=__doc__,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="the fixed small budget (under 10 minutes on 2 cores); default: the long run",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the fuzzer and fault points")
    p.add_argument(
        "--data",
        type=Path,
        default=None,
        help="folder of real sample files to mutate (default: $TICKTENSOR_DATA or ../shared/data)",
    )
    p.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="scratch folder, kept (default: a temp dir, removed but for saved fuzz findings)",
    )
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="write figures as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ticktensor.reliability.report import format_report, run_report

    def log(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    report = run_report(
        quick=args.quick, seed=args.seed, data_dir=args.data, work_dir=args.work_dir, log=log
    )
    print(format_report(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_dict(), indent=1, default=str) + "\n")
    return 0 if report.passed else 1
