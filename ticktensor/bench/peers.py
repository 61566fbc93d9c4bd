"""Other loaders measured when installed; each one skipped says why."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from .results import Row

__all__ = ["PEERS", "Peer", "peer_rows"]


@dataclass(frozen=True)
class Peer:
    """A peer library: its row name, import name and how to install it."""

    name: str
    module: str
    install: str

    def installed(self) -> bool:
        """Whether the library can be imported here."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False


PEERS = (
    Peer("spdl", "spdl", "pip install spdl"),
    Peer("litdata", "litdata", "pip install litdata"),
    Peer("mosaicml_streaming", "streaming", "pip install mosaicml-streaming"),
    Peer("dali_external_source", "nvidia.dali", "pip install nvidia-dali-cuda120 (needs CUDA)"),
)


def peer_rows() -> list[Row]:
    """One skipped row per peer, saying whether it is missing or not yet adapted."""
    rows = []
    for peer in PEERS:
        if peer.installed():
            reason = "installed, but the bench has no adapter for it yet"
        else:
            reason = f"not installed ({peer.install})"
        rows.append(Row.skipped(peer.name, "peer", reason))
    return rows
