"""``ticktensor info STORE``: versions, symbols, rows, bytes, codec, packs and table files."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ticktensor.store import PackRecord, SegmentRecord, Store, StoreVersion, table_files

from ._format import human_bytes, ns_to_iso

__all__ = ["register", "store_info"]


def register(sub: Any) -> None:
    p = sub.add_parser("info", help="summarize a store", description=__doc__)
    p.add_argument("store", help="store path or fsspec URL")
    p.add_argument("--version", type=int, default=None, help="version to describe (latest)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(run=run)


def store_info(store: Store, version: int | None = None) -> dict[str, Any]:
    """A JSON-able summary of ``store`` at ``version``."""
    v = store.version(version)
    segs, packs = v.segments, v.packs
    records: list[SegmentRecord | PackRecord] = [*segs, *packs]
    codecs = sorted({str(r.layout["codec"]) for r in records})
    spans = [(r.ts_start, r.ts_end) for r in records]
    return {
        "url": store.url,
        "format_version": store.format_version,
        "version": v.version,
        "latest_version": store.latest_version(),
        "created": v.manifest.created,
        "message": v.manifest.message,
        "default_layout": store.layout.to_dict(),
        "codecs": codecs,
        "symbols": list(v.symbols),
        # A session is the store's partition: a day, a month (2024-03), a year (2024) or
        # all time (all).
        "partition": v.manifest.attributes.get("partition", "day"),
        "sessions": sorted({s.session for s in segs} | {p.session for p in packs}),
        "segments": len(segs),
        "packs": [_pack_info(p) for p in packs],
        "pack_symbols": len({s for p in packs for s in v.pack_index(p).symbols}),
        "rows": v.rows,
        "features": list(v.feature_names),
        "labels": list(v.label_names),
        "ts_start": min((start for start, _ in spans), default=None),
        "ts_end": max((end for _, end in spans), default=None),
        "segment_bytes": sum(s.nbytes for s in segs),
        "segment_files": sum(len(s.files) for s in segs),
        "pack_bytes": sum(p.nbytes for p in packs),
        "pack_files": sum(len(p.files) for p in packs),
        "tables": {kind: _tables_info(v, kind) for kind in sorted({t.kind for t in v.tables})},
        "bytes": v.nbytes,
        "stats_period": None if v.stats is None else list(v.stats.period),
        "versions": [
            {
                "version": m.version,
                "created": m.created,
                "message": m.message,
                "segments": len(m.segments),
                "packs": len(m.packs),
                "rows": m.rows,
                "bytes": m.nbytes,
            }
            for m in store.versions()
        ],
    }


def _pack_info(pack: PackRecord) -> dict[str, Any]:
    """One pack: its session, number of symbols, rows and objects."""
    return {
        "session": pack.session,
        "path": pack.path,
        "symbols": pack.symbols,
        "rows": pack.rows,
        "files": len(pack.files),
        "bytes": pack.nbytes,
        "codec": str(pack.layout["codec"]),
        "ts_start": pack.ts_start,
        "ts_end": pack.ts_end,
    }


def _tables_info(version: StoreVersion, kind: str) -> dict[str, Any]:
    """Counts of the version's ``kind`` tables and their files: ``paths`` relative to the
    store root, ``urls`` absolute (local stores) or fsspec URLs, both in key order."""
    records = version.tables_of(kind)
    return {
        "files": len(records),
        "rows": sum(t.rows for t in records),
        "bytes": sum(t.nbytes for t in records),
        "paths": [t.path for t in records],
        "urls": list(table_files(version, kind)),
    }


def format_info(info: dict[str, Any]) -> str:
    sessions = info["sessions"]
    packs = info["packs"]
    parts = [f"{info['segments']} segments"] if info["segments"] or not packs else []
    held = " and ".join([*parts, *([f"{len(packs)} packs"] if packs else [])])
    lines = [
        f"store     {info['url']}  (format v{info['format_version']})",
        f"version   {info['version']} of {info['latest_version']}  created {info['created']}"
        + (f"  {info['message']!r}" if info["message"] else ""),
        f"codec     {', '.join(info['codecs']) or info['default_layout']['codec']}"
        f"  ({info['default_layout']['chunk_rows']:,} rows per chunk by default)",
        f"symbols   {len(info['symbols'])}: {', '.join(info['symbols'])}",
        f"sessions  {len(sessions)}"
        + (f": {sessions[0]} .. {sessions[-1]}" if sessions else "")
        + f"  (partition {info['partition']})",
        f"rows      {info['rows']:,} in {held}, "
        f"{len(info['features'])} features, {len(info['labels'])} labels",
    ]
    if packs:
        lines.append(
            f"packs     {len(packs)} sessions ({packs[0]['session']} .. {packs[-1]['session']}), "
            f"{info['pack_symbols']} symbols, {sum(p['rows'] for p in packs):,} rows in "
            f"{info['pack_files']} files"
        )
    if info["ts_start"] is not None:
        lines.append(f"time      {ns_to_iso(info['ts_start'])} .. {ns_to_iso(info['ts_end'])}")
    features = info["segment_bytes"] + info["pack_bytes"]
    lines.append(
        f"bytes     {human_bytes(info['bytes'])} (features {human_bytes(features)}"
        f" in {info['segment_files'] + info['pack_files']} files)"
    )
    for kind, t in info["tables"].items():
        lines.append(
            f"events    {kind}: {t['rows']:,} rows in {t['files']} files, {human_bytes(t['bytes'])}"
        )
    lines.append("versions")
    any_packs = any(m["packs"] for m in info["versions"])
    lines.extend(
        f"  v{m['version']:<4} {m['created']}  {m['segments']:>4} segments "
        + (f"{m['packs']:>3} packs " if any_packs else "")
        + f"{m['rows']:>12,} rows  {human_bytes(m['bytes']):>10}  {m['message']}"
        for m in info["versions"]
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    info = store_info(Store.open(args.store), args.version)
    print(json.dumps(info, indent=2) if args.json else format_info(info))
    return 0
