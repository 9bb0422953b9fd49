"""Fixed-point encoding: the int32 sum of N workers can never overflow; bad floats refused."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ina.host import quantize

ADVERSARIAL = np.array(
    [3.4e38, -3.4e38, 1e38, -1e38, 1.0, -1.0, 1e-45, -1e-45, 1.2e-38, 0.0, -0.0, 65504.0],
    dtype=np.float32,
)


@pytest.mark.parametrize("n_workers", [1, 2, 3, 4, 8, 17, 32])
@pytest.mark.parametrize("block", [1, 4, 64])
def test_adversarial_magnitudes_never_overflow(n_workers, block):
    rng = np.random.default_rng(n_workers)
    xs = [rng.permutation(ADVERSARIAL) for _ in range(n_workers)]
    # everyone agrees on the max exponent per block
    exps = np.max([quantize.block_exponents(x, block) for x in xs], axis=0)
    ints = [quantize.encode(x, exps, block, n_workers).astype(np.int64) for x in xs]
    total = np.sum(ints, axis=0)
    assert np.all(np.abs(total) < 2**31)  # the int32 sum is the true integer sum
    got = quantize.decode(total.astype(np.int32), exps, block, n_workers)
    exact = np.sum(np.asarray(xs, np.float64), axis=0)
    bound = quantize.error_bound(exps, block, n_workers, exact.size)
    assert np.all(np.abs(got - exact) <= bound)


@settings(max_examples=60, deadline=None)
@given(
    arrays(
        np.float32,
        st.integers(1, 300),
        elements=st.floats(allow_nan=False, allow_infinity=False, width=32),
    ),
    st.integers(1, 32),
    st.sampled_from([1, 7, 32, 256]),
)
def test_roundtrip_within_bound(x, n_workers, block):
    exps = quantize.block_exponents(x, block)
    v = quantize.encode(x, exps, block, n_workers)
    assert np.all(np.abs(v.astype(np.int64)) * n_workers < 2**31)
    back = quantize.decode(v, exps, block, n_workers)
    one_rounding = quantize.error_bound(exps, block, n_workers, x.size) / n_workers
    assert np.all(np.abs(back - x) <= one_rounding)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_refused_with_index(bad):
    x = np.zeros(10, np.float32)
    x[6] = bad
    with pytest.raises(ValueError, match="index 6"):
        quantize.check_finite(x)


def test_zero_block_has_zero_exponent_and_encodes_to_zero():
    x = np.zeros(8, np.float32)
    exps = quantize.block_exponents(x, 4)
    assert exps.tolist() == [0, 0]
    assert not quantize.encode(x, exps, 4, 4).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, block", [(1000, 256), (1024, 256), (7, 64), (300, 1)])
def test_numpy_and_torch_encode_bit_for_bit_alike(dtype, n, block):
    """numpy takes its own one-pass route (no padded copy); torch the blocked one: the same
    exponents, integers and decoded values, a short last block included."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(dtype)
    x[: n // 5] = 0.0  # whole zero blocks too
    t = torch.from_numpy(x)
    exps = quantize.block_exponents(x, block)
    assert np.array_equal(exps, quantize.block_exponents(t, block).numpy())
    ints = quantize.encode(x, exps, block, 4)
    assert ints.shape == (n,)
    assert np.array_equal(ints, quantize.encode(t, torch.from_numpy(exps), block, 4).numpy())
    out = quantize.decode(ints, exps, block, 4)
    back = quantize.decode(torch.from_numpy(ints), torch.from_numpy(exps), block, 4).numpy()
    assert out.dtype == np.float64 and np.array_equal(out, back)
