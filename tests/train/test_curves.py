"""Loss curves from metrics.jsonl: restarts supersede lost points, time to a target loss."""

from __future__ import annotations

import json
from pathlib import Path

from ticktensor.train import CurvePoint, loss_curve, time_to_target


def write(path: Path, records: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"event": "ev')


def evaluation(step: int, wall: float, loss: float) -> dict[str, object]:
    return {
        "event": "eval",
        "step": step,
        "samples_seen": 64 * step,
        "wall_s": wall,
        "valid_loss": loss,
    }


def test_a_restart_supersedes_the_points_after_its_checkpoint(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    write(
        log,
        [
            {"event": "start", "launch": 0},
            evaluation(0, 0.5, 2.0),
            evaluation(10, 3.0, 1.5),
            evaluation(20, 6.0, 1.2),  # lost: the next launch resumed from step 10
            {"event": "start", "launch": 1, "resumed": {"step": 10}},
            evaluation(20, 6.5, 1.25),
            evaluation(30, 9.0, 1.0),
        ],
    )
    assert [(p.step, p.valid_loss) for p in loss_curve(log)] == [
        (0, 2.0),
        (10, 1.5),
        (20, 1.25),
        (30, 1.0),
    ]
    assert time_to_target(log, 1.3) == CurvePoint(20, 1280, 6.5, 1.25)
    assert time_to_target(log, 0.5) is None
    assert loss_curve(tmp_path / "missing.jsonl") == []
