"""Feature segments: one Zarr v3 group per (symbol, session) with ``ts``, ``values``, ``labels``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr

from ticktensor.errors import SchemaError, StoreCorruptError

from ._guard import GuardedStore
from ._layout import Layout
from ._location import Location, safe_component
from ._manifest import FileEntry, SegmentRecord, SourceFile, sha256_hex
from ._zarr_write import array_files, group_file

__all__ = [
    "SEGMENT_FORMAT_VERSION",
    "SegmentArrays",
    "open_segment",
    "read_array",
    "segment_content_hash",
    "write_segment",
]


#: Format of a segment's Zarr group. Unchanged since store format 1, and part of every
#: content hash, so segments written by format 1 and 2 writers are the same bytes.
SEGMENT_FORMAT_VERSION = 1


@dataclass(frozen=True)
class SegmentArrays:
    """The Zarr arrays of one segment, opened read-only.

    ``values`` is ``[rows, n_features]`` float32, ``ts`` ``[rows]`` int64 ns UTC and
    ``labels`` ``[rows, n_labels]`` float32 (``None`` when the store has no labels).
    """

    ts: zarr.Array[Any]
    values: zarr.Array[Any]
    labels: zarr.Array[Any] | None


def check_rows(
    ts: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    labels: npt.NDArray[np.float32] | None,
    feature_names: Sequence[str],
    label_names: Sequence[str],
    where: str,
) -> int:
    """The row arrays of a segment or pack must be typed and shaped alike; their rows."""
    if ts.dtype != np.int64 or ts.ndim != 1:
        raise SchemaError(f"{where}: ts must be int64 [rows], got {ts.dtype} {list(ts.shape)}")
    n = ts.shape[0]
    if n == 0:
        raise SchemaError(f"{where}: needs at least one row, got 0")
    if values.dtype != np.float32 or values.shape != (n, len(feature_names)):
        raise SchemaError(
            f"{where}: values must be float32 [{n}, {len(feature_names)}] "
            f"(rows, features), got {values.dtype} {list(values.shape)}"
        )
    if label_names and (
        labels is None or labels.dtype != np.float32 or labels.shape != (n, len(label_names))
    ):
        got = "None" if labels is None else f"{labels.dtype} {list(labels.shape)}"
        raise SchemaError(f"{where}: labels must be float32 [{n}, {len(label_names)}], got {got}")
    if not label_names and labels is not None and labels.size:
        raise SchemaError(f"{where}: labels given but label_names is empty")
    return int(n)


def _check_inputs(
    ts: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    labels: npt.NDArray[np.float32] | None,
    feature_names: Sequence[str],
    label_names: Sequence[str],
    where: str,
) -> None:
    check_rows(ts, values, labels, feature_names, label_names, where)
    steps = np.diff(ts)
    if steps.size and steps.min() < 0:
        row = int(np.argmax(steps < 0)) + 1
        raise SchemaError(
            f"{where}: ts must be non-decreasing; row {row} has {int(ts[row])} "
            f"after {int(ts[row - 1])}"
        )


def segment_content_hash(
    symbol: str,
    session: str,
    ts: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    labels: npt.NDArray[np.float32] | None,
    feature_names: Sequence[str],
    label_names: Sequence[str],
    layout: Layout,
) -> str:
    """Hash of a segment's logical content and layout: equal inputs give equal segments."""
    header = {
        "format_version": SEGMENT_FORMAT_VERSION,
        "symbol": symbol,
        "session": session,
        "feature_names": list(feature_names),
        "label_names": list(label_names),
        "layout": layout.to_dict(),
        "rows": int(ts.shape[0]),
    }
    h = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
    h.update(np.ascontiguousarray(ts).data)
    h.update(np.ascontiguousarray(values).data)
    if labels is not None and label_names:
        h.update(np.ascontiguousarray(labels).data)
    return h.hexdigest()


def segment_path(symbol: str, session: str, content_hash: str) -> str:
    return f"segments/{safe_component(symbol)}/{safe_component(session)}-{content_hash[:16]}"


