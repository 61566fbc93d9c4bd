"""Feature segments: one Zarr v3 group per (symbol, session) with ``ts``, ``values``, ``labels``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr

from ticktensor.errors import SchemaError, StoreCorruptError

from ._chunk_map import StoredChunk, codec_of, recorded_crcs
from ._guard import GuardedStore, decode_chunk
from ._layout import Layout
from ._location import Location, safe_component
from ._manifest import ZARR_JSON_BYTES, FileEntry, SegmentRecord, SourceFile, sha256_hex
from ._zarr_write import array_files, group_file
from .codecs import codec_of_chain

__all__ = [
    "SEGMENT_FORMAT_VERSION",
    "SegmentArrays",
    "check_segment_content",
    "open_segment",
    "read_array",
    "read_checked_segment",
    "refuse_links",
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
    their columns named; written directly, as zarr-python writes them, with each chunk
    file's CRC-32C in the array's attribute ``chunk_crc32c``."""
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
            data, rows, layout, dimension_names=dims, attributes=attributes, checksums=True
        ):
            yield f"{name}/{key}", encoded


def open_segment(
    location: Location, record: SegmentRecord, *, verify_chunks: bool = False
) -> SegmentArrays:
    """Open a segment's arrays read-only with zarr-python, behind the chunk guard.

    The group must stay inside the store (no symlinks), its metadata must match the
    manifest's hashes and describe the record's shape, dtype, chunking and codec; each
    chunk is then checked as it is read (see :class:`GuardedStore`), against the CRC-32C
    its array's metadata records (its sha256 with ``verify_chunks``).
    """
    where = f"segment {record.symbol}/{record.session} ({location.display(record.path)})"
    refuse_links(location, record.path, where)
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
    crcs: dict[str, int] = {}
    store = GuardedStore(
        location.zarr_store(record.path, read_only=True),
        files=record.files,
        codec=layout.chunk_codec,
        limits=limits,
        where=f"segment {record.symbol}/{record.session}",
        verify_chunks=verify_chunks,
        crcs=crcs,
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
    # The CRC-32C from the metadata zarr read through the guard (hash-checked above).
    for name, array in arrays.items():
        attributes = array.metadata.attributes
        if not isinstance(attributes, Mapping):
            raise StoreCorruptError(
                f"{where}: array {name!r} attributes are {attributes!r:.80}, expected an object"
            )
        recorded = recorded_crcs(
            {"attributes": dict(attributes)},
            -(-record.rows // rows),
            f"{where} array {name!r}",
        )
        tail = (0,) * (array.ndim - 1)
        for k, crc in enumerate(recorded):
            if crc is not None:
                crcs[f"{name}/{array.metadata.encode_chunk_key((k, *tail))}"] = crc
    return SegmentArrays(ts=arrays["ts"], values=arrays["values"], labels=arrays.get("labels"))


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
        chain = [_entry(array.serializer), *(_entry(c) for c in array.compressors)]
        codecs = [entry["name"] for entry in chain[1:]]
        filters = tuple(array.filters)
    except Exception as exc:  # properties of malformed metadata raise anything
        why = f"array {name!r} metadata is malformed ({exc!r:.200})"
        raise StoreCorruptError(f"{where}: {why}") from exc
    want = (shape, chunks, dtype)
    codec = codec_of_chain(chain)
    if got != want or filters or codec is not layout.chunk_codec:
        raise StoreCorruptError(
            f"{where}: array {name!r} is shape {list(got[0])}, chunks {list(got[1])}, {got[2]}, "
            f"codecs {codecs}; the manifest says shape {list(shape)}, chunks "
            f"{list(chunks)}, {dtype}, codec {layout.codec.value} (rule: segment_metadata)"
        )


def _entry(codec: Any) -> dict[str, Any]:
    """A zarr-python codec's metadata entry, as plain JSON values."""
    entry: dict[str, Any] = json.loads(json.dumps(codec.to_dict()))
    return entry


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


Rows = tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.float32] | None]
"""A segment's ``ts``, ``values`` and ``labels`` (``None`` without label names)."""


def read_checked_segment(location: Location, record: SegmentRecord) -> Rows | None:
    """A whole segment read chunk by chunk without zarr-python, checked as strictly.

    Each file read must have its recorded size and sha256 (a listed chunk that is
    missing, or an unlisted one that exists, is an error), each array's metadata must
    describe the record's shape, chunking, dtype and codec, each compressed frame must
    decode to exactly one chunk, and the decoded rows must hash to the record's content
    hash; failures raise :class:`~ticktensor.errors.StoreCorruptError` naming the
    segment and the file. Returns ``None`` when the segment is not in the form
    ticktensor writes (a record that lists no files, metadata it does not decode
    itself): zarr-python then reads it (:meth:`StoreVersion.read_segment`).
    """
    where = f"segment {record.symbol}/{record.session}"
    refuse_links(location, record.path, f"{where} ({location.display(record.path)})")
    try:
        layout = Layout.from_dict(dict(record.layout))
    except (KeyError, TypeError, ValueError):
        return None
    labelled = bool(record.label_names)
    if not record.files or labelled != ("labels/zarr.json" in record.files):
        return None
    if _checked_file(location, record, "zarr.json", where) is None:
        return None
    tails = {"ts": (), "values": (len(record.feature_names),), "labels": (len(record.label_names),)}
    arrays = {}
    for name in ("ts", "values", "labels") if labelled else ("ts", "values"):
        array = _checked_array(location, record, layout, name, tails[name], where)
        if array is None:
            return None
        arrays[name] = array
    ts, values, labels = arrays["ts"], arrays["values"], arrays.get("labels")
    check_segment_content(location, record, ts, values, labels, layout)
    return ts, values, labels


