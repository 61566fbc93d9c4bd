"""``ticktensor ingest``: convert vendor market data files into a new store version.

examples:
  ticktensor ingest trades.csv.gz --out store --schema trades --symbol AAPL \\
      --columns ts_event=time,price=px,size=qty --ts-unit ms
  ticktensor ingest 'data/*.dbn.zst' --out s3://bucket/store --codec zstd --workers 8
  ticktensor ingest AMZN_*_message_1.csv --out store --format lobster --schema quotes
  ticktensor ingest quotes.parquet --out store --features features.toml --report report.json
  ticktensor ingest eurusd-bars.csv --out store --symbol EURUSD  # columns, bar length inferred
  ticktensor ingest BTCUSDT-aggTrades-2024-08-08.csv spot_btcusdt_20240808.gz --out store
  RAY_ADDRESS=ray://head:10001 ticktensor ingest 's3://raw/2024-*/' --out s3://feat --engine ray
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from ticktensor.errors import ConfigError, VersionConflictError
from ticktensor.schemas import EventKind, parse_duration_ns
from ticktensor.store import Codec, Layout

from ._flag_types import parse_period, positive_int
from ._format import human_bytes
from ._hints import INGEST_HINTS, in_cli_words

if TYPE_CHECKING:
    from ticktensor.ingest import IngestOptions, IngestResult

__all__ = ["register"]

SCHEMAS = {
    "trades": "trades",
    "quotes": "quotes",
    "mbp10": "mbp10",
    "mbo": "mbo",
    "bars": "ohlcv",
    "ohlcv": "ohlcv",
    "definitions": "definitions",
    "statistics": "statistics",
}
FORMATS = ("auto", "csv", "parquet", "arrow", "dbn", "lobster", "tardis", "binance")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "ingest",
        help="convert market data files into a store version",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("sources", nargs="+", metavar="SRC", help="paths, globs or fsspec URLs")
    p.add_argument("--out", required=True, help="store path or fsspec URL (created if new)")
    p.add_argument("--format", choices=FORMATS, default="auto")
    p.add_argument("--schema", choices=sorted(SCHEMAS), help="canonical schema of the events")
    p.add_argument("--symbol", help="symbol for files without a symbol column")
    p.add_argument("--features", metavar="SPEC.toml", help="feature spec (default: by data)")
    p.add_argument("--codec", choices=[c.value for c in Codec], help="feature chunk codec")
    p.add_argument("--chunk-rows", type=positive_int, help="rows per feature chunk")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=os.cpu_count() or 1,
        help="parallel tasks: threads of this process for --engine local (default: cores)",
    )
    p.add_argument("--engine", choices=("local", "ray"), default="local")
    p.add_argument("--strict", action="store_true", help="fail on the first bad row")
    p.add_argument("--start", type=date.fromisoformat, help="declared first day (UTC)")
    p.add_argument("--end", type=date.fromisoformat, help="declared day after the last")
    p.add_argument(
        "--stats-period",
        type=parse_period,
        metavar="START:END",
        help="compute normalization statistics over [START, END) only (dates or ISO "
        "timestamps, UTC unless zoned), e.g. 2024-01-02:2024-07-01; kept for later ingests",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="supersede the stored rows of the job's symbols (other symbols of a session are kept)",
    )
    p.add_argument(
        "--partition",
        choices=("auto", "day", "month", "year", "all"),
        default="auto",
        help="period of time one pack holds: a UTC day (intraday data), a month or a year "
        "(few rows per symbol a day, e.g. daily bars), or all time (one pack); auto: from "
        "the data's rows per day (all for small low-frequency data). Recorded by a store's "
        "first ingest and kept by later ones",
    )
    p.add_argument("--report", metavar="FILE", help="write per-file results as JSON")
    p.add_argument("--message", default="", help="version message")
    p.add_argument("--batch-rows", type=positive_int, default=1 << 20, help="rows per read batch")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--allow-all-quarantined",
        action="store_true",
        help="exit 0 even when rows were read and every one was quarantined (by default "
        "such a run fails, naming the top reasons; the quarantine is stored either way)",
    )
    csv = p.add_argument_group("generic CSV")
    csv.add_argument("--delimiter", default=",")
    csv.add_argument("--no-header", action="store_true")
    csv.add_argument(
        "--columns",
        default="",
        metavar="NAME=COL,...",
        help="canonical column = file column (or 0-based index without header)",
    )
    csv.add_argument(
        "--ts-unit",
        choices=("s", "ms", "us", "ns"),
        help="unit of epoch timestamps (default: from their magnitude)",
    )
    csv.add_argument("--ts-format", help="strptime format of text timestamps")
    csv.add_argument("--timezone", default="UTC", help="zone of text timestamps")
    csv.add_argument("--price-scale", type=float, default=1.0, help="price multiplier")
    csv.add_argument(
        "--interval",
        metavar="DURATION",
        help="bar length of ohlcv files without an interval_ns column, e.g. 1m "
        "(default: from the file name, else from the timestamps)",
    )
    p.set_defaults(run=run)


def _ns(day: date | None) -> int | None:
    if day is None:
        return None
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()) * 1_000_000_000


def options_from_args(args: argparse.Namespace) -> IngestOptions:
    from ticktensor.ingest import IngestOptions
    from ticktensor.ingest.readers import CsvFormat, ReadOptions

    columns = {}
    for item in filter(None, args.columns.split(",")):
        name, sep, col = item.partition("=")
        if not sep:
            raise ConfigError(f"--columns expects NAME=COLUMN pairs, got {item!r}")
        columns[name.strip()] = col.strip()
    csv = CsvFormat(
        delimiter=args.delimiter,
        header=not args.no_header,
        columns=columns,
        ts_unit=args.ts_unit,
        ts_format=args.ts_format,
        timezone=args.timezone,
        price_scale=args.price_scale,
    )
    kind = EventKind(SCHEMAS[args.schema]) if args.schema else None
    spec = None
    if args.features:
        from ticktensor.ingest.features import load_spec

        spec = load_spec(args.features)
    layout = None
    if args.codec or args.chunk_rows:
        layout = Layout(
            codec=Codec(args.codec or "none"), chunk_rows=args.chunk_rows or Layout().chunk_rows
        )
    start, end = _ns(args.start), _ns(args.end)
    if (start is None) != (end is None):
        raise ConfigError("--start and --end declare a range together; give both")
    if start is not None and end is not None and start >= end:
        raise ConfigError(
            f"--start {args.start} must be before --end {args.end} (the day after the last)"
        )
    try:
        interval = parse_duration_ns(args.interval) if args.interval else None
    except ConfigError as exc:
        raise ConfigError(f"--interval: {exc}") from None
    read = ReadOptions(
        kind=kind, symbol=args.symbol, batch_rows=args.batch_rows, csv=csv, interval_ns=interval
    )
    return IngestOptions(
        format=args.format,
        read=read,
        spec=spec,
        layout=layout,
        workers=args.workers,
        engine=args.engine,
        strict=args.strict,
        ts_range=None if start is None or end is None else (start, end),
        stats_period=args.stats_period,
        replace=args.replace,
        message=args.message,
        partition=args.partition,
    )


def format_result(result: IngestResult) -> str:
    width = max([len(os.path.basename(f.file)) for f in result.files] + [4])
    kind = max([len(f.schema or "-") for f in result.files] + [7])  # "definitions" is 11
    lines = [
        f"{'file':<{width}}  {'format':<8} {'schema':<{kind}} {'read':>12} {'stored':>12} "
        f"{'quarantined':>12} {'s':>7}"
    ]
    for f in result.files:
        lines.append(
            f"{os.path.basename(f.file):<{width}}  {f.format:<8} {f.schema or '-':<{kind}} "
            f"{f.rows_read:>12,} {f.rows_stored:>12,} {f.rows_quarantined:>12,} {f.seconds:>7.2f}"
            + (f"  ({f.note})" if f.note else "")
        )
        lines.extend(" " * (width + 2) + line for line in _inference_lines(f.inference))
        if f.rules:
            lines.append(
                " " * (width + 2)
                + "quarantine rules: "
                + ", ".join(f"{k} {v:,}" for k, v in sorted(f.rules.items()))
            )
    lines.append(
        f"{'total':<{width}}  {'':<{kind + 9}} {result.rows_read:>12,} {result.rows_stored:>12,} "
        f"{result.rows_quarantined:>12,} {result.seconds:>7.2f}"
    )
    v = result.version
    state = "published" if result.published else "unchanged (identical content already stored)"
    held = f"{len(v.packs)} packs ({sum(p.symbols for p in v.packs):,} symbol-sessions)"
    if result.partition == "all":
        held += ", one for all time"
    elif result.partition != "day":
        held += f", one per {result.partition}"
    if v.segments:  # sessions an older ticktensor stored as one segment per symbol
        held += f" and {len(v.segments)} segments"
    lines.append(
        f"store version {v.version} {state}: {held}, {v.rows:,} feature rows, "
        f"{human_bytes(v.nbytes)}; {result.rows_read / max(result.seconds, 1e-9):,.0f} rows/s"
    )
    lines.extend(f"note: {n}" for n in result.notes)
    return "\n".join(lines)


def _inference_lines(inference: dict[str, Any] | None) -> list[str]:
    """What the reader inferred: the column mapping (file column names that differ from
    the canonical ones, and constants) and its notes."""
    if not inference:
        return []
    columns: dict[str, str] = inference.get("columns", {})
    mapped = [f"{k}={v}" for k, v in columns.items() if k != v]
    lines = [f"columns: {', '.join(mapped)}"] if mapped else []
    return lines + list(inference.get("notes", []))


def run(args: argparse.Namespace) -> int:
    from ticktensor.ingest import ingest

    try:
        result = ingest(args.sources, args.out, options_from_args(args), progress=not args.quiet)
    except VersionConflictError as exc:
        raise in_cli_words(exc, INGEST_HINTS) from exc
    if args.report:
        with open(args.report, "w") as f:
            json.dump([r.to_dict() for r in result.files], f, indent=2)
    print(format_result(result), file=sys.stdout)
    if result.rows_read and not result.rows_stored and not args.allow_all_quarantined:
        print(f"ticktensor ingest: error: {nothing_stored(result)}", file=sys.stderr)
        return 1
    return 0


def nothing_stored(result: IngestResult, top: int = 3) -> str:
    """Why a run that read rows stored none: its top quarantine rules, each with the
    first message of that rule, and the flag that accepts such a run."""
    counts: dict[str, int] = {}
    examples: dict[str, str] = {}
    for f in result.files:
        for rule, n in f.rules.items():
            counts[rule] = counts.get(rule, 0) + n
        for rule, message in f.examples.items():
            examples.setdefault(rule, message)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]
    reasons = "; ".join(
        f"{rule} {n:,}" + (f" (e.g. {examples[rule]})" if rule in examples else "")
        for rule, n in ranked
    )
    return (
        f"nothing stored: {result.rows_read:,} read, all quarantined; top reasons: {reasons}. "
        "Fix the flags the reasons name and run again (the quarantine table of this run is "
        "in the store), or pass --allow-all-quarantined to accept such a run"
    )
