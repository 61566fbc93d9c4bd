"""ticktensor: market data to versioned stores, and a fast windowed loader."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["DataLoader", "__version__"]

if TYPE_CHECKING:
    from ticktensor.loaders.dataloader import DataLoader


def __getattr__(name: str) -> Any:
    # Lazy, so that `import ticktensor` (the CLI, the store, ingest) does not import torch.
    if name == "DataLoader":
        from ticktensor.loaders.dataloader import DataLoader

        return DataLoader
    raise AttributeError(f"module 'ticktensor' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "DataLoader"])
