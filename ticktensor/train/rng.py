"""Random number generator state of one process, as tensors and ints a checkpoint can hold."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ["get_rng_state", "set_rng_state"]


def get_rng_state() -> dict[str, Any]:
    """The state of Python's, numpy's (global) and torch's generators (CUDA's too).

    Only tensors, ints, floats and ``None``, so ``torch.load(weights_only=True)`` reads
    it back without unpickling arbitrary objects.

    Examples
    --------
    >>> state = get_rng_state()
    >>> a = torch.rand(2)
    >>> set_rng_state(state)
    >>> torch.equal(a, torch.rand(2))
    True
    """
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)  # noqa: NPY002
    state: dict[str, Any] = {
        "python": {
            "version": version,
            "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss": gauss,
        },
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`get_rng_state` returned (CUDA's only where CUDA is present)."""
    py = state["python"]
    internal = tuple(int(v) for v in py["internal"].tolist())
    random.setstate((int(py["version"]), internal, py["gauss"]))
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state((n["name"], keys, n["pos"], n["has_gauss"], n["cached"]))  # noqa: NPY002
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])
