"""The sequence model trained here: a small causal 1-D conv net over ``[W, F]`` windows."""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own convention
from torch import nn

__all__ = ["WindowConvNet"]


class WindowConvNet(nn.Module):
    """Dilated causal convolutions over a window, read out at its last row.

    Each layer is a residual ``Conv1d`` with dilation ``2**i``, left-padded so that row
    ``t`` only sees rows ``<= t``: the prediction uses the whole window (receptive field
    ``1 + (kernel - 1) * (2**layers - 1)`` rows) and nothing from after its last row.
    The read-out is a linear map of the last row's channels and their mean over the
    window.

    Parameters
    ----------
    n_features, n_labels
        Input features per row and outputs per sample.
    hidden, layers, kernel
        Channels, number of conv layers, kernel size.

    Examples
    --------
    >>> import torch
    >>> net = WindowConvNet(n_features=3, n_labels=1, hidden=8)
    >>> net(torch.zeros(4, 16, 3)).shape
    torch.Size([4, 1])
    """

    def __init__(
        self, n_features: int, n_labels: int, hidden: int = 32, layers: int = 2, kernel: int = 5
    ) -> None:
        super().__init__()
        self.inp = nn.Linear(n_features, hidden)
        self.convs = nn.ModuleList(
            nn.Conv1d(hidden, hidden, kernel, dilation=2**i) for i in range(layers)
        )
        self.pads = [(kernel - 1) * 2**i for i in range(layers)]
        self.norm = nn.LayerNorm(2 * hidden)
        self.out = nn.Linear(2 * hidden, n_labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F]`` -> predictions ``[B, L]``."""
        h = self.inp(x).transpose(1, 2)  # [B, hidden, W]
        for conv, pad in zip(self.convs, self.pads, strict=True):
            h = h + F.gelu(conv(F.pad(h, (pad, 0))))
        features = torch.cat([h[:, :, -1], h.mean(dim=2)], dim=1)
        out: torch.Tensor = self.out(self.norm(features))
        return out
