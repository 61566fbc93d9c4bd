"""The rows of ``bench wide``: each figure with its goal, the ratio and the verdict, as text.

A goal is either a ratio of two figures of the same run (``append_session /
polars_parquet_session <= 2x``) or a limit on one figure (``objects_per_session <= 10``),
whose ratio is then the figure over the limit. Either way the verdict is ``pass`` or
``FAIL`` on that ratio, or ``skipped`` when a figure is missing.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["GOAL_LIMITS", "build_rows", "format_rows", "format_session", "wide_markdown"]

GOAL_LIMITS: Mapping[str, float] = {
    "age": 1.2,  # the last sessions / the first ones: flat with the store's age
    "append_over_parquet": 2.0,
    "objects_per_session": 10,
    "metadata_bytes_per_commit": 256 * 1024,
    "ingest_over_pyarrow": 0.5,
    "open_dataset_s": 1.0,
    "wide_over_narrow": 0.8,
}


def _goal(text: str, ratio: float | None, limit: float, *, at_most: bool = True) -> dict[str, Any]:
    if ratio is None:
        verdict = "skipped"
    else:
        verdict = "pass" if (ratio <= limit if at_most else ratio >= limit) else "FAIL"
    return {"goal": text, "ratio": ratio, "limit": limit, "verdict": verdict}


def _row(
    name: str, value: float | None, unit: str, goals: Sequence[dict[str, Any]] = (), note: str = ""
) -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "goals": list(goals), "note": note}


def _age(values: Sequence[float], what: str) -> dict[str, Any]:
    """``what`` of the last sessions over the first: medians of three from six sessions on."""
    n, limit = len(values), GOAL_LIMITS["age"]
    if n >= 6:
        text = f"{what}: sessions {n - 2}-{n} / 1-3 (medians) <= {limit:g}x"
        return _goal(text, statistics.median(values[-3:]) / statistics.median(values[:3]), limit)
    ratio = values[-1] / values[0] if n >= 2 and values[0] else None
    return _goal(f"{what}: session {n} / session 1 <= {limit:g}x", ratio, limit)


def _append_rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    o, sessions = doc["options"], doc["sessions"]
    append = [float(r["append_s"]) for r in sessions]
    parquet = [float(r["polars_parquet_s"]) for r in sessions]
    over = statistics.median(a / p for a, p in zip(append, parquet, strict=True))
    limit = GOAL_LIMITS["append_over_parquet"]
    shape = f"{o['symbols']:,} symbols x {o['rows']} rows x {o['features']} float32 features"
    rows = [
        _row(
            "append_session",
            statistics.median(append),
            "s",
            [
                _age(append, "append_session"),
                _goal(f"append_session / polars_parquet_session <= {limit:g}x", over, limit),
            ],
            f"{shape} (+{o['labels']} label): one write_pack + commit per session, median of "
            f"sessions 1-{len(append)} (commit: median "
            f"{statistics.median(float(r['commit_s']) for r in sessions):.3f} s); the ratio to "
            "Parquet is the median of the per-session ratios",
        ),
        _row(
            "polars_parquet_session",
            statistics.median(parquet),
            "s",
            note="the same session as one zstd Parquet file (polars write_parquet), median",
        ),
    ]
    reference = doc["segment_sessions"]
    if not reference:
        rows.append(_row("append_session_segments", None, "s", note="runs with --quick only"))
        return rows
    seconds = statistics.median(float(r["append_s"]) for r in reference)
    first = reference[0]
    rows.append(
        _row(
            "append_session_segments",
            seconds,
            "s",
            note=f"reference: one legacy segment per symbol + commit, sessions 1-{len(reference)} "
            f"of a store of their own, median ({seconds / statistics.median(append):.1f}x "
            f"append_session); {first['objects']:,} objects and "
            f"{first['metadata_bytes']:,} metadata bytes per session",
        )
    )
    return rows


def _commit_rows(sessions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    plain = [r for r in sessions if not r["checkpoint"]]
    checkpoints = [r for r in sessions if r["checkpoint"]]
    objects = [float(r["objects"]) for r in plain]
    meta = [float(r["metadata_bytes"]) for r in plain]
    lim_o, lim_m = GOAL_LIMITS["objects_per_session"], GOAL_LIMITS["metadata_bytes_per_commit"]
    span = f"sessions without a checkpoint ({len(plain)} of {len(sessions)})"
    rows = [
        _row(
            "objects_per_session",
            max(objects),
            "objects",
            [
                _goal(f"objects_per_session <= {lim_o:g}", max(objects) / lim_o, 1),
                _age(objects, "objects"),
            ],
            f"files a commit added under packs/ and events/, largest of the {span}: "
            f"{min(objects):.0f}-{max(objects):.0f}; plus {plain[0]['version_files']} version "
            "file(s)",
        ),
        _row(
            "metadata_bytes_per_commit",
            max(meta),
            "bytes",
            [
                _goal(f"metadata_bytes_per_commit <= {lim_m / 1024:g} KiB", max(meta) / lim_m, 1),
                _age(meta, "metadata bytes"),
            ],
            f"bytes of version files a commit wrote, largest of the {span}: "
            f"{min(meta):,.0f}-{max(meta):,.0f}",
        ),
    ]
    if checkpoints:
        last = checkpoints[-1]
        each = ", ".join(f"session {r['session']}: {r['metadata_bytes']:,}" for r in checkpoints)
        note = f"log entry + checkpoint (the full state) every 10th commit: {each} bytes"
        rows.append(_row("metadata_bytes_checkpoint", last["metadata_bytes"], "bytes", note=note))
    else:
        note = "no checkpoint commit in this run (every 10th version writes one)"
        rows.append(_row("metadata_bytes_checkpoint", None, "bytes", note=note))
    return rows


def _ingest_rows(ingest: Mapping[str, Any]) -> list[dict[str, Any]]:
    limit = GOAL_LIMITS["ingest_over_pyarrow"]
    text = f"ingest_wide / pyarrow_csv_parquet >= {limit:g}x"
    if "error" in ingest:
        note = f"skipped: {ingest['error']}"
        return [
            _row("ingest_wide", None, "rows/s", [_goal(text, None, limit)], note),
            _row("pyarrow_csv_parquet", None, "rows/s", note=note),
        ]
    ours, theirs = ingest["ticktensor_csv"], ingest["pyarrow_csv_parquet"]
    ratio = float(ours["rows_per_s"]) / float(theirs["rows_per_s"])
    written = ", ".join(f"{n:,} under {area}/" for area, n in ingest["store"].items() if n)
    goal = _goal(text, ratio, limit, at_most=False)
    return [
        _row(
            "ingest_wide",
            float(ours["rows_per_s"]),
            "rows/s",
            [goal],
            f"ticktensor ingest of one all-symbol CSV, {ours['rows']:,} rows: median "
            f"{ours['seconds']:.2f} s of {ours['runs_seconds']}; wrote {written or 'nothing'}",
        ),
        _row(
            "pyarrow_csv_parquet",
            float(theirs["rows_per_s"]),
            "rows/s",
            note=f"pyarrow.csv.read_csv + one zstd Parquet file: median {theirs['seconds']:.2f} s",
        ),
    ]


def _read_rows(reads: Mapping[str, Any], options: Mapping[str, Any]) -> list[dict[str, Any]]:
    errors, loaders = reads["errors"], reads["loaders"]
    limit = GOAL_LIMITS["open_dataset_s"]
    opened = reads.get("open")
    if opened is None:
        goal = _goal(f"open_dataset <= {limit:g} s", None, 1)
        rows = [_row("open_dataset", None, "s", [goal], f"skipped: {errors['open_dataset']}")]
    else:
        goal = _goal(f"open_dataset <= {limit:g} s", float(opened["seconds"]) / limit, 1)
        note = (
            f"open_store + WindowDataset(version, {options['window']}) in a fresh process over "
            f"{opened['pairs']:,} (symbol, session) pairs, {opened['windows']:,} windows; "
            f"median of {[round(s, 3) for s in opened['runs_seconds']]}"
        )
        joined = reads.get("open_cross_gaps")
        if joined is not None:
            note += (
                f"; with cross_gaps=True: median {joined['seconds']:.3f} s of "
                f"{[round(s, 3) for s in joined['runs_seconds']]}, {joined['windows']:,} windows"
            )
        rows = [_row("open_dataset", float(opened["seconds"]), "s", [goal], note)]
    limit = GOAL_LIMITS["wide_over_narrow"]
    wide, narrow = loaders.get("loader_wide"), loaders["loader_narrow"]
    ratio = None if wide is None else wide["samples_per_s"] / narrow["samples_per_s"]
    goal = _goal(f"loader_wide / loader_narrow >= {limit:g}x", ratio, limit, at_most=False)
    shape = f"batch {options['batch']}, shuffle, window {options['window']}"
    if wide is None:
        rows.append(_row("loader_wide", None, "samples/s", [goal], errors["loader_wide"]))
    else:
        note = (
            f"ticktensor.DataLoader ({shape}) over the wide store, {wide['windows']:,} "
            "windows, its chunks loaded before the timed repetitions"
        )
        rows.append(_row("loader_wide", wide["samples_per_s"], "samples/s", [goal], note))
    note = (
        f"the same bytes as one series of one symbol, {shape}, {narrow['windows']:,} "
        "windows, loaded first alike"
    )
    rows.append(_row("loader_narrow", narrow["samples_per_s"], "samples/s", note=note))
    return rows


def build_rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every row of a ``bench wide`` run from its figures (``run_wide``'s document)."""
    return [
        *_append_rows(doc),
        *_commit_rows(doc["sessions"]),
        *_ingest_rows(doc["ingest"]),
        *_read_rows(doc["reads"], doc["options"]),
    ]