def write_segment(
    location: Location,
    *,
    symbol: str,
    session: str,
    ts: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    labels: npt.NDArray[np.float32] | None,
    feature_names: Sequence[str],
    label_names: Sequence[str],
    layout: Layout,
    sources: Sequence[SourceFile] = (),
) -> SegmentRecord:
    """Write one segment's arrays and return its record (not yet part of any version).

    A folder already at the path (an older version's segment of the same content, or an
    interrupted write's leftover) is never removed: files with these bytes are kept,
    missing ones written, and a file with other bytes is an error (see
    :meth:`Location.write_content_addressed`).
    """
    where = f"segment {symbol}/{session}"
    _check_inputs(ts, values, labels, feature_names, label_names, where)
    content_hash = segment_content_hash(
        symbol, session, ts, values, labels, feature_names, label_names, layout
    )
    rel = segment_path(symbol, session, content_hash)
    existed = location.exists(rel)
    attrs = {
        "ticktensor": {
            "format_version": SEGMENT_FORMAT_VERSION,
            "symbol": symbol,
            "session": session,
            "feature_names": list(feature_names),
            "label_names": list(label_names),
            "content_hash": content_hash,
        }
    }
    files: dict[str, FileEntry] = {}
    for key, data in _segment_files(attrs, ts, values, labels, feature_names, label_names, layout):
        digest = sha256_hex(data)
        location.write_content_addressed(f"{rel}/{key}", data, digest, exists=existed)
        files[key] = FileEntry(digest, len(data))
    n = int(ts.shape[0])
    return SegmentRecord(
        symbol=symbol,
        session=session,
        path=rel,
        rows=n,
        ts_start=int(ts[0]),
        ts_end=int(ts[-1]),
        layout=layout.to_dict(),
        content_hash=content_hash,
        files=files,
        feature_names=tuple(feature_names),
        label_names=tuple(label_names),
        sources=tuple(sources),
    )


def _segment_files(
    attrs: dict[str, Any],
    ts: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    labels: npt.NDArray[np.float32] | None,
    feature_names: Sequence[str],
    label_names: Sequence[str],
    layout: Layout,
) -> Iterator[tuple[str, bytes]]:
    """The segment's files as ``(key, bytes)``: the group, ``ts``, and the float32
    ``[time, column]`` matrices ``values`` and ``labels``, chunked along time only and
    their columns named; written directly, as zarr-python writes them."""
    rows = min(layout.chunk_rows, int(ts.shape[0]))
    yield "zarr.json", group_file(attrs)
    arrays: list[tuple[str, npt.NDArray[Any], list[str], dict[str, Any] | None]] = [
        ("ts", ts, ["time"], None),
        ("values", values, ["time", "feature"], {"feature_names": list(feature_names)}),
    ]
    if label_names and labels is not None:
        arrays.append(("labels", labels, ["time", "label"], {"label_names": list(label_names)}))
    for name, data, dims, attributes in arrays:
        for key, encoded in array_files(
            data, rows, layout, dimension_names=dims, attributes=attributes
        ):
            yield f"{name}/{key}", encoded


