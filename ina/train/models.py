"""Models for `ina train`, by registry name.

Every factory takes the data set's input shape ``(C, H, W)`` and number of classes, so one
name works on digits (1x8x8), MNIST (1x28x28) and CIFAR-10 (3x32x32):

- ``mlp``: one hidden layer of 128 (about 10k parameters on digits): the default, trains to
  > 95 % on digits in seconds, communication is latency-bound (a few packets per step);
- ``cnn``: two 3x3 convolutions and a 2x2 max-pool, then a hidden layer of 64 (about 35k
  parameters on digits);
- ``mid_mlp``: hidden layers 512, 512 (about 300k parameters on digits, 1.2 MB of gradients):
  a step is cheap on a quiet path and costly on a congested one, the regime DC2 is built for;
- ``big_mlp``: hidden layers 2048, 1024, 1024 (about 3.3M parameters on digits, 13 MB of
  float32 gradients per step): communication dominates, for the compression experiments.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

Shape = tuple[int, int, int]


def _mlp(input_shape: Shape, num_classes: int, hidden: tuple[int, ...]) -> nn.Module:
    """Flatten, then Linear + ReLU per hidden width, then a Linear to the classes."""
    c, h, w = input_shape
    layers: list[nn.Module] = [nn.Flatten()]
    width = c * h * w
    for out in hidden:
        layers += [nn.Linear(width, out), nn.ReLU()]
        width = out
    return nn.Sequential(*layers, nn.Linear(width, num_classes))


def mlp(input_shape: Shape, num_classes: int, hidden: int = 128) -> nn.Module:
    return _mlp(input_shape, num_classes, (hidden,))


def cnn(input_shape: Shape, num_classes: int) -> nn.Module:
    c, h, w = input_shape
    return nn.Sequential(
        nn.Conv2d(c, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * (h // 2) * (w // 2), 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


def mid_mlp(input_shape: Shape, num_classes: int) -> nn.Module:
    return _mlp(input_shape, num_classes, (512, 512))


def big_mlp(input_shape: Shape, num_classes: int) -> nn.Module:
    return _mlp(input_shape, num_classes, (2048, 1024, 1024))


MODELS: dict[str, Callable[[Shape, int], nn.Module]] = {
    "mlp": mlp,
    "cnn": cnn,
    "mid_mlp": mid_mlp,
    "big_mlp": big_mlp,
}


def build_model(name: str, input_shape: Shape, num_classes: int) -> nn.Module:
    """A fresh model by registry name; seed torch first for a reproducible initialization."""
    try:
        factory = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}") from None
    return factory(tuple(input_shape), num_classes)


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
