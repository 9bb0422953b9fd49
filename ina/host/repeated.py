"""A gradient that is one block of values repeated, and its int32 lanes made packet by packet.

A timing-only step (`ina.sim.step`) sends every bucket of a model's gradients through the
real transport and switch, but its times depend on the packets' sizes, never on the values
in them. It fills each bucket with one block of random values repeated (``np.resize(block,
n)``), which for Llama-7B is 27 GB of float32, as much again of int32 lanes, and the sums.
`Repeated` is that gradient without the array: its values at any positions, its block
exponents (periodic: computed on one block), its peak. `EncodedLanes` is its int32 encoding
with the agreed exponents, made for the chunks the transport sends as it sends them (a
`ina.host.rounds.LaneSource`): the packets are the same bytes as with the arrays, and a
worker holds no array larger than the block and the bucket's per-chunk state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ina.host import quantize

PIECE = 1 << 22  # values per pass where the exponents are not periodic (bounded memory)


@dataclass(frozen=True)
class Repeated:
    """``size`` float values: ``block`` repeated and cut, the values of ``np.resize(block,
    size)``, without holding them."""

    block: np.ndarray
    size: int

    def __post_init__(self) -> None:
        if self.block.ndim != 1 or (self.size and not self.block.size):
            raise ValueError("Repeated needs a flat, non-empty block")

    @property
    def dtype(self) -> np.dtype:
        return self.block.dtype

    def values(self, start: int, stop: int) -> np.ndarray:
        """Positions ``[start, stop)`` as an array."""
        p = self.block.size
        return self.block[np.arange(start, stop) % p]

    def peak(self) -> float:
        """The largest ``|x|`` (NaN or infinite if any value is)."""
        if not self.size:
            return 0.0
        return float(np.max(np.abs(self.block[: min(self.size, self.block.size)])))

    def chunk_values(self, chunks: np.ndarray, lanes: int) -> np.ndarray:
        """The values of chunks ``chunks`` of ``lanes`` values each, shape ``(k, lanes)``;
        beyond ``size`` zeros (a packet's unused lanes)."""
        chunks = np.asarray(chunks, np.int64)
        p = self.block.size
        if p % lanes == 0:  # chunk c holds block row c mod p/lanes
            rows = self.block.reshape(-1, lanes)[chunks % (p // lanes)]
        else:
            pos = chunks[:, None] * lanes + np.arange(lanes)
            rows = self.block[pos % p]
        tail = self.size % lanes
        if tail:
            rows[chunks == self.size // lanes, tail:] = 0  # (a copy: the block stays)
        return rows

    def block_exponents(self, lanes: int) -> np.ndarray:
        """`quantize.block_exponents` of the values, per ``lanes`` values: of one block and
        repeated where ``lanes`` divides the block, else in passes of ``PIECE`` values."""
        n, p = self.size, self.block.size
        full = n // lanes
        if p % lanes == 0:
            exps = np.resize(quantize.block_exponents(self.block, lanes), full)
            if n > full * lanes:  # a short last block has its own
                last = quantize.block_exponents(self.values(full * lanes, n), lanes)
                exps = np.concatenate([exps, last])
            return exps
        step = max(PIECE // lanes, 1) * lanes
        parts = [
            quantize.block_exponents(self.values(a, min(a + step, n)), lanes)
            for a in range(0, n, step)
        ]
        return np.concatenate(parts) if parts else np.zeros(0, np.int32)


@dataclass(frozen=True)
class EncodedLanes:
    """``quantize.encode(values, exps, lanes, num_workers)`` of a `Repeated` gradient,
    chunk by chunk: a `ina.host.rounds.LaneSource` whose rows are that encoding's."""

    grad: Repeated
    exps: np.ndarray  # the agreed biased exponent of each chunk
    lanes: int
    num_workers: int

    def __post_init__(self) -> None:
        if self.exps.size != math.ceil(self.grad.size / self.lanes):
            raise ValueError(
                f"{self.exps.size} exponents for {self.grad.size} values of {self.lanes} lanes"
            )

    @property
    def size(self) -> int:
        return self.grad.size

    def rows(self, chunks: np.ndarray, lanes: int) -> np.ndarray:
        """The int32 lanes of ``chunks``, shape ``(k, lanes)`` (zero beyond ``size``)."""
        if lanes != self.lanes:
            raise ValueError(f"lanes encoded in blocks of {self.lanes}, sent in {lanes}")
        chunks = np.asarray(chunks, np.int64)
        vals = self.grad.chunk_values(chunks, lanes)
        ints = quantize.encode(vals.reshape(-1), self.exps[chunks], lanes, self.num_workers)
        return ints.reshape(chunks.size, lanes)
