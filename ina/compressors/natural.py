"""``natural``: natural compression (Horváth et al., 2019): stochastic rounding to powers of
two. The switch cannot add it, so it takes the all-gather path.

A value ``x = ±2^e (1 + m)`` (``0 <= m < 1``) becomes ``±2^(e+1)`` with probability ``m`` and
``±2^e`` otherwise: unbiased, at most 9/8 the variance. Each worker sends 8 bits per value: a
sign bit and a 7-bit exponent code relative to its own largest exponent ``E`` (code ``c >= 1``
means ``2^(E - 127 + c)``, 0 means zero; values below ``2^(E - 126)`` are rounded
stochastically to 0 or ``2^(E - 126)``, still unbiased), four codes to a lane, plus ``E``.

Why not in the switch: the sum of powers of two is not a power of two, and exponents do not
add; summing the decoded values exactly is the dense int32 path (32 bits per value). So the
codes are **all-gathered**: one SUM round in which worker ``w`` fills slice ``w`` of ``N``
slices and zeros elsewhere; the switch's sum is the concatenation, each worker decodes all N
payloads and adds them. Honest cost: every worker sends (and receives) N payloads, ``8 N``
bits per value: less than dense int32 only for N < 4. Memory: none (unbiased).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from ina.compressors.base import (
    Aggregation,
    Compressor,
    Context,
    Outcome,
    allgather_steps,
    context,
    float_input,
    register,
    restore,
)
from ina.host.rounds import Steps

_CODES = 127  # exponent codes 1..127; 0 is zero


@dataclass(frozen=True)
class NaturalContext(Context):
    numel: int


@dataclass(frozen=True)
class NaturalPayload:
    """One worker's codes: ``sign << 7 | c`` per value, and its top exponent."""

    codes: np.ndarray  # uint8
    top: int  # E: every value is at most 2^E


def _round_to_powers(x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Exponents ``k`` of the stochastically rounded ``|x|`` and their max ``E`` (zeros get an
    exponent far below any code)."""
    m, e = np.frexp(np.abs(x))  # |x| = m 2^e, 0.5 <= m < 1: 2^(e-1) (1 + (2m - 1))
    up = rng.random(x.size) < 2 * m - 1
    k = (e - 1 + up).astype(np.int64)
    nz = x != 0
    top = int(k[nz].max()) if nz.any() else 0
    return np.where(nz, k, top - 2 * _CODES), top


def encode(x: np.ndarray, rng: np.random.Generator) -> NaturalPayload:
    """Natural compression of flat ``x`` to 8-bit codes."""
    k, top = _round_to_powers(x, rng)
    low = top - (_CODES - 1)  # smallest exponent with a code (c = 1)
    c = np.clip(k - low + 1, 0, _CODES)
    tiny = (k < low) & (x != 0)  # below 2^low: 0 or 2^low, unbiased
    if tiny.any():
        p = np.abs(x[tiny]) / np.ldexp(1.0, low)
        c[tiny] = rng.random(p.size) < p
    codes = (c | ((x < 0) << 7)).astype(np.uint8)
    return NaturalPayload(codes, top)


def decode(p: NaturalPayload) -> np.ndarray:
    """float64 values of a payload."""
    c = (p.codes & 0x7F).astype(np.int64)
    mag = np.where(c > 0, np.ldexp(1.0, p.top - _CODES + c), 0.0)
    return np.where(p.codes >> 7, -mag, mag)


def to_lanes(p: NaturalPayload) -> np.ndarray:
    """int32 lanes: the top exponent, then the codes four to a lane (zero-padded)."""
    codes = np.zeros(-(-p.codes.size // 4) * 4, np.uint8)
    codes[: p.codes.size] = p.codes
    return np.concatenate([np.array([p.top], np.int32), codes.view(np.int32)])


def from_lanes(lanes: np.ndarray, n: int) -> NaturalPayload:
    lanes = np.ascontiguousarray(lanes, np.int32)
    return NaturalPayload(lanes[1:].view(np.uint8)[:n].copy(), int(lanes[0]))


@register("natural")
class Natural(Compressor):
    """Stochastic rounding to powers of two, all-gathered."""

    aggregation = Aggregation.ALLGATHER
    memory = "none"
    summary = "sign + 7-bit exponent; sums of powers of two are not codes: all-gather"

    def compress(self, tensor, key: Hashable = "") -> tuple[NaturalPayload, NaturalContext]:
        _, flat = float_input(tensor)
        p = encode(flat, self.rng(key, self._next_step(key)))
        return p, NaturalContext(**context(tensor), numel=flat.size)

    def decompress(self, payload: NaturalPayload, ctx: NaturalContext) -> np.ndarray:
        return restore(decode(payload), ctx)

    def _reduce_steps(
        self, flat: np.ndarray, key: Hashable, step: int, shape: tuple[int, ...]
    ) -> Steps[Outcome]:
        mine = to_lanes(encode(flat, self.rng(key, step)))
        rows = yield from allgather_steps(mine, self.num_workers, self.worker)
        values = [decode(from_lanes(r, flat.size)) for r in rows]
        total = np.sum(values, axis=0) if values else np.zeros(flat.size)
        everyone = rows.reshape(-1).astype(np.int64)  # the concatenation of all payloads
        return Outcome(total, values[self.worker], (mine.astype(np.int64),), (everyone,))
