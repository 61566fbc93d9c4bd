"""FastOptions: the fast path's settings, one frozen value passed as ``DataLoader(fast=...)``."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ticktensor.errors import ConfigError

from ._resident import ResidentOptions
from .dali import DaliOptions
from .samplers import Order

__all__ = ["Engine", "FastOptions", "Padding", "with_legacy_keywords"]

Engine = Literal["auto", "python", "native"]
"""Who assembles host batches: ``"auto"`` (the native thread once every chunk is
loaded, the Python thread before), ``"python"`` (always the Python thread) or
``"native"`` (same as ``"auto"``; named for symmetry in benchmarks)."""


Padding = Literal["samples", "steps", "none"]
"""How the tail of an epoch is spread over the ranks (see :attr:`FastOptions.pad`)."""


@dataclass(frozen=True)
class FastOptions:
    """How :class:`~ticktensor.DataLoader` runs its fast path over a window dataset.

    Every field has a default that suits a single-process training loop; torch's own
    keywords (``batch_size``, ``shuffle``, ``drop_last``, ``pin_memory``, ``timeout``,
    ``generator``, ``prefetch_factor``) stay on the ``DataLoader`` itself.

    Parameters
    ----------
    order
        The sample order (an :class:`~ticktensor.loaders.Order`). Default:
        ``UniformOrder(seed)`` when ``shuffle`` else ``SequentialOrder()``.
    seed
        Seed of the default shuffled order. Default: ``generator.initial_seed()`` when a
        generator is given, else 0. Recorded in ``state_dict()``.
    rank, world_size
        This process's data-parallel rank and the number of ranks (both or neither).
        Default: resolved when each pass starts, from an initialized
        ``torch.distributed`` process group, else the launcher's environment (see
        :func:`~ticktensor.loaders.world_from_env`).
    pad
        How an epoch that the ranks cannot share evenly is made even. ``"samples"``
        (default, also ``None``): as torch's ``DistributedSampler`` does, the order is
        wrapped around by at most ``world_size - 1`` samples (its first ones) to a
        multiple of ``world_size``, so every rank gets ``ceil(N / world_size)`` samples
        and the same batches as with torch; evaluation counts are torch's. ``"steps"``
        (or ``True``): the last global step is filled by wrapping around, so every
        batch on every rank is full (up to ``world_size * batch_size - 1`` repeated
        samples): choose it when every step needs equal batch shapes on all ranks
        (compiled graphs, collectives on batch tensors). ``False``: no padding; the last
        step's samples are split as evenly as possible, so ranks may differ by one
        sample. ``drop_last`` drops the short last global step after padding, as torch's
        ``DataLoader(drop_last=True)`` over a ``DistributedSampler`` does.
    device
        Copy each batch to this device (for CUDA: ``non_blocking`` on a side stream from
        pinned buffers); a bare ``"cuda"`` is this rank's GPU (``cuda:LOCAL_RANK``).
        ``"auto"``: the device of an ``accelerate.Accelerator`` created before the
        loader, else this rank's GPU when CUDA is available, else the CPU. Default:
        batches stay on the CPU, as with torch.
    prefetch
        Batches assembled ahead of the consumer (the ring's depth). Default:
        ``prefetch_factor`` when given, else 2.
    readahead
        Batches whose chunks are loaded ahead of their assembly, as far as the dataset's
        chunk cache allows.
    backend
        ``"torch"`` hands out the ring's buffers as torch tensors; ``"dali"`` (or a
        :class:`~ticktensor.loaders.DaliOptions`) runs them through an NVIDIA DALI
        pipeline that normalizes and casts, on ``device``'s GPU or the CPU.
    residency
        ``"host"`` keeps chunks in host memory; ``"device"`` (or a
        :class:`~ticktensor.loaders.ResidentOptions`) copies each chunk to ``device``
        once and cuts windows there. Needs ``device``.
    engine
        Who assembles host batches: ``"auto"``/``"native"`` (a C++ thread that never
        takes the GIL, once every chunk of the dataset is loaded) or ``"python"`` (the
        Python thread throughout, for comparisons).

    Examples
    --------
    >>> FastOptions(seed=7, prefetch=4)
    FastOptions(order=None, seed=7, rank=None, world_size=None, pad=None, device=None, \
prefetch=4, readahead=16, backend='torch', residency='host', engine='auto')
    """

    order: Order | None = None
    seed: int | None = None
    rank: int | None = None
    world_size: int | None = None
    pad: bool | Literal["samples", "steps"] | None = None
    device: torch.device | Literal["auto"] | str | None = None
    prefetch: int | None = None
    readahead: int = 16
    backend: Literal["torch", "dali"] | DaliOptions = "torch"
    residency: Literal["host", "device"] | ResidentOptions = "host"
    engine: Engine = "auto"

    def __post_init__(self) -> None:
        if self.order is not None and not isinstance(self.order, Order):
            raise ConfigError(f"order: expected an Order, got {type(self.order).__name__}")
        _check_int("seed", self.seed, 0, optional=True)
        if (self.rank is None) != (self.world_size is None):
            raise ConfigError("rank and world_size: give both, or neither")
        _check_int("world_size", self.world_size, 1, optional=True)
        _check_int("rank", self.rank, 0, optional=True)
        if self.rank is not None and self.world_size is not None and self.rank >= self.world_size:
            raise ConfigError(f"rank {self.rank} is not below world_size {self.world_size}")
        if self.pad is not None and not isinstance(self.pad, bool) and self.pad not in _PADS:
            raise ConfigError(
                f"pad: expected True, False or None, 'samples' or 'steps', got {self.pad!r}"
            )
        if self.device is not None and self.device != "auto":
            try:
                device = torch.device(self.device)
            except (RuntimeError, TypeError) as exc:
                raise ConfigError(
                    f"device: {self.device!r} is not a torch device ({exc})"
                ) from None
            object.__setattr__(self, "device", device)
        _check_int("prefetch", self.prefetch, 1, optional=True)
        _check_int("readahead", self.readahead, 1)
        if not isinstance(self.backend, DaliOptions) and self.backend not in ("torch", "dali"):
            raise ConfigError(
                f"backend: expected 'torch', 'dali' or a DaliOptions, got {self.backend!r}"
            )
        if not isinstance(self.residency, ResidentOptions) and self.residency not in (
            "host",
            "device",
        ):
            raise ConfigError(
                f"residency: expected 'host', 'device' or a ResidentOptions, got {self.residency!r}"
            )
        if self.engine not in ("auto", "python", "native"):
            raise ConfigError(f"engine: expected 'auto', 'python' or 'native', got {self.engine!r}")
        dali, resident, target = self.dali, self.resident, self.torch_device
        if dali is not None and resident is not None:
            raise ConfigError("backend='dali' and residency='device' do not combine: pick one")
        if resident is not None and target is None and self.device != "auto":
            raise ConfigError(
                "residency='device' needs device= (e.g. 'cuda'; 'cpu' runs it on host tensors)"
            )
        if dali is not None and target is not None and target.type not in ("cpu", "cuda"):
            raise ConfigError(f"backend='dali' runs on 'cpu' or 'cuda', not on {target}")
        if target is not None and target.type not in ("cpu", "cuda"):
            raise ConfigError(
                f"device {target}: the fast path delivers to 'cpu' or 'cuda' devices; move "
                "batches yourself (batch_transform=) for other accelerators"
            )
        if target is not None and target.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"device {target}: CUDA is not available")

    @property
    def torch_device(self) -> torch.device | None:
        """:attr:`device` as a ``torch.device`` (``None``: the CPU, or ``"auto"``, which
        :func:`~ticktensor.loaders._devices.resolve_device` decides when the loader is
        built)."""
        return self.device if isinstance(self.device, torch.device) else None

    @property
    def dali(self) -> DaliOptions | None:
        """The DALI backend's options, or ``None`` for the torch backend."""
        if isinstance(self.backend, DaliOptions):
            return self.backend
        return DaliOptions() if self.backend == "dali" else None

    @property
    def resident(self) -> ResidentOptions | None:
        """The device-resident mode's options, or ``None`` for host residency."""
        if isinstance(self.residency, ResidentOptions):
            return self.residency
        return ResidentOptions() if self.residency == "device" else None


