"""The ``ticktensor`` command line: one subcommand per job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ticktensor import __version__
from ticktensor.errors import TickTensorError
from ticktensor.store import object_store_error

from . import _bench, _demo, _info, _ingest, _migrate, _reliability, _train, _verify

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ticktensor",
        description="Market data to versioned stores, and a fast windowed loader for PyTorch.",
    )
    parser.add_argument("--version", action="version", version=f"ticktensor {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (_bench, _demo, _info, _ingest, _migrate, _reliability, _train, _verify):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except TickTensorError as exc:
        print(f"ticktensor {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # an object store that did not answer, from any stage
        error = object_store_error(exc)
        if error is None:
            raise
        print(f"ticktensor {args.command}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"ticktensor {args.command}: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
