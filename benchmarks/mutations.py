"""Mutation list: each GPU-path safeguard, removed in a child process, must make a test fail.

Run ``python benchmarks/mutations.py`` (a few minutes on two cores; no GPU needed). Each
mutation is a small patch of the loader's code applied at interpreter start-up
(``sitecustomize`` on ``PYTHONPATH``), so it also reaches the child processes the tests
start, and never touches the files on disk. The targeted tests run once unmutated (they
must pass) and once per mutation (at least one must fail). The table is printed and
written to ``benchmarks/results/mutations-<date>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    """A safeguard removed: its name, what the patch does, and the tests meant to notice."""

    name: str
    removes: str
    patch: str
    tests: tuple[str, ...]


def _copies_patch(*, before: str, after: bool) -> str:
    """A patch replacing :meth:`CopyStream.copies`: ``before`` runs before the copies are
    queued on the side stream (the wait that orders them after the consumer's work), and
    with ``after`` the current stream waits on an event recorded after them."""
    wait_after = (
        "copied = torch.cuda.Event()\n        copied.record(side)\n        "
        "current.wait_event(copied)"
        if after
        else "pass"
    )
    return f"""
import contextlib
import torch
from ticktensor.loaders import _fences
@contextlib.contextmanager
def copies(self):
    current = torch.cuda.current_stream(self.device)
    side = self._side()
    {before}
    try:
        with torch.cuda.stream(side):
            yield
    finally:
        {wait_after}
_fences.CopyStream.copies = copies
"""


MUTATIONS = (
    Mutation(
        "no fences",
        "Delivery.build never creates reader fences for pinned host batches",
        """
        import dataclasses
        from ticktensor.loaders import batch_source
        _build = batch_source.Delivery.build.__func__
        def build(cls, *args, **kwargs):
            return dataclasses.replace(_build(cls, *args, **kwargs), fences=None)
        batch_source.Delivery.build = classmethod(build)
        """,
        ("tests/loaders/test_cuda_lazy.py",),
    ),
    Mutation(
        "fence at hand-out",
        "the fence of a slot is recorded when its batch is handed out, before the "
        "consumer queues its copy (both engines)",
        """
        from ticktensor.loaders import _native_prefetch, _prefetch
        early = {}
        _next = _prefetch.Prefetcher.__next__
        def python_next(self):
            item = _next(self)
            fences = self._shared.fences
            if fences is not None:
                for slot in list(self._shared.slots):
                    if slot.out and id(slot) not in early:
                        early[id(slot)] = fences.record()
            return item
        def reclaim(self, fences):
            if self.out and self.is_free():
                self.fence = early.pop(id(self), None) or fences.record()
                self.out = False
        _prefetch.Prefetcher.__next__ = python_next
        _prefetch.Slot.reclaim = reclaim
        class HandedOut:
            def __init__(self, inner):
                self.inner, self.queue = inner, []
            def enter_thread(self):
                self.inner.enter_thread()
            def record(self):
                return self.queue.pop(0) if self.queue else self.inner.record()
        _native_next = _native_prefetch.NativePrefetcher.__next__
        def native_next(self):
            item = _native_next(self)
            if self._fences is not None:
                if not isinstance(self._fences, HandedOut):
                    self._fences = HandedOut(self._fences)
                self._fences.queue.append(self._fences.inner.record())
            return item
        _native_prefetch.NativePrefetcher.__next__ = native_next
        """,
        ("tests/loaders/test_fences.py",),
    ),
    Mutation(
        "fence on the wrong device",
        "CudaFences records on the rank's device's current stream only",
        """
        import torch
        from ticktensor.loaders import _fences
        def record(self):
            event = torch.cuda.Event(blocking=True)
            event.record(torch.cuda.current_stream(self.device))
            return event
        _fences.CudaFences.record = record
        """,
        ("tests/loaders/test_fences.py", "tests/loaders/test_cuda_lazy.py"),
    ),
    Mutation(
        "no enter_thread in the staging thread",
        "the resident mode's staging thread does not make the fences' device current",
        """
        from ticktensor.loaders import _chunk_staging
        _run = _chunk_staging._run
        class NoEnter:
            def __init__(self, inner):
                self.inner = inner
            def enter_thread(self):
                pass
            def record(self):
                return self.inner.record()
        def run(shared):
            if shared.fences is not None:
                shared.fences = NoEnter(shared.fences)
            _run(shared)
        _chunk_staging._run = run
        """,
        ("tests/loaders/test_chunk_staging.py",),
    ),
    Mutation(
        "no DALI pending-input hold",
        "DALI's external source holds no fed arrays (their ring slots can be refilled "
        "while DALI reads them)",
        """
        import collections
        from ticktensor.loaders import _dali_pipeline
        _init = _dali_pipeline._Feed.__init__
        def init(self, hold):
            _init(self, hold)
            self.held = collections.deque(maxlen=0)
        _dali_pipeline._Feed.__init__ = init
        """,
        ("tests/loaders/test_dali.py", "tests/loaders/test_dali_feed.py"),
    ),
    Mutation(
        "no resident copy-stream wait",
        "the consumer's current stream does not wait for the resident mode's chunk copies "
        "(gathers may read a slot before its chunk arrives)",
        _copies_patch(before="side.wait_stream(current)", after=False),
        ("tests/loaders/test_resident_streams.py",),
    ),
    Mutation(
        "resident copies not after the gathers",
        "the resident mode's copy stream does not wait for the gathers queued before "
        "(a copy may overwrite an evicted slot a queued gather still reads)",
        _copies_patch(before="pass", after=True),
        ("tests/loaders/test_resident_streams.py",),
    ),
    Mutation(
        "resident copies after the consumer's compute",
        "the resident mode's copy stream waits for everything queued on the current stream "
        "(the training step after each gather too), not for the gathers only: copies never "
        "overlap compute",
        _copies_patch(before="side.wait_stream(current)\n    self._reads.clear()", after=True),
        ("tests/loaders/test_resident_streams.py",),
    ),
)

# Listed in the issue, absent from the code: nothing to remove.
ABSENT: dict[str, str] = {}


def _pytest(tests: tuple[str, ...], patch: str | None, workdir: Path) -> tuple[int, list[str]]:
    env = dict(os.environ)
    if patch is not None:
        (workdir / "sitecustomize.py").write_text(textwrap.dedent(patch))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(workdir), env.get("PYTHONPATH")]))
    # The patch imports modules before pytest could rewrite their asserts: not an error here.
    quiet = ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *quiet, *tests]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, flags=re.MULTILINE)
    if done.returncode != 0 and not failed:
        failed = [done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "no output"]
    return done.returncode, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the mutation of this name only")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if args.only in (None, m.name)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        targets = tuple(sorted({test for m in chosen for test in m.tests}))
        code, failed = _pytest(targets, None, Path(tmp))
        print(f"unmutated: {'pass' if code == 0 else 'FAIL ' + ', '.join(failed)}", flush=True)
        if code != 0:
            return 1
        for mutation in chosen:
            code, failed = _pytest(mutation.tests, mutation.patch, Path(tmp))
            rows.append(
                {
                    "mutation": mutation.name,
                    "removes": mutation.removes,
                    "tests": list(mutation.tests),
                    "caught": code != 0,
                    "failing": failed,
                }
            )
            print(f"{mutation.name}: {'caught' if code else 'SURVIVED'} {failed[:3]}", flush=True)
    for name, why in ABSENT.items():
        rows.append({"mutation": name, "removes": why, "tests": [], "caught": None, "failing": []})
    day = datetime.datetime.now(datetime.UTC).date().isoformat()
    out = Path(args.out)
    (out / f"mutations-{day}.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = ["| mutation | caught | failing tests (first 3) |", "|---|---|---|"]
    for row in rows:
        verdict = "n/a (absent)" if row["caught"] is None else "yes" if row["caught"] else "NO"
        shown = "<br>".join(f"`{test}`" for test in row["failing"][:3]) or row["removes"]
        lines.append(f"| {row['mutation']} | {verdict} | {shown} |")
    table = "\n".join(lines) + "\n"
    (out / f"mutations-{day}.md").write_text(table)
    print(table)
    return 0 if all(row["caught"] is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
