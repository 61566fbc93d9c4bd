"""Results as text for the terminal and as Markdown for the README and docs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .goals import ours_for
from .results import Results, Row, ratio
from .wide_rows import format_rows, wide_markdown

__all__ = ["README_BEGIN", "README_END", "markdown", "readme_section", "splice_readme", "text"]

README_BEGIN = "<!-- bench:begin {source} -->"
README_END = "<!-- bench:end -->"
THREAD_HEAD = ["threads", "samples/s", "GB/s", "memcpy GB/s", "zstd decode GB/s", "zstd epoch GB/s"]


def _num(value: float | None, fmt: str = ",.0f") -> str:
    return "" if value is None else format(value, fmt)


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:,.2f}x"


def _main_ratio(rows: Sequence[Row], row: Row) -> float | None:
    """Our loader's row for the same samples (:func:`ours_for`) over this row, in samples/s."""
    if row.kind == "loader" or row.samples_per_s is None:
        return None
    return ratio(rows, ours_for(row.name), row.name)


def _table(header: Sequence[str], align: str, lines: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table; ``align`` has one letter per column, ``l`` or ``r``."""
    rule = ["---:" if a == "r" else "---" for a in align]
    return [f"| {' | '.join(row)} |" for row in (header, rule, *lines)]


def _row_cells(rows: Sequence[Row], r: Row) -> list[str]:
    return [
        "skipped" if r.samples_per_s is None else _num(r.samples_per_s),
        _num(r.gb_per_s, ".2f"),
        _num(r.first_batch_s, ".3f"),
        _ratio(_main_ratio(rows, r)),
    ]


def _goal_cells(g: dict[str, Any]) -> list[str]:
    value = g["ratio"]
    shown = "" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
    return [g["goal"], shown, g["verdict"]]


def _model_cells(m: dict[str, Any]) -> list[str]:
    return [
        f"{m['predicted_samples_per_s']:,.0f}",
        f"{m['measured_samples_per_s']:,.0f}",
        f"{m['measured_over_predicted']:.0%}",
        m["verdict"],
    ]


def _thread_cells(t: dict[str, Any]) -> list[str]:
    return [
        str(t["threads"]),
        f"{t['samples_per_s']:,.0f}",
        f"{t['gb_per_s']:.2f}",
        f"{t['memcpy_gb_per_s']:.2f}",
        f"{t['zstd_decode_gb_per_s']:.2f}",
        _num(t.get("zstd_block_gb_per_s"), ".2f"),
    ]


def _stall_cells(s: dict[str, Any]) -> list[str]:
    return [
        s["name"],
        f"{s['step_ms']:g}",
        f"{s['stall_pct']:.1f}",
        _num(s.get("predicted_pct"), ".1f"),
        _num(s.get("break_even_ms"), ".2f"),
    ]


def _ingest_cells(r: dict[str, Any]) -> list[str]:
    return [
        r["name"],
        f"{r['rows_per_s']:,.0f}",
        f"{r['mb_per_s']:.1f}",
        f"{r['seconds']:.2f}",
        _ratio(r.get("ticktensor_over")),
    ]


def _columns(cells: Sequence[str], widths: Sequence[int]) -> str:
    """Fixed-width text: a negative width left-aligns."""
    return "".join(
        f"{c:<{-w}}" if w < 0 else f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)
    )


def text(results: Results) -> str:
    """The whole report: rows, goals, model, thread scaling, stall, ingest, wide, sweeps, notes."""
    out: list[str] = []
    meta = results.meta
    if meta:
        m = meta.get("machine", {})
        out.append(
            f"# {meta.get('date', '')}  {m.get('cpu', '')}  {m.get('cores', '')} cores  "
            f"{m.get('memory_gib', '')} GiB  GPU: {m.get('gpu') or 'none'}  "
            f"commit {str(meta.get('git', {}).get('commit') or '')[:10]}  load average "
            f"{_load(m.get('load_average'))} -> {_load(meta.get('load_average_after'))}"
        )
    if results.rows:
        widths: tuple[int, ...] = (-24, -10, 14, 9, 9, 9, 11)
        head = ["method", "kind", "samples/s", "GB/s", "first s", "RSS MB", "ours / it"]
        out.append(_columns(head, widths) + "  note")
        for r in results.rows:
            cells = _row_cells(results.rows, r)
            cells.insert(3, _num(r.peak_rss_mb))
            out.append(_columns([r.name, r.kind, *cells], widths) + f"  {r.note}")
        out.append(
            "(ours / it: samples/s of our row for the same samples (ticktensor, or its zstd, lz4,"
            " cold variant) over this row's; limits show the samples/s they would carry)"
        )
    if results.goals:
        out += ["", "goals (ratios from this run):"]
        for g in results.goals:
            goal, value, verdict = _goal_cells(g)
            extra = f"  {g['note']}" if g.get("note") else ""
            out.append(f"  {goal:<66}{value:>8}  {verdict}{extra}")
    if results.model:
        out += ["", "performance model (docs/performance.md): predicted vs measured samples/s"]
        for m in results.model:
            predicted, measured, share, verdict = _model_cells(m)
            out.append(f"  {m['name']:<24}{predicted:>12}{measured:>12}{share:>6}  {verdict}")
    if results.threads:
        widths = (8, 14, 8, 13, 18, 17)
        out += ["", _columns(THREAD_HEAD, widths)]
        out += [_columns(_thread_cells(t), widths) for t in results.threads]
    if results.stall:
        widths = (-16, 9, 9, 13, 15)
        head = ["loader", "step ms", "stall %", "predicted %", "break-even ms"]
        out += ["", _columns(head, widths)]
        out += [_columns(_stall_cells(s), widths) for s in results.stall]
    if results.ingest:
        widths = (-22, 14, 9, 9, 14)
        out += [
            "",
            _columns(["ingest method", "rows/s", "MB/s", "seconds", "ticktensor /"], widths),
        ]
        out += [_columns(_ingest_cells(r), widths) for r in results.ingest]
    if results.wide:
        out += ["", "wide (workload W1):", format_rows(results.wide["rows"])]
    for name, points in results.sweeps.items():
        out += ["", f"sweep {name}: " + "; ".join(_point(p) for p in points)]
    if results.notes:
        out.append("")
        out.extend(f"note: {n}" for n in results.notes)
    return "\n".join(out)


def _load(values: Sequence[float] | None) -> str:
    return "?" if not values else f"{values[0]:.2f}"


def _point(p: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:,.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in p.items())


def markdown(results: Results) -> str:
    """Markdown tables of the rows, goals, model, thread scaling, stall, ingest, wide; the notes."""
    out: list[str] = []
    if results.rows:
        head = ["method", "kind", "samples/s", "GB/s", "first batch s", "ours / it", "what"]
        lines = [
            [f"`{r.name}`", r.kind, *_row_cells(results.rows, r), r.note] for r in results.rows
        ]
        out += _table(head, "llrrrrl", lines)
    if results.goals:
        out += [
            "",
            *_table(
                ["goal", "ratio or value", "verdict"],
                "lrl",
                [_goal_cells(g) for g in results.goals],
            ),
        ]
    if results.model:
        head = ["row", "predicted samples/s", "measured", "measured / predicted", "binding limit"]
        lines = [[f"`{m['name']}`", *_model_cells(m)] for m in results.model]
        out += ["", *_table(head, "lrrrl", lines)]
    if results.threads:
        out += ["", *_table(THREAD_HEAD, "rrrrrr", [_thread_cells(t) for t in results.threads])]
    if results.stall:
        head = ["loader", "step ms", "data stall %", "predicted %", "break-even step ms"]
        out += ["", *_table(head, "lrrrr", [_stall_cells(s) for s in results.stall])]
    if results.ingest:
        head = ["ingest method", "rows/s", "MB/s", "seconds", "ticktensor / it"]
        out += ["", *_table(head, "lrrrr", [_ingest_cells(r) for r in results.ingest])]
    if results.wide:
        out += ["", *wide_markdown(results.wide["rows"])]
    if results.notes:
        out += ["", *(f"- {note}" for note in results.notes)]
    return "\n".join(out)


def readme_section(results: Results, source: str, plot: str | None = None) -> str:
    """The README's performance section body, generated from the results file ``source``."""
    meta = results.meta
    m = meta.get("machine", {})
    gpu = m.get("gpu") or "no GPU"
    commit = str(meta.get("git", {}).get("commit") or "")[:10]
    lines = [
        README_BEGIN.format(source=source),
        f"Generated from [`{source}`]({source}) by `ticktensor bench report {source} --readme "
        "README.md` (do not edit by hand). Measured on "
        f"{m.get('cores', '?')} cores of {m.get('cpu', 'an unknown CPU')}, "
        f"{m.get('memory_gib', '?')} GiB RAM, {gpu}, load average "
        f"{_load(m.get('load_average'))} -> {_load(meta.get('load_average_after'))}; "
        f"commit `{commit}`, {meta.get('date', '')}; "
        f"command `{meta.get('command', '')}`.",
        "",
        markdown(results),
    ]
    if plot:
        lines += ["", f"![scaling sweeps]({plot})"]
    lines.append(README_END)
    return "\n".join(lines)


def splice_readme(readme: str, section: str) -> str:
    """``readme`` with the text between the bench markers replaced by ``section``.

    Raises
    ------
    ValueError
        If the README has no ``<!-- bench:begin ... -->`` / ``<!-- bench:end -->`` pair.
    """
    prefix = README_BEGIN.split("{", maxsplit=1)[0]
    start = readme.find(prefix)
    end = readme.find(README_END, start)
    if start < 0 or end < 0:
        raise ValueError(f"the README has no {prefix}... {README_END} markers")
    return readme[:start] + section + readme[end + len(README_END) :]
