"""Compressed allreduce of float buckets on the bucket's device (`SparseAllreduce`).

N workers in one process through ``LocalGroup`` (the switch's arithmetic), and through the
switch model over UDP with loss. The reference for every library is exact: the float sums
are the decoded wrap-around int32 sum of what every worker encoded, and numpy's codec
produces the same bits from the same gradients.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.host import quantize
from ina.host.arrays import ops
from ina.host.compression import HomomorphicConfig, LocalGroup, SparseAllreduce
from ina.host.rounds import plain, run_blocking
from ina.host.transport import Transport

I32 = np.iinfo(np.int32)


def host(a):
    return ops(a).to_host(a)


def gradients(rng, workers, n):
    """float32 gradients with magnitudes over many octaves, some exact zeros."""
    out = []
    for _ in range(workers):
        g = rng.standard_normal(n) * np.exp2(rng.integers(-20, 10, n))
        g[rng.random(n) < 0.05] = 0
        out.append(g.astype(np.float32))
    return out


def run_group(grads, density, lib=None, steps=2, cfg=None, sparsifier="topk"):
    """Every worker's results of ``steps`` calls on bucket "b" (the later ones carry residuals)."""
    workers = len(grads)
    codecs = [
        SparseAllreduce(workers, w, sparsifier, cfg or HomomorphicConfig()) for w in range(workers)
    ]
    to = lib.to if lib is not None else (lambda a: a)

    def worker(w, reduce):
        x = to(grads[w])
        return [
            run_blocking(codecs[w].allreduce_steps(x, density, key="b", level=w), plain(reduce))
            for _ in range(steps)
        ]

    return LocalGroup(workers, timeout=30).run(worker), codecs


def check_exact(results, workers):
    """Each call: every worker decodes the same float sums, = decode(sum of the ints)."""
    for call in zip(*results, strict=True):
        total = np.add.reduce([host(r.ints) for r in call], dtype=np.int32)
        expected = host(quantize.decode(total, call[0].exponents, total.size, workers))
        for r in call:
            np.testing.assert_array_equal(host(r.sums).reshape(-1), expected)
            assert (r.exp, r.level) == (call[0].exp, workers - 1)


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    workers=st.integers(2, 16),
    n=st.integers(1, 30_000),
    density=st.sampled_from([0.001, 0.01, 0.05, 0.3]),
    load=st.sampled_from([0.8, 1.23]),
)
def test_bit_exact_and_the_same_on_every_library(arraylib, seed, workers, n, density, load):
    rng = np.random.default_rng(seed)
    grads = gradients(rng, workers, n)
    cfg = HomomorphicConfig(cells_per_nnz=load, seed=seed)  # 0.8: peeling fails, repairs
    results, _ = run_group(grads, density, arraylib, cfg=cfg)
    check_exact(results, workers)
    r = results[0][-1]
    assert ops(r.sums) is ops(arraylib.to(grads[0]))  # stays on the input's device
    if arraylib.name != "numpy":  # numpy's codec: the same bits from the same gradients
        ref, _ = run_group(grads, density, cfg=cfg)
        for got, want in zip(results[0], ref[0], strict=True):
            np.testing.assert_array_equal(host(got.ints), want.ints)
            np.testing.assert_array_equal(host(got.sums), want.sums)
            assert got.reduced.repaired == want.reduced.repaired


def test_residual_keeps_what_the_encoding_did_not_carry(arraylib):
    rng = np.random.default_rng(1)
    grads = gradients(rng, 3, 5000)
    results, codecs = run_group(grads, 0.02, arraylib, steps=1)
    for w, (r,) in enumerate(results):
        sent = host(quantize.decode(r.ints, r.exponents, 5000, 3))
        residual = host(codecs[w].memory.residual("'b':5000"))
        np.testing.assert_array_equal(residual, grads[w].astype(np.float64) - sent)
        assert np.count_nonzero(host(r.ints)) == 100  # 2 % of 5000 kept


def test_shapes_types_and_torch_cpu_tensors_in_and_out():
    import torch

    rng = np.random.default_rng(2)
    grads = [g.reshape(40, 50) for g in gradients(rng, 2, 2000)]
    results, _ = run_group([torch.from_numpy(g) for g in grads], 0.05, steps=1)
    (r,), _ = results
    assert isinstance(r.sums, torch.Tensor) and r.sums.shape == (40, 50)
    assert r.sums.dtype == torch.float64 and isinstance(r.ints, torch.Tensor)
    ref, _ = run_group(grads, 0.05, steps=1)
    np.testing.assert_array_equal(r.sums.numpy(), ref[0][0].sums)


def test_random_k_shared_support_and_validation():
    rng = np.random.default_rng(3)
    grads = gradients(rng, 4, 10_000)
    results, _ = run_group(grads, 0.01, steps=1, sparsifier="randk")
    check_exact(results, 4)
    assert results[0][0].reduced.support.nnz == 100  # shared draws: the union is one worker's
    codec = SparseAllreduce(2)
    with pytest.raises(ValueError, match="empty"):
        next(codec.allreduce_steps(np.zeros(0, np.float32), 0.1))
    with pytest.raises(ValueError, match="density"):
        next(codec.allreduce_steps(np.ones(10, np.float32), 0.0))
    with pytest.raises(ValueError):
        SparseAllreduce(0)


@pytest.mark.network
@pytest.mark.parametrize(("num_workers", "density", "loss"), [(2, 0.05, 0.0), (4, 0.01, 0.05)])
def test_through_the_switch_with_loss(harness_factory, arraylib, num_workers, density, loss):
    """Over UDP through the switch model, packets lost, duplicated and reordered: exact."""
    from ina.switch_model.impair import Impairment

    impair = Impairment(loss=loss, dup=loss, reorder=0.3 if loss else 0, seed=4)
    h = harness_factory(num_workers, lanes=64, pool_size=16, impairment=impair)
    grads = gradients(np.random.default_rng(num_workers), num_workers, 20_000)

    def work(w):
        codec = SparseAllreduce(num_workers, w)
        with Transport(h.config(w, rto=0.01)) as t:

            def reduce(values, op, exp=0, level=0):
                r = t.reduce(values, op, exp=exp, level=level)
                return r.values, r.exp, r.level

            x = arraylib.to(grads[w])
            return [
                run_blocking(codec.allreduce_steps(x, density, key=0, level=w), plain(reduce))
                for _ in range(2)
            ]

    res = h.run(work)
    for w, r in res.items():
        assert not isinstance(r, BaseException), f"worker {w}: {r!r}"
    check_exact([res[w] for w in range(num_workers)], num_workers)
