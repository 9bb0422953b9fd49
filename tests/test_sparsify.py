"""Sparsifiers (registry, top-k, random-k) and error-feedback memory."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.host.compression import sparsify
from ina.host.compression.sparsify import Memory, SparsifyCompressor, num_kept

densities = st.sampled_from([0.0001, 0.001, 0.01, 0.05, 0.1, 0.5, 1.0])


def test_registry():
    assert {"topk", "randk"} <= set(sparsify.SPARSIFIERS)
    assert isinstance(sparsify.make_sparsifier("topk"), sparsify.TopK)
    assert sparsify.make_sparsifier("randk", seed=3, shared=False).shared is False
    with pytest.raises(ValueError, match="unknown sparsifier"):
        sparsify.make_sparsifier("nope")
    with pytest.raises(ValueError, match="twice"):
        sparsify.register("topk")(sparsify.TopK)


def test_num_kept():
    assert num_kept(1000, 0.05) == 50
    assert num_kept(1000, 0.0001) == 1  # at least one
    assert num_kept(1001, 1.0) == 1001 and num_kept(0, 0.5) == 0
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError):
            num_kept(10, bad)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5000), densities, st.integers(0, 2**32 - 1))
def test_topk_selects_the_largest(n, density, seed):
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    comp = SparsifyCompressor("topk", density)
    sp, ctx = comp.compress(x, "b")
    k = num_kept(n, density)
    assert ctx.k == k == sp.indices.size == np.unique(sp.indices).size
    assert (np.diff(sp.indices) > 0).all()
    kept = np.abs(x[sp.indices])
    dropped = np.delete(np.abs(x), sp.indices)
    if dropped.size:
        assert kept.min() >= dropped.max()
    np.testing.assert_array_equal(sp.values, x[sp.indices])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5000), densities, st.integers(0, 1000))
def test_randk_counts_and_shared_seed(n, density, seed):
    x = np.ones(n, np.float32)
    k = num_kept(n, density)
    shared = [SparsifyCompressor(sparsify.RandomK(seed), density, worker=w) for w in range(3)]
    picks = [c.compress(x, "bucket")[0].indices for c in shared]
    for p in picks:
        assert p.size == k == np.unique(p).size and p.min() >= 0 and p.max() < n
        np.testing.assert_array_equal(p, picks[0])  # same on every worker
    again = shared[0].compress(x, "bucket")[0].indices  # next step: a fresh draw
    assert again.size == k
    if 0 < k < n // 2 and n > 100:
        assert not np.array_equal(again, picks[0])
        own = [
            SparsifyCompressor(sparsify.RandomK(seed, shared=False), density, worker=w)
            .compress(x, "bucket")[0]
            .indices
            for w in range(2)
        ]
        assert not np.array_equal(own[0], own[1])


def test_compress_decompress_shape():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 12
    comp = SparsifyCompressor("topk", 0.25)
    sp, ctx = comp.compress(x, "b")
    dense = comp.decompress(sp, ctx)
    assert dense.shape == x.shape and dense.dtype == x.dtype
    assert np.count_nonzero(dense) == 6
    np.testing.assert_array_equal(dense[dense != 0], x[dense != 0])
    assert ctx.step == 0 and comp.compress(x, "b")[1].step == 1


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 3000),
    densities,
    st.sampled_from(["topk", "randk"]),
    st.integers(0, 2**32 - 1),
)
def test_error_feedback_preserves_mass(n, density, name, seed):
    """residual + sent == input + old residual, bit for bit, over several steps."""
    rng = np.random.default_rng(seed)
    comp = SparsifyCompressor(name, density)
    mem = Memory()
    for _ in range(3):
        grad = rng.standard_normal(n).astype(np.float32)
        old = mem.residual("b")
        x = mem.compensate(grad, "b")
        np.testing.assert_array_equal(x, grad if old is None else grad + old)
        sp, ctx = comp.compress(x, "b")
        sent = comp.decompress(sp, ctx)
        mem.update("b", x, sent)
        np.testing.assert_array_equal(mem.residual("b") + sent, x)
        assert np.count_nonzero(mem.residual("b")[sp.indices]) == 0
    if density == 1.0:
        assert not mem.residual("b").any()


def test_memory_is_per_bucket():
    mem = Memory()
    mem.update("a", np.ones(3, np.float32), np.zeros(3, np.float32))
    assert mem.residual("b") is None
    np.testing.assert_array_equal(mem.compensate(np.ones(3, np.float32), "a"), 2)
    with pytest.raises(ValueError):
        mem.compensate(np.ones(4, np.float32), "a")
    mem.reset("a")
    assert mem.residual("a") is None
