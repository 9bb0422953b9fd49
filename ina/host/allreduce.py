"""Allreduce of float tensors through the switch: the worker library's front door.

Dense mode (SwitchML-style), for a flat tensor ``x`` of ``n`` values cut into blocks of
``lanes`` values (one packet each):

1. meta round (MAX): lanes ``[n, -n, e_0, e_1, ...]`` with ``e_b`` the block exponents. The
   switch returns the max of each, so every worker learns the agreed exponent of every block,
   and ``max(n) != -max(-n)`` reveals workers that disagree on the length (a clear error in
   round one instead of a hang later);
2. data round (SUM): int32 values scaled with the agreed exponents;
3. decode: exact integer sums -> floats, divided by N for a mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ina.host import quantize
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
    error_bound: np.ndarray | None = None  # max |result - exact sum| per value


class Worker:
    """One worker of a job: ``allreduce(x)`` returns the sum (or mean) over all workers."""

    def __init__(self, cfg: WorkerConfig, rtt_listener=None, link=None) -> None:
        self.cfg = cfg
        self.transport = Transport(cfg, rtt_listener=rtt_listener, link=link)
        self.last = AllreduceInfo()

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def stats(self):
        return self.transport.stats

    def allreduce(self, x, average: bool = False):
        """Sum (or mean) of ``x`` over the job's workers; numpy arrays or torch tensors of any
        shape and float dtype; returns the same type, shape and dtype."""
        is_torch = type(x).__module__.startswith("torch")
        if is_torch:
            import torch

            arr = x.detach().cpu().numpy()
        else:
            arr = np.asarray(x)
        if not np.issubdtype(arr.dtype, np.floating):
            raise TypeError(f"allreduce takes float tensors, got {arr.dtype}")
        flat = arr.reshape(-1)
        out = self.allreduce_flat(flat, average=average).astype(arr.dtype).reshape(arr.shape)
        if is_torch:
            return torch.from_numpy(out).to(x.device)
        return out

    def allreduce_flat(self, flat: np.ndarray, average: bool = False) -> np.ndarray:
        """Flat float array -> float64 sum (or mean) over workers."""
        quantize.check_finite(flat)
        if flat.size and float(np.abs(flat).max()) >= FLOAT32_LIMIT:
            raise ValueError("allreduce input exceeds the float32 range (|x| >= 2**128)")
        n = flat.size
        N = self.cfg.num_workers
        L = self.cfg.lanes
        if n >= 2**31:
            raise ValueError("tensors of 2**31 values or more are not supported")
        exps = quantize.block_exponents(flat, L) if n else np.zeros(0, np.int32)
        meta = np.concatenate([np.array([n, -n], np.int32), exps])

        def check_length(chunk: int, lanes: np.ndarray) -> None:
            if chunk == 0 and int(lanes[0]) != -int(lanes[1]):
                raise LengthMismatch(
                    f"job {self.cfg.job_id}: workers disagree on the tensor length "
                    f"(between {-int(lanes[1])} and {int(lanes[0])}); this worker has {n}"
                )

        agreed = self.transport.reduce(meta, Op.MAX, on_chunk=check_length).values[2:]
        if n == 0:
            return np.zeros(0)
        ints = quantize.encode(flat, agreed, L, N)
        sums = self.transport.reduce(ints, Op.SUM).values
        out = quantize.decode(sums, agreed, L, N)
        self.last = AllreduceInfo(n, agreed, quantize.error_bound(agreed, L, N, n))
        self.last_int_sums = sums
        self.last_ints = ints
        if average:
            out /= N
        return out
