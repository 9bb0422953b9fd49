"""Float <-> int32 fixed point with a scale all workers agree on (SwitchML's exponent scheme).

Each worker computes, per block of values, the exponent ``e`` with every ``|x| < 2**e``; the
switch MAX-combines the exponents, so every worker scales block ``b`` by the same
``2**(B - E_b)`` with ``B = 30 - ceil(log2(N))``. Then each encoded value has
``|v| <= 2**B`` and the sum of N of them stays within ``N * 2**B <= 2**30`` (``2**31`` for
odd cases): the int32 sum in the switch cannot overflow. Decoding the integer sum is exact;
the only error is each worker's rounding, at most ``2**(E_b - B - 1)`` per value.

The functions take numpy arrays or torch tensors on any device and answer in kind
(`ina.host.arrays`), bit for bit the same: scaling is a multiplication by a power of two
built from its bits (exact: every scale and every scaled value here is a normal float64),
and rounding is to the nearest integer, halves to even, on both.
"""

from __future__ import annotations

import math

import numpy as np

from ina.errors import NonFiniteError
from ina.host.arrays import Array, ops
from ina.protocol import EXP_BIAS, EXP_MAX, EXP_MIN, EXP_ZERO


def mantissa_bits(num_workers: int) -> int:
    """B: encoded values have |v| <= 2**B so that num_workers of them sum without overflow."""
    if num_workers < 1:
        raise ValueError("num_workers must be >= 1")
    return 30 - math.ceil(math.log2(num_workers))


def check_finite(x: Array) -> None:
    """Raise `NonFiniteError` (a ValueError) naming the first NaN/Inf: they have no
    fixed-point encoding."""
    xp = ops(x)
    flat = x.reshape(-1)
    bad = ~xp.isfinite(flat)
    if xp.any(bad):
        i = int(xp.nonzero(bad)[0])
        raise NonFiniteError(
            f"allreduce input has a non-finite value ({float(flat[i])}) at index {i}"
        )


def _blocks(xp, x: Array, block: int, dtype=None) -> Array:
    """Flat ``x`` as float64 (or ``dtype``), zero-padded to whole blocks, shape (blocks,
    block); ``x`` itself (not a copy) if it has that type and fills its blocks: callers never
    write to it."""
    dtype = xp.float64 if dtype is None else dtype
    n = xp.size(x)
    nblocks = -(-n // block)
    if nblocks * block == n:
        return xp.astype(x.reshape(nblocks, block), dtype)
    padded = xp.zeros(nblocks * block, dtype)
    padded[:n] = x.reshape(-1)
    return padded.reshape(nblocks, block)


def _scale_numpy(x: np.ndarray, scale: np.ndarray, block: int, out: np.ndarray) -> np.ndarray:
    """``out[i] = x[i] * scale[i // block]`` in float64 for flat numpy ``x``, in one pass:
    the whole blocks through a (blocks, block) view, a short last block on its own (no
    padded float64 copy of ``x`` first; widening inside the multiply is exact)."""
    n = x.size
    whole = n // block
    m = whole * block
    np.multiply(x[:m].reshape(whole, block), scale[:whole, None], out=out[:m].reshape(whole, block))
    if m < n:
        np.multiply(x[m:], scale[whole], out=out[m:])
    return out


def _block_peaks_numpy(a: np.ndarray, block: int) -> np.ndarray:
    """The largest of each block of flat numpy ``a``, as float64 (a short last block on its
    own: no padded copy)."""
    n = a.size
    whole = n // block
    m = whole * block
    peaks = np.empty(-(-n // block), np.float64)
    peaks[:whole] = a[:m].reshape(whole, block).max(axis=1)
    if m < n:
        peaks[whole] = a[m:].max()
    return peaks


def _is_float(x: Array) -> bool:
    dtype = x.dtype
    floating = getattr(dtype, "is_floating_point", None)  # a torch dtype
    return floating if floating is not None else dtype.kind == "f"


def block_exponents(x: Array, block: int) -> Array:
    """Biased exponent of each block of ``block`` values of flat ``x`` (int32, EXP_ZERO for an
    all-zero block). The last block may be short."""
    xp = ops(x)
    # |x| and the maximum are exact in x's own float type, and so is widening the peaks to
    # float64: the same peaks as in float64, without widening every value first
    native = x.dtype if _is_float(x) else None
    if isinstance(x, np.ndarray):
        flat = x.reshape(-1) if native is not None else x.reshape(-1).astype(np.float64)
        peak = _block_peaks_numpy(np.abs(flat), block)
    else:
        peak = xp.astype(xp.amax(xp.abs(_blocks(xp, x, block, native)), 1), xp.float64)
    # peak = m * 2**e with 0.5 <= m < 1, so |x| < 2**e
    e = xp.clip(xp.frexp_exponent(peak), EXP_MIN, EXP_MAX) + EXP_BIAS
    return xp.astype(xp.where(peak > 0, e, EXP_ZERO), xp.int32)


def _shifts(biased: Array, bits: int) -> Array:
    xp = ops(biased)
    e = xp.astype(xp.where(biased == EXP_ZERO, EXP_MIN + EXP_BIAS, biased), xp.int64) - EXP_BIAS
    return bits - e


def _pow2(shifts: Array) -> Array:
    """``2.0 ** shifts`` (float64), exact: the bits of the double, biased exponent above a zero
    mantissa. Shifts stay within [B - 128, B + 126], far inside the normal range, so that
    ``x * _pow2(s)`` is ``ldexp(x, s)``, several times faster than numpy's ldexp loop."""
    xp = ops(shifts)
    bits = (xp.astype(shifts, xp.int64).reshape(-1) + 1023) << 52
    return xp.view(bits, xp.float64).reshape(shifts.shape)


def encode(x: Array, biased_exps: Array, block: int, num_workers: int) -> Array:
    """Flat float ``x`` -> int32, block ``b`` scaled by 2**(B - E_b) with the agreed exponents."""
    xp = ops(x)
    biased_exps = xp.asarray(biased_exps)
    shifts = _shifts(biased_exps, mantissa_bits(num_workers))
    if isinstance(x, np.ndarray):
        scaled = _scale_numpy(x.reshape(-1), _pow2(shifts), block, np.empty(x.size))
        return np.rint(scaled, out=scaled).astype(np.int32)
    blocks, scale = _blocks(xp, x, block), _pow2(shifts.reshape(-1, 1))
    return xp.astype(xp.rint(blocks * scale), xp.int32).reshape(-1)[: xp.size(x)]


def decode(v: Array, biased_exps: Array, block: int, num_workers: int) -> Array:
    """int32 sums -> float64 values (the sum over workers, not yet averaged)."""
    xp = ops(v)
    biased_exps = xp.asarray(biased_exps)
    shifts = _shifts(biased_exps, mantissa_bits(num_workers))
    if isinstance(v, np.ndarray):
        return _scale_numpy(v.reshape(-1), _pow2(-shifts), block, np.empty(v.size))
    blocks, scale = _blocks(xp, v, block), _pow2(-shifts.reshape(-1, 1))
    return (blocks * scale).reshape(-1)[: xp.size(v)]


def error_bound(biased_exps: Array, block: int, num_workers: int, n: int) -> Array:
    """Largest possible |decoded sum - true sum| per value: N roundings of half a step each."""
    xp = ops(biased_exps)
    shifts = _shifts(biased_exps, mantissa_bits(num_workers))
    step = _pow2(-shifts)
    return xp.repeat(num_workers * step / 2, block)[:n]
