"""One ``ticktensor bench`` run: which parts, on which workload, and where the results go."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .loader import run_loader
from .machine import describe_run
from .options import BenchOptions
from .report import markdown, text
from .results import Results
from .workload import Workload

if TYPE_CHECKING:
    from .wide import WideOptions

__all__ = ["Part", "execute"]

Part = Literal["loader", "ingest", "train", "all"]


def execute(
    part: Part,
    workload: Workload,
    options: BenchOptions,
    *,
    ingest_rows: int,
    ingest_baselines: Sequence[str] | None = None,
    json_path: Path | None = None,
    plot_path: Path | None = None,
    show_markdown: bool = False,
    argv: Sequence[str] | None = None,
    wide: WideOptions | None = None,
    wide_workdir: Path | None = None,
    say: Callable[[str], None] = print,
) -> Results:
    """Run ``part`` (``all``: loader, train, sweeps and ingest), report, and write the files.

    With ``wide`` (``bench all``), workload W1 of that shape runs last
    (:func:`ticktensor.bench.wide.run_wide`, its scratch stores under ``wide_workdir``).
    """
    started = time.perf_counter()
    results = Results(meta=describe_run(None if argv is None else list(argv)))
    results.meta["workload"] = asdict(workload) | {"cache_dir": str(workload.cache_dir)}
    results.meta["options"] = asdict(options) | {"codec": options.codec.value}
    say(f"# command: {results.meta['command']}")
    if part in ("loader", "all"):
        run_loader(workload, options, results, say)
    if part in ("train", "all"):
        from .train import run_train

        run_train(workload, options, results, say)
    if part == "all":
        from .sweeps import run_sweeps

        run_sweeps(workload, options, results, say)
    if part in ("ingest", "all"):
        from .ingest import BASELINES, run_ingest

        run_ingest(
            ingest_rows,
            results,
            baselines=BASELINES if ingest_baselines is None else ingest_baselines,
            repeats=min(3, options.repeats),
            say=say,
        )
    if wide is not None:
        from .wide import run_wide

        results.wide = run_wide(wide, workdir=wide_workdir, say=say)
    results.meta["seconds"] = round(time.perf_counter() - started, 1)
    results.meta["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    say("")
    say(text(results))
    if show_markdown:
        say("")
        say(markdown(results))
    if json_path is not None:
        results.write(json_path)
        say(f"# results written to {json_path}")
    if plot_path is not None:
        from .plot import plot

        plot(results, plot_path)
        say(f"# plot written to {plot_path}")
    say(f"# finished in {results.meta['seconds']:.0f} s")
    return results
