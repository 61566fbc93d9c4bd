"""Which device a rank's loader uses: a bare ``cuda`` is the rank's own GPU, resolved once."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping

import torch

from .sharding import _env_int

__all__ = ["accelerate_device", "resolve_device"]


def accelerate_device() -> torch.device | None:
    """The device of the ``accelerate.Accelerator`` this process created, if any.

    accelerate is not imported here: a process that never imported it has none.
    """
    state = sys.modules.get("accelerate.state")
    if state is None or not state.is_initialized():
        return None
    device: torch.device = state.AcceleratorState().device
    return device


def resolve_device(
    device: torch.device | str | None,
    *,
    env: Mapping[str, str] | None = None,
    current: Callable[[], int] | None = None,
) -> torch.device | None:
    """``device`` with a bare ``cuda`` made ``cuda:N`` for this process.

    ``N`` is ``LOCAL_RANK`` when a launcher set it (torchrun, Lightning, accelerate: one
    GPU per local rank), else the current CUDA device. Everything the loader runs on the
    GPU (copy stream, events, resident chunks, DALI's ``device_id``) then uses that one
    index, also from its own threads, instead of each thread's current device (device 0
    in a new thread, which would put every rank's work, and a CUDA context, on GPU 0).
    Other devices are returned as they are. ``"auto"`` is :func:`accelerate_device`
    when an ``Accelerator`` exists, else this rank's GPU when CUDA is available, else
    the CPU.

    Examples
    --------
    >>> resolve_device(torch.device("cuda"), env={"LOCAL_RANK": "1"})
    device(type='cuda', index=1)
    >>> resolve_device(torch.device("cuda", 3), env={"LOCAL_RANK": "1"})
    device(type='cuda', index=3)
    """
    if device == "auto":
        chosen = accelerate_device()
        if chosen is None:
            chosen = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return resolve_device(chosen, env=env, current=current)
    if device is None or isinstance(device, str) or device.type != "cuda":
        return None if isinstance(device, str) else device
    given: int | None = device.index  # torch types it int; it is None for a bare "cuda"
    if given is not None:
        return device
    local = _env_int("LOCAL_RANK", env)
    if local is not None:
        return torch.device("cuda", local)
    index = current() if current is not None else torch.cuda.current_device()
    return torch.device("cuda", index)
