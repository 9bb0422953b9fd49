"""One data-parallel rank's parts that both ways to train share: its INA `Worker` and hook
state, compressing as the run's configuration says (`ina_worker`), the digest that proves the
replicas identical, and the columns of the training logs.

The wall-clock rank (`ina.train.worker_main`) gives `ina_worker` a UDP transport and an
emulated path; the simulator (`ina.sim.train`) gives it a simulated transport and clock.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np
import torch

# metrics.csv (rank 0, a row per epoch). METRIC stands for the workload's metric column
# (`Metric.column`: test_acc for accuracy, test_bpc for bits per character).
METRIC = "test_acc"
METRICS = (
    "epoch", "step", "train_loss", "test_loss", METRIC, "epoch_s", "step_ms", "comm_ms",
    "bytes_sent",
)  # fmt: skip
# steps.csv (rank 0, with step_log): time_s since the start of training without the time of
# the eval_every evaluations; density used by the step's first bucket; level agreed by its
# end; bytes_sent cumulative; the metric every eval_every steps (empty otherwise)
STEP_LOG = (
    "step", "time_s", "monotonic", "step_s", "comm_s", "loss", "density", "level", "bytes_sent",
    METRIC,
)  # fmt: skip


def with_metric(columns: tuple[str, ...], column: str) -> list[str]:
    """A CSV header with the workload's metric column in place of `METRIC`."""
    return [column if c == METRIC else c for c in columns]


def param_digest(model: torch.nn.Module) -> str:
    """A hash of every parameter's bytes, in order: equal digests = bit-identical replicas."""
    h = hashlib.blake2b(digest_size=16)
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


class StepBatch:
    """Collects a DC2 controller's RTT samples and feeds them to it in one call per step.

    The transport reports the RTTs of every receive batch, often one or two chunks under
    link emulation, and one `DC2Controller.observe` costs about 0.1 ms: hundreds of calls a
    step cost ~10 % of a compressed step. The monitor's vectorized update gives the same
    statistics as feeding the samples one at a time, so the decisions do not change."""

    def __init__(self, controller) -> None:
        self.controller = controller
        self._step = controller.step
        self._rtts: list[np.ndarray] = []
        self._times: list[np.ndarray] = []

    def observe(self, rtt: np.ndarray, times: np.ndarray) -> None:
        """Samples and their arrival times (the transport's ``rtt_listener``)."""
        rtt = np.asarray(rtt, np.float64).reshape(-1)
        self._rtts.append(rtt)
        self._times.append(np.broadcast_to(np.asarray(times, np.float64), rtt.shape))

    def step(self, now: float | None = None, agreed_index: int | None = None) -> int:
        if self._rtts:
            self.controller.observe(np.concatenate(self._rtts), np.concatenate(self._times))
            self._rtts.clear()
            self._times.clear()
        return self._step(now, agreed_index)


def ina_worker(config: dict, cfg, link=None, transport=None, clock=time.monotonic):
    """A `Worker` for ``cfg`` and its hook state, compressing as the config says: the part of
    a rank's set-up that the wall-clock ranks and the simulator (`ina.sim.train`) share.
    ``transport``/``clock``: the simulator's; ``link``: an emulated path (wall clock)."""
    from ina.host.allreduce import CompressionConfig, Worker
    from ina.host.compression import HomomorphicConfig
    from ina.workload.hook import INAHookState

    compression = config["compression"]
    kwargs: dict = {"link": link, "transport": transport, "clock": clock}
    controller = None
    if config.get("compressor"):  # a GRACE method (ina train --compressor NAME)
        from ina.compressors import make_communicator

        compression = "compressor"
        kwargs["communicator"] = make_communicator(
            config["compressor"],
            num_workers=cfg.num_workers,
            worker=cfg.worker_id,
            seed=config["seed"],
            args=config.get("compressor_args") or [],
        )
    coding = HomomorphicConfig(coding=config.get("coding", "sketch"))
    if compression == "homomorphic":
        kwargs["compression"] = CompressionConfig(density=config["density"], homomorphic=coding)
    elif compression == "dc2":
        kwargs["compression"] = CompressionConfig(homomorphic=coding)
        from ina.control.dc2 import DC2Controller
        from ina.control.dc2.laws import index_to_density

        controller = DC2Controller(config["law"], **config.get("law_params", {}))
        batch = StepBatch(controller)  # one monitor update per step, not per receive
        kwargs["rtt_listener"] = batch.observe
        controller.step = batch.step
        kwargs["ladder"] = index_to_density
        kwargs["level"] = controller.index  # every worker starts at the law's initial level
    worker = Worker(cfg, **kwargs)
    state = INAHookState(
        worker,
        compression=compression,
        density=config["density"] if compression == "homomorphic" else 1.0,
        start_compress_iter=config["warmup_steps"] if compression != "dense" else 1,
        controller=controller,
        keep_error_bounds=config.get("dump_step") is not None,
    )
    return worker, state
