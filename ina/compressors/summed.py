"""Templates for methods the switch sums: agree (MAX), encode integers, SUM packed, decode.

A quantizer is summable in the switch when every worker encodes with the *same* parameters
(a norm, a scale, an exponent): then the sum of the integers is the integer of the sum and
one decode of the switch's sum gives the aggregate. `SummedQuantizer` is that recipe:

1. ``statistics(x)``: int32 lanes to agree on (a float's bit pattern, a block exponent) or
   ``None`` if the method needs no agreement; one MAX round (`agree_max_steps`) makes them
   the same on every worker;
2. ``encode(x, agreed)``: the `Field` s of integers (each in a documented range) and the
   context that decodes them;
3. one SUM round of the fields, packed with headroom (`sum_fields_steps`);
4. ``decode(sums, ctx, count)``: linear in the integers, so decoding one worker's own
   integers (count 1) gives its contribution and decoding the sum gives the aggregate.
   Methods whose shared parameter is itself a sum (a mean scale, `efsignsgd`, `onebit`) send
   it in the same SUM round and decode each worker's contribution with it (``decode_own``).

`dense_steps` is the int32 fixed-point allreduce of a float vector with per-block exponents
agreed by MAX (SwitchML's scheme, `ina.host.quantize`): the baseline, and the transport of
random-k's values and of PowerSGD's factors.
"""

from __future__ import annotations

import abc
from collections.abc import Hashable, Sequence
from dataclasses import replace

import numpy as np

from ina.compressors.base import (
    Compressor,
    Context,
    Field,
    Outcome,
    agree_max_steps,
    float_input,
    restore,
    sum_fields_steps,
)
from ina.host import quantize
from ina.host.rounds import Steps
from ina.protocol import EXP_BIAS, EXP_MIN, EXP_ZERO


class SummedQuantizer(Compressor):
    """A quantizer whose integers the switch sums (see the module docstring)."""

    def statistics(self, flat: np.ndarray) -> np.ndarray | None:
        """int32 lanes every worker must agree on by MAX before encoding (None: none)."""
        return None

    @abc.abstractmethod
    def encode(
        self, flat: np.ndarray, agreed: np.ndarray | None, key: Hashable, step: int
    ) -> tuple[list[Field], Context]:
        """This worker's integer fields with the agreed parameters, and their context."""

    @abc.abstractmethod
    def decode(self, ints: Sequence[np.ndarray], ctx: Context, count: int) -> np.ndarray:
        """Flat float64 values from the integers of ``count`` workers (summed)."""

    def decode_own(
        self, own: Sequence[np.ndarray], sums: Sequence[np.ndarray], ctx: Context
    ) -> np.ndarray:
        """This worker's contribution, as counted in the aggregate: its own integers decoded
        (parameters the sum itself agrees on, such as a mean scale, come from ``sums``)."""
        return self.decode(own, ctx, 1)

    def compress(self, tensor, key: Hashable = "") -> tuple[tuple[np.ndarray, ...], Context]:
        """GRACE's compress: this worker alone, its own statistics as the agreed ones."""
        _, flat = float_input(tensor)
        fields, ctx = self.encode(flat, self.statistics(flat), key, self._next_step(key))
        ctx = _with_shape(ctx, tensor)
        return tuple(np.asarray(f.values, np.int64) for f in fields), ctx

    def decompress(self, payload: Sequence[np.ndarray], ctx: Context) -> np.ndarray:
        return restore(self.decode(payload, ctx, 1), ctx)

    def _reduce_steps(
        self, flat: np.ndarray, key: Hashable, step: int, shape: tuple[int, ...]
    ) -> Steps[Outcome]:
        stats = self.statistics(flat)
        agreed = None if stats is None else (yield from agree_max_steps(stats, flat.size))
        fields, ctx = self.encode(flat, agreed, key, step)
        sums = yield from sum_fields_steps(fields, self.num_workers)
        own = tuple(np.asarray(f.values, np.int64) for f in fields)
        return Outcome(
            total=self.decode(sums, ctx, self.num_workers),
            sent=self.decode_own(own, sums, ctx),
            encoded=own,
            summed=sums,
        )


def _with_shape(ctx: Context, tensor) -> Context:
    """``ctx`` with the caller's shape and dtype (encode sees the flat float64 copy)."""
    x = np.asarray(tensor)
    return replace(ctx, shape=tuple(x.shape), dtype=x.dtype.str)


def exponent_scale(biased: np.ndarray) -> np.ndarray:
    """``2**E`` for agreed biased block exponents (every ``|x| < 2**E``); an all-zero block
    (EXP_ZERO on every worker) gets the smallest scale, its values are all 0 anyway."""
    e = np.where(biased == EXP_ZERO, EXP_MIN + EXP_BIAS, biased).astype(np.int64) - EXP_BIAS
    return np.ldexp(1.0, e)


def dense_steps(
    values: np.ndarray, block: int, num_workers: int
) -> Steps[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Sum a float vector over workers as int32 fixed point with agreed block exponents.

    Rounds: MAX of the block exponents, SUM of the int32 values (``|v| <= 2^B``,
    B = 30 - ceil(log2 N): N of them cannot overflow). Returns ``(total, sent, ints, sums)``:
    the decoded sum, this worker's decoded values, its integers and the switch's sums.
    """
    v = np.asarray(values, np.float64).reshape(-1)
    exps = quantize.block_exponents(v, block) if v.size else np.zeros(0, np.int32)
    exps = yield from agree_max_steps(exps, v.size)
    q = quantize.encode(v, exps, block, num_workers).astype(np.int64)
    one = 1 << quantize.mantissa_bits(num_workers)
    (sums,) = yield from sum_fields_steps([Field(q, -one, one)], num_workers)
    total = quantize.decode(sums, exps, block, num_workers)
    sent = quantize.decode(q, exps, block, num_workers)
    return total, sent, q, sums
