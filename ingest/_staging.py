"""Staging: per-file parts of an ingest job, kept in the store until the job publishes.

Phase one of a job converts each input file into parts, one per (session, kind) and
batch of the file, holding every symbol's rows; phase two assembles each session from
its parts. Parts live under ``STORE/staging/<job id>/`` and are never referenced by a
version: a crashed job leaves only staging debris, which is safe to delete when no job
runs. A job whose tasks share its process (the local engine) may keep parts in memory
instead, up to a budget of bytes, and stages the rest on disk: a job is never resumed
from its parts, so they need to outlive neither the job nor a crash.
"""

from __future__ import annotations

import io
import threading
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ticktensor.schemas import EventKind
from ticktensor.store import Location, safe_component

__all__ = ["Staging", "repeated"]


def repeated(value: str, rows: int) -> pa.DictionaryArray:
    """``value`` on each of ``rows`` rows, as a dictionary of that one string: staged parts
    name their source file this way, without a per-row copy of the text."""
    codes = pa.array(np.zeros(rows, dtype=np.int32))
    return pa.DictionaryArray.from_arrays(codes, pa.array([value], pa.string()))


_SOURCE, _ROW = "_source", "_row"


class Staging:
    """The staging area of one ingest job, addressed by ``(location, job_id)``.

    ``memory_bytes`` is how many bytes of parts it keeps in this process rather than on
    disk (0: none). Only a staging area that keeps none is picklable: tasks in other
    processes could not see the parts this one holds.
    """

    def __init__(self, location: Location, job_id: str, memory_bytes: int = 0) -> None:
        self.location = location
        self.job_id = job_id
        self.root = f"staging/{job_id}"
        self.memory_bytes = memory_bytes
        self._held: dict[str, pa.Table] = {}
        self._held_sizes: dict[str, int] = {}
        self._held_bytes = 0
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[type[Staging], tuple[Location, str]]:
        if self.memory_bytes:
            raise TypeError("a staging area that keeps parts in memory stays in its process")
        return (Staging, (self.location, self.job_id))

    def write_part(
        self, kind: EventKind, session: str, tag: str, table: pa.Table, nbytes: int | None = None
    ) -> str:
        """Store one part; ``table`` carries the ``_source`` and ``_row`` columns.

        ``tag`` orders the parts of a session as their rows come in the inputs: by
        input file (in URL order), then batch. ``nbytes``, when given, is the part's
        size in memory (a slice of a batch: its share of the batch's), and says that
        its all-null columns are already left out: measuring a slice costs more than
        staging it, for a file of thousands of days of a few rows each.
        """
        rel = f"{self.root}/parts/{safe_component(session)}/{kind.value}/{tag}.arrow"
        # Uncompressed Arrow IPC streamed to the file: parts live for one job, so encoding
        # speed beats size. All-null columns are left out (assemble restores the schema).
        if nbytes is None:
            empty = [
                c
                for c, col in zip(table.column_names, table.columns, strict=True)
                if col.null_count == len(col) and len(col)
            ]
            table = table.drop_columns(empty)
            nbytes = table.nbytes
        with self._lock:
            if self._held_bytes + nbytes <= self.memory_bytes:
                self._held[rel] = table
                self._held_sizes[rel] = nbytes
                self._held_bytes += nbytes
                return rel
        with self.location.open_atomic(rel) as f, pa.ipc.new_file(f, table.schema) as writer:
            writer.write_table(table)
        return rel

    def write_quarantine(self, tag: str, table: pa.Table) -> str:
        rel = f"{self.root}/quarantine/{tag}.parquet"
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        self.location.write_atomic(rel, buf.getvalue())
        return rel

    def held(self, rels: list[str]) -> bool:
        """Whether every part of ``rels`` is kept in this process's memory."""
        return all(rel in self._held for rel in rels)

    def release(self, rels: list[str]) -> None:
        """Forget the parts of ``rels`` kept in memory: their reader holds them now."""
        with self._lock:
            for rel in rels:
                if self._held.pop(rel, None) is not None:
                    self._held_bytes -= self._held_sizes.pop(rel)

    def read(self, rels: list[str]) -> pa.Table:
        tables = []
        for rel in rels:
            if rel in self._held:
                tables.append(self._held[rel])
                continue
            if rel.endswith(".arrow") and self.location.is_local:
                # Memory-mapped: the columns are the page cache's pages, not a copy.
                tables.append(pa.ipc.open_file(pa.memory_map(self.location.path(rel))).read_all())
                continue
            data = self.location.read_bytes(rel)
            if rel.endswith(".arrow"):
                tables.append(pa.ipc.open_file(pa.py_buffer(data)).read_all())
            else:
                tables.append(pq.read_table(io.BytesIO(data)))
        return pa.concat_tables(tables, promote_options="default")

    def remove(self) -> None:
        with self._lock:
            self._held.clear()
            self._held_sizes.clear()
            self._held_bytes = 0
        self.location.remove_tree(self.root)


def group_parts(
    parts: list[tuple[str, EventKind, str]],
) -> dict[str, dict[EventKind, list[str]]]:
    """``(session, kind, rel)`` tuples grouped by session, then kind; each kind's parts in
    the order of their tags (input file, then batch)."""
    out: dict[str, dict[EventKind, list[str]]] = defaultdict(lambda: defaultdict(list))
    for session, kind, rel in parts:
        out[session][kind].append(rel)
    return {s: {k: sorted(rels) for k, rels in v.items()} for s, v in sorted(out.items())}
