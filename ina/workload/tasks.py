"""What one data-parallel rank trains with: `build_rank`, the loss and the evaluation.

The workloads themselves (data sets, models, metrics, targets) are named in
`ina.workload.catalog`. `build_rank` makes everything one rank needs (model, training shard,
test shard, loss, metric) without touching ``torch.distributed``: `ina.train.worker_main`
wraps the model in DDP; a simulator that runs every rank in one process calls it once per
rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.functional import cross_entropy
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ina.workload.catalog import TASKS, Workload
from ina.workload.data import DATASETS, Dataset, load_dataset, shard, test_shard
from ina.workload.models import build_model

assert set(TASKS) == set(DATASETS), "every data set needs a task"


def loss_fn(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per prediction: one per sample (classes ``(B, K)``), or one per
    position (a language model's ``(B, L, V)`` against labels ``(B, L)``)."""
    return cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1024
) -> tuple[float, float, float]:
    """(summed cross-entropy in nats, number correct, number of predictions) on ``x``, ``y``,
    in batches (the LSTM's activations on a whole test shard would be large). Sums, so that
    ranks can add theirs up; `Metric.value` turns them into the metric."""
    was_training = model.training
    model.eval()
    loss, correct, count = 0.0, 0.0, 0.0
    for i in range(0, len(x), batch):
        logits = model(x[i : i + batch])
        flat, labels = logits.reshape(-1, logits.shape[-1]), y[i : i + batch].reshape(-1)
        loss += cross_entropy(flat, labels, reduction="sum").item()
        correct += (flat.argmax(1) == labels).sum().item()
        count += labels.numel()
    model.train(was_training)
    return loss, correct, count


@dataclass
class RankParts:
    """Everything one rank trains with (`build_rank`)."""

    workload: Workload
    data: Dataset
    model: torch.nn.Module  # initialized from the seed: the same on every rank
    loader: DataLoader  # this rank's training shard
    sampler: DistributedSampler  # call ``sampler.set_epoch(e)`` before each epoch
    test_x: torch.Tensor  # this rank's test shard (every world-th sample)
    test_y: torch.Tensor

    loss = staticmethod(loss_fn)
    evaluate = staticmethod(evaluate)


def build_rank(
    workload: Workload,
    rank: int,
    world: int,
    batch_size: int,
    seed: int,
    data_dir: str | None = None,
) -> RankParts:
    """Model, data shards, loss and metric of ``rank`` out of ``world``: no process group
    needed. The model's initialization is drawn from torch's global generator seeded with
    ``seed`` (the same on every rank); the data set is made or loaded from ``seed`` too (data
    sets cache what is costly to make, per process)."""
    torch.manual_seed(seed)
    data = load_dataset(workload.dataset, seed=seed, path=data_dir)
    if data.kind != workload.task.kind:  # the registry and the loader disagree: a bug
        raise RuntimeError(f"{data.name}: loader made {data.kind} data, task says otherwise")
    loader, sampler = shard(data, rank, world, batch_size, seed)
    test_x, test_y = test_shard(data, rank, world)
    model = build_model(workload.model, data.input_shape, data.num_classes)
    return RankParts(workload, data, model, loader, sampler, test_x, test_y)


def model_of(workload: Workload) -> torch.nn.Module:
    """The workload's model, built from its data set's shapes (no data loaded)."""
    from ina.workload.data import SHAPES

    shape, classes = SHAPES[workload.dataset]
    return build_model(workload.model, shape, classes)
