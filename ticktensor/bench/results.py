"""A benchmark's results: rows of rates, and the file that records how they were measured."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ticktensor.errors import ConfigError

__all__ = ["Kind", "Results", "Row", "ratio"]

Kind = Literal["loader", "baseline", "limit", "peer"]
FORMAT = "ticktensor-bench/1"


@dataclass(frozen=True)
class Row:
    """One method's figures; a skipped one has ``samples_per_s=None`` and says why in ``note``.

    Parameters
    ----------
    name
        The method (``ticktensor``, ``torch_mmap_w2``, ``memcpy`` ...).
    kind
        ``loader`` (ours), ``baseline`` (what users write), ``limit`` (a physical ceiling,
        its ``samples_per_s`` the samples it would carry), or ``peer`` (another library).
    samples_per_s, gb_per_s
        Rates: samples delivered per second and their bytes (a limit's own GB/s).
    first_batch_s
        Seconds from the start to the first batch, where there is one.
    peak_rss_mb
        Peak resident memory of the process tree while the method ran.
    rss_growth_mb
        That peak less the resident memory when the method started.
    note
        What the row measured, or why it was skipped.
    stats
        The loader's own ``stats()`` of the last repetition, for loader rows.
    """

    name: str
    kind: Kind
    samples_per_s: float | None
    gb_per_s: float | None
    first_batch_s: float | None = None
    peak_rss_mb: float | None = None
    rss_growth_mb: float | None = None
    note: str = ""
    stats: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def skipped(cls, name: str, kind: Kind, reason: str) -> Row:
        """A row that was not measured, with the reason."""
        return cls(name, kind, None, None, note=reason)

    @classmethod
    def from_rate(
        cls, name: str, kind: Kind, samples_per_s: float, sample_bytes: int, **more: Any
    ) -> Row:
        """A row whose GB/s is ``samples_per_s`` samples of ``sample_bytes`` bytes."""
        return cls(name, kind, samples_per_s, samples_per_s * sample_bytes / 1e9, **more)

    @classmethod
    def from_gbps(
        cls, name: str, kind: Kind, gb_per_s: float, sample_bytes: int, **more: Any
    ) -> Row:
        """A limit row: ``gb_per_s``, shown as the samples of ``sample_bytes`` it would carry."""
        return cls(name, kind, gb_per_s * 1e9 / sample_bytes, gb_per_s, **more)


def ratio(
    rows: Sequence[Row], top: str, bottom: str, metric: str = "samples_per_s"
) -> float | None:
    """``top``'s ``metric`` over ``bottom``'s; ``None`` when either is missing or skipped.

    Examples
    --------
    >>> rows = [Row("a", "loader", 300.0, 3.0), Row("b", "baseline", 100.0, 2.0)]
    >>> ratio(rows, "a", "b"), ratio(rows, "a", "b", "gb_per_s"), ratio(rows, "a", "c")
    (3.0, 1.5, None)
    """
    by = {r.name: r for r in rows}
    if top not in by or bottom not in by:
        return None
    a, b = getattr(by[top], metric), getattr(by[bottom], metric)
    if a is None or b is None or b == 0:
        return None
    return float(a) / float(b)


@dataclass
class Results:
    """Everything one ``ticktensor bench`` run measured, and how (``meta``).

    Sections are filled by the benchmarks that ran: ``rows`` (loader and its baselines
    and limits), ``threads`` (thread scaling), ``stall`` (``bench train``), ``model``
    (predicted vs measured), ``sweeps`` (``bench all``), ``ingest``, ``wide`` (workload
    W1: :func:`ticktensor.bench.wide.run_wide`'s document, rows with their own goals);
    ``goals`` are the checks with their verdicts.
    """

    meta: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    threads: list[dict[str, Any]] = field(default_factory=list)
    stall: list[dict[str, Any]] = field(default_factory=list)
    model: list[dict[str, Any]] = field(default_factory=list)
    goals: list[dict[str, Any]] = field(default_factory=list)
    sweeps: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    ingest: list[dict[str, Any]] = field(default_factory=list)
    wide: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def row(self, name: str) -> Row | None:
        """The row called ``name``, if measured."""
        return next((r for r in self.rows if r.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """The results as plain JSON types, with the file format's name."""
        doc = asdict(self)
        doc["format"] = FORMAT
        return doc

    def write(self, path: Path) -> None:
        """Write the results as JSON (parent folders created)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, default=_plain) + "\n")

    @classmethod
    def read(cls, path: Path) -> Results:
        """Read a file written by :meth:`write`."""
        doc = json.loads(Path(path).read_text())
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ConfigError(f"{path}: not a ticktensor bench results file (format {FORMAT})")
        doc.pop("format")
        rows = [Row(**r) for r in doc.pop("rows")]
        return cls(rows=rows, **doc)


def _plain(value: object) -> object:
    """JSON for the odd value in ``stats()`` (numpy scalars, paths)."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)
