"""Training options: validation, the command line's flags, the model's shape."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ticktensor.cli import build_parser
from ticktensor.errors import ConfigError
from ticktensor.train import TrainConfig, WindowConvNet


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"batch_size": 0}, "batch_size: expected an integer >= 1"),
        ({"window": True}, "window: expected an integer >= 1"),
        ({"lr": 0.0}, "lr must be > 0"),
        ({"valid_fraction": 1.0}, "valid_fraction"),
        ({"order": "random"}, "order: expected 'uniform' or 'block'"),
        ({"store_version": 0}, "store_version"),
        ({"tp": 0}, "tp: expected an integer >= 1"),
    ],
)
def test_bad_options_are_named(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainConfig(store="s", out="o", **changes)  # type: ignore[arg-type]


def test_every_option_is_a_flag() -> None:
    args = build_parser().parse_args(
        ["train", "--store", "S", "--out", "O", "--batch-size", "32", "--sample-log"]
    )
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    config = TrainConfig(**{n: getattr(args, n) for n in names})
    assert config == TrainConfig(store="S", out="O", batch_size=32, sample_log=True)


def test_model_is_causal_in_the_window() -> None:
    torch.manual_seed(0)
    net = WindowConvNet(n_features=3, n_labels=2, hidden=8, layers=3, kernel=3)
    x = torch.randn(4, 20, 3)
    h = net.inp(x).transpose(1, 2)
    conv, pad = net.convs[0], net.pads[0]
    changed = x.clone()
    changed[:, 15:] += 1.0  # rows after t = 14 must not move position 14
    h2 = net.inp(changed).transpose(1, 2)
    a = conv(torch.nn.functional.pad(h, (pad, 0)))
    b = conv(torch.nn.functional.pad(h2, (pad, 0)))
    assert torch.equal(a[:, :, :15], b[:, :, :15])
    assert net(x).shape == (4, 2)
