"""Models for `ina train`, by registry name.

Every factory takes the data set's input shape (without the batch dimension) and number of
classes. `ina.workload.catalog.INPUTS` says which kinds of data set (`ina.workload.data.Dataset.kind`) a model takes:
the image models work on digits (1x8x8), MNIST (1x28x28) and CIFAR-10 (3x32x32), the MLPs
on MNIST-1D's signals (1x40) too.

- ``mlp``: one hidden layer of 128 (about 10k parameters on digits): the default, trains to
  > 95 % on digits in seconds, communication is latency-bound (a few packets per step);
- ``cnn``: two 3x3 convolutions and a 2x2 max-pool, then a hidden layer of 64 (about 35k
  parameters on digits);
- ``mid_mlp``: hidden layers 512, 512 (about 300k parameters on digits, 1.2 MB of gradients):
  a step is cheap on a quiet path and costly on a congested one, the regime DC2 is built for;
- ``big_mlp``: hidden layers 2048, 1024, 1024 (about 3.3M parameters on digits, 13 MB of
  float32 gradients per step): communication dominates, for the compression experiments;
- ``cnn1d``: three 1-D convolutions and a linear layer for MNIST-1D (25,162 parameters);
- ``char_lstm``: a character-level language model, embedding 32, one LSTM layer of 128, a
  linear layer to the vocabulary (98,722 parameters on ``pytext``'s 98 characters);
- ``resnet``: ResNet-20 in the style of He et al.'s CIFAR network (three stages of three
  basic blocks, 16/32/64 channels, batch norm, global pooling): about 270k parameters in 65
  tensors, most of them small (batch norm's scales and shifts): the many-tensor model of
  MergeComp's scheduling (`ina sim mergecomp`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from ina.workload.catalog import INPUTS

Shape = tuple[int, ...]


def _mlp(input_shape: Shape, num_classes: int, hidden: tuple[int, ...]) -> nn.Module:
    """Flatten, then Linear + ReLU per hidden width, then a Linear to the classes."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(input_shape)
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


def cnn1d(input_shape: Shape, num_classes: int) -> nn.Module:
    """For 1-D signals ``(C, L)``: two convolution + max-pool stages halve the length twice,
    a third convolution, then one linear layer over all positions. Keeping the positions
    (no global pooling) lets it use where a template's features sit relative to each other;
    MNIST-1D translates whole templates, which the pooled stages absorb."""
    c, length = input_shape
    return nn.Sequential(
        nn.Conv1d(c, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool1d(2),
        nn.Conv1d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool1d(2),
        nn.Conv1d(64, 64, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64 * (length // 4), num_classes),
    )


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a shortcut (1x1 convolution when the shape
    changes)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.short(x))


def resnet(input_shape: Shape, num_classes: int, blocks: int = 3) -> nn.Module:
    c = input_shape[0]
    layers: list[nn.Module] = [nn.Conv2d(c, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    cin = 16
    for stage, cout in enumerate((16, 32, 64)):
        for b in range(blocks):
            layers.append(BasicBlock(cin, cout, 2 if stage and not b else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes)]
    return nn.Sequential(*layers)


class CharLSTM(nn.Module):
    """Character-level language model: ids ``(B, L)`` -> next-character logits ``(B, L, V)``.

    Each window starts from a zero state (no state carried between batches), so that the
    windows of a shuffled epoch are independent samples, as `DistributedSampler` assumes."""

    def __init__(self, vocab: int, embed: int = 32, hidden: int = 128, layers: int = 1) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(x))
        return self.head(out)


def char_lstm(input_shape: Shape, num_classes: int) -> nn.Module:
    """``num_classes`` is the vocabulary's size (inputs and outputs are characters)."""
    return CharLSTM(num_classes)


MODELS: dict[str, Callable[[Shape, int], nn.Module]] = {
    "mlp": mlp,
    "cnn": cnn,
    "mid_mlp": mid_mlp,
    "big_mlp": big_mlp,
    "cnn1d": cnn1d,
    "char_lstm": char_lstm,
    "resnet": resnet,
}

assert set(MODELS) == set(INPUTS), "every model names the data it takes"


def build_model(name: str, input_shape: Shape, num_classes: int) -> nn.Module:
    """A fresh model by registry name; seed torch first for a reproducible initialization."""
    try:
        factory = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}") from None
    return factory(tuple(input_shape), num_classes)


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
