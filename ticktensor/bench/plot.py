"""The sweeps as one PNG, each panel with its limits drawn as lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .results import Results

__all__ = ["plot"]


def plot(results: Results, path: Path) -> Path:
    """Draw the thread, batch, window, size and codec sweeps and the stall curves to ``path``.

    Panels without data are left out; limits from the same run are dashed lines.
    Needs matplotlib (the ``bench`` extra).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    limit = {r.name: r for r in results.rows if r.samples_per_s is not None}
    panels = [
        p for p in ("threads", "batch", "window", "rows", "codec", "stall") if _has(results, p)
    ]
    cols = 3
    nrows = max(1, (len(panels) + cols - 1) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        if panel == "threads":
            xs = [t["threads"] for t in results.threads]
            ax.plot(xs, [t["gb_per_s"] for t in results.threads], "o-", label="ticktensor")
            ax.plot(
                xs,
                [t["memcpy_gb_per_s"] for t in results.threads],
                "k--",
                label="memcpy (same threads)",
            )
            ax.plot(
                xs, [t["zstd_decode_gb_per_s"] for t in results.threads], "r:", label="zstd decode"
            )
            if all("zstd_block_gb_per_s" in t for t in results.threads):
                epoch = [t["zstd_block_gb_per_s"] for t in results.threads]
                ax.plot(xs, epoch, "s-", color="tab:red", label="ticktensor, zstd epoch")
            ax.set(xlabel="threads", ylabel="GB/s", title="thread scaling (uniform, warm)")
            _ticks(ax, xs)
        elif panel == "batch":
            pts = results.sweeps["batch"]
            ax.plot(
                [p["batch"] for p in pts], [p["gb_per_s"] for p in pts], "o-", label="ticktensor"
            )
            _hline(ax, limit.get("memcpy_x_threads"), "memcpy x threads")
            _hline(ax, limit.get("numpy_gather"), "numpy gather (1 thread)", ":")
            ax.set(xscale="log", xlabel="batch size", ylabel="GB/s", title="batch size")
            _ticks(ax, [p["batch"] for p in pts])
        elif panel == "window":
            pts = results.sweeps["window"]
            ax.plot(
                [p["window"] for p in pts], [p["gb_per_s"] for p in pts], "o-", label="ticktensor"
            )
            _hline(ax, limit.get("memcpy_x_threads"), "memcpy x threads")
            ax.set(xscale="log", xlabel="window rows", ylabel="GB/s", title="window length")
            _ticks(ax, [p["window"] for p in pts])
        elif panel == "rows":
            pts = results.sweeps["rows"]
            xs = [p["gib"] for p in pts]
            ax.plot(
                xs, [p["warm_gb_per_s"] for p in pts], "o-", label="ticktensor, page cache warm"
            )
            ax.plot(xs, [p["cold_gb_per_s"] for p in pts], "s-", label="ticktensor, evicted")
            ax.plot(
                xs, [p["seqread_gb_per_s"] for p in pts], "k--", label="sequential read, evicted"
            )
            ax.set(xlabel="dataset GiB", ylabel="GB/s", title="dataset size (one epoch from open)")
        elif panel == "codec":
            pts = results.sweeps["codec"]
            names = [p["codec"] for p in pts]
            ax.bar(names, [p["gb_per_s"] for p in pts], label="ticktensor, one epoch from open")
            for i, p in enumerate(pts):
                if p["decode_x_threads_gb_per_s"] is not None:
                    ax.hlines(
                        p["decode_x_threads_gb_per_s"],
                        i - 0.4,
                        i + 0.4,
                        colors="k",
                        linestyles="--",
                    )
            ax.plot([], [], "k--", label="decode rate x threads")
            ax.set(yscale="log", ylabel="GB/s", title="codecs (block order, warm)")
            tops = [p["gb_per_s"] for p in pts] + [
                p["decode_x_threads_gb_per_s"] for p in pts if p["decode_x_threads_gb_per_s"]
            ]
            ax.set_ylim(top=max(tops) * 8)  # room for the legend above the lines
        else:
            for name in sorted({s["name"] for s in results.stall}):
                pts = [s for s in results.stall if s["name"] == name]
                ax.plot(
                    [s["step_ms"] for s in pts], [s["stall_pct"] for s in pts], "o-", label=name
                )
            ax.set(
                xscale="log",
                xlabel="step time ms",
                ylabel="data stall %",
                title="simulated accelerator",
            )
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    m = results.meta.get("machine", {})
    fig.suptitle(
        f"ticktensor bench: {m.get('cores', '?')} cores of {m.get('cpu', '?')}", fontsize=10
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _has(results: Results, panel: str) -> bool:
    if panel == "threads":
        return bool(results.threads)
    if panel == "stall":
        return bool(results.stall)
    return bool(results.sweeps.get(panel))


def _hline(ax: Any, row: Any, label: str, style: str = "--") -> None:
    if row is not None and row.gb_per_s is not None:
        ax.axhline(row.gb_per_s, color="k", linestyle=style, linewidth=1, label=label)


def _ticks(ax: Any, values: list[int]) -> None:
    ax.set_xticks(values, [str(v) for v in values])
    ax.minorticks_off()
