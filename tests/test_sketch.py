"""Count sketch: sizing, partitioned hashing, linearity in int32, exact peeling, detection."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.host.compression import sketch

I32 = np.iinfo(np.int32)


def random_support(rng, n, nnz):
    return np.sort(rng.choice(n, nnz, replace=False))


def random_int32(rng, size, extreme=0.2):
    """int32 values, a share of them at the extremes to exercise wrap-around."""
    v = rng.integers(I32.min, I32.max, size, endpoint=True, dtype=np.int64).astype(np.int32)
    pick = rng.random(size) < extreme
    v[pick] = rng.choice(np.array([I32.min, I32.max, -I32.max, 1, -1], np.int32), pick.sum())
    return v


def test_sizing():
    spec = sketch.SketchSpec.for_nnz(1000, 1.23, slack=0)
    assert spec.cells == 1230 and spec.cells_per_partition == 410
    spec = sketch.SketchSpec.for_nnz(1000, 1.23, slack=2.0)
    assert spec.cells >= 1230 + 2 * 1000**0.5 and spec.cells % 3 == 0
    assert sketch.SketchSpec.for_nnz(0).cells == 3  # at least one cell per partition
    for bad in ({"cells_per_nnz": 0}, {"slack": -1}):
        with pytest.raises(ValueError):
            sketch.SketchSpec.for_nnz(10, **bad)
    with pytest.raises(ValueError):
        sketch.SketchSpec(0)


def test_hash_is_partitioned_deterministic_and_seeded():
    pos = np.arange(0, 10**6, 7)
    spec = sketch.SketchSpec(1000, 3, seed=42)
    h = sketch.hash_cells(pos, spec)
    assert h.shape == (3, pos.size)
    for k in range(3):
        assert h[k].min() >= k * 1000 and h[k].max() < (k + 1) * 1000
        # roughly uniform over the partition: every cell used, none more than 2x the mean
        counts = np.bincount(h[k] - k * 1000, minlength=1000)
        assert counts.min() > 0 and counts.max() < 2 * pos.size / 1000
    np.testing.assert_array_equal(h, sketch.hash_cells(pos, spec))
    assert (h != sketch.hash_cells(pos, sketch.SketchSpec(1000, 3, seed=43))).mean() > 0.9


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 3000),
    st.floats(0.5, 2.0),
    st.integers(2, 5),
)
def test_homomorphism(seed, nnz, load, workers):
    """sketch(a) + sketch(b) == sketch(a + b), all in int32 wrap-around."""
    rng = np.random.default_rng(seed)
    pos = random_support(rng, 4 * nnz, nnz)
    spec = sketch.SketchSpec.for_nnz(nnz, load, seed=seed)
    cells = sketch.hash_cells(pos, spec)
    vals = [random_int32(rng, nnz) for _ in range(workers)]
    summed = np.add.reduce([sketch.encode(v, cells, spec) for v in vals], dtype=np.int32)
    total = np.add.reduce(vals, dtype=np.int32)
    np.testing.assert_array_equal(summed, sketch.encode(total, cells, spec))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 20000))
def test_peel_is_exact_where_decoded(seed, nnz):
    rng = np.random.default_rng(seed)
    pos = random_support(rng, 3 * nnz, nnz)
    spec = sketch.SketchSpec.for_nnz(nnz, seed=seed)
    cells = sketch.hash_cells(pos, spec)
    vals = random_int32(rng, nnz)
    vals[rng.random(nnz) < 0.1] = 0  # zero sums on the support are legal
    r = sketch.peel(sketch.encode(vals, cells, spec), cells, sketch.cell_counts(cells, spec))
    assert r.consistent
    np.testing.assert_array_equal(r.values[r.decoded], vals[r.decoded])
    assert (r.values[~r.decoded] == 0).all()
    if nnz >= 5000:  # well above the finite-size window at the default sizing
        assert r.complete


def test_peel_large_at_default_sizing():
    rng = np.random.default_rng(1)
    nnz = 200_000
    pos = random_support(rng, 4_000_000, nnz)
    spec = sketch.SketchSpec.for_nnz(nnz)
    cells = sketch.hash_cells(pos, spec)
    vals = random_int32(rng, nnz)
    r = sketch.peel(sketch.encode(vals, cells, spec), cells)
    assert r.complete and r.consistent and r.passes > 1
    np.testing.assert_array_equal(r.values, vals)


def test_overloaded_sketch_stalls_detectably():
    rng = np.random.default_rng(2)
    nnz = 5000
    pos = random_support(rng, 50_000, nnz)
    spec = sketch.SketchSpec.for_nnz(nnz, 0.9, slack=0)  # fewer cells than positions
    cells = sketch.hash_cells(pos, spec)
    vals = random_int32(rng, nnz)
    r = sketch.peel(sketch.encode(vals, cells, spec), cells)
    assert not r.complete and r.undecoded.size > 0 and r.consistent
    np.testing.assert_array_equal(r.values[r.decoded], vals[r.decoded])


def test_inconsistent_sketch_is_flagged():
    rng = np.random.default_rng(3)
    nnz = 2000
    pos = random_support(rng, 20_000, nnz)
    spec = sketch.SketchSpec.for_nnz(nnz)
    cells = sketch.hash_cells(pos, spec)
    sk = sketch.encode(random_int32(rng, nnz), cells, spec)
    sk[np.flatnonzero(sketch.cell_counts(cells, spec) >= 2)[0]] += 1  # corrupt one cell
    assert not sketch.peel(sk, cells).consistent


def test_input_validation():
    spec = sketch.SketchSpec(4)
    cells = sketch.hash_cells(np.arange(5), spec)
    with pytest.raises(ValueError):
        sketch.encode(np.zeros(5, np.int64), cells, spec)
    with pytest.raises(ValueError):
        sketch.encode(np.zeros(4, np.int32), cells, spec)
    with pytest.raises(ValueError):
        sketch.peel(np.zeros(12, np.int64), cells)
