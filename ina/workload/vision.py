"""ImageNet classifiers of the model zoo (`ina.workload.zoo`), written out here from the
papers' tables because torchvision does not import in this environment.

- ResNet (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016, Table 1):
  a 7x7 stem, four stages of bottleneck blocks (1x1, 3x3, 1x1 convolutions, expansion 4),
  global average pooling and one linear layer. The stride of a stage's first block sits on
  its 3x3 convolution ("v1.5", as MLPerf's reference and most frameworks train it: the same
  parameters as the paper's v1, which strides the 1x1); shortcuts that change shape are a
  1x1 convolution and batch norm (the paper's option B). ResNet-50 has 3, 4, 6, 3 blocks per
  stage, ResNet-101 3, 4, 23, 3.
- VGG (Simonyan and Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
  Recognition", ICLR 2015, Table 1, configurations D and E): 3x3 convolutions with ReLU in
  five stages closed by 2x2 max-pooling, then three fully connected layers (4096, 4096,
  1000) with dropout. No batch norm, as in the paper.

Inputs are ImageNet crops, ``(B, 3, 224, 224)``; outputs are logits over 1000 classes.
"""

from __future__ import annotations

import torch
from torch import nn

IMAGENET_CLASSES = 1000
IMAGE_SHAPE = (3, 224, 224)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided when the stage downsamples), 1x1 expand, each with batch
    norm; the shortcut is added before the last ReLU."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        return torch.relu(self.bn3(self.conv3(out)) + self.shortcut(x))


class ResNet(nn.Module):
    """He et al.'s ImageNet ResNet with bottleneck blocks; ``blocks`` per stage."""

    def __init__(self, blocks: tuple[int, int, int, int], classes: int = IMAGENET_CLASSES):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        stages, cin = [], 64
        for i, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512), strict=True)):
            stage = []
            for b in range(n):
                # conv2_x keeps the stem's 56x56 (the max-pool already halved it); every
                # later stage halves the size in its first block
                stage.append(Bottleneck(cin, width, 2 if i and not b else 1))
                cin = width * Bottleneck.expansion
            stages.append(nn.Sequential(*stage))
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(x.mean((2, 3)), 1))


def resnet50() -> ResNet:
    return ResNet((3, 4, 6, 3))


def resnet101() -> ResNet:
    return ResNet((3, 4, 23, 3))


# Output channels of each 3x3 convolution, "M" for a 2x2 max-pool (the paper's Table 1).
VGG_CONFIGS = {
    "D": (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
          512, 512, 512, "M"),
    "E": (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
          512, 512, 512, 512, "M"),
}  # fmt: skip


class VGG(nn.Module):
    """Simonyan and Zisserman's VGG: the convolution stack of a configuration, then three
    fully connected layers over the 7x7x512 map a 224x224 input leaves."""

    def __init__(self, config: str, classes: int = IMAGENET_CLASSES) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in VGG_CONFIGS[config]:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU()]
                cin = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(4096, 4096),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(4096, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def vgg16() -> VGG:
    return VGG("D")


def vgg19() -> VGG:
    return VGG("E")
