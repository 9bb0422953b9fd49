"""Index bitmaps: pack/unpack round trips, layout, and OR of packed == packed OR."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.host.compression import bitmap

masks = st.lists(st.booleans(), min_size=0, max_size=300).map(lambda b: np.array(b, np.bool_))


@settings(max_examples=100, deadline=None)
@given(masks)
def test_round_trip(mask):
    words = bitmap.pack(mask)
    assert words.dtype == np.int32
    assert words.size == bitmap.num_words(mask.size)
    np.testing.assert_array_equal(bitmap.unpack(words, mask.size), mask)
    np.testing.assert_array_equal(bitmap.positions(words, mask.size), np.flatnonzero(mask))
    assert bitmap.popcount(words) == mask.sum()


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 200), st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=6))
def test_or_of_packed_is_packed_or(n, seeds):
    rng = [np.random.default_rng(s) for s in seeds]
    ms = [r.random(n) < r.random() for r in rng]
    ored = np.bitwise_or.reduce(np.stack([bitmap.pack(m) for m in ms]), axis=0)
    np.testing.assert_array_equal(bitmap.unpack(ored, n), np.logical_or.reduce(ms))


def test_layout_lsb_first_and_sign_bit():
    mask = np.zeros(64, np.bool_)
    mask[[0, 31, 33]] = True
    words = bitmap.pack(mask)
    assert words.tolist() == [1 | -(2**31), 2]  # bit 31 of word 0 is the int32 sign bit


def test_padding_is_zero_and_non_bool_input():
    words = bitmap.pack(np.ones(33, np.int8))
    assert words.tolist() == [-1, 1]
    assert bitmap.num_words(0) == 0 and bitmap.pack(np.zeros(0, bool)).size == 0


def test_bad_shapes():
    with pytest.raises(ValueError):
        bitmap.pack(np.zeros((2, 2), bool))
    with pytest.raises(ValueError):
        bitmap.unpack(np.zeros(3, np.int32), 64)
    with pytest.raises(ValueError):
        bitmap.num_words(-1)
