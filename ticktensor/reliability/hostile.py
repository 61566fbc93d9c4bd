"""Hostile stores: named cases of damage that must never be served, followed or fatal.

Each case builds small pack stores through the public API (``Store.create``,
``write_pack``, ``commit``), damages them as a hostile store or a failing disk would,
and checks from the outside (``WindowDataset`` and ``DataLoader`` with their defaults,
``ticktensor verify``) what the design promises:

- ``repair-symlinked-area``: ``verify --repair`` touches nothing outside the store when
  ``staging/``, ``events/`` or ``packs/`` is a symlink to a folder elsewhere;
- ``silent-chunk-damage``: a flipped byte in a zstd chunk, or two swapped shard-index
  entries (``none`` and ``zstd``), is an error naming the chunk or serves the committed
  values, never other ones (the default loader, ``verify=False``);
- ``pack-symbol-list``: a pack whose symbol list is out of order, duplicated, holds an
  empty name or a null (hashes rewritten to match) is refused by ``verify`` and the loader;
- ``huge-pointer``: a 100 MB ``latest.json`` is refused quickly, naming it, under a
  memory cap (no ``MemoryError``);
- ``write-through-symlink``: a commit neither creates the target of a dangling ``.lock``
  symlink nor writes through a ``versions/`` folder symlinked elsewhere;
- ``checkpoint-disagrees``: a checkpoint that drops a pack its own log entry or an
  earlier one added (hashes rewritten to match) is an error naming the checkpoint when
  the version is opened, and ``verify`` says so;
- ``shard-truncated-mapped``: a shard truncated during a ``verify=False`` epoch is an
  error naming it (or the epoch serves the committed values), never a signal.

The cases run in a child process, each under a memory cap
(``python -m ticktensor.reliability._hostilechild``): a reader killed by a signal is a
failed outcome of its case, not the end of the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ticktensor.errors import ConfigError, TickTensorError
from ticktensor.store import Store

from ._forge import add_session, pack_store, rechain, rewrite_pack_file, shard_index
from .faults import FaultOutcome

__all__ = ["CASES", "HostileCase", "hostile_stores"]

_Outcomes = Iterator[FaultOutcome]


@dataclass(frozen=True)
class HostileCase:
    """One named case: ``run(folder)`` yields an outcome per point of the case."""

    name: str
    run: Callable[[Path], _Outcomes]
    memory_mib: int = 2048  # the child's address space beyond what it holds after imports


# -- helpers ---------------------------------------------------------------------------


def _cli(*argv: str) -> tuple[int, str]:
    """``ticktensor ARGV`` in this process: exit code and output (stdout + stderr)."""
    from ticktensor.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(argv))
    return code, out.getvalue()


def _epoch(url: str, *, epochs: int = 1, cut: Callable[[], None] | None = None) -> str:
    """The sha256 of every batch of the last of ``epochs`` in-order epochs of the default
    loader; ``cut`` runs after the first batch of the last epoch."""
    from ticktensor import DataLoader
    from ticktensor.loaders import WindowDataset

    loader = DataLoader(WindowDataset(Store.open(url).version(), 16), batch_size=256)
    digest = hashlib.sha256()
    for epoch in range(epochs):
        digest = hashlib.sha256()
        for i, (x, y) in enumerate(loader):
            digest.update(x.numpy().tobytes())
            digest.update(y.numpy().tobytes())
            if i == 0 and epoch == epochs - 1 and cut is not None:
                cut()
    return digest.hexdigest()


def _served(
    case: str,
    point: str,
    url: str,
    reference: str,
    name: str,
    *,
    epochs: int = 1,
    cut: Callable[[], None] | None = None,
) -> FaultOutcome:
    """Epochs over a damaged store: an error naming ``name``, or the committed values."""
    try:
        got = _epoch(url, epochs=epochs, cut=cut)
    except (TickTensorError, OSError) as exc:
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        if name in text:
            return FaultOutcome(case, point, True, text)
        return FaultOutcome(case, point, False, f"error does not name {name}: {text}")
    except Exception as exc:  # an undocumented error is a finding too
        return FaultOutcome(case, point, False, f"{type(exc).__name__}: {exc}"[:300])
    if got == reference:
        return FaultOutcome(case, point, True, "served the committed values")
    return FaultOutcome(case, point, False, "served other values without an error (verify=False)")


def _refused(code: int, out: str) -> bool:
    return code != 0 and not out.startswith("OK")


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (links not followed) and its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _changed(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    keys = set(before) | set(after)
    return sorted(k for k in keys if before.get(k) != after.get(k))


def _old_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    two_days_ago = time.time() - 2 * 86_400
    os.utime(path, (two_days_ago, two_days_ago))


# -- the cases ---------------------------------------------------------------------------


def _repair_symlinked_area(root: Path) -> _Outcomes:
    case = "repair-symlinked-area"
    for area in ("staging", "events", "packs"):
        store_dir, outside = root / area / "store", root / area / "outside"
        pack_store(store_dir)
        if (store_dir / area).exists():  # the store's own files move out, behind the link
            shutil.move(str(store_dir / area), str(outside))
        _old_file(outside / "precious.bin", b"not the store's")
        _old_file(outside / "deep" / "notes.txt", b"nor this")
        (store_dir / area).symlink_to(outside, target_is_directory=True)
        before = _tree(outside)
        try:
            code, out = _cli("verify", str(store_dir), "--repair", "--grace", "0", "--quiet")
        except Exception as exc:
            code, out = -1, f"{type(exc).__name__}: {exc}"
        lost = _changed(before, _tree(outside))
        said = out.strip().splitlines()[-1][:120] if out.strip() else f"exit {code}"
        if lost:
            detail = f"{area}/ -> outside: repair removed or changed {lost[:3]} ({said})"
            yield FaultOutcome(case, f"{area}/ symlinked", False, detail)
        else:
            yield FaultOutcome(case, f"{area}/ symlinked", True, f"outside untouched ({said})")


def _silent_chunk_damage(root: Path) -> _Outcomes:
    case = "silent-chunk-damage"
    for codec, damages in (
        ("zstd", ("flipped byte", "swapped index")),
        ("none", ("swapped index",)),
    ):
        pristine = root / f"{codec}-pristine"
        store = pack_store(pristine, codec)
        reference = _epoch(store.url)
        pack_path = store.version().packs[0].path
        for damage in damages:
            target = root / f"{codec}-{damage.replace(' ', '-')}"
            shutil.copytree(pristine, target)
            index = shard_index(target / pack_path)
            if damage == "flipped byte":
                offset, nbytes = index.entries[0]
                data = bytearray(index.path.read_bytes())
                data[offset + nbytes // 2] ^= 0xFF
                index.path.write_bytes(bytes(data))
            else:
                index.swap(0, 1)
            point = f"{codec}: {damage} in values/c/0/0"
            yield _served(case, point, str(target), reference, "values/c/0/0")


def _pack_symbol_list(root: Path) -> _Outcomes:
    case = "pack-symbol-list"
    forged: dict[str, list[object]] = {
        "out of order": ["BBB", "AAA"],
        "duplicated": ["AAA", "AAA"],
        "empty name": ["", "BBB"],
        "null name": [None, "BBB"],
    }
    for point, symbols in forged.items():
        store_dir = root / point.replace(" ", "-")
        store = pack_store(store_dir)
        pack = store.version().packs[0]
        meta = json.loads((store_dir / pack.path / "zarr.json").read_bytes())
        meta["attributes"]["ticktensor"]["symbols"] = symbols
        rewrite_pack_file(store_dir, pack.path, "zarr.json", json.dumps(meta).encode())
        accepted = []
        code, out = _cli("verify", str(store_dir), "--quiet")
        if not _refused(code, out):
            accepted.append(f"verify ({out.strip().splitlines()[0][:60] if out else code})")
        try:
            _epoch(str(store_dir))
            accepted.append("the default loader")
        except TickTensorError as exc:
            if pack.session not in str(exc):
                accepted.append(f"the loader's error does not name the pack: {exc}"[:160])
        except Exception as exc:
            accepted.append(f"the loader raised {type(exc).__name__}: {exc}"[:160])
        detail = f"symbols {symbols} accepted by " + "; ".join(accepted) if accepted else "refused"
        yield FaultOutcome(case, point, not accepted, detail)


def _huge_pointer(root: Path) -> _Outcomes:
    case = "huge-pointer"
    store = pack_store(root / "store")
    count = (100 << 20) // 3
    (root / "store" / "latest.json").write_bytes(b"[" + b"{}," * count + b"{}]")
    checks: dict[str, Callable[[], object]] = {
        "Store.open().version()": lambda: Store.open(store.url).version(),
        "ticktensor verify": lambda: _cli("verify", store.url, "--quiet"),
    }
    for point, check in checks.items():
        t0 = time.perf_counter()
        try:
            result = check()
            error = "" if not isinstance(result, tuple) or result[0] == 0 else str(result[1])
        except TickTensorError as exc:
            error = str(exc)
        except MemoryError:
            error = "MemoryError"
        seconds = time.perf_counter() - t0
        ok = "latest.json" in error and seconds < 10.0
        why = "accepted" if not error else error.strip().splitlines()[-1][:200]
        yield FaultOutcome(case, point, ok, f"{seconds:.1f} s: {why}")
    (root / "store" / "latest.json").unlink()  # 100 MB of scratch


def _write_through_symlink(root: Path) -> _Outcomes:
    case = "write-through-symlink"
    for point in (".lock dangling symlink", "versions/ symlinked"):
        base = root / point.split()[0].strip("./")
        store_dir, outside = base / "store", base / "outside"
        pack_store(store_dir)
        outside.mkdir(parents=True, exist_ok=True)
        if point.startswith(".lock"):
            (store_dir / ".lock").unlink()
            (store_dir / ".lock").symlink_to(outside / "created-by-commit")
        else:
            shutil.move(str(store_dir / "versions"), str(outside / "versions"))
            (store_dir / "versions").symlink_to(outside / "versions", target_is_directory=True)
        before = _tree(outside)
        try:
            add_session(Store.open(str(store_dir)), 1)
            said = "committed"
        except (TickTensorError, OSError) as exc:
            said = f"refused: {exc}".splitlines()[0][:120]
        written = _changed(before, _tree(outside))
        ok = not written
        detail = f"wrote {written[:3]} outside the store ({said})" if written else said
        yield FaultOutcome(case, point, ok, detail)


def _checkpoint_disagrees(root: Path) -> _Outcomes:
    case = "checkpoint-disagrees"
    name = "versions/00000002.checkpoint.json"
    # Version 1 adds session 2024-01-02, version 2 (the checkpoint) 2024-01-03.
    for whose, session in (("its own entry's", "2024-01-03"), ("an earlier entry's", "2024-01-02")):
        store_dir = root / session
        store = pack_store(store_dir, sessions=3, checkpoint_every=2)
        checkpoint = json.loads((store_dir / name).read_bytes())
        checkpoint["packs"] = [p for p in checkpoint["packs"] if p["session"] != session]
        (store_dir / name).write_bytes(json.dumps(checkpoint).encode())
        rechain(store_dir)
        point = f"drops {whose} pack"
        try:
            sessions = [p.session for p in Store.open(store.url).version().packs]
            detail = f"used silently: the latest version lists packs {sessions}, not {session}"
            yield FaultOutcome(case, f"{point}: open", False, detail)
        except TickTensorError as exc:
            text = str(exc).splitlines()[0][:200]
            yield FaultOutcome(case, f"{point}: open", name in text, text)
        code, out = _cli("verify", store.url, "--quiet")
        said = out.strip().splitlines()[0][:200] if out.strip() else f"exit {code}"
        ok = _refused(code, out) and name in out
        yield FaultOutcome(case, f"{point}: verify", ok, said)


def _shard_truncated_mapped(root: Path) -> _Outcomes:
    case = "shard-truncated-mapped"
    pristine = root / "pristine"
    store = pack_store(pristine, "none", rows=20_000, features=8, chunk_rows=1024)
    reference = _epoch(store.url)
    target = root / "truncated"
    shutil.copytree(pristine, target)
    shards = sorted((target / store.version().packs[0].path / "values" / "c").rglob("*"))
    shards = [p for p in shards if p.is_file()]

    def truncate() -> None:  # as another process would, while the epoch has them mapped
        for shard in shards:
            os.truncate(shard, shard.stat().st_size // 4)

    point = "values shards cut to a quarter during the second epoch"
    yield _served(case, point, str(target), reference, "values/c/", epochs=2, cut=truncate)


CASES: dict[str, HostileCase] = {
    case.name: case
    for case in (
        HostileCase("repair-symlinked-area", _repair_symlinked_area),
        HostileCase("silent-chunk-damage", _silent_chunk_damage),
        HostileCase("pack-symbol-list", _pack_symbol_list),
        HostileCase("huge-pointer", _huge_pointer, memory_mib=1024),
        HostileCase("write-through-symlink", _write_through_symlink),
        HostileCase("checkpoint-disagrees", _checkpoint_disagrees),
        HostileCase("shard-truncated-mapped", _shard_truncated_mapped),
    )
}


# -- running cases in children -----------------------------------------------------------


def hostile_stores(
    root: Path, names: Sequence[str] | None = None, *, timeout_s: float = 300.0
) -> list[FaultOutcome]:
    """Every named case (or ``names``), building below ``root/NAME``, in child processes.

    One child runs the cases in turn, each under its memory cap. A child that dies (a
    signal, ``timeout_s`` per case) fails the case it was running with how it died, and
    a new child takes the cases left.
    """
    todo = list(CASES if names is None else names)
    unknown = sorted(set(todo) - set(CASES))
    if unknown:
        raise ConfigError(
            f"unknown hostile case(s) {', '.join(unknown)}; known: {', '.join(CASES)}"
        )
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}  # arenas reserve address space per thread
    out: list[FaultOutcome] = []
    while todo:
        cmd = [sys.executable, "-m", "ticktensor.reliability._hostilechild", str(root), *todo]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=timeout_s * len(todo),
                                  check=False, env=env)  # fmt: skip
            stdout, stderr, code = done.stdout, done.stderr, done.returncode
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
        except subprocess.TimeoutExpired as exc:
            stdout, stderr, code = exc.stdout or b"", exc.stderr or b"", -1
            how = f"ran past {timeout_s * len(todo):.0f} s"
        finished = 0
        for line in stdout.decode(errors="replace").splitlines():
            if line.startswith("{"):
                doc = json.loads(line)
                if "case_done" in doc:
                    finished += 1
                else:
                    out.append(FaultOutcome(**doc))
        if finished < len(todo) and code == 0:
            raise RuntimeError(f"hostile child ended early: {stderr.decode()[-500:]}")
        if finished < len(todo):  # the child died inside case todo[finished]
            name = todo[finished]
            points = sum(o.fault == name for o in out)
            tail = stderr.decode(errors="replace").strip()[-300:]
            out.append(
                FaultOutcome(name, f"after {points} point(s)", False, f"child {how}: {tail}")
            )
            finished += 1
        todo = todo[finished:]
    return out
