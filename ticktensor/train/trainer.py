"""The training loop: DDP over a store, checkpoints, exact resume, metrics against wall time."""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from ticktensor.errors import CheckpointError
from ticktensor.loaders import EpochState

from .checkpoint import Checkpoints, StoreIdentity
from .config import TrainConfig
from .data import TrainData
from .distributed import Distributed
from .jsonlines import JsonLines, read_jsonlines
from .model import WindowConvNet
from .rng import get_rng_state, set_rng_state
from .samples import SampleLog

__all__ = ["train"]


def train(config: TrainConfig) -> dict[str, Any]:
    """Train (or resume) the run in ``config.out``; returns rank 0's summary.

    Runs as one process or under ``torchrun`` (ranks and rendezvous from the
    environment). See ``docs/training.md``.
    """
    ctx = Distributed.from_env(config.backend, config.device, config.tp)
    run = None
    try:
        run = _Run(config, ctx)
        return run.run()
    finally:
        if run is not None:
            run.close()
        # The model holds the process group: it must go, and the group with it, while the
        # interpreter is alive. A gloo worker thread that drops the last reference to a
        # collective's tensors during interpreter shutdown aborts the process.
        run = None
        gc.collect()
        ctx.close()


class _Run:
    def __init__(self, config: TrainConfig, ctx: Distributed) -> None:
        self.config, self.ctx = config, ctx
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.launch = 0  # starts of this run before this one (torchrun restarts or reruns)
        self.out = Path(config.out)
        self.checkpoints = Checkpoints(self.out / "checkpoints", config.keep_checkpoints)
        if ctx.device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
            # Ranks on one node share its cores; more threads than cores make gloo's
            # collectives wait on descheduled ranks.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // ctx.local_world_size))
        self.data = TrainData.build(config, ctx.dp_size, ctx.local_world_size)
        self.identity = StoreIdentity.of(self.data.version)
        torch.manual_seed(config.seed)
        net = WindowConvNet(
            self.data.train.n_features,
            self.data.train.n_labels,
            config.hidden,
            config.layers,
            config.kernel,
        ).to(ctx.device)
        self.net = net
        self.model: torch.nn.Module = net
        if ctx.distributed:
            ids = [ctx.device.index] if ctx.device.type == "cuda" else None
            self.model = DistributedDataParallel(net, device_ids=ids, process_group=ctx.dp_group)
        self.optimizer = torch.optim.AdamW(
            net.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            self.optimizer, T_max=config.epochs
        )
        mean, std = self.data.label_stats()
        self.y_mean = torch.as_tensor(mean, dtype=torch.float32, device=ctx.device)
        self.y_std = torch.as_tensor(std, dtype=torch.float32, device=ctx.device)
        device = str(ctx.device) if ctx.device.type == "cuda" else None
        self.loader = self.data.train_loader(ctx.dp_rank, ctx.dp_size, device)
        self.valid_loader = self.data.valid_loader(ctx.dp_rank, ctx.dp_size, device)
        self.step = 0
        self.samples_seen = 0
        self.elapsed_before = 0.0  # training wall time of earlier attempts
        self.t0 = time.perf_counter()
        # Squared error and label count of the epoch so far, on the device (no sync per step).
        self.epoch_acc = torch.zeros(2, dtype=torch.float64, device=ctx.device)
        self.metrics = JsonLines(self.out / "metrics.jsonl") if ctx.rank == 0 else None
        self.samples: SampleLog | None = None  # opened once the launch number is known

    # -- resume ------------------------------------------------------------------------

    def resume(self) -> dict[str, Any] | None:
        """Load the latest good checkpoint (rank 0 picks it, every rank reads it)."""
        path, launch = None, 0
        if self.ctx.rank == 0:
            self.checkpoints.remove_temporaries()
            latest = self.checkpoints.latest()
            path = None if latest is None else str(latest[0])
            starts = read_jsonlines(self.out / "metrics.jsonl")
            launch = sum(1 for r in starts if r.get("event") == "start")
        path, self.launch = self.ctx.broadcast_object((path, launch))
        if self.config.sample_log:
            tp_rank = 0 if self.ctx.mesh is None else self.ctx.mesh.get_local_rank("tp")
            self.samples = SampleLog(
                self.out, self.ctx.rank, self.ctx.dp_rank, tp_rank, self.launch
            )
        if path is None:
            return None
        state = self.checkpoints.load(path)
        self.identity.check_resumable(state["store"], path)
        saved = state["model_options"]
        if saved != self.config.model_options():
            raise CheckpointError(
                f"{path} holds a model with {saved}, this run asks for "
                f"{self.config.model_options()}: start a new run in another --out folder"
            )
        self.net.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.loader.load_state_dict(state["loader"])
        rngs = state["rng"]
        if self.ctx.rank < len(rngs):
            set_rng_state(rngs[self.ctx.rank])
        else:  # more ranks than saved: a fresh but deterministic stream
            torch.manual_seed(self.config.seed * 100_003 + self.ctx.rank)
        self.step, self.samples_seen = int(state["step"]), int(state["samples_seen"])
        self.elapsed_before = float(state["elapsed_s"])
        # The epoch's loss sums so far, over all ranks: rank 0 carries them on.
        sums = [v * self.config.tp if self.ctx.rank == 0 else 0.0 for v in state["epoch_sums"]]
        self.epoch_acc = torch.tensor(sums, dtype=torch.float64, device=self.ctx.device)
        return {"path": path, **{k: state[k] for k in ("step", "samples_seen", "world")}}

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        config, ctx = self.config, self.ctx
        resumed = self.resume()
        self.baseline = self.data.baseline_loss()
        self.t0 = time.perf_counter()
        start = {
            "event": "start",
            "launch": self.launch,
            "attempt": self.attempt,
            "world_size": ctx.world_size,
            "dp_size": ctx.dp_size,
            "tp": config.tp,
            "store": self.identity.to_dict(),
            "train_samples": len(self.data.train),
            "valid_samples": len(self.data.valid),
            "global_batch": config.batch_size,
            "valid_baseline_loss": self.baseline,
            "steps_per_epoch": -(-len(self.data.train) // config.batch_size),
        }
        if resumed is not None:
            gap = (
                SampleLog.replayed(self.out, self.launch, resumed["step"])
                if config.sample_log
                else None
            )
            start |= {"resumed": resumed, "replayed": gap}
            self.say(
                f"resumed from {resumed['path']} at step {resumed['step']} "
                f"({resumed['samples_seen']:,} samples seen, saved by {resumed['world']} ranks; "
                f"now {ctx.world_size})"
                + (
                    f"; {gap['steps']} steps ({gap['samples']:,} samples) after it were "
                    "lost with the previous launch and are trained again"
                    if gap
                    else f"; at most {config.checkpoint_every} steps of the previous launch "
                    "are trained again"
                )
            )
        self.log(start)
        if resumed is None:  # the starting point of the loss-against-time curve
            self.evaluate(self.loader.epoch, torch.zeros(2, dtype=torch.float64))
        summary: dict[str, Any] = {"epochs": []}
        while self.loader.epoch < config.epochs:
            record = self.train_epoch(self.loader.epoch)
            if record is None:  # max_steps reached
                break
            summary["epochs"].append(record)
        if self.step and not self.checkpoints_has(self.step):
            self.save()
        summary |= {"step": self.step, "samples_seen": self.samples_seen, "attempt": self.attempt}
        self.log({"event": "end", **summary, "wall_s": self.wall()})
        return summary

    def train_epoch(self, epoch: int) -> dict[str, Any] | None:
        config, ctx = self.config, self.ctx
        self.loader.set_epoch(epoch)
        plan = self.data.plan(
            EpochState.from_state_dict(self.loader.state_dict()), ctx.dp_rank, ctx.dp_size
        )
        self.model.train()
        t_epoch, samples_epoch = time.perf_counter(), 0
        since_eval = torch.zeros(2, dtype=torch.float64, device=ctx.device)
        for k, (x, y) in enumerate(self.loader):
            n_global = plan.samples_consumed(k + 1) - plan.samples_consumed(k)
            ids = plan.batch(k)
            if x.shape[0] != ids.shape[0]:
                raise RuntimeError(f"step {k}: batch of {x.shape[0]} for {ids.shape[0]} ids")
            if self.samples is not None:
                self.data.check_batch(self.step + 1, ids, x, y)
            pred = self.model(x)
            sq = (pred - (y - self.y_mean) / self.y_std).pow(2).sum()
            # DDP averages gradients over the dp ranks; scaling by dp_size / n_global makes
            # the update the mean over the global step, also for a short last step.
            loss = sq * (ctx.dp_size / (n_global * y.shape[1]))
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.step += 1
            self.samples_seen += n_global
            samples_epoch += n_global
            if self.samples is not None:
                self.samples.write(self.step, epoch, self.data.train_ids[ids])
            step_sums = torch.stack([sq.detach().double(), sq.new_tensor(y.numel()).double()])
            self.epoch_acc += step_sums
            since_eval += step_sums
            if ctx.tp_group is not None and not ctx.same_in_group(ids, ctx.tp_group):
                raise RuntimeError(
                    f"step {self.step}: the tensor-parallel peers of rank {ctx.rank} hold "
                    "other samples; their batches must be identical"
                )
            last = k + 1 == plan.num_steps
            if config.eval_every and self.step % config.eval_every == 0 and not last:
                self.evaluate(epoch, since_eval)
                since_eval.zero_()
            stop = bool(config.max_steps) and self.step >= config.max_steps
            if (config.checkpoint_every and self.step % config.checkpoint_every == 0) or (
                stop and not last
            ):
                self.save()
            self.drill()
            if stop and not last:
                return None
        wall = time.perf_counter() - t_epoch
        stats = self.loader.stats()
        sq_total, n_total, stall_sum, stall_max = self.reduce_epoch(stats["stall_fraction"])
        valid = self.evaluate(epoch, since_eval)
        self.scheduler.step()
        self.epoch_acc.zero_()
        record = {
            "event": "epoch",
            "epoch": epoch,
            "step": self.step,
            "train_loss": sq_total / max(n_total, 1.0),
            "valid_loss": valid,
            "samples": samples_epoch,
            "samples_per_s": samples_epoch / wall if wall > 0 else 0.0,
            "stall_pct": 100 * stall_sum / ctx.world_size,
            "stall_pct_max": 100 * stall_max,
            "epoch_s": wall,
            "wall_s": self.wall(),
            "samples_seen": self.samples_seen,
        }
        self.log(record)
        self.say(
            f"epoch {epoch}: train loss {record['train_loss']:.5g}  valid loss {valid:.5g} "
            f"(mean predictor {self.baseline:.5g})  "
            f"{record['samples_per_s']:,.0f} samples/s  data stall {record['stall_pct']:.1f}% "
            f"(max rank {record['stall_pct_max']:.1f}%)  {record['step']} steps, "
            f"{self.samples_seen:,} samples seen"
        )
        self.save()
        if config.max_steps and self.step >= config.max_steps:
            return None
        return record

    def reduce_epoch(self, stall: float) -> tuple[float, float, float, float]:
        """Epoch loss sums (over dp ranks: tp peers saw the same samples) and stall figures."""
        tp = self.config.tp
        sq, n, stall_sum = self.ctx.all_reduce([*self.epoch_acc.tolist(), stall])
        (stall_max,) = self.ctx.all_reduce([stall], op="max")
        return sq / tp, n / tp, stall_sum, stall_max

    def evaluate(self, epoch: int, since: torch.Tensor) -> float:
        """Validation loss (mean squared error over every validation sample), logged."""
        self.model.eval()
        sums = [0.0, 0.0]
        with torch.no_grad():
            for x, y in self.valid_loader:
                sums[0] += float((self.net(x) - (y - self.y_mean) / self.y_std).pow(2).sum())
                sums[1] += float(y.numel())
        self.model.train()
        sq, n, tsq, tn = self.ctx.all_reduce([*sums, *since.tolist()])
        loss = sq / max(n, 1.0)
        self.log(
            {
                "event": "eval",
                "epoch": epoch,
                "step": self.step,
                "samples_seen": self.samples_seen,
                "wall_s": self.wall(),
                "valid_loss": loss,
                "train_loss": tsq / tn if tn else None,
            }
        )
        return loss

    # -- checkpoints, logs, drills -------------------------------------------------------

    def save(self) -> None:
        """Write a checkpoint (rank 0), with every rank's RNG state."""
        rngs = self.ctx.gather_objects(get_rng_state())
        epoch_sums = [v / self.config.tp for v in self.ctx.all_reduce(self.epoch_acc.tolist())]
        if self.ctx.rank != 0:
            return
        state = {
            "step": self.step,
            "samples_seen": self.samples_seen,
            "elapsed_s": self.wall(),
            "epoch_sums": epoch_sums,
            "store": self.identity.to_dict(),
            "model_options": self.config.model_options(),
            "config": self.config.to_dict(),
            "world": self.ctx.world_size,
            "attempt": self.attempt,
            "label_mean": self.y_mean.cpu(),
            "label_std": self.y_std.cpu(),
            "model": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "loader": self.loader.state_dict(),
            "rng": rngs,
        }
        path = self.checkpoints.save(state, self.step)
        self.log(
            {
                "event": "checkpoint",
                "step": self.step,
                "path": str(path),
                **self.loader.state_dict(),
            }
        )

    def checkpoints_has(self, step: int) -> bool:
        has = any(p.name == f"step-{step:09d}.pt" for p in self.checkpoints.paths())
        return bool(self.ctx.broadcast_object(has))

    def drill(self) -> None:
        c = self.config
        if (
            c.kill_at_step
            and self.step == c.kill_at_step
            and self.launch == 0
            and self.ctx.rank == c.kill_rank
        ):
            self.say(
                f"fault drill: rank {self.ctx.rank} kills itself (SIGKILL) after step {self.step}",
                every=True,
            )
            os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        if self.samples is not None:
            self.samples.close()

    def wall(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.t0

    def log(self, record: dict[str, Any]) -> None:
        if self.metrics is not None:
            self.metrics.write({"time": time.time(), **record})

    def say(self, text: str, every: bool = False) -> None:
        if every or self.ctx.rank == 0:
            prefix = f"[rank {self.ctx.rank}] " if self.ctx.distributed else ""
            print(prefix + text, file=sys.stdout, flush=True)
