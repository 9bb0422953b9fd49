"""Allreduce of float tensors through the switch: the worker library's front door.

Two modes, chosen per call by the compression density (1.0 = dense):

Dense mode (SwitchML-style), for a flat tensor ``x`` of ``n`` values cut into blocks of
``lanes`` values (one packet each):

1. meta round (MAX): lanes ``[n, -n, e_0, e_1, ...]`` with ``e_b`` the block exponents. The
   switch returns the max of each, so every worker learns the agreed exponent of every block,
   and ``max(n) != -max(-n)`` reveals workers that disagree on the length (a clear error in
   round one instead of a hang later);
2. data round (SUM): int32 values scaled with the agreed exponents;
3. decode: exact integer sums -> floats, divided by N for a mean.

Compressed mode (density < 1; Li et al., ICML'24 behind a sparsifier with error feedback):

1. add the bucket's residual, keep the top-k (or random-k) entries, the rest becomes the
   new residual (error feedback, GRACE's Memory);
2. round 1 (OR): the bitmap of kept positions, with the bucket's exponent in the header's
   MAX-combined ``exp``: every worker gets the union support and the agreed scale;
3. round 2 (SUM): the int32 values on the union, count-sketched (or sent as plain lanes with
   ``coding="support"``); peeled exactly, undecoded positions repaired by a dense SUM round;
4. decode as in dense mode; the residual keeps what this worker's encoding did not carry.

Every call is written once as a generator of switch rounds (`allreduce_steps`, see
`ina.host.rounds`): `allreduce` drives it with the blocking UDP transport, the simulator
(`ina.sim`) drives the same generator in virtual time.

Level agreement (DC2): every call carries this worker's proposed compression level in the
header's MAX-combined ``level`` field of its first round; the agreed level (the hardest any
worker asked for) is what every worker uses from the next call on, so all workers always run
the same mode with the same density.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ina.host import quantize
from ina.host.arrays import is_torch, ops
from ina.host.compression import HomomorphicConfig
from ina.host.compression.sparse_allreduce import SparseAllreduce
from ina.host.repeated import EncodedLanes, Repeated
from ina.host.rounds import Round, Steps, run_blocking
from ina.host.transport import Transport, WorkerConfig
from ina.protocol import Op

FLOAT32_LIMIT = 2.0**128  # beyond float32: the exponent byte cannot express the scale


class LengthMismatch(ValueError):
    """Workers of one job called allreduce with tensors of different lengths."""


@dataclass
class AllreduceInfo:
    """What the last call did (for tests and the training loop's statistics)."""

    n: int = 0
    exponents: np.ndarray | None = None  # agreed biased exponent per block
    block: int = 0  # values per exponent block
    num_workers: int = 0

    @cached_property
    def error_bound(self) -> np.ndarray | None:
        """Max |result - exact sum| per value. Computed when asked for: it is as large as
        the tensor, and most calls (every step of a training run) never read it."""
        if self.exponents is None:
            return None
        if self.n == 0:
            return np.zeros(0)
        return quantize.error_bound(self.exponents, self.block, self.num_workers, self.n)


@dataclass(frozen=True)
class CompressionConfig:
    """How a worker compresses; every worker of a job must use the same values.

    ``density`` is the fixed density when no level ladder is given; with ``ladder`` (a
    function level index -> density, e.g. DC2's), the agreed level picks the density.
    """

    density: float = 1.0
    sparsifier: str = "topk"
    homomorphic: HomomorphicConfig = field(default_factory=HomomorphicConfig)

    def __post_init__(self) -> None:
        if not 0.0 < self.density <= 1.0:
            raise ValueError(f"density must be in (0, 1], got {self.density}")


class Worker:
    """One worker of a job: ``allreduce(x)`` returns the sum (or mean) over all workers."""

    def __init__(
        self,
        cfg: WorkerConfig,
        rtt_listener=None,
        link=None,
        compression: CompressionConfig | None = None,
        ladder: Callable[[int], float] | None = None,
        level: int = 0,
        controller=None,
        transport=None,
        clock: Callable[[], float] = time.monotonic,
        communicator=None,
    ) -> None:
        """``transport``: what carries the rounds (default: a UDP `Transport` for ``cfg``;
        the simulator passes its own); ``clock``: the time the DC2 controller sees;
        ``communicator``: a GRACE method (`ina.compressors.Communicator`) that compressed
        calls (``compressor=True``) go through instead of the sparsifier."""
        self.cfg = cfg
        self.clock = clock
        # DC2: the controller sees every clean RTT sample and proposes levels on the ladder
        self.controller = controller
        if controller is not None:
            from ina.control.dc2 import index_to_density

            ladder = ladder or index_to_density
            listener = rtt_listener

            def rtt_listener(rtt: np.ndarray, times: np.ndarray) -> None:
                controller.observe(rtt, times)  # each sample at its own arrival time
                if listener is not None:
                    listener(rtt, times)

        if transport is None:
            transport = Transport(cfg, rtt_listener=rtt_listener, link=link)
        else:
            transport.core.rtt_listener = rtt_listener
        self.transport = transport
        self.last = AllreduceInfo()
        self.compression = compression or CompressionConfig()
        self.ladder = ladder
        # internal state: the level every worker uses now, and the one this worker proposes
        self.level = level
        self.proposed_level = level
        # compressed mode: sparsifier, error feedback and the homomorphic rounds, on the
        # gradient's own device (ina.host.compression.sparse_allreduce)
        self.sparse = SparseAllreduce(
            cfg.num_workers, cfg.worker_id, self.compression.sparsifier,
            self.compression.homomorphic,
        )  # fmt: skip
        self.memory = self.sparse.memory
        self.homomorphic = self.sparse.homomorphic
        if communicator is not None and communicator.compressor.num_workers != cfg.num_workers:
            raise ValueError(
                f"the {communicator.name} communicator is built for "
                f"{communicator.compressor.num_workers} workers, the job has {cfg.num_workers}"
            )
        self.communicator = communicator
        self.last_reduction = None  # the communicator's last `Reduction` (compressor calls)

    def density(self) -> float:
        """The density of the next call (from the agreed level if there is a ladder)."""
        if self.ladder is not None:
            return self.ladder(self.level)
        return self.compression.density

    def control_step(self) -> int:
        """Once per training step with DC2: the controller's next proposal (returned)."""
        if self.controller is None:
            return self.level
        index = self.controller.step(self.clock(), agreed_index=self.level)
        self.propose_level(index)
        return index

    def propose_level(self, level: int) -> None:
        """The level this worker asks for; takes effect for all workers after the next call."""
        if not 0 <= level <= 255:
            raise ValueError("level must fit the 8-bit header field (0..255)")
        self.proposed_level = level

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def stats(self):
        return self.transport.stats

    def allreduce(
        self,
        x,
        average: bool = False,
        key: object = None,
        density: float | None = None,
        compressor: bool = False,
    ):
        """Sum (or mean) of ``x`` over the job's workers; numpy arrays or torch tensors of any
        shape and float dtype; returns the same type, shape and dtype.

        ``key`` names the bucket for error feedback in compressed mode (residuals are kept
        per key; the same key must always carry a tensor of the same size). ``density``
        overrides the configured density for this call (every worker must pass the same:
        e.g. a dense warm-up before compression starts). ``compressor``: send this call
        through the Worker's GRACE communicator (its error feedback keyed by ``key``); with
        ``average`` the result is the method's gradient (the mean, or signSGD's vote)."""
        steps = self.allreduce_steps(
            x, average=average, key=key, density=density, compressor=compressor
        )
        return run_blocking(steps, self.transport.reduce_round)

    def allreduce_steps(
        self,
        x,
        average: bool = False,
        key: object = None,
        density: float | None = None,
        compressor: bool = False,
    ) -> Steps:
        """`allreduce` as a generator of switch rounds (`ina.host.rounds`)."""
        if is_torch(x):
            import torch

            if not x.is_floating_point():
                raise TypeError(f"allreduce takes float tensors, got {x.dtype}")
            # stays where it is: compressed mode encodes on the tensor's device and sends
            # only the rounds' lanes through the host (ina.host.compression.sparse_allreduce)
            flat = x.detach().reshape(-1)
        else:
            x = np.asarray(x)
            if not np.issubdtype(x.dtype, np.floating):
                raise TypeError(f"allreduce takes float tensors, got {x.dtype}")
            flat = x.reshape(-1)
        out = yield from self.allreduce_flat_steps(
            flat, average=average, key=key, density=density, compressor=compressor
        )
        if is_torch(x):
            out = out if is_torch(out) else torch.from_numpy(np.ascontiguousarray(out))
            return out.to(device=x.device, dtype=x.dtype).reshape(x.shape)
        return out.astype(x.dtype).reshape(x.shape)

    def allreduce_flat(
        self,
        flat: np.ndarray,
        average: bool = False,
        key: object = None,
        density: float | None = None,
        compressor: bool = False,
    ) -> np.ndarray:
        """Flat float array -> float64 sum (or mean) over workers."""
        steps = self.allreduce_flat_steps(
            flat, average=average, key=key, density=density, compressor=compressor
        )
        return run_blocking(steps, self.transport.reduce_round)

    def allreduce_flat_steps(
        self,
        flat: np.ndarray,
        average: bool = False,
        key: object = None,
        density: float | None = None,
        compressor: bool = False,
    ) -> Steps[np.ndarray]:
        """`allreduce_flat` as a generator of switch rounds; ``flat`` a numpy array or a torch
        tensor (the result: float64 numpy, or a tensor on ``flat``'s device when compressed)."""
        xp = ops(flat)
        # one pass for both checks: the peak is NaN or infinite if any value is
        peak = float(xp.amax(xp.abs(flat), 0)) if xp.size(flat) else 0.0
        if not math.isfinite(peak):
            quantize.check_finite(flat)  # raises, naming the first such value
        if peak >= FLOAT32_LIMIT:
            raise ValueError("allreduce input exceeds the float32 range (|x| >= 2**128)")
        if compressor:
            if self.communicator is None:
                raise ValueError("compressor=True, but this Worker has no communicator")
            # GRACE's methods encode on the host (numpy): the lanes cross it anyway
            host = flat.detach().cpu().numpy() if is_torch(flat) else np.asarray(flat)
            red = yield from self.communicator.step_steps(host.astype(np.float64), key)
            self.last_reduction = red
            self.last = AllreduceInfo(host.size)
            return red.grad.copy() if average else red.total.copy()
        if density is None:
            density = self.density()
        elif not 0.0 < density <= 1.0:
            raise ValueError(f"density must be in (0, 1], got {density}")
        if density < 1.0 and xp.size(flat):
            out = yield from self._compressed_steps(flat, density, key)
        else:  # dense: every int32 lane crosses the host anyway
            host = flat.detach().cpu().numpy() if is_torch(flat) else flat
            out = yield from self._dense_steps(host)
        if average:
            out /= self.cfg.num_workers
        return out

    def timing_steps(self, grad: Repeated) -> Steps[None]:
        """A dense call whose sums nobody reads (timing only, `ina.sim.step`): the rounds and
        packets of ``allreduce_steps(np.resize(grad.block, grad.size))`` without an array of
        the gradient's size. The SUM round's lanes are encoded as the transport sends them
        (`ina.host.repeated.EncodedLanes`) and its result is not kept: ``last_ints`` and
        ``last_int_sums`` are None."""
        if self.density() < 1.0:
            raise ValueError("timing_steps runs the dense path: this worker compresses")
        peak = grad.peak()
        if not math.isfinite(peak):
            quantize.check_finite(grad.block[: grad.size])  # raises, naming the first
        if peak >= FLOAT32_LIMIT:
            raise ValueError("allreduce input exceeds the float32 range (|x| >= 2**128)")
        n, L, N = grad.size, self.cfg.lanes, self.cfg.num_workers
        agreed = yield from self._agree_exponents(n, grad.block_exponents)
        if n:
            yield Round(EncodedLanes(grad, agreed, L, N), Op.SUM, keep=False)
        self.last = AllreduceInfo(n, agreed, L, N)
        self.last_int_sums = self.last_ints = None

    def _agree_exponents(self, n: int, exponents) -> Steps[np.ndarray]:
        """The meta round (MAX) of a dense call of ``n`` values: ``exponents(lanes)`` are this
        worker's block exponents; returns the agreed ones (and takes the agreed level)."""
        L = self.cfg.lanes
        if n >= 2**31:
            raise ValueError("tensors of 2**31 values or more are not supported")
        exps = exponents(L) if n else np.zeros(0, np.int32)
        meta = np.concatenate([np.array([n, -n], np.int32), exps])

        def check_length(lanes: np.ndarray) -> None:
            if int(lanes[0]) != -int(lanes[1]):
                raise LengthMismatch(
                    f"job {self.cfg.job_id}: workers disagree on the tensor length "
                    f"(between {-int(lanes[1])} and {int(lanes[0])}); this worker has {n}"
                )

        meta_out = yield Round(meta, Op.MAX, level=self.proposed_level, check=check_length)
        self.level = meta_out.level
        return meta_out.values[2:]

    def _dense_steps(self, flat: np.ndarray) -> Steps[np.ndarray]:
        n = flat.size
        N = self.cfg.num_workers
        L = self.cfg.lanes
        agreed = yield from self._agree_exponents(
            n, lambda lanes: quantize.block_exponents(flat, lanes)
        )
        if n == 0:
            self.last = AllreduceInfo(0, agreed, L, N)
            self.last_int_sums = self.last_ints = np.zeros(0, np.int32)
            return np.zeros(0)
        ints = quantize.encode(flat, agreed, L, N)
        sums = (yield Round(ints, Op.SUM)).values
        out = quantize.decode(sums, agreed, L, N)
        self.last = AllreduceInfo(n, agreed, L, N)
        self.last_int_sums = sums
        self.last_ints = ints
        return out

    def _compressed_steps(self, flat, density: float, key: object) -> Steps:
        res = yield from self.sparse.allreduce_steps(flat, density, key, level=self.proposed_level)
        n = res.ints.shape[0]
        N = self.cfg.num_workers
        self.level = res.level
        self.last = AllreduceInfo(n, res.exponents, n, N)
        self.last_int_sums = res.reduced.values
        self.last_ints = res.ints
        self.last_compressed = res.reduced
        return res.sums
