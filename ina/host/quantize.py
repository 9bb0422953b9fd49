"""Float <-> int32 fixed point with a scale all workers agree on (SwitchML's exponent scheme).

Each worker computes, per block of values, the exponent ``e`` with every ``|x| < 2**e``; the
switch MAX-combines the exponents, so every worker scales block ``b`` by the same
``2**(B - E_b)`` with ``B = 30 - ceil(log2(N))``. Then each encoded value has
``|v| <= 2**B`` and the sum of N of them stays within ``N * 2**B <= 2**30`` (``2**31`` for
odd cases): the int32 sum in the switch cannot overflow. Decoding the integer sum is exact;
the only error is each worker's rounding, at most ``2**(E_b - B - 1)`` per value.
"""

from __future__ import annotations

import math

import numpy as np

from ina.protocol import EXP_BIAS, EXP_MAX, EXP_MIN, EXP_ZERO


def mantissa_bits(num_workers: int) -> int:
    """B: encoded values have |v| <= 2**B so that num_workers of them sum without overflow."""
    if num_workers < 1:
        raise ValueError("num_workers must be >= 1")
    return 30 - math.ceil(math.log2(num_workers))


def check_finite(x: np.ndarray) -> None:
    """Raise ValueError naming the first NaN/Inf: they have no fixed-point encoding."""
    bad = ~np.isfinite(x)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"allreduce input has a non-finite value ({x.flat[i]}) at index {i}")


def block_exponents(x: np.ndarray, block: int) -> np.ndarray:
    """Biased exponent of each block of ``block`` values of flat ``x`` (int32, EXP_ZERO for an
    all-zero block). The last block may be short."""
    x = np.asarray(x).reshape(-1)
    n = x.size
    nblocks = -(-n // block)
    full = n // block
    peak = np.zeros(nblocks, dtype=np.float64)
    if full:  # max |x| as max(max x, -min x): two reads, no |x| array
        rows = x[: full * block].reshape(full, block)
        peak[:full] = np.maximum(rows.max(axis=1), -rows.min(axis=1))
    if full < nblocks:
        tail = x[full * block :]
        peak[full] = max(float(tail.max()), -float(tail.min()))
    _, e = np.frexp(peak)  # peak = m * 2**e with 0.5 <= m < 1, so |x| < 2**e
    e = np.clip(e, EXP_MIN, EXP_MAX) + EXP_BIAS
    return np.where(peak > 0, e, EXP_ZERO).astype(np.int32)


def _shifts(biased: np.ndarray, bits: int) -> np.ndarray:
    e = np.where(biased == EXP_ZERO, EXP_MIN + EXP_BIAS, biased).astype(np.int64) - EXP_BIAS
    return bits - e


def _blocks(a: np.ndarray, nblocks: int, block: int) -> np.ndarray:
    """A new float64 (nblocks, block) array of flat ``a``, zero-padded at the end."""
    if a.size == nblocks * block:
        return np.asarray(a).astype(np.float64).reshape(nblocks, block)
    out = np.zeros((nblocks, block), np.float64)
    out.reshape(-1)[: a.size] = a
    return out


def encode(x: np.ndarray, biased_exps: np.ndarray, block: int, num_workers: int) -> np.ndarray:
    """Flat float ``x`` -> int32, block ``b`` scaled by 2**(B - E_b) with the agreed exponents."""
    bits = mantissa_bits(num_workers)
    n = x.size
    nblocks = biased_exps.size
    # times 2**shift: exact (a power of two, |shift| <= 156), the same as np.ldexp, 20x faster
    scaled = _blocks(x, nblocks, block)
    scaled *= np.ldexp(1.0, _shifts(biased_exps, bits))[:, None]
    np.rint(scaled, out=scaled)
    return scaled.astype(np.int32).reshape(-1)[:n]


def decode(v: np.ndarray, biased_exps: np.ndarray, block: int, num_workers: int) -> np.ndarray:
    """int32 sums -> float64 values (the sum over workers, not yet averaged)."""
    bits = mantissa_bits(num_workers)
    n = v.size
    nblocks = biased_exps.size
    out = _blocks(v, nblocks, block)
    out *= np.ldexp(1.0, -_shifts(biased_exps, bits))[:, None]
    return out.reshape(-1)[:n]


def error_bound(biased_exps: np.ndarray, block: int, num_workers: int, n: int) -> np.ndarray:
    """Largest possible |decoded sum - true sum| per value: N roundings of half a step each."""
    bits = mantissa_bits(num_workers)
    step = np.ldexp(1.0, -_shifts(biased_exps, bits))
    return np.repeat(num_workers * step / 2, block)[:n]
