"""``ticktensor verify STORE``: re-hash every stored file against the manifest."""

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
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    store = Store.open(args.store)
    pinned = store.version(args.version)
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
