"""Training against the simulated switch: `ina train`, the DDP communication hook, data, models.

- `ina.train.hook`: `INAHookState` and `ina_allreduce_hook`, a DDP communication hook that
  sends each gradient bucket through `ina.host.allreduce.Worker`;
- `ina.train.workloads`: the registry of workloads (data set, model, loss, metric, target)
  and `build_rank`, one rank's model and data without a process group;
- `ina.train.data`: data sets that need no download (scikit-learn's digits, MNIST-1D made by
  the ``mnist1d`` package, ``pytext`` from `ina.train.textdata`; MNIST and CIFAR-10 from
  files on disk), sharded per rank;
- `ina.train.models`: models by name (``mlp``, ``cnn``, ``mid_mlp``, ``big_mlp``, ``cnn1d``,
  ``char_lstm``);
- `ina.train.worker_main`: one rank (launched by torchrun);
- `ina.train.cli`: the ``ina train`` command.
"""
