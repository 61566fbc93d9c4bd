"""``ticktensor migrate STORE``: store each session held by segments as one pack."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tqdm import tqdm

from ticktensor.store import Codec, MigrateReport, SessionMigration, Store, migrate

from ._flag_types import positive_int
from ._format import human_bytes

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "migrate",
        help="store each session's segments as one pack",
        description=__doc__
        + " Each pack is read back and checked against the segments' content hashes before "
        "it is committed; older versions keep their segments; event tables are unchanged.",
    )
    p.add_argument("store", help="store path or fsspec URL")
    p.add_argument("--dry-run", action="store_true", help="say what would change; write nothing")
    p.add_argument(
        "--session",
        action="append",
        dest="sessions",
        metavar="SESSION",
        help="migrate only this session (repeatable; default: every session)",
    )
    p.add_argument(
        "--codec",
        choices=[c.value for c in Codec],
        help="codec of the packs (default: the segments' own, or the store's default)",
    )
    p.add_argument("--chunk-rows", type=positive_int, help="rows per inner chunk of the packs")
    p.add_argument(
        "--commit-every",
        type=positive_int,
        default=None,
        metavar="N",
        help="commit after every N sessions (default: the whole run is one version)",
    )
    p.add_argument("--threads", type=positive_int, default=4, help="segments read at once")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    store = Store.open(args.store)
    plan = migrate(store, sessions=args.sessions, dry_run=True)
    if not plan.sessions:
        print(_nothing_to_do(store, plan))
        return 0
    if args.dry_run:
        for item in plan.sessions:
            print(f"  would pack {_segments_text(item)}")
        print(
            f"dry run: would write {len(plan.sessions)} pack(s) replacing {plan.segments} "
            f"segment(s) ({plan.rows:,} rows) of version {plan.base_version} in "
            f"{_commits_text(len(plan.sessions), args.commit_every)}; nothing written"
        )
        return 0
    with tqdm(
        total=len(plan.sessions),
        unit="session",
        desc="migrate",
        disable=args.quiet or None,
        file=sys.stderr,
    ) as bar:

        def done(item: SessionMigration) -> None:
            bar.write(f"  packed {_segments_text(item)} -> {_pack_text(item)}, checked")
            bar.update(1)

        report = migrate(
            store,
            sessions=args.sessions,
            codec=args.codec,
            chunk_rows=args.chunk_rows,
            commit_every=args.commit_every or 0,
            threads=args.threads,
            on_session=done,
        )
    versions = ", ".join(str(v) for v in report.versions) or "none"
    print(
        f"migrated {len(report.sessions)} session(s): {report.segments} segment(s) -> "
        f"{len(report.sessions)} pack(s), {report.rows:,} rows, in {report.seconds:.1f} s; "
        f"version(s) {versions}. Versions 0..{report.base_version} still read the segments; "
        "event tables are unchanged."
    )
    if report.read_through_zarr:
        print(
            f"note: {report.read_through_zarr} segment(s) were not in the form this "
            "ticktensor writes and were read through zarr-python, which is slower"
        )
    return 0


def _segments_text(item: SessionMigration) -> str:
    return (
        f"{item.session}: {item.segments} segment(s), {item.rows:,} rows "
        f"({item.segment_files} files, {human_bytes(item.segment_bytes)})"
    )


def _pack_text(item: SessionMigration) -> str:
    return f"1 pack ({item.pack_files} files, {human_bytes(item.pack_bytes)})"


def _commits_text(sessions: int, every: int | None) -> str:
    if not every or every >= sessions:
        return "one new version"
    return f"{-(-sessions // every)} new versions ({every} sessions each)"


def _nothing_to_do(store: Store, report: MigrateReport) -> str:
    return (
        f"nothing to migrate: version {report.base_version} of {store.url} holds no segments "
        f"to pack ({report.already_packed} session(s) already packs); no version written"
    )
