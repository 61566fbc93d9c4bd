"""Which device a rank's loader uses: a bare ``cuda`` is its GPU, found when a pass starts."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

import torch

from ticktensor.errors import ConfigError

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
    count: Callable[[], int] | None = None,
) -> torch.device | None:
    """``device`` with a bare ``cuda`` made ``cuda:N`` for this process, as it is now.

    The loader calls this on the consumer's thread when a pass starts, never when it is
    built or unpickled (a launcher that forks, Lightning ``ddp_fork`` or accelerate's
    ``notebook_launcher``, refuses a process whose CUDA is initialised, and a loader
    unpickled under ``ddp_spawn`` exists before its rank has chosen a GPU). ``N`` is, in
    this order: the current device when the process chose one other than 0
    (``torch.cuda.set_device``; Lightning ``devices=[2, 3]``); ``LOCAL_RANK`` when a
    launcher set it (torchrun, Lightning, accelerate: one GPU per local rank), which must
    name a visible device; else the current device. Everything the loader runs on the GPU
    (copy stream, events, resident chunks, DALI's ``device_id``) then uses that one
    index, also from its own threads, instead of each thread's current device (device 0
    in a new thread). Other devices are returned as they are. ``"auto"`` is
    :func:`accelerate_device` when an ``Accelerator`` exists, else this rank's GPU when
    CUDA is available, else the CPU. No CUDA function that initialises CUDA is called
    while CUDA is not initialised.

    Examples
    --------
    >>> two = lambda: 2
    >>> resolve_device(torch.device("cuda"), env={"LOCAL_RANK": "1"}, current=int, count=two)
    device(type='cuda', index=1)
    >>> resolve_device(torch.device("cuda", 3), env={"LOCAL_RANK": "1"})
    device(type='cuda', index=3)
    """
    if device == "auto":
        chosen = accelerate_device()
        if chosen is None:
            chosen = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return resolve_device(chosen, env=env, current=current, count=count)
    if device is None or isinstance(device, str) or device.type != "cuda":
        return None if isinstance(device, str) else device
    given: int | None = device.index  # torch types it int; it is None for a bare "cuda"
    if given is not None:
        return device
    if current is not None:
        index = current()
    else:  # before CUDA is initialised the current device is 0, and asking would initialise it
        initialized = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        index = torch.cuda.current_device() if initialized else 0
    local = _env_int("LOCAL_RANK", env)
    if index != 0 or local is None:
        return torch.device("cuda", index)
    visible = count() if count is not None else torch.cuda.device_count()
    if local >= visible:
        shown = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
        listed = "" if shown is None else f" (CUDA_VISIBLE_DEVICES={shown!r})"
        raise ConfigError(
            f"LOCAL_RANK={local} names no visible CUDA device: this process sees {visible}"
            f"{listed}; with one visible device per rank, pass device='cuda:0'"
        )
    return torch.device("cuda", local)