def open_segment(
    location: Location, record: SegmentRecord, *, verify_chunks: bool = False
) -> SegmentArrays:
    """Open a segment's arrays read-only with zarr-python, behind the chunk guard.

    The group must stay inside the store (no symlinks), its metadata must match the
    manifest's hashes and describe the record's shape, dtype, chunking and codec; each
    chunk is then checked as it is read (see :class:`GuardedStore`).
    """
    where = f"segment {record.symbol}/{record.session} ({location.display(record.path)})"
    location.check_inside(record.path)
    links = location.find_links(record.path)
    if links:
        raise StoreCorruptError(
            f"{where}: {links[0]} is a symlink; a store holds plain files only "
            "(rule: store_relative_path)"
        )
    try:
        layout = Layout.from_dict(dict(record.layout))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreCorruptError(f"{where}: layout {dict(record.layout)} is malformed") from exc
    rows = min(layout.chunk_rows, max(record.rows, 1))
    shapes = {
        "ts": ((record.rows,), (rows,)),
        "values": ((record.rows, len(record.feature_names)), (rows, len(record.feature_names))),
        "labels": ((record.rows, len(record.label_names)), (rows, len(record.label_names))),
    }
    limits = {name: int(np.prod(s[1])) * (8 if name == "ts" else 4) for name, s in shapes.items()}
    store = GuardedStore(
        location.zarr_store(record.path, read_only=True),
        files=record.files,
        codec=layout.codec.value,
        limits=limits,
        where=f"segment {record.symbol}/{record.session}",
        verify_chunks=verify_chunks,
    )
    try:
        group = zarr.open_group(store, mode="r")
        has_labels = "labels" in group
        arrays = {
            name: array_of(group, name, where)
            for name in ("ts", "values", "labels")
            if name != "labels" or has_labels
        }
    except StoreCorruptError:
        raise
    except FileNotFoundError as exc:
        raise StoreCorruptError(f"{where}: segment group is missing") from exc
    except Exception as exc:  # zarr's metadata parser: JSON, type and validation errors
        raise StoreCorruptError(f"{where}: Zarr metadata is malformed ({exc!r:.300})") from exc
    for name, array in arrays.items():
        shape, chunks = shapes[name]
        dtype = np.dtype(np.int64 if name == "ts" else np.float32)
        _check_array(array, name, shape, chunks, dtype, layout, where)
    if record.label_names and "labels" not in arrays:
        raise StoreCorruptError(f"{where}: array 'labels' is missing")
    return SegmentArrays(ts=arrays["ts"], values=arrays["values"], labels=arrays.get("labels"))


_CODEC_CLASSES = {"none": (), "zstd": ("ZstdCodec",), "lz4": ("BloscCodec",)}
_CODEC_CLASSES["blosc"] = ("BloscCodec",)


def _check_array(
    array: zarr.Array[Any],
    name: str,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    dtype: np.dtype[Any],
    layout: Layout,
    where: str,
) -> None:
    """The array's metadata must say what the manifest record says (bounded, typed reads)."""
    try:
        got = (tuple(array.shape), tuple(array.chunks), np.dtype(array.dtype))
        codecs = tuple(type(c).__name__ for c in array.compressors)
        filters = tuple(array.filters)
        serializer = type(array.serializer).__name__
    except Exception as exc:  # properties of malformed metadata raise anything
        why = f"array {name!r} metadata is malformed ({exc!r:.200})"
        raise StoreCorruptError(f"{where}: {why}") from exc
    want = (shape, chunks, dtype)
    codecs_ok = codecs == _CODEC_CLASSES[layout.codec.value] and serializer == "BytesCodec"
    if got != want or filters or not codecs_ok:
        raise StoreCorruptError(
            f"{where}: array {name!r} is shape {list(got[0])}, chunks {list(got[1])}, {got[2]}, "
            f"codecs {list(codecs)}; the manifest says shape {list(shape)}, chunks "
            f"{list(chunks)}, {dtype}, codec {layout.codec.value} (rule: segment_metadata)"
        )


def array_of(group: zarr.Group, name: str, where: str) -> zarr.Array[Any]:
    """The group's array ``name``; missing, or a group there, is ``StoreCorruptError``."""
    try:
        node = group[name]
    except KeyError:
        raise StoreCorruptError(f"{where}: array {name!r} is missing") from None
    if not isinstance(node, zarr.Array):
        raise StoreCorruptError(f"{where}: {name!r} is a group, expected an array")
    return node


def read_array(array: zarr.Array[Any], name: str, dtype: type[Any], where: str) -> Any:
    """The whole array; a decode failure is found again chunk by chunk to name the chunk."""
    try:
        return np.asarray(array[...], dtype=dtype)
    except StoreCorruptError:
        raise
    except Exception:  # located below, chunk by chunk
        pass
    step = int(array.chunks[0])
    for i in range(-(-int(array.shape[0]) // step)):
        key = f"{name}/c/{i}" + ("/0" if array.ndim == 2 else "")
        try:
            array[i * step : (i + 1) * step]
        except StoreCorruptError:
            raise
        except Exception as exc:  # numcodecs/zarr decode errors differ per codec
            raise StoreCorruptError(
                f"{where} chunk {key}: cannot decode ({exc!r:.200})", [(key, repr(exc))]
            ) from exc
    raise StoreCorruptError(f"{where}: array {name!r} cannot be read")
