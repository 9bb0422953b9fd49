"""Index bitmaps: pack/unpack round trips, layout, and OR of packed == packed OR.

Every test runs on each array library of the codec (numpy, torch on the CPU, torch on CUDA
when present): the words must be the same bits.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.host.arrays import ops
from ina.host.compression import bitmap

masks = st.lists(st.booleans(), min_size=0, max_size=300).map(lambda b: np.array(b, np.bool_))


def host(a):
    return ops(a).to_host(a)


@settings(max_examples=60, deadline=None)
@given(masks)
def test_round_trip(arraylib, mask):
    words = bitmap.pack(arraylib.to(mask))
    assert host(words).dtype == np.int32
    assert host(words).size == bitmap.num_words(mask.size)
    np.testing.assert_array_equal(host(bitmap.unpack(words, mask.size)), mask)
    np.testing.assert_array_equal(host(bitmap.positions(words, mask.size)), np.flatnonzero(mask))
    assert bitmap.popcount(words) == mask.sum()
    from_indices = bitmap.pack_indices(arraylib.to(np.flatnonzero(mask)), mask.size)
    np.testing.assert_array_equal(host(from_indices), host(words))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 200), st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=6))
def test_or_of_packed_is_packed_or(arraylib, n, seeds):
    rng = [np.random.default_rng(s) for s in seeds]
    ms = [r.random(n) < r.random() for r in rng]
    ored = np.bitwise_or.reduce(np.stack([host(bitmap.pack(arraylib.to(m))) for m in ms]), axis=0)
    np.testing.assert_array_equal(
        host(bitmap.unpack(arraylib.to(ored), n)), np.logical_or.reduce(ms)
    )


def test_layout_lsb_first_and_sign_bit(arraylib):
    mask = np.zeros(64, np.bool_)
    mask[[0, 31, 33]] = True
    expected = [1 | -(2**31), 2]  # bit 31 of word 0 is the int32 sign bit
    assert host(bitmap.pack(arraylib.to(mask))).tolist() == expected
    assert host(bitmap.pack_indices(arraylib.to(np.array([0, 31, 33])), 64)).tolist() == expected


def test_padding_is_zero_and_non_bool_input(arraylib):
    words = bitmap.pack(arraylib.to(np.ones(33, np.int8)))
    assert host(words).tolist() == [-1, 1]
    assert bitmap.num_words(0) == 0 and host(bitmap.pack(arraylib.to(np.zeros(0, bool)))).size == 0


def test_positions_ignore_padding_bits(arraylib):
    """Bits past ``n`` (which a correct peer never sets) are not positions."""
    words = arraylib.to(np.array([-1, -1], np.int32))
    assert host(bitmap.positions(words, 40)).tolist() == list(range(40))
    assert host(bitmap.unpack(words, 40)).sum() == 40


def test_views_at_odd_offsets(arraylib):
    """A mask or words viewed out of a larger buffer (not aligned to 8 bytes) pack the same."""
    rng = np.random.default_rng(1)
    big = arraylib.to(rng.random(200) < 0.3)
    words = bitmap.pack(big[3:131])
    expected = np.packbits(host(big)[3:131], bitorder="little").view("<i4")
    np.testing.assert_array_equal(host(words), expected)
    buffer = arraylib.to(np.concatenate([[7], expected]).astype(np.int32))
    np.testing.assert_array_equal(
        host(bitmap.positions(buffer[1:], 128)), np.flatnonzero(host(big)[3:131])
    )


def test_large_bitmap_matches_numpy(arraylib):
    rng = np.random.default_rng(0)
    mask = rng.random(1 << 20) < 0.05
    words = bitmap.pack(arraylib.to(mask))
    np.testing.assert_array_equal(host(words), np.packbits(mask, bitorder="little").view("<i4"))
    np.testing.assert_array_equal(host(bitmap.positions(words, mask.size)), np.flatnonzero(mask))


def test_bad_shapes():
    with pytest.raises(ValueError):
        bitmap.pack(np.zeros((2, 2), bool))
    with pytest.raises(ValueError):
        bitmap.unpack(np.zeros(3, np.int32), 64)
    with pytest.raises(ValueError):
        bitmap.num_words(-1)
