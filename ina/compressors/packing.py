"""Several small integers per int32 lane, so that the switch's plain int32 add sums them all.

A low-bit quantizer (signs, ternary, 4-bit QSGD levels) gives each worker integers in a small
range ``[lo, hi]``. Sending one per int32 lane wastes most of the lane; packing several per
lane is only correct if the switch's sum of the packed lanes still separates into the sums of
the fields. It does when no field's sum over the N workers can spill into the next field:

* each value is offset to ``u = v - lo`` in ``[0, span]``, ``span = hi - lo``; the sum of N of
  them is in ``[0, N * span]``: ``N * span + 1`` possible values, the field's **radix** ``R``;
* a lane holds ``f`` fields as ``u_0 + u_1 R + ... + u_{f-1} R^(f-1)``, and ``f`` is the largest
  count with ``R^f <= 2^32``. The N-worker sum of such lanes is ``sum_i S_i R^i`` with each
  ``S_i <= N * span = R - 1``: a number below ``2^32`` whose base-R digits are exactly the field
  sums. The switch adds lanes modulo ``2^32`` (int32 wrap-around), which loses nothing here,
  since the true sum is below ``2^32``; read as uint32 it is the true sum;
* where binary fields of ``w = bit_length(N * span)`` bits fit as many fields into a lane, the
  radix is ``2^w`` (shifts and masks, cheaper to decode). For ``span = 2^b - 1`` and N a power of
  two that is the rule "b value bits + log2 N headroom bits per field"; in general the headroom
  is ``w - b = ceil(log2 N)`` bits or a little less. A mixed radix ``N * span + 1`` packs more
  where it matters (signs for 5 workers: 12 fields per lane against 8 binary ones).

No packing whose lanes are decoded one at a time can do better: the sum of one lane has at most
``2^32`` values and must tell apart ``R^f`` combinations of field sums, so ``f <= log_R 2^32``;
this packing takes exactly that many. Fields never straddle two lanes, because the switch drops
a lane's carry: a straddling field's low part would lose its top bits.

`Packing.for_range` refuses what would carry (a requested field count with ``R^f > 2^32``, a
range whose N-worker sum needs more than 32 bits) and `Packing.pack` refuses values outside
``[lo, hi]``: a value out of range is the one way a field sum could spill into its neighbour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LANE_BITS = 32
_LANE_VALUES = 1 << LANE_BITS


def max_fields(radix: int) -> int:
    """The most fields of ``radix`` whose combined value stays below ``2^32``."""
    if radix < 2:
        return LANE_BITS  # a field that is always 0 needs no room; cap at one per bit anyway
    f = 0
    while radix ** (f + 1) <= _LANE_VALUES:
        f += 1
    return f


@dataclass(frozen=True)
class Packing:
    """How one worker's integers in ``[lo, hi]`` travel, ``fields`` per int32 lane, so that the
    switch's int32 sum over ``num_workers`` workers decodes to the exact field sums."""

    lo: int
    hi: int
    num_workers: int
    fields: int  # per lane
    radix: int  # base of a lane's digits: > num_workers * (hi - lo)
    shift: int  # log2(radix) when the radix is a power of two (fast path), else 0

    @classmethod
    def for_range(cls, lo: int, hi: int, num_workers: int, fields: int | None = None) -> Packing:
        """The packing for values in ``[lo, hi]`` summed over ``num_workers``; ``fields`` per
        lane if given (ValueError if that many would carry), else as many as fit."""
        lo, hi = int(lo), int(hi)
        if hi < lo:
            raise ValueError(f"empty range [{lo}, {hi}]")
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        top = num_workers * (hi - lo)  # largest field sum
        if top >= _LANE_VALUES:
            raise ValueError(
                f"values in [{lo}, {hi}] summed over {num_workers} workers need "
                f"{top.bit_length()} bits, more than a {LANE_BITS}-bit lane"
            )
        exact = top + 1
        w = max(top.bit_length(), 1)
        most = max_fields(exact)
        if fields is None:
            fields = most
        if not 1 <= fields <= most:
            raise ValueError(
                f"{fields} fields per lane for values in [{lo}, {hi}] and {num_workers} "
                f"workers would carry across fields: each field needs radix {exact} "
                f"({math.log2(exact):.2f} bits), so at most {most} fit in {LANE_BITS} bits"
            )
        if fields * w <= LANE_BITS:  # binary fields fit as many: shifts and masks
            return cls(lo, hi, num_workers, fields, 1 << w, w)
        return cls(lo, hi, num_workers, fields, exact, 0)

    @property
    def span(self) -> int:
        return self.hi - self.lo

    @property
    def bits_per_value(self) -> float:
        """Lane bits per packed value (headers not included)."""
        return LANE_BITS / self.fields

    def lanes(self, n: int) -> int:
        """Lanes that carry ``n`` values."""
        return -(-n // self.fields)

    def pack(self, values: np.ndarray) -> np.ndarray:
        """int32 lanes carrying ``values`` (integers in ``[lo, hi]``), ``fields`` per lane.

        Field ``i`` of lane ``j`` is value ``j * fields + i``; the last lane is padded with
        ``lo`` (offset 0).
        """
        v = np.asarray(values).reshape(-1)
        if v.size and (v.min() < self.lo or v.max() > self.hi):
            bad = int(np.flatnonzero((v < self.lo) | (v > self.hi))[0])
            raise ValueError(
                f"value {int(v[bad])} at index {bad} is outside [{self.lo}, {self.hi}]: "
                "its sum could carry into the next field"
            )
        L = self.lanes(v.size)
        u = np.zeros(L * self.fields, np.uint32)
        np.subtract(v, self.lo, out=u[: v.size], casting="unsafe")
        u = u.reshape(L, self.fields)
        out = u[:, -1].copy()
        for i in range(self.fields - 2, -1, -1):  # Horner: ((u_{f-1} R + u_{f-2}) R + ...)
            if self.shift:
                out <<= np.uint32(self.shift)
                out |= u[:, i]
            else:
                out *= np.uint32(self.radix)
                out += u[:, i]
        return out.view(np.int32)

    def unpack(self, lanes: np.ndarray, n: int, count: int | None = None) -> np.ndarray:
        """The field sums (int64, ``n`` of them) from lanes summed over ``count`` workers
        (default ``num_workers``; 1 decodes one worker's own lanes)."""
        count = self.num_workers if count is None else count
        if not 0 <= count <= self.num_workers:
            raise ValueError(f"count must be in [0, {self.num_workers}], got {count}")
        t = np.ascontiguousarray(lanes, np.int32).view(np.uint32).copy()
        if t.size != self.lanes(n):
            raise ValueError(f"{t.size} lanes cannot carry {n} values ({self.lanes(n)} needed)")
        out = np.empty((t.size, self.fields), np.int64)
        if self.shift:
            mask = np.uint32(self.radix - 1)
            for i in range(self.fields):
                out[:, i] = t & mask
                if i + 1 < self.fields:  # never shift by the full 32 bits
                    t >>= np.uint32(self.shift)
        else:
            r = np.uint32(self.radix)
            for i in range(self.fields):
                q = t // r
                out[:, i] = t - q * r
                t = q
        out = out.reshape(-1)[:n]
        out += count * self.lo
        return out
