"""From raw market data to a store: readers, normalization, synthetic data, bars and features.

:func:`ingest` is the job behind ``ticktensor ingest``: input files in, one new store
version out, configured by :class:`IngestOptions` and reported by :class:`IngestResult`;
:func:`validate_inputs` runs its reading and validation alone and publishes nothing.
The public modules are :mod:`ticktensor.ingest.readers` (vendor formats and their
detection), :mod:`ticktensor.ingest.synthetic` (deterministic synthetic quotes and
trades), :mod:`ticktensor.ingest.bars` (time, volume and dollar bars) and
:mod:`ticktensor.ingest.features` (point-in-time features, labels and training stats);
their main entry points are re-exported here.

Examples
--------
>>> from ticktensor.ingest import IngestOptions, ingest
>>> from ticktensor.ingest.readers import ReadOptions
>>> options = IngestOptions(workers=1, read=ReadOptions(kind="trades"))
>>> options.format
'auto'
"""

from __future__ import annotations

from ._job import FileReport, IngestOptions, IngestResult, ingest, validate_inputs
from ._partition import (
    MIN_PARTITION_ROWS,
    Partition,
    PartitionChoice,
    choose_partition,
    partition_label,
)
from .bars import dollar_bars, make_bars, time_bars, volume_bars
from .features import (
    DEMO_FEATURE_SPEC,
    FEATURES,
    FeatureArrays,
    FeatureStatsAccumulator,
    build_features,
    compute_features,
    compute_session_features,
    default_spec,
    demo_feature_spec,
    dump_spec,
    known_features,
    load_spec,
)
from .synthetic import SyntheticMarket, generate_day, iter_days

__all__ = [
    "DEMO_FEATURE_SPEC",
    "FEATURES",
    "MIN_PARTITION_ROWS",
    "FeatureArrays",
    "FeatureStatsAccumulator",
    "FileReport",
    "IngestOptions",
    "IngestResult",
    "Partition",
    "PartitionChoice",
    "SyntheticMarket",
    "build_features",
    "choose_partition",
    "compute_features",
    "compute_session_features",
    "default_spec",
    "demo_feature_spec",
    "dollar_bars",
    "dump_spec",
    "generate_day",
    "ingest",
    "iter_days",
    "known_features",
    "load_spec",
    "make_bars",
    "partition_label",
    "time_bars",
    "validate_inputs",
    "volume_bars",
]
