"""Sample logs: which sample ids each rank trained on, step by step, and the work a failure lost."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .jsonlines import JsonLines, read_jsonlines

__all__ = ["SampleLog"]


class SampleLog:
    """Appends ``{"launch", "step", "epoch", "rank", "dp_rank", "tp_rank", "ids"}`` per
    completed step to ``RUN/samples-rank{rank}.jsonl``.

    ``ids`` are ids of the store version's full window dataset, so logs of runs with
    different world sizes compare directly. A *launch* is one start of the run (a torchrun
    restart or a rerun); a launch that resumed from the checkpoint of step ``S``
    supersedes the records of earlier launches after ``S``.
    """

    def __init__(
        self, out: str | os.PathLike[str], rank: int, dp_rank: int, tp_rank: int, launch: int
    ) -> None:
        self._log = JsonLines(Path(out) / f"samples-rank{rank}.jsonl")
        self._fixed = {"rank": rank, "dp_rank": dp_rank, "tp_rank": tp_rank}
        self.launch = launch

    def write(self, step: int, epoch: int, ids: npt.NDArray[np.int64]) -> None:
        """Record the samples of ``step``, once its optimizer step is done."""
        record: dict[str, Any] = {"launch": self.launch, "step": step, "epoch": epoch}
        self._log.write(record | self._fixed | {"ids": ids.tolist()})

    def close(self) -> None:
        self._log.close()

    @staticmethod
    def replayed(out: str | os.PathLike[str], launch: int, resumed_step: int) -> dict[str, int]:
        """Steps and samples that launches before ``launch`` trained after the checkpoint
        of ``resumed_step``: work lost to the failure, trained again from the checkpoint."""
        last, samples = resumed_step, 0
        for path in sorted(Path(out).glob("samples-rank*.jsonl")):
            for rec in read_jsonlines(path):
                if rec["launch"] < launch and rec["step"] > resumed_step:
                    last = max(last, int(rec["step"]))
                    samples += len(rec["ids"]) if rec["tp_rank"] == 0 else 0
        return {"steps": last - resumed_step, "samples": samples}
