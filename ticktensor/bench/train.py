"""``bench train``: data stall of our loader and torch's under a simulated accelerator."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch.utils.data

from ticktensor.loaders import DataLoader, FastOptions
from ticktensor.store import Store

from .baselines import MmapWindows
from .engine import open_dataset, order_of
from .measure import warm
from .model import break_even_step_s, stall_fraction
from .options import BenchOptions
from .results import Results
from .stall import Accelerator, measure_stall
from .workload import Workload, prepare, store_files

__all__ = ["run_train"]


def run_train(
    workload: Workload, options: BenchOptions, results: Results, say: Callable[[str], None] = print
) -> None:
    """Stall % of ``ticktensor`` and ``torch_mmap_w2`` at each step time (``results.stall``)."""
    w, o = workload, options
    prepare(w, [o.codec], say)
    version = Store.open(str(w.store_dir(o.codec))).version()
    warm(sorted(w.npy_dir().glob("*.npy")) + store_files(version))
    ds = open_dataset(version, w.window, o.threads)
    mmap = MmapWindows(w.npy_dir(), w.symbols, w.window)
    accelerator = Accelerator()
    say(
        f"# simulated accelerator: {accelerator.kind}; step times "
        f"{', '.join(f'{s:g}' for s in o.step_ms)} ms"
    )
    generator = torch.Generator().manual_seed(w.seed)
    makers: dict[str, Callable[[], Iterable[Any]]] = {
        "ticktensor": lambda: DataLoader(
            ds, batch_size=w.batch, fast=FastOptions(order=order_of(o.order, w.seed))
        ),
        "torch_mmap_w2": lambda: torch.utils.data.DataLoader(
            mmap,
            batch_size=w.batch,
            shuffle=True,
            num_workers=2,
            generator=generator,
            persistent_workers=False,
        ),
    }
    seconds = max(o.seconds, 1.0)
    for name, make in makers.items():
        free = measure_stall(name, _once(make), 0.0, seconds, accelerator)
        batch_s = free.wall_s / free.batches
        for step_ms in o.step_ms:
            row = measure_stall(name, _once(make), step_ms / 1e3, seconds, accelerator)
            results.stall.append(
                {
                    "name": name,
                    "step_ms": step_ms,
                    "stall_pct": row.stall_pct,
                    "predicted_pct": 100 * stall_fraction(batch_s, step_ms / 1e3),
                    "batches": row.batches,
                    "wait_s": row.wait_s,
                    "wall_s": row.wall_s,
                    "first_batch_s": row.first_batch_s,
                    "break_even_ms": 1e3 * break_even_step_s(w.batch, w.batch / batch_s),
                    "accelerator": accelerator.kind,
                }
            )
        say(
            f"#   {name}: {w.batch / batch_s:,.0f} samples/s unhindered; "
            f"stalls below a {batch_s * 1e3:.2f} ms step"
        )


def _once(make: Callable[[], Iterable[Any]]) -> Callable[[], Iterable[Any]]:
    """``make`` building the loader once, then passing over it again and again."""
    built: list[Iterable[Any]] = []

    def get() -> Iterable[Any]:
        if not built:
            built.append(make())
        return built[0]

    return get