def check_segment_content(
    location: Location,
    record: SegmentRecord,
    ts: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    labels: npt.NDArray[np.float32] | None,
    layout: Layout,
) -> None:
    """The decoded rows of a segment must hash to its record's content hash."""
    again = segment_content_hash(
        record.symbol,
        record.session,
        ts,
        values,
        labels,
        record.feature_names,
        record.label_names,
        layout,
    )
    if again != record.content_hash:
        raise StoreCorruptError(
            f"{location.display(record.path)}: decoded content hash "
            f"{again[:16]} != recorded {record.content_hash[:16]}"
        )


def refuse_links(location: Location, rel: str, where: str) -> None:
    """A folder of the store (``rel``) must hold plain files only, no symlinks."""
    location.refuse_links(rel, below=True, where=where)


def _checked_file(location: Location, record: SegmentRecord, key: str, where: str) -> bytes | None:
    """The segment's file ``key``, which must have its recorded size and sha256;
    ``None`` when the record does not list it."""
    entry = record.files.get(key)
    if entry is None:
        return None
    if key.endswith("zarr.json") and entry.bytes > ZARR_JSON_BYTES:
        why = f"{entry.bytes:,} bytes recorded, a zarr.json holds at most {ZARR_JSON_BYTES:,}"
        raise StoreCorruptError(f"{where} chunk {key}: {why}", [(key, why)])
    try:
        data = _read_file(location, f"{record.path}/{key}", entry.bytes)
    except FileNotFoundError:
        why = "file is missing"
    except OSError as exc:  # an I/O error names the chunk it hit
        raise StoreCorruptError(
            f"{where} chunk {key}: cannot read ({exc})", [(key, str(exc))]
        ) from exc
    else:
        if len(data) != entry.bytes:
            why = f"{len(data):,} bytes stored, the manifest records {entry.bytes:,}"
        elif sha256_hex(data) != entry.sha256:
            why = f"content hash mismatch (manifest sha256 {entry.sha256[:16]}...)"
        else:
            return data
    raise StoreCorruptError(f"{where} chunk {key}: {why}", [(key, why)])


def _read_file(location: Location, rel: str, recorded: int) -> bytes:
    """The bytes of the store's file ``rel``, at most one more than the ``recorded`` size
    (enough to tell a larger file): opened directly on a local store (the filesystem
    layer costs more than reading a small file), else through it."""
    if location.is_local:
        with open(location.path(rel), "rb") as f:
            return f.read(recorded + 1)
    return location.read_bytes(rel)


def _checked_array(
    location: Location,
    record: SegmentRecord,
    layout: Layout,
    name: str,
    tail: tuple[int, ...],
    where: str,
) -> npt.NDArray[Any] | None:
    """The segment's array ``name`` of shape ``(rows, *tail)``, each chunk checked and
    decoded into place; ``None`` when its metadata is not the form ticktensor writes for
    the record, or it has no columns (zarr-python reads those)."""
    dtype = np.dtype(np.int64 if name == "ts" else np.float32)
    if 0 in tail:
        return None
    chunk_rows = min(layout.chunk_rows, max(record.rows, 1))
    document = _checked_file(location, record, f"{name}/zarr.json", where)
    try:
        meta = json.loads(b"null" if document is None else document)
        expected = (
            meta["shape"] == [record.rows, *tail]
            and meta["data_type"] == dtype.name
            and meta["chunk_grid"]
            == {"name": "regular", "configuration": {"chunk_shape": [chunk_rows, *tail]}}
            and meta["chunk_key_encoding"]
            == {"name": "default", "configuration": {"separator": "/"}}
            and meta["fill_value"] == ("NaN" if dtype.kind == "f" else 0)
            and not meta.get("storage_transformers")
            and codec_of(meta) is layout.chunk_codec
        )
    except (ValueError, TypeError, KeyError):
        return None
    if not expected:
        return None
    count = -(-record.rows // chunk_rows)
    out = np.empty((count * chunk_rows, *tail), dtype)
    stored = out.reshape(count, -1).view(np.uint8)  # one row of bytes per chunk
    suffix = "/0" if tail else ""
    for k in range(count):
        key = f"{name}/c/{k}{suffix}"
        data = _checked_file(location, record, key, where)
        if data is None:
            _check_absent(location, record, key, where)
            out[k * chunk_rows : (k + 1) * chunk_rows] = np.nan if dtype.kind == "f" else 0
            continue
        chunk = StoredChunk(
            rel=f"{record.path}/{key}",
            offset=0,
            nbytes=len(data),
            index=k,
            row_start=k * chunk_rows,
            rows=min(chunk_rows, record.rows - k * chunk_rows),
            stored_rows=chunk_rows,
            columns=int(np.prod(tail)),
            codec=layout.chunk_codec,
            sha256=record.files[key].sha256,
            array=name,
            owner=f"segment {record.symbol}/{record.session}",
            whole_file=True,
            record=record,
        )
        decode_chunk(chunk, data, stored[k], stored.shape[1], f"{where} chunk {key}")
    return out[: record.rows]


def _check_absent(location: Location, record: SegmentRecord, key: str, where: str) -> None:
    """A chunk the record does not list holds only the fill value and was never
    written; a file there is not what was published."""
    if location.exists(f"{record.path}/{key}"):
        why = "file is not listed in the manifest"
        raise StoreCorruptError(f"{where} chunk {key}: {why}", [(key, why)])
