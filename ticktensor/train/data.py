"""The data side of a run: the pinned store version, its time split, and sharded loaders."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from ticktensor.errors import ConfigError
from ticktensor.kernels import ThreadPool
from ticktensor.loaders import (
    BlockShuffleOrder,
    DataLoader,
    EpochState,
    FastOptions,
    Order,
    SequentialOrder,
    ShardPlan,
    UniformOrder,
    WindowDataset,
    time_splits,
)
from ticktensor.store import Store, StoreVersion

from .config import TrainConfig

__all__ = ["TrainData"]

Int64s = npt.NDArray[np.int64]


@dataclass
class TrainData:
    """Train and validation windows of one pinned store version, and their loaders.

    ``train_ids`` / ``valid_ids`` map a subset's sample ``j`` to the full dataset's
    sample id, which is what sample logs record (stable across world sizes and runs).
    """

    version: StoreVersion
    train: WindowDataset
    valid: WindowDataset
    train_ids: Int64s
    valid_ids: Int64s
    order: Order
    batch_size: int  # per data-parallel rank

    @classmethod
    def build(cls, config: TrainConfig, dp_size: int, local_world: int) -> TrainData:
        """Open the store, cut windows, split in time (purged and embargoed)."""
        if config.batch_size % dp_size:
            raise ConfigError(
                f"batch_size {config.batch_size} (global) is not a multiple of the "
                f"{dp_size} data-parallel ranks"
            )
        version = Store.open(config.store).version(config.store_version)
        threads = config.threads or max(1, (os.cpu_count() or 1) // max(1, local_world))
        ds = WindowDataset(
            version, config.window, normalize=version.stats is not None, pool=ThreadPool(threads)
        )
        cut = int(np.quantile(ds.sample_ts, 1 - config.valid_fraction))
        train_idx, valid_idx = time_splits(
            ds,
            [cut],
            horizon_ns=round(config.horizon_s * 1e9),
            embargo_ns=round(config.embargo_s * 1e9),
        )
        if train_idx.size == 0 or valid_idx.size == 0:
            raise ConfigError(
                f"the time split left {train_idx.size} training and {valid_idx.size} "
                f"validation samples of {len(ds)}; lower horizon_s/embargo_s or change "
                "valid_fraction"
            )
        order: Order = (
            UniformOrder(config.seed)
            if config.order == "uniform"
            else BlockShuffleOrder(config.seed)
        )
        return cls(
            version,
            ds.subset(train_idx),
            ds.subset(valid_idx),
            train_idx.astype(np.int64),
            valid_idx.astype(np.int64),
            order,
            config.batch_size // dp_size,
        )

    def labels(self, split: WindowDataset) -> npt.NDArray[np.float32]:
        """The labels ``[N, L]`` of a split's samples, in sample order."""
        rows = split.sample_start + (split.window - 1)
        out = np.empty((len(split), split.n_labels), dtype=np.float32)
        for source, labels in enumerate(split.labels_sources):
            mask = split.sample_segment == source
            out[mask] = labels[rows[mask]]
        return out

    def check_batch(self, step: int, ids: Int64s, x: torch.Tensor, y: torch.Tensor) -> None:
        """Raise unless a loader's training batch is exactly a direct gather of ``ids``
        (the audit behind sample logs: what is logged is what was trained on)."""
        want_x, want_y = self.train.get_batch(ids)
        if not (
            np.array_equal(x.cpu().numpy(), want_x) and np.array_equal(y.cpu().numpy(), want_y)
        ):
            raise RuntimeError(
                f"step {step}: the loader's batch is not samples {ids[:8].tolist()}..."
            )

    def label_stats(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Mean and standard deviation of the training labels, per label (a zero or
        non-finite std is 1). The model predicts standardized labels: returns are
        often ~1e-4, far below the scale an optimizer's steps move outputs by."""
        labels = self.labels(self.train).astype(np.float64)
        mean, std = labels.mean(axis=0), labels.std(axis=0)
        std[~np.isfinite(std) | (std == 0)] = 1.0
        return mean, std

    def baseline_loss(self) -> float:
        """Validation loss (in standardized units) of always predicting the training
        labels' mean: the bar a model has to clear."""
        mean, std = self.label_stats()
        return float((((self.labels(self.valid) - mean) / std) ** 2).mean())

    def train_loader(self, dp_rank: int, dp_size: int, device: str | None) -> DataLoader:
        """This rank's shard of the training windows: every sample once per epoch.

        ``pad=False``: the last global step is split as evenly as possible instead of
        wrapping around, so the samples of an epoch are the same whatever the number of
        ranks, also when a run is resumed on another number of them.
        """
        return DataLoader(
            self.train,
            batch_size=self.batch_size,
            shuffle=True,
            pin_memory=device is not None,
            fast=FastOptions(
                order=self.order,
                seed=getattr(self.order, "seed", 0),
                rank=dp_rank,
                world_size=dp_size,
                pad=False,
                device=device,
            ),
        )

    def valid_loader(self, dp_rank: int, dp_size: int, device: str | None) -> DataLoader:
        """This rank's shard of the validation windows, in time order, each once."""
        return DataLoader(
            self.valid,
            batch_size=self.batch_size,
            fast=FastOptions(
                order=SequentialOrder(), rank=dp_rank, world_size=dp_size, pad=False, device=device
            ),
        )

    def plan(self, state: EpochState, dp_rank: int, dp_size: int) -> ShardPlan:
        """The shard plan the training loader follows from ``state``: which sample ids
        each step of this rank holds, for logs and the per-step sample count."""
        order = self.order.order(self.train, state.epoch)
        return state.plan(order, self.batch_size, dp_size, dp_rank, drop_last=False, pad=False)
