"""Seed inputs for the fuzzer: small real files (from a data folder) and synthetic ones."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

__all__ = ["default_data_dir", "head_lines", "read_seed", "synthetic_trades_csv"]


def default_data_dir() -> Path | None:
    """``$TICKTENSOR_DATA``, else ``../shared/data`` from the working directory, if it exists."""
    for candidate in (os.environ.get("TICKTENSOR_DATA"), "../shared/data"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def head_lines(data: bytes, lines: int) -> bytes:
    """The first ``lines`` lines of ``data`` (seeds stay small, so each input is fast)."""
    return b"".join(io.BytesIO(data).readlines()[:lines])


def read_seed(data_dir: Path | None, rel: str, *, lines: int | None = None) -> bytes | None:
    """A seed file below ``data_dir``: zstd files are decompressed, text cut to ``lines``."""
    if data_dir is None or not (data_dir / rel).is_file():
        return None
    data = (data_dir / rel).read_bytes()
    if rel.endswith(".zst"):
        data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    if rel.endswith(".parquet") and lines is not None:
        buf = io.BytesIO()
        pq.write_table(pq.read_table(io.BytesIO(data)).slice(0, lines), buf)
        data = buf.getvalue()
    elif lines is not None:
        data = head_lines(data, lines)
    return data


def synthetic_trades_csv(rows: int = 64, seed: int = 0) -> bytes:
    """A small, valid trades CSV (``ts_event,symbol,price,size,side``)."""
    rng = np.random.default_rng(seed)
    ts = 1_704_186_000 * 10**9 + np.cumsum(rng.integers(1, 10**6, rows))
    price = np.round(100 + np.cumsum(rng.normal(0, 0.01, rows)), 2)
    size = rng.integers(1, 500, rows)
    side = rng.choice(["B", "S", "N"], rows)
    lines = ["ts_event,symbol,price,size,side"]
    lines += [f"{t},AAPL,{p},{s},{d}" for t, p, s, d in zip(ts, price, size, side, strict=True)]
    return ("\n".join(lines) + "\n").encode()


def arrow_file(parquet: bytes, *, stream: bool = False) -> bytes:
    """``parquet`` converted to an Arrow IPC file (or stream)."""
    table = pq.read_table(io.BytesIO(parquet))
    sink = pa.BufferOutputStream()
    opener = pa.ipc.new_stream if stream else pa.ipc.new_file
    with opener(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=64)
    return bytes(sink.getvalue().to_pybytes())
