"""Packing of small integers into int32 lanes with headroom for N workers' sums.

The switch adds lanes as int32 with wrap-around; a packing is correct when the unpacked sum
of the packed lanes equals the sum of the unpacked values, for every input in range and every
worker count, including all workers at the top of the range (the largest field sums).
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.compressors.packing import LANE_BITS, Packing, max_fields
from ina.host.compression import combine
from ina.protocol import HEADER_BYTES, Op

RANGES = [(0, 1), (-1, 1), (-7, 7), (0, 15), (-8, 7), (-127, 127), (0, 1000), (-(2**14), 2**14)]


def switch_sum(lanes_per_worker):
    return combine(Op.SUM, lanes_per_worker)  # int32 wrap-around, as the switch adds


def check_exact(pack: Packing, values_per_worker):
    lanes = [pack.pack(v) for v in values_per_worker]
    n = values_per_worker[0].size
    got = pack.unpack(switch_sum(lanes), n, count=len(values_per_worker))
    want = np.sum(np.stack(values_per_worker).astype(np.int64), axis=0)
    assert np.array_equal(got, want)
    for v, lane in zip(values_per_worker, lanes, strict=True):  # one worker's own lanes too
        assert np.array_equal(pack.unpack(lane, n, count=1), v)


@pytest.mark.parametrize("lo,hi", RANGES)
@pytest.mark.parametrize("workers", [1, 2, 3, 5, 8, 16, 17, 31, 32])
def test_sums_exact_at_the_extremes(lo, hi, workers):
    pack = Packing.for_range(lo, hi, workers)
    n = 3 * pack.fields + 1  # a short last lane too
    rng = np.random.default_rng(workers * 1000 + hi)
    check_exact(pack, [np.full(n, hi) for _ in range(workers)])  # largest field sums
    check_exact(pack, [np.full(n, lo) for _ in range(workers)])
    check_exact(pack, [rng.integers(lo, hi, n, endpoint=True) for _ in range(workers)])
    extremes = [rng.choice([lo, hi], n) for _ in range(workers)]
    check_exact(pack, extremes)


@settings(max_examples=60, deadline=None)
@given(
    lo=st.integers(-(2**20), 2**20),
    span=st.integers(0, 2**16),
    workers=st.integers(1, 32),
    n=st.integers(0, 200),
    seed=st.integers(0, 2**32 - 1),
)
def test_sums_exact_random(lo, span, workers, n, seed):
    pack = Packing.for_range(lo, lo + span, workers)
    rng = np.random.default_rng(seed)
    vals = [rng.integers(lo, lo + span, n, endpoint=True) for _ in range(workers)]
    check_exact(pack, vals)


@pytest.mark.parametrize("lo,hi", RANGES)
@pytest.mark.parametrize("workers", range(1, 33))
def test_as_many_fields_as_any_per_lane_packing(lo, hi, workers):
    """f fields need (N span + 1)^f distinct lane sums: f is the most that 2^32 allows, and
    never fewer than binary fields of b + ceil(log2 N) bits (the headroom rule)."""
    pack = Packing.for_range(lo, hi, workers)
    radix = workers * (hi - lo) + 1
    assert radix**pack.fields <= 2**32 < radix ** (pack.fields + 1) or pack.fields == 32
    b = max(1, (hi - lo).bit_length())
    h = math.ceil(math.log2(workers)) if workers > 1 else 0
    assert pack.fields >= LANE_BITS // (b + h)
    if (hi - lo) == 2**b - 1 and workers == 2**h and pack.fields == LANE_BITS // (b + h):
        assert pack.shift == b + h  # the plain rule: fields of b + log2 N bits, shifts


def test_refuses_what_would_carry():
    most = Packing.for_range(0, 15, 16).fields
    assert most == 4  # 8-bit fields: 4 value bits + 4 headroom bits
    Packing.for_range(0, 15, 16, fields=most)
    with pytest.raises(ValueError, match="would carry across fields"):
        Packing.for_range(0, 15, 16, fields=most + 1)
    with pytest.raises(ValueError, match="would carry across fields"):
        Packing.for_range(-1, 1, 32, fields=6)  # 6 x log2(65) = 36.1 bits > 32
    with pytest.raises(ValueError, match="more than a 32-bit lane"):
        Packing.for_range(0, 2**31, 2)  # one field alone overflows
    with pytest.raises(ValueError, match="empty range"):
        Packing.for_range(1, 0, 2)
    pack = Packing.for_range(-7, 7, 8)
    with pytest.raises(ValueError, match=r"value 8 at index 2 is outside \[-7, 7\]"):
        pack.pack(np.array([0, 7, 8]))
    with pytest.raises(ValueError, match="outside"):
        pack.pack(np.array([-8]))
    with pytest.raises(ValueError, match="lanes cannot carry"):
        pack.unpack(np.zeros(3, np.int32), 1)


def test_less_headroom_would_carry():
    """The radix rule is tight: one less, and N workers at the top of the range spill."""
    workers, lo, hi = 8, 0, 15
    ok = Packing.for_range(lo, hi, workers)
    tight = Packing(lo, hi, workers, ok.fields, workers * (hi - lo), 0)  # radix one too small
    vals = [np.full(ok.fields, hi) for _ in range(workers)]
    summed = switch_sum([tight.pack(v) for v in vals])
    assert not np.array_equal(tight.unpack(summed, ok.fields), np.sum(vals, axis=0))
    check_exact(ok, vals)


def test_four_bit_method_bits_per_value():
    """A 4-bit value (QSGD with 7 levels a side, integers in [-7, 7]) per worker: bits on the
    wire per value, lanes and the INA header of a 256-lane packet, for N up to 32."""
    header_share = 8 * HEADER_BYTES / 256  # header bits per lane of a full packet
    for workers in range(2, 33):
        pack = Packing.for_range(-7, 7, workers)
        bits = pack.bits_per_value * (1 + header_share / LANE_BITS)
        # the best any per-lane packing can do: floor(32 / log2(14 N + 1)) fields per lane
        best = LANE_BITS / math.floor(LANE_BITS / math.log2(14 * workers + 1))
        assert pack.bits_per_value == pytest.approx(best)
        # binary fields of 4 + ceil(log2 N) bits never beat it
        w = 4 + math.ceil(math.log2(workers))
        assert pack.bits_per_value <= LANE_BITS / (LANE_BITS // w)
        if workers in (16, 17, 18):  # where 4 + log2 N bits per field fill the lane
            assert bits <= 4 + math.log2(workers) + header_share / pack.fields
        check_exact(pack, [np.full(pack.fields * 4 + 3, 7) for _ in range(workers)])
        check_exact(pack, [np.full(pack.fields * 4 + 3, -7) for _ in range(workers)])


def test_max_fields():
    assert max_fields(2) == 32 and max_fields(3) == 20 and max_fields(2**16) == 2
    assert max_fields(2**16 + 1) == 1 and max_fields(2**32) == 1 and max_fields(1) == 32
