"""What a training step is, read by both ways to train (`ina.train` on the wall clock and
`ina.sim` in simulated time): the trainable tasks (data sets, models, losses, metrics), DDP's
buckets and communication hook, a rank's INA worker, compute models, MergeComp's search."""
