"""``ticktensor verify STORE [--repair]``: re-hash stored files; remove orphaned debris."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tqdm import tqdm

from ticktensor.errors import StoreCorruptError
from ticktensor.store import Store

from ._format import human_bytes

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("verify", help="check a store's content hashes", description=__doc__)
    p.add_argument("store", help="store path or fsspec URL")
    p.add_argument("--version", type=int, default=None, help="version to verify (latest)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--repair",
        action="store_true",
        help="after verifying, remove files no published version refers to (debris of "
        "interrupted commits and killed jobs); published data is never touched",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="--repair keeps orphans younger than this, so a running job keeps its files "
        "(default 3600; 0 when no writer runs)",
    )
    p.add_argument("--dry-run", action="store_true", help="--repair: list, do not remove")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    code = _verify(args)
    if args.repair and code:
        # Repair keeps what the published versions list: on a store whose versions do
        # not read as written that list is not to be trusted.
        print("repair: not run, the store failed verification", file=sys.stderr)
    elif args.repair:
        _repair(args)
    return code


def _repair(args: argparse.Namespace) -> None:
    store = Store.open(args.store)
    report = store.repair(grace_s=args.grace, dry_run=args.dry_run)
    verb = "would remove" if report.dry_run else "removed"
    for rel, _ in report.removed:
        print(f"  {verb} {rel}")
    print(
        f"repair: {verb} {len(report.removed)} orphaned file(s), "
        f"{human_bytes(report.removed_bytes)}; {report.referenced} files of versions "
        f"0..{report.version} untouched"
    )
    if report.too_young:
        print(
            f"repair: kept {len(report.too_young)} orphan(s) younger than {args.grace:g} s "
            "(a job may still be writing them; --grace 0 when no writer runs)"
        )


def _verify(args: argparse.Namespace) -> int:
    """Verify the store; 1 (after printing why) when it or anything it holds is damaged,
    from its pointer on: nothing a reader would refuse passes."""
    store = Store.open(args.store)
    try:
        pinned = store.version(args.version)
    except StoreCorruptError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    with tqdm(
        total=pinned.nbytes,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=f"verify v{pinned.version}",
        disable=args.quiet or None,
        file=sys.stderr,
    ) as bar:
        try:
            report = store.verify(pinned.version, on_file=lambda _rel, n: bar.update(n))
        except StoreCorruptError as exc:
            bar.close()
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
    print(
        f"OK: version {report.version} of {store.url}: {report.files_checked} files, "
        f"{human_bytes(report.bytes_checked)} match their content hashes"
    )
    return 0
