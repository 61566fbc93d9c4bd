"""What the default chunk check costs: a first epoch with it against one without, raw and zstd.

Every chunk a loader reads is checked once, when loaded, against the CRC-32C its pack
recorded (``WindowDataset(verify=False)``, the default); ``verify="none"`` checks nothing.
Both read the workload's series as one pack per codec (written once beside the segment
stores), one epoch over non-overlapping windows from opening, so every stored byte is read
and checked once: the ratio of the two rows is the check's whole cost.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Literal

import numpy as np

from ticktensor.store import Codec, Layout, Store, StoreVersion

from .engine import fresh_pass
from .measure import Rep, summarize, timing_row
from .options import BenchOptions
from .results import Results
from .workload import Workload

__all__ = ["CODECS", "integrity_rows", "pack_store"]

Say = Callable[[str], None]
#: The codecs whose packs are measured.
CODECS = (Codec.NONE, Codec.ZSTD)
#: First epochs per codec and setting, at least: the two rows differ by a few percent.
_PASSES = 5


def pack_store(w: Workload, codec: Codec, say: Say = print) -> StoreVersion:
    """The workload's series as one pack of ``codec`` (written once, then reused)."""
    root = w.data_dir / f"pack-{codec.value}"
    if not (root / "READY").exists():
        say(f"# writing the benchmark data as one {codec.value} pack to {root} ...")
        store = Store.create(
            str(root), layout=Layout(codec=codec, chunk_rows=w.chunk_rows), exist_ok=True
        )
        writer = store.pack_writer(
            session="2024-01-02",
            feature_names=[f"f{i}" for i in range(w.features)],
            label_names=["y"],
        )
        for series in w.series():
            rows = series.ts.shape[0]
            writer.append(
                [series.symbol], np.array([0, rows]), series.ts, series.values, series.labels
            )
        store.commit(packs=[writer.finish()], message=f"benchmark pack, codec {codec.value}")
        (root / "READY").write_text(json.dumps({"codec": codec.value}))
    return Store.open(str(root)).version()


def integrity_rows(w: Workload, o: BenchOptions, results: Results, say: Say) -> None:
    """``ticktensor_check_<codec>`` and ``ticktensor_nocheck_<codec>``: one epoch from
    opening with the default chunk check and without, taking turns (in ABBA order); their
    ratio is said."""
    sb = w.sample_bytes
    passes = max(_PASSES, o.passes)  # a short epoch: a few more passes than o.passes
    say(f"# default chunk check (CRC-32C) on and off: {passes} first epochs each, taking turns")
    for codec in CODECS:
        version = pack_store(w, codec, say)
        reps: dict[str, list[Rep]] = {"check": [], "nocheck": []}
        settings: tuple[tuple[str, bool | Literal["none"]], ...] = (
            ("nocheck", "none"),
            ("check", False),
        )
        for p in range(passes):
            # ABBA: whichever goes first after the previous pass's teardown takes turns too.
            for kind, verify in settings if p % 2 == 0 else settings[::-1]:
                reps[kind].append(
                    fresh_pass(version, w.window, w.batch, o.threads, w.seed + p, verify=verify)
                )
        note = (
            f"one epoch of a {codec.value} pack, stride {w.window}, block order, from opening, "
            f"{o.threads} threads"
        )
        on, off = summarize(reps["check"]), summarize(reps["nocheck"])
        results.rows.append(
            timing_row(
                f"ticktensor_check_{codec.value}",
                "loader",
                on,
                sb,
                f"{note}; every chunk checked once against its CRC-32C (the default)",
            )
        )
        results.rows.append(
            timing_row(
                f"ticktensor_nocheck_{codec.value}",
                "loader",
                off,
                sb,
                f'{note}; verify="none": no chunk checked',
            )
        )
        ratio = on.samples_per_s / off.samples_per_s if off.samples_per_s else float("nan")
        paired = [a / b for a, b in zip(on.rates, off.rates, strict=True) if b > 0]
        say(
            f"#   {codec.value}: check on {on.samples_per_s:,.0f} samples/s, off "
            f"{off.samples_per_s:,.0f} samples/s (medians): {ratio:.3f}x (goal >= 0.95x); "
            f"median of the passes' ratios {float(np.median(paired)):.3f}x "
            f"({', '.join(f'{r:.2f}' for r in paired)})"
        )
