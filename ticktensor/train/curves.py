"""Loss curves from a run's ``metrics.jsonl``: validation loss against wall time and samples."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .jsonlines import read_jsonlines

__all__ = ["CurvePoint", "loss_curve", "time_to_target"]


@dataclass(frozen=True)
class CurvePoint:
    """One validation pass: when it ran and what it measured."""

    step: int
    samples_seen: int
    wall_s: float
    valid_loss: float


def loss_curve(path: str | os.PathLike[str]) -> list[CurvePoint]:
    """The validation passes of a run, in order (restarts included; a launch that resumed
    from step ``S`` supersedes earlier launches' points after ``S``)."""
    points: list[CurvePoint] = []
    for rec in read_jsonlines(path):
        if rec.get("event") == "start" and rec.get("resumed"):
            step = int(rec["resumed"]["step"])
            points = [p for p in points if p.step <= step]
        elif rec.get("event") == "eval":
            point = CurvePoint(
                int(rec["step"]), int(rec["samples_seen"]), float(rec["wall_s"]), rec["valid_loss"]
            )
            points = [p for p in points if p.step != point.step] + [point]
    return points


def time_to_target(path: str | os.PathLike[str], target: float) -> CurvePoint | None:
    """The first validation pass whose loss is at most ``target``, or ``None``.

    Compare runs with different loaders, batch sizes or world sizes on its ``wall_s``
    (training time to the target) and ``samples_seen``, not only on throughput.

    Examples
    --------
    >>> import json, pathlib, tempfile
    >>> log = pathlib.Path(tempfile.mkdtemp()) / "metrics.jsonl"
    >>> evals = [(0, 0, 1.0, 1.37), (200, 102400, 5.9, 1.087), (400, 204800, 10.4, 1.086)]
    >>> lines = [
    ...     {"event": "eval", "step": s, "samples_seen": n, "wall_s": t, "valid_loss": v}
    ...     for s, n, t, v in evals
    ... ]
    >>> _ = log.write_text("".join(json.dumps(line) + "\\n" for line in lines))
    >>> time_to_target(log, 1.0865)
    CurvePoint(step=400, samples_seen=204800, wall_s=10.4, valid_loss=1.086)
    """
    return next((p for p in loss_curve(path) if p.valid_loss <= target), None)