def _figure(value: float | None, unit: str) -> str:
    if value is None:
        return "skipped"
    if unit == "s":
        return f"{value:.3f} s"
    return f"{value:,.0f} {unit}"


def format_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a fixed-width table, one line per goal, then each row's note."""
    lines = [f"{'row':<27}{'figure':>20}  {'goal':<64}{'ratio':>8}  verdict"]
    for row in rows:
        figure = _figure(row["value"], row["unit"])
        goals = row["goals"] or [{"goal": "", "ratio": None, "verdict": ""}]
        for k, g in enumerate(goals):
            ratio = "" if g["ratio"] is None else f"{g['ratio']:.2f}x"
            head = f"{row['name']:<27}{figure:>20}" if k == 0 else " " * 47
            lines.append(f"{head}  {g['goal']:<64}{ratio:>8}  {g['verdict']}".rstrip())
    lines.append("(ratio of a limit such as <= 10 is the figure over the limit: <= 1x passes)")
    lines += [f"{row['name']}: {row['note']}" for row in rows if row["note"]]
    return "\n".join(lines)


def wide_markdown(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The rows as Markdown table lines, one line per goal."""
    lines = ["| W1 row | figure | goal | ratio | verdict |", "| --- | ---: | --- | ---: | --- |"]
    for row in rows:
        goals = row["goals"] or [{"goal": "", "ratio": None, "verdict": ""}]
        for k, g in enumerate(goals):
            name, figure = (
                (f"`{row['name']}`", _figure(row["value"], row["unit"])) if k == 0 else ("", "")
            )
            ratio = "" if g["ratio"] is None else f"{g['ratio']:.2f}x"
            lines.append(f"| {name} | {figure} | {g['goal']} | {ratio} | {g['verdict']} |")
    return lines


SESSION_COLUMNS = (
    ("session", "session", "{:>7d}"),
    ("append s", "append_s", "{:>9.3f}"),
    ("commit s", "commit_s", "{:>9.3f}"),
    ("parquet s", "polars_parquet_s", "{:>10.3f}"),
    ("objects", "objects", "{:>8,d}"),
    ("version files", "version_files", "{:>14d}"),
    ("metadata bytes", "metadata_bytes", "{:>15,d}"),
)


def format_session(row: Mapping[str, Any]) -> str:
    """One appended session as a table line (with the header before session 1)."""
    cells = [fmt.format(row[key]) for _, key, fmt in SESSION_COLUMNS]
    line = " ".join(cells) + ("  checkpoint" if row["checkpoint"] else "")
    if row["session"] != 1:
        return line
    widths = [len(fmt.format(0)) for _, _, fmt in SESSION_COLUMNS]
    head = " ".join(t.rjust(w) for (t, _, _), w in zip(SESSION_COLUMNS, widths, strict=True))
    return head + "\n" + line