_PADS = ("samples", "steps")


def _check_int(name: str, value: Any, minimum: int, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name}: expected an integer >= {minimum}, got {value!r}")


# FastOptions fields that were DataLoader keywords before FastOptions existed.
_LEGACY_KEYWORDS = (
    "order",
    "seed",
    "rank",
    "world_size",
    "pad",
    "device",
    "prefetch",
    "readahead",
    "backend",
    "residency",
)


def with_legacy_keywords(fast: FastOptions | None, legacy: dict[str, Any]) -> FastOptions | None:
    """``fast`` with the earlier releases' fast-path keywords folded in (deprecated)."""
    unknown = sorted(set(legacy) - set(_LEGACY_KEYWORDS))
    if unknown:
        raise TypeError(f"DataLoader() got unexpected keyword argument(s) {unknown}")
    given = {name: value for name, value in legacy.items() if value is not None}
    if not given:
        return fast
    if fast is not None:
        raise ConfigError(f"{sorted(given)}: give these in fast=FastOptions(...), not beside it")
    warnings.warn(
        f"DataLoader({', '.join(f'{k}=' for k in sorted(given))}) is deprecated: pass "
        f"fast=FastOptions({', '.join(f'{k}=...' for k in sorted(given))})",
        DeprecationWarning,
        stacklevel=3,  # the caller of DataLoader(...)
    )
    return FastOptions(**given)
