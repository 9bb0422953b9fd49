"""Training against the simulated switch: `ina train`, the DDP communication hook, data, models.

- `ina.train.hook`: `INAHookState` and `ina_allreduce_hook`, a DDP communication hook that
  sends each gradient bucket through `ina.host.allreduce.Worker`;
- `ina.train.data`: data sets that need no download (scikit-learn's digits; MNIST and
  CIFAR-10 from files on disk), sharded per rank;
- `ina.train.models`: models by name (``mlp``, ``cnn``, ``big_mlp``);
- `ina.train.worker_main`: one rank (launched by torchrun);
- `ina.train.cli`: the ``ina train`` command.
"""
