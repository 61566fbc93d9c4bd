"""A recording stand-in for ``torch.cuda``: which CUDA functions a loader calls, on which thread.

:func:`install` replaces the ``torch.cuda`` functions that create or query CUDA state
(streams, events, the current device, memory, pinned allocation) with ones that record
the call and return stand-ins, on a machine without a GPU; a tensor allocated
"page-locked" (``torch.empty(pin_memory=True)``, ``Tensor.pin_memory()``) is ordinary
memory whose ``is_pinned()`` says true. It is meant for a child
process (:func:`run_child`), so nothing of it leaks into the test session. Asking
whether CUDA is available, how many devices there are and whether CUDA is initialised
is not recorded: none of these initialises CUDA.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
CALLS: list[dict[str, Any]] = []
# The "page-locked" allocations: storage addresses, each kept alive (no address reused).
PINNED: dict[int, torch.Tensor] = {}


def _pinned(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, marked as allocated page-locked: its ``is_pinned()`` is true."""
    PINNED[tensor.untyped_storage().data_ptr()] = tensor
    return tensor


def _record(name: str, *args: Any) -> None:
    CALLS.append(
        {
            "call": name,
            "args": [str(arg) for arg in args],
            "thread": threading.current_thread().name,
        }
    )


class _Stream:
    def __init__(self, device: Any = None, **_: Any) -> None:
        _record("Stream", device)
        self.device = device

    def wait_event(self, event: Any) -> None:
        _record("Stream.wait_event")

    def wait_stream(self, stream: Any) -> None:
        _record("Stream.wait_stream")


class _Event:
    def __init__(self, **_: Any) -> None:
        _record("Event")

    def record(self, stream: Any = None) -> None:
        _record("Event.record", getattr(stream, "device", stream))

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


def install(devices: int = 2) -> list[dict[str, Any]]:
    """Replace ``torch.cuda``'s stateful functions with recording stand-ins; the calls."""
    cuda: Any = torch.cuda
    current = [0]

    def recorder(name: str, result: Any = None) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            _record(name, *args, *kwargs.values())
            return result(*args) if callable(result) else result

        return call

    def set_device(device: Any) -> None:
        _record("set_device", device)
        current[0] = torch.device(device).index or 0

    cuda.is_available = lambda: True
    cuda.device_count = lambda: devices
    cuda.is_initialized = lambda: False
    cuda._lazy_init = recorder("_lazy_init")
    cuda.init = recorder("init")
    cuda.current_device = recorder("current_device", lambda: current[0])
    cuda.set_device = set_device
    cuda.Stream = _Stream
    cuda.Event = _Event

    def current_stream(device: Any = None) -> _Stream:
        _record("current_stream", device)
        stream = _Stream.__new__(_Stream)
        stream.device = current[0] if device is None else device
        return stream

    cuda.current_stream = current_stream
    cuda.mem_get_info = recorder("mem_get_info", (80 << 30, 80 << 30))
    cuda.synchronize = recorder("synchronize")
    empty = torch.empty

    def pinned_empty(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
        if pin_memory:
            _record("pinned allocation")
            return _pinned(empty(*args, **kwargs))
        return empty(*args, **kwargs)

    def pin_memory(self: torch.Tensor, *_: Any) -> torch.Tensor:
        _record("pin_memory")
        return _pinned(self.clone())

    def is_pinned(self: torch.Tensor, *_: Any) -> bool:
        return self.untyped_storage().data_ptr() in PINNED

    torch.empty = pinned_empty  # type: ignore[assignment]
    torch.Tensor.pin_memory = pin_memory  # type: ignore[method-assign]
    torch.Tensor.is_pinned = is_pinned  # type: ignore[method-assign]
    return CALLS


def run_child(script: str, env: dict[str, str] | None = None) -> Any:
    """Run ``script`` in a new interpreter with the stand-ins installed; what it printed
    last, as JSON. The script sees ``CALLS`` and ``install``'s module as ``fake``."""
    prelude = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import fake_cuda as fake; "
        "fake.install(); CALLS = fake.CALLS\n"
    )
    environment = {**os.environ, **(env or {})}
    environment.pop("LOCAL_RANK", None)
    done = subprocess.run(
        [sys.executable, "-c", prelude + script],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
