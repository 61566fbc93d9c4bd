"""Throughput benchmarks: the loader and ingest against baselines, limits and a performance model.

``ticktensor bench loader|ingest|train|all`` runs them (see ``docs/performance.md``); every
figure is measured in the same run as the baselines and limits it is compared with.
Importing this package does not import torch; ``ticktensor.bench.run.execute`` does.
"""

from .goals import GOALS, Goal
from .model import Demand, Limits, Prediction, Stage, break_even_step_s, predict, stall_fraction
from .options import BenchOptions
from .report import markdown, readme_section, splice_readme, text
from .results import Results, Row, ratio
from .workload import Workload

__all__ = [
    "GOALS",
    "BenchOptions",
    "Demand",
    "Goal",
    "Limits",
    "Prediction",
    "Results",
    "Row",
    "Stage",
    "Workload",
    "break_even_step_s",
    "markdown",
    "predict",
    "ratio",
    "readme_section",
    "splice_readme",
    "stall_fraction",
    "text",
]
