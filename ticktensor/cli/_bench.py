"""``ticktensor bench loader|ingest|train|all|wide|live|report``: figures against baselines."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ticktensor.bench.wide import WideOptions

__all__ = ["add_bench_arguments", "register"]

_PARTS = {
    "loader": "ticktensor.DataLoader against torch (mmap, zarr), threads, numpy, memcpy, decode "
    "and sequential read, in one run; goals, model, thread scaling",
    "ingest": "CSV trades -> store against pyarrow and pandas",
    "train": "data stall (share of time waiting for batches) under a simulated accelerator",
    "all": "loader, train, scaling sweeps, ingest, then W1 (--quick: under 5 minutes on 2 cores, "
    "and about 1 for W1)",
}
QUICK = {"rows": 250_000, "seconds": 0.5, "repeats": 3, "passes": 1, "ingest_rows": 1_000_000}
FULL = {"seconds": 2.0, "repeats": 5, "passes": 2, "ingest_rows": 10_000_000}
WIDE_FORMAT = "ticktensor-bench-wide/1"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bench", help="measure throughput against baselines and limits", description=__doc__
    )
    benches = p.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    for part, help_text in _PARTS.items():
        parser = benches.add_parser(
            part, help=help_text, description=help_text + ". Workload D1 by default."
        )
        add_bench_arguments(parser, workload=part != "ingest")
        if part == "all":
            add_wide_arguments(parser, prefix="wide-")
        parser.set_defaults(run=run_bench, part=part)
    _register_wide(benches)
    _register_live(benches)
    report = benches.add_parser(
        "report",
        help="render a results file: text, Markdown, plot, README section",
        description="Render a results file written by --json: the text report (default), "
        "Markdown tables, the sweep plot, or the README's performance section.",
    )
    report.add_argument(
        "results", type=Path, help="a JSON file written by ticktensor bench ... --json"
    )
    report.add_argument("--markdown", action="store_true", help="print Markdown tables")
    report.add_argument("--plot", type=Path, help="draw the sweeps to this PNG")
    report.add_argument(
        "--readme", type=Path, help="rewrite this README's section between the bench markers"
    )
    report.add_argument(
        "--readme-plot", help="image path the README section shows (default: --plot)"
    )
    report.set_defaults(run=run_report)


def _register_wide(benches: Any) -> None:
    help_text = (
        "workload W1, a store that holds a market: append one session per commit as the store "
        "ages, objects and metadata bytes per commit, ingest of an all-symbol CSV, time to open "
        "the store as a dataset, the loader over it; each against its baseline, in one run"
    )
    wide = benches.add_parser("wide", help=help_text, description=help_text + ".")
    add_wide_arguments(wide)
    wide.add_argument("--json", type=Path, help="write the options, figures and rows")
    wide.set_defaults(run=run_wide, part="wide")


def _register_live(benches: Any) -> None:
    help_text = (
        "live features: latency per tick of a 10-feature spec (C++ API, one core), events/s "
        "of a wide replay (batch API, one core), against a polars recompute over a trailing "
        "window and a numpy incremental loop, in one run"
    )
    live = benches.add_parser("live", help=help_text, description=help_text + ".")
    live.add_argument("--quick", action="store_true", help="smaller sizes (a few seconds)")
    live.add_argument("--latency-quotes", type=int, metavar="N", help="quotes timed (200,000)")
    live.add_argument("--wide-symbols", type=int, metavar="N", help="symbols replayed (1,000)")
    live.add_argument("--wide-quotes", type=int, metavar="N", help="quotes per symbol (2,000)")
    live.add_argument("--repeats", type=int, metavar="N", help="repetitions, the best counts (3)")
    live.add_argument("--json", type=Path, help="write the options, figures and goals")
    live.set_defaults(run=run_live, part="live")


def run_live(args: argparse.Namespace) -> int:
    from ticktensor.bench.live import LiveOptions, format_live, run_live
    from ticktensor.bench.machine import describe_run

    meta = describe_run(_command(args))
    print(f"# command: {meta['command']}")
    options = LiveOptions.quick() if args.quick else LiveOptions()
    given = _given(args, "latency_quotes", "wide_symbols", "wide_quotes", "repeats")
    options = dataclasses.replace(options, **given)
    doc = run_live(options)
    meta["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(format_live(doc))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        document = {"format": "ticktensor-bench-live/1", "meta": meta,
                    "options": dataclasses.asdict(options), **doc}  # fmt: skip
        args.json.write_text(json.dumps(document, indent=1) + "\n")
        print(f"# results written to {args.json}")
    return 0


def add_wide_arguments(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The shape of W1 (``bench wide``), as ``--symbols``; ``bench all`` adds ``--wide-``."""
    group = parser.add_argument_group("workload W1 (DESIGN.md; --quick scales it down)")
    if not prefix:
        group.add_argument(
            "--quick", action="store_true", help="500 symbols x 10 sessions, 200,000 CSV rows"
        )
    for name, kind, text in (
        ("symbols", int, "symbols per session (5,000; --quick 500)"),
        ("sessions", int, "sessions appended, one commit each (20; --quick 10)"),
        ("rows", int, "rows per symbol and session (390)"),
        ("features", int, "float32 features per row (16)"),
        ("window", int, "rows per sample of the dataset and loader rows (32)"),
        ("batch", int, "samples per batch of the loader rows (256)"),
        ("ingest-rows", int, "trades in the all-symbol CSV (2,000,000; --quick 200,000)"),
        ("segment-sessions", int, "sessions of the per-segment reference (0; --quick 3)"),
        ("seconds", float, "length of one loader repetition (2; --quick 0.5)"),
        ("repeats", int, "repetitions of each timed method, the median counts (3)"),
    ):
        if prefix and name in ("seconds", "repeats"):
            continue  # bench all's own --seconds and --repeats apply
        metavar = "SECONDS" if kind is float else "N"
        group.add_argument(f"--{prefix}{name}", type=kind, metavar=metavar, help=text)
    group.add_argument(
        f"--{prefix}workdir", type=Path, metavar="DIR", help="where the scratch stores live (tmp)"
    )


