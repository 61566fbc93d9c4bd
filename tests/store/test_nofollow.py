"""Opening below a store root in one ``openat2`` call answers as the walk a folder at a
time does: the same file or folder, the same error naming the same link or missing path."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ticktensor.store import _nofollow
from ticktensor.store._nofollow import SymlinkError, open_below, open_folder


@pytest.fixture
def walk_only() -> Iterator[Callable[[bool], None]]:
    """Switch the one-call open off (True) or back to what this machine supports."""
    works = _nofollow._OPENAT2["works"]

    def walk(only: bool) -> None:
        _nofollow._OPENAT2["works"] = works and not only

    yield walk
    _nofollow._OPENAT2["works"] = works


def _outcome(call: Callable[[], int], root: Path, rel: str) -> tuple[str, str]:
    """What a call gave: whether it opened ``rel`` itself (the same inode), or its
    error's type, text and link (the root's path left out)."""
    try:
        fd = call()
    except OSError as exc:
        return type(exc).__name__, f"{exc} {getattr(exc, 'rel', None)}".replace(str(root), "ROOT")
    try:
        opened, there = os.fstat(fd), os.lstat(root / rel)
        return "opened", str((opened.st_ino, opened.st_dev) == (there.st_ino, there.st_dev))
    finally:
        os.close(fd)


def _tree(root: Path) -> None:
    """Folders, files, a link to a folder, a link to a file and a dangling link."""
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "b" / "c" / "f").write_bytes(b"x")
    (root / "a" / "g").write_bytes(b"y")
    (root / "a" / "to_b").symlink_to(root / "a" / "b")
    (root / "a" / "to_g").symlink_to(root / "a" / "g")
    (root / "a" / "gone").symlink_to(root / "nowhere")
    (root / "a" / "rel_b").symlink_to("b")  # relative links too
    (root / "a" / "b" / "up").symlink_to("..")


PATHS = [
    "a",
    "a/b",
    "a/b/c",
    "a/b/c/f",
    "a/g",
    "a/to_b",
    "a/to_b/c",
    "a/to_b/c/f",
    "a/to_g",
    "a/gone",
    "a/gone/x",
    "a/rel_b",
    "a/rel_b/c",
    "a/rel_b/c/f",
    "a/b/up",
    "a/b/up/g",
    "a/missing",
    "a/missing/deeper",
    "a/g/under_a_file",
    "a//b/c",
]


@pytest.mark.parametrize("rel", PATHS)
@pytest.mark.parametrize("create", [False, True])
def test_open_folder_as_the_walk(
    tmp_path: Path, walk_only: Callable[[bool], None], rel: str, create: bool
) -> None:
    _assert_same_both_ways(
        tmp_path, walk_only, rel, lambda root: partial(open_folder, str(root), rel, create=create)
    )


@pytest.mark.parametrize("rel", PATHS)
@pytest.mark.parametrize(
    "flags",
    [os.O_RDONLY, os.O_WRONLY | os.O_CREAT | os.O_EXCL, os.O_RDWR | os.O_CREAT],
    ids=["read", "create-exclusive", "create"],
)
def test_open_below_as_the_walk(
    tmp_path: Path, walk_only: Callable[[bool], None], rel: str, flags: int
) -> None:
    _assert_same_both_ways(
        tmp_path, walk_only, rel, lambda root: partial(open_below, str(root), rel, flags)
    )


def _assert_same_both_ways(
    tmp_path: Path,
    walk_only: Callable[[bool], None],
    rel: str,
    opener: Callable[[Path], Callable[[], int]],
) -> None:
    """The walk alone and openat2 first give the same outcome on the same tree."""
    outcomes = []
    for only in (True, False):
        root = tmp_path / f"walk-{only}"
        _tree(root)
        walk_only(only)
        outcomes.append(_outcome(opener(root), root, rel))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] != "opened" or outcomes[0][1] == "True"


def test_a_link_on_the_way_is_named(tmp_path: Path, walk_only: Callable[[bool], None]) -> None:
    _tree(tmp_path)
    for only in (True, False):
        walk_only(only)
        with pytest.raises(SymlinkError) as info:
            open_below(str(tmp_path), "a/to_b/c/f", os.O_RDONLY)
        assert info.value.rel == "a/to_b"


_NAMES = st.sampled_from(["a", "b", "c", "link", "rlink", "file"])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(parts=st.lists(_NAMES, min_size=1, max_size=5), create=st.booleans())
def test_any_path_as_the_walk(
    tmp_path_factory: pytest.TempPathFactory,
    walk_only: Callable[[bool], None],
    parts: list[str],
    create: bool,
) -> None:
    """Every folder holds folders a, b, c, a file, a link to its parent's a and one to
    its own b (three levels deep): any path of those names opens, or fails, the same
    both ways."""
    rel = "/".join(parts)
    outcomes = []
    for only in (True, False):
        root = tmp_path_factory.mktemp("tree")

        def fill(folder: Path, depth: int) -> None:
            (folder / "file").write_bytes(b"z")
            (folder / "link").symlink_to(folder.parent / "a")
            (folder / "rlink").symlink_to("b")
            if depth < 3:
                for name in "abc":
                    (folder / name).mkdir()
                    fill(folder / name, depth + 1)

        fill(root, 0)
        walk_only(only)
        calls = (
            partial(open_folder, str(root), rel, create=create),
            partial(open_below, str(root), rel, os.O_RDONLY),
        )
        outcomes += [_outcome(call, root, rel) for call in calls]
    half = len(outcomes) // 2
    assert outcomes[:half] == outcomes[half:]
    assert all(kind != "opened" or same == "True" for kind, same in outcomes)
