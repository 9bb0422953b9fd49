"""Workloads by name: a data set, a model that fits it, the metric and a default target.

A training loop needs to know, for any data set, which models fit it, what it minimizes,
how good the model is and when to stop. Classification (digits, MNIST-1D) is scored by
accuracy, higher is better; language modelling (``pytext``) by bits per character, lower is
better. Both minimize the cross-entropy of a class per prediction (an image's label, or
every next character of a window), so one loss and one evaluation serve both, and each
metric is a function of the summed evaluation counts (`Metric.value`), which add up across
ranks.

| data set | kind | default model | metric | default target |
|---|---|---|---|---|
| ``digits`` | image 1x8x8 | ``mlp`` | accuracy | 0.95 |
| ``mnist1d`` | signal 1x40 | ``cnn1d`` | accuracy | 0.96 |
| ``pytext`` | text, windows of 64 | ``char_lstm`` | bits per character | 2.3 |
| ``mnist``, ``cifar10`` | image (files) | ``mlp`` | accuracy | 0.95, 0.5 |

This module is names and numbers only, without torch: `ina train` checks its options and
launches its ranks from them, and only the ranks (`ina.workload.tasks`, `models`, `data`)
need torch, whose import costs each process about 2 s of CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# How a rank's DDP hook sends its gradients (`ina.workload.hook`): ``--compression``'s
# choices; ``compressor`` is every bucket through the Worker's GRACE communicator
# (`ina.compressors`), chosen with ``ina train --compressor NAME``.
COMPRESSIONS = ("dense", "homomorphic", "dc2")
MODES = (*COMPRESSIONS, "compressor")

# The models of `ina.workload.models`, and the kinds of data set each takes
# (`ina.workload.data.Dataset.kind`).
INPUTS: dict[str, tuple[str, ...]] = {
    "mlp": ("image", "signal"),
    "cnn": ("image",),
    "mid_mlp": ("image", "signal"),
    "big_mlp": ("image", "signal"),
    "cnn1d": ("signal",),
    "char_lstm": ("text",),
    "resnet": ("image",),
}


@dataclass(frozen=True)
class Metric:
    """A quality metric computed from summed evaluation counts.

    ``column`` names it in ``metrics.csv``, ``steps.csv`` and ``result.json``; ``measure``
    is ``"correct"`` (the fraction of right predictions) or ``"bits"`` (the mean
    cross-entropy in bits); ``low`` and ``high`` bound a valid target (exclusive,
    inclusive)."""

    name: str
    column: str
    measure: str
    higher_is_better: bool
    low: float
    high: float
    unit: str

    def value(self, loss_sum: float, correct: float, count: float) -> float:
        """The metric of an evaluation whose cross-entropy (nats) summed to ``loss_sum``
        over ``count`` predictions, ``correct`` of them right."""
        if self.measure == "bits":
            return loss_sum / max(count, 1) / math.log(2)
        return correct / max(count, 1)

    def reached(self, value: float, target: float) -> bool:
        return value >= target if self.higher_is_better else value <= target

    def check_target(self, target: float) -> None:
        if not self.low < target <= self.high:
            raise ValueError(
                f"a target {self.name} must be in ({self.low:g}, {self.high:g}], got {target:g}"
            )

    def format(self, value: float) -> str:
        return f"{100 * value:.2f} %" if self.unit == "%" else f"{value:.4f}{self.unit}"


ACCURACY = Metric("accuracy", "test_acc", "correct", True, 0.0, 1.0, "%")
BPC = Metric("bits per character", "test_bpc", "bits", False, 0.0, 8.0, "")


@dataclass(frozen=True)
class Task:
    """What a data set asks of a model: its kind, its metric and default choices."""

    dataset: str
    kind: str  # `ina.workload.data.Dataset.kind`: which models fit (`ina.workload.models.INPUTS`)
    metric: Metric
    default_model: str
    default_target: float
    needs_dir: bool  # read from --data-dir (mnist, cifar10), or made here (no --data-dir)
    default_lr: float = 0.05  # SGD with momentum 0.9


TASKS: dict[str, Task] = {
    t.dataset: t
    for t in (
        Task("digits", "image", ACCURACY, "mlp", 0.95, False),
        Task("mnist", "image", ACCURACY, "mlp", 0.95, True),
        Task("cifar10", "image", ACCURACY, "mlp", 0.5, True),
        # The targets of the steps-to-target table (docs/dc2.md): dense, 4 workers x 32,
        # reaches them in about 500 (mnist1d) and 900 (pytext) steps. The LSTM's lr: after
        # 300 dense steps (4 workers, one process) 0.2 gave 2.94 bits per character, 0.5
        # 2.62, 1.0 2.46; 0.5 leaves a margin for the larger steps of error feedback.
        Task("mnist1d", "signal", ACCURACY, "cnn1d", 0.96, False),
        Task("pytext", "text", BPC, "char_lstm", 2.3, False, default_lr=0.5),
    )
}


@dataclass(frozen=True)
class Workload:
    """A data set and a model that fits it; `resolve` makes one."""

    task: Task
    model: str

    @property
    def dataset(self) -> str:
        return self.task.dataset

    @property
    def metric(self) -> Metric:
        return self.task.metric

    @property
    def default_target(self) -> float:
        return self.task.default_target

    @property
    def name(self) -> str:
        return f"{self.dataset}/{self.model}"


def resolve(dataset: str, model: str | None = None) -> Workload:
    """The workload of ``dataset`` with ``model`` (default: the data set's own); ValueError
    with a one-line reason when the data set or the model is unknown or they do not fit."""
    task = TASKS.get(dataset)
    if task is None:
        raise ValueError(f"unknown data set {dataset!r}; known: {sorted(TASKS)}")
    model = model or task.default_model
    if model not in INPUTS:
        raise ValueError(f"unknown model {model!r}; known: {sorted(INPUTS)}")
    if task.kind not in INPUTS[model]:
        fits = sorted(m for m, kinds in INPUTS.items() if task.kind in kinds)
        raise ValueError(
            f"--model {model} does not fit --dataset {dataset} ({task.kind} data); "
            f"models for it: {', '.join(fits)}"
        )
    return Workload(task, model)