WIDE_FIELDS = (
    "symbols",
    "sessions",
    "rows",
    "features",
    "window",
    "batch",
    "ingest_rows",
    "segment_sessions",
    "seconds",
    "repeats",
)


def wide_options(args: argparse.Namespace, prefix: str = "") -> WideOptions:
    """The :class:`~ticktensor.bench.wide.WideOptions` of the command line."""
    from ticktensor.bench.wide import WideOptions

    options = WideOptions.quick() if args.quick else WideOptions()
    given = {f: getattr(args, prefix + f, None) for f in WIDE_FIELDS}
    return dataclasses.replace(options, **{k: v for k, v in given.items() if v is not None})


def run_wide(args: argparse.Namespace) -> int:
    from ticktensor.bench.machine import describe_run
    from ticktensor.bench.wide import format_rows, run_wide

    meta = describe_run(_command(args))
    print(f"# command: {meta['command']}")
    started = time.perf_counter()
    doc = run_wide(wide_options(args), workdir=args.workdir)
    meta["seconds"] = round(time.perf_counter() - started, 1)
    meta["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print()
    print(format_rows(doc["rows"]))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"format": WIDE_FORMAT, "meta": meta, **doc}, indent=1) + "\n"
        )
        print(f"# results written to {args.json}")
    print(f"# finished in {meta['seconds']:.0f} s")
    return 0


def add_bench_arguments(parser: argparse.ArgumentParser, *, workload: bool = True) -> None:
    """Options of ``bench loader|ingest|train|all``; ``None`` means the default (D1).

    ``workload=False`` leaves out the loader workload's options (``bench ingest``).
    """
    if workload:
        _add_workload_arguments(parser)
    _add_timing_arguments(parser)


def _add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("workload (D1 of DESIGN.md by default)")
    data.add_argument(
        "--store", help="benchmark an existing store's series instead of generated data"
    )
    data.add_argument("--symbols", type=int, help="series, one per symbol (D1: 16)")
    data.add_argument("--rows", type=int, help="rows per series (D1: 1,000,000; --quick: 250,000)")
    data.add_argument("--features", type=int, help="float32 features per row (D1: 32)")
    data.add_argument("--window", type=int, help="rows per sample (D1: 128)")
    data.add_argument("--batch", type=int, help="samples per batch (D1: 256)")
    data.add_argument("--chunk-rows", type=int, help="rows per stored chunk (32,768)")
    data.add_argument(
        "--codec", choices=["none", "lz4", "zstd", "blosc"], help="store of the main row (none)"
    )
    data.add_argument(
        "--order", choices=["uniform", "block"], help="order of the main row (uniform)"
    )
    data.add_argument("--seed", type=int, help="seed of the data and the orders (0)")
    data.add_argument("--cache-dir", type=Path, help="where data is written once (build/bench-d1)")


