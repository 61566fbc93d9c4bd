"""Input expansion, decompression and hashing of raw input bytes."""

from __future__ import annotations

import bz2
import gzip
import hashlib
from pathlib import Path

import fsspec
import pytest
import zstandard

from ticktensor.errors import ConfigError, InputError
from ticktensor.ingest._sources import Input, expand_inputs

PAYLOAD = b"ts,px\n" + b"".join(b"%d,%d.5\n" % (i, i) for i in range(20_000))
PACK = {"": lambda b: b, ".gz": gzip.compress, ".zst": zstandard.compress, ".bz2": bz2.compress}


def _files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for suffix, pack in PACK.items():
        path = tmp_path / f"t.csv{suffix}"
        path.write_bytes(pack(PAYLOAD))
        out[suffix] = path
    return out


def test_globs_directories_and_dedup(tmp_path: Path) -> None:
    files = _files(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.csv").write_bytes(b"a\n")
    got = expand_inputs([str(tmp_path / "t.csv*"), str(files[""])])
    assert [i.path for i in got] == sorted(str(p) for p in files.values())
    assert [i.name for i in got] == ["t.csv"] * 4
    assert {i.compression for i in got} == {None, "gzip", "zstd", "bz2"}
    assert [i.name for i in expand_inputs([str(tmp_path / "sub")])] == ["x.csv"]
    with pytest.raises(ConfigError, match="nothing-here"):
        expand_inputs([str(tmp_path / "nothing-here*.csv")])


def test_file_and_memory_urls(tmp_path: Path) -> None:
    files = _files(tmp_path)
    [by_url] = expand_inputs([f"file://{files['.gz']}"])
    assert by_url.url.startswith("file://")
    with by_url.open() as stream:
        assert stream.read() == PAYLOAD
    with fsspec.open("memory://srcs/a.csv.zst", "wb") as f:
        f.write(zstandard.compress(PAYLOAD))
    with fsspec.open("memory://srcs/b.csv", "wb") as f:
        f.write(PAYLOAD)
    got = expand_inputs(["memory://srcs/*.csv*"])
    assert [i.url for i in got] == ["memory:///srcs/a.csv.zst", "memory:///srcs/b.csv"]
    for source in got:
        with source.open() as stream:
            assert stream.read() == PAYLOAD


@pytest.mark.parametrize("suffix", list(PACK))
def test_decompress_and_hash_raw_bytes_even_when_stopping_early(
    tmp_path: Path, suffix: str
) -> None:
    path = _files(tmp_path)[suffix]
    [source] = expand_inputs([str(path)])
    assert source.head(6) == b"ts,px\n"
    with source.open() as stream:
        assert stream.read(100) == PAYLOAD[:100]
    assert source.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    source.sha256 = None
    with source.open_seekable() as file:
        file.seek(len(PAYLOAD) - 7)
        assert file.read() == PAYLOAD[-7:]
    assert source.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_corrupt_archive_head_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv.gz"
    path.write_bytes(b"not gzip at all")
    [source] = expand_inputs([str(path)])
    assert isinstance(source, Input)
    with pytest.raises(InputError, match=r"bad\.csv\.gz: cannot decompress gzip"):
        source.head()
