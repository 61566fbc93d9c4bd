"""Training options: one frozen, validated dataclass that the CLI and the API share."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from ticktensor.errors import ConfigError

__all__ = ["TrainConfig"]

Backend = Literal["auto", "gloo", "nccl"]
OrderName = Literal["uniform", "block"]


@dataclass(frozen=True)
class TrainConfig:
    """What to train on, how, and where checkpoints and logs go.

    Parameters
    ----------
    store
        Store path or fsspec URL.
    out
        Run folder: ``checkpoints/``, ``metrics.jsonl`` and (with ``sample_log``) one
        ``samples-rank{r}.jsonl`` per rank. A rerun with the same ``out`` resumes from
        the latest good checkpoint.
    store_version
        Version to pin (default: the latest). A resumed run refuses a store version
        other than its checkpoint's.
    window
        Rows per sample window.
    batch_size
        *Global* batch size, split evenly over the data-parallel ranks, so a run resumed
        with another number of processes takes the same optimizer steps.
    epochs, lr, weight_decay, seed
        Optimization: AdamW, cosine learning rate over epochs; ``seed`` fixes the model's
        initialization and the sample order.
    hidden, layers, kernel
        The model: a causal 1-D conv net over the window (see :class:`WindowConvNet`).
    order
        ``"uniform"`` (a uniformly random permutation per epoch) or ``"block"`` (chunk
        blocks shuffled, then windows within a block).
    valid_fraction, horizon_s, embargo_s
        The last ``valid_fraction`` of the samples in time is held out for validation,
        purged by the label horizon and embargoed (``loaders.time_splits``).
    checkpoint_every
        Steps between checkpoints (also one at the end of every epoch); 0: epoch ends only.
    keep_checkpoints
        Checkpoints kept on disk (older ones are deleted after a new one is written).
    eval_every
        Steps between validation passes (also one at the end of every epoch); 0: epoch ends.
    max_steps
        Stop after this many optimizer steps in total (a checkpoint is written): for
        smoke runs and for handing a run to another number of processes. 0: no limit.
    tp
        Tensor-parallel size: ranks are laid out on a ``(dp, tp)`` device mesh and data is
        sharded over ``dp`` only, so the ``tp`` ranks of one data-parallel index get
        identical batches.
    backend
        ``torch.distributed`` backend: ``"auto"`` is nccl with CUDA, else gloo.
    device
        ``"auto"`` (``cuda:LOCAL_RANK`` with CUDA, else CPU), or a torch device string.
    sample_log
        Write the sample ids each rank trained on, per step, for auditing.
    kill_at_step, kill_rank
        Fault drill: in the first launch of a run (not after a restart), rank ``kill_rank``
        kills itself with SIGKILL right after step ``kill_at_step`` (0: no drill).
    threads
        Threads of the window gather per rank (0: cores / local ranks).
    """

    store: str
    out: str
    store_version: int | None = None
    window: int = 64
    batch_size: int = 256
    epochs: int = 2
    lr: float = 3e-3
    weight_decay: float = 1e-4
    seed: int = 0
    hidden: int = 32
    layers: int = 2
    kernel: int = 5
    order: OrderName = "uniform"
    valid_fraction: float = 0.2
    horizon_s: float = 60.0
    embargo_s: float = 0.0
    checkpoint_every: int = 100
    keep_checkpoints: int = 3
    eval_every: int = 0
    max_steps: int = 0
    tp: int = 1
    backend: Backend = "auto"
    device: str = "auto"
    sample_log: bool = False
    kill_at_step: int = 0
    kill_rank: int = 0
    threads: int = 0

    def __post_init__(self) -> None:
        positive = {"window": self.window, "batch_size": self.batch_size, "epochs": self.epochs}
        positive |= {"hidden": self.hidden, "layers": self.layers, "kernel": self.kernel}
        positive |= {"keep_checkpoints": self.keep_checkpoints, "tp": self.tp}
        for name, value in positive.items():
            _check_int(name, value, 1)
        counts = {"seed": self.seed, "checkpoint_every": self.checkpoint_every}
        counts |= {"eval_every": self.eval_every, "max_steps": self.max_steps}
        counts |= {"kill_at_step": self.kill_at_step, "kill_rank": self.kill_rank}
        counts |= {"threads": self.threads}
        for name, value in counts.items():
            _check_int(name, value, 0)
        if self.store_version is not None:
            _check_int("store_version", self.store_version, 1)
        if not self.lr > 0 or self.weight_decay < 0:
            raise ConfigError(
                f"lr must be > 0 and weight_decay >= 0, got {self.lr}, {self.weight_decay}"
            )
        if not 0 < self.valid_fraction < 1:
            raise ConfigError(
                f"valid_fraction: expected a value in (0, 1), got {self.valid_fraction}"
            )
        if self.horizon_s < 0 or self.embargo_s < 0:
            raise ConfigError(
                f"horizon_s and embargo_s must be >= 0, got {self.horizon_s}, {self.embargo_s}"
            )
        if self.order not in ("uniform", "block"):
            raise ConfigError(f"order: expected 'uniform' or 'block', got {self.order!r}")
        if self.backend not in ("auto", "gloo", "nccl"):
            raise ConfigError(f"backend: expected 'auto', 'gloo' or 'nccl', got {self.backend!r}")
        if not self.store or not self.out:
            raise ConfigError("store and out are required")

    def model_options(self) -> dict[str, int]:
        """The options that fix the model's shape: a checkpoint must match them."""
        return {
            "window": self.window,
            "hidden": self.hidden,
            "layers": self.layers,
            "kernel": self.kernel,
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-safe values."""
        return asdict(self)


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name}: expected an integer >= {minimum}, got {value!r}")