def _add_timing_arguments(parser: argparse.ArgumentParser) -> None:
    timing = parser.add_argument_group("timing")
    timing.add_argument(
        "--quick", action="store_true", help="a smaller, shorter run (rows 250,000, 0.5 s x 3)"
    )
    timing.add_argument("--seconds", type=float, help="length of one repetition (2; --quick 0.5)")
    timing.add_argument("--repeats", type=int, help="repetitions, the median counts (5; --quick 3)")
    timing.add_argument(
        "--passes", type=int, help="epochs of the compressed and cold rows (2; --quick 1)"
    )
    timing.add_argument("--threads", type=int, help="loader threads (the core count)")
    timing.add_argument(
        "--thread-counts", type=int, nargs="+", help="thread scaling table (1 2 4 .. cores)"
    )
    timing.add_argument("--step-ms", type=float, nargs="+", help="simulated step times (1 5 20)")
    timing.add_argument(
        "--ingest-rows", type=int, help="CSV rows of bench ingest (10,000,000; --quick 1,000,000)"
    )
    timing.add_argument(
        "--ingest-baselines",
        nargs="*",
        choices=("pyarrow_csv_parquet", "pandas_zarr"),
        help="baselines of bench ingest (both; none or one for a file too large for them)",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--json", type=Path, help="write the results (with machine, versions, commit, command)"
    )
    out.add_argument("--plot", type=Path, help="draw the sweeps and limits to this PNG")
    out.add_argument("--markdown", action="store_true", help="also print the tables as Markdown")


def _given(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def run_bench(args: argparse.Namespace) -> int:
    # Imported here: the benchmarks need torch, which the other commands must not load.
    from ticktensor.bench import BenchOptions, Workload
    from ticktensor.bench.run import execute

    preset = QUICK if args.quick else FULL
    shape = _given(
        args, "symbols", "rows", "features", "window", "batch", "chunk_rows", "seed", "cache_dir"
    )
    store = getattr(args, "store", None)
    if args.quick and "rows" not in shape and store is None:
        shape["rows"] = preset["rows"]
    workload = Workload.from_store(store, **shape) if store else Workload(**shape)
    timing: dict[str, Any] = {k: preset[k] for k in ("seconds", "repeats", "passes")}
    timing |= _given(args, "seconds", "repeats", "passes", "threads", "codec", "order")
    if args.thread_counts:
        timing["thread_counts"] = tuple(args.thread_counts)
    if args.step_ms:
        timing["step_ms"] = tuple(args.step_ms)
    options = BenchOptions(**timing, quick=args.quick)
    wide = None
    if args.part == "all":
        wide = dataclasses.replace(
            wide_options(args, prefix="wide_"),
            seconds=options.seconds,
            repeats=min(3, options.repeats),
        )
    execute(
        args.part,
        workload,
        options,
        ingest_rows=args.ingest_rows or int(preset["ingest_rows"]),
        ingest_baselines=args.ingest_baselines,  # None: every baseline
        json_path=args.json,
        plot_path=args.plot,
        show_markdown=args.markdown,
        argv=_command(args),
        wide=wide,
        wide_workdir=getattr(args, "wide_workdir", None),
    )
    return 0


def _command(args: argparse.Namespace) -> list[str]:
    """The command line that ``args`` came from, spelled as ``ticktensor bench ...``."""
    argv = ["ticktensor", "bench", args.part]
    for name, value in vars(args).items():
        if name in ("part", "bench", "command", "run") or value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, list | tuple):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def run_report(args: argparse.Namespace) -> int:
    from ticktensor.bench import Results, markdown, readme_section, splice_readme, text

    results = Results.read(args.results)
    if args.plot is not None:
        from ticktensor.bench.plot import plot

        plot(results, args.plot)
        print(f"# plot written to {args.plot}")
    if args.readme is not None:
        image = args.readme_plot or (None if args.plot is None else str(args.plot))
        section = readme_section(results, str(args.results), image)
        args.readme.write_text(splice_readme(args.readme.read_text(), section))
        print(f"# {args.readme}: performance section regenerated from {args.results}")
    if args.markdown:
        print(markdown(results))
    elif args.readme is None and args.plot is None:
        print(text(results))
    return 0
