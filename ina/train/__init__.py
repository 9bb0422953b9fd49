"""Training on the wall clock: one process per rank launched by torchrun, DDP with the INA
communication hook (`ina.workload.hook`), gradients summed in a real switch (the model
process or BMv2) over UDP.

- `ina.train.worker_main`: one rank (launched by torchrun);
- `ina.train.torchrun`: the launcher's wrapper.

The ``ina train`` command (`ina.train_cli`) sits above this package and `ina.sim`, because
``ina train --sim`` trains in simulated time; what both ways share is `ina.workload`.
"""
