"""The two-round homomorphic allreduce, N workers in one process through ``LocalGroup``.

``LocalGroup`` combines the workers' lanes with the switch's arithmetic (int32 wrap-around
SUM, OR, MAX); the end-to-end tests through the real switch live with the transport. Tests
taking ``arraylib`` run the codec on each array library (numpy, torch on the CPU, torch on
CUDA when present); the reference is the dense wrap-around int32 sum, computed apart.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.host.arrays import ops
from ina.host.compression import (
    HomomorphicAllreduce,
    HomomorphicConfig,
    LocalGroup,
    combine,
    repair,
)
from ina.host.rounds import plain, run_blocking
from ina.protocol import Op

I32 = np.iinfo(np.int32)
EXTREMES = np.array([I32.min, I32.max, -I32.max, 1, -1], np.int32)


def sparse_buckets(rng, workers, n, density, extreme=0.3, overlap=0.5):
    """Per-worker int32 buckets: a share of positions common to all workers, some extremes."""
    common = rng.random(n) < density * overlap
    out = []
    for _ in range(workers):
        mask = common | (rng.random(n) < density * (1 - overlap))
        v = rng.integers(I32.min, I32.max, n, endpoint=True, dtype=np.int64).astype(np.int32)
        pick = rng.random(n) < extreme
        v[pick] = rng.choice(EXTREMES, pick.sum())
        v[~mask] = 0
        out.append(v)
    return out


def dense_sum(buckets):
    return np.add.reduce(np.stack(buckets), axis=0, dtype=np.int32)


def host(a):
    return ops(a).to_host(a)


def run(buckets, config=None, exps=None, levels=None, lib=None):
    """Every worker's ``allreduce_int`` through a LocalGroup, on ``lib``'s arrays."""
    n_workers = len(buckets)
    group = LocalGroup(n_workers, timeout=20)
    hcs = [HomomorphicAllreduce(config) for _ in range(n_workers)]
    exps = exps or [0] * n_workers
    levels = levels or [0] * n_workers
    to = lib.to if lib is not None else (lambda a: a)
    results = group.run(
        lambda w, reduce: hcs[w].allreduce_int(to(buckets[w]), reduce, exps[w], levels[w])
    )
    return results, hcs, group


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    workers=st.integers(2, 16),
    n=st.integers(1, 20000),
    density=st.sampled_from([0.0001, 0.001, 0.01, 0.05, 0.2, 0.5]),
    load=st.sampled_from([0.7, 1.0, 1.23, 1.3, 1.6]),
    slack=st.sampled_from([0.0, 2.0]),
    coding=st.sampled_from(["sketch", "sketch", "support"]),
)
def test_bit_exact_against_dense_int32(arraylib, seed, workers, n, density, load, slack, coding):
    """Any number of workers, densities, and sketch loads down to where most positions are
    lost to peeling and repaired: the decoded sums are the dense int32 sums, bit for bit."""
    rng = np.random.default_rng(seed)
    buckets = sparse_buckets(rng, workers, n, density)
    cfg = HomomorphicConfig(cells_per_nnz=load, cells_slack=slack, seed=seed, coding=coding)
    results, hcs, _ = run(buckets, cfg, lib=arraylib)
    expected = dense_sum(buckets)
    union = np.logical_or.reduce([b != 0 for b in buckets])
    for r, hc in zip(results, hcs, strict=True):
        values = host(r.values)
        assert values.dtype == np.int32 and ops(r.values) is ops(arraylib.to(expected))
        np.testing.assert_array_equal(values, expected)
        assert r.support.nnz == union.sum()
        assert hc.stats.peel_failures == (r.repaired > 0)
        assert r.repaired == results[0].repaired  # every worker repairs the same positions
    if arraylib.name != "numpy":  # and as many as the numpy codec, in as many passes
        (ref, *_), _, _ = run(buckets, cfg)
        assert (results[0].repaired, results[0].passes) == (ref.repaired, ref.passes)
        assert (results[0].coding, results[0].lanes) == (ref.coding, ref.lanes)


def test_wraparound_extremes(arraylib):
    n = 4096
    a = np.zeros(n, np.int32)
    a[::7] = I32.max
    b = np.zeros(n, np.int32)
    b[::7] = 1  # I32.max + 1 wraps to I32.min
    b[1::7] = I32.min
    c = np.zeros(n, np.int32)
    c[1::7] = I32.min  # I32.min + I32.min wraps to 0: a zero sum on the support
    results, _, _ = run([a, b, c], lib=arraylib)
    expected = dense_sum([a, b, c])
    assert expected[0] == I32.min and expected[1] == 0
    for r in results:
        np.testing.assert_array_equal(host(r.values), expected)
        assert r.coding == "sketch" and r.repaired == 0


def test_round_one_agrees_exp_and_level():
    rng = np.random.default_rng(0)
    buckets = sparse_buckets(rng, 4, 1000, 0.05)
    results, _, _ = run(buckets, exps=[130, 150, 141, 0], levels=[2, 0, 5, 1])
    assert {(r.exp, r.level) for r in results} == {(150, 5)}


def test_forced_peeling_failure_is_detected_and_repaired_exactly(arraylib):
    rng = np.random.default_rng(1)
    n, workers = 50_000, 4
    buckets = sparse_buckets(rng, workers, n, 0.05)
    cfg = HomomorphicConfig(cells_per_nnz=0.8, cells_slack=0)  # cells < nnz: cannot peel
    results, hcs, group = run(buckets, cfg, lib=arraylib)
    expected = dense_sum(buckets)
    r = results[0]
    assert r.repaired > 0 and r.coding == "sketch"
    for res, hc in zip(results, hcs, strict=True):
        np.testing.assert_array_equal(host(res.values), expected)
        assert hc.stats.peel_failures == 1 and hc.stats.repaired_positions == r.repaired
    # the repair is one dense SUM round of exactly the undecoded positions
    words = -(-n // 32)
    assert group.calls == 3
    assert group.lanes_sent == [words + r.lanes + r.repaired] * workers
    assert r.bytes_repair == 4 * r.repaired
    assert r.bytes_sent == 4 * (words + r.lanes + r.repaired)


def test_traffic_at_five_percent_union():
    rng = np.random.default_rng(2)
    n = 400_000
    buckets = sparse_buckets(rng, 2, n, 0.05, overlap=1.0)  # union = 5 %
    results, hcs, _ = run(buckets)
    r = results[0]
    assert r.repaired == 0
    ratio = 4 * n / r.bytes_sent
    assert ratio >= 8.0, ratio
    assert hcs[0].stats.compression_ratio == pytest.approx(ratio)


def test_empty_union_sends_no_second_round():
    zeros = [np.zeros(100, np.int32) for _ in range(3)]
    results, _, group = run(zeros)
    assert group.calls == 1
    assert all(r.coding == "none" and not r.values.any() and r.bytes_round2 == 0 for r in results)


def test_dense_union_falls_back_to_support_lanes(arraylib):
    rng = np.random.default_rng(3)
    buckets = sparse_buckets(rng, 2, 1000, 1.0, overlap=1.0)  # (almost) every position
    results, hcs, _ = run(buckets, lib=arraylib)
    for r in results:
        np.testing.assert_array_equal(host(r.values), dense_sum(buckets))
        assert r.coding == "support" and r.lanes == r.support.nnz
    assert hcs[0].stats.fallbacks == 1


def test_sketch_whose_cells_overflow_falls_back_to_support_lanes(arraylib):
    """Far too few cells: some hold 32 or more positions, more than a cell's decoding word
    counts (sketch.Table.fits); every worker sees it before round 2 and sends plain lanes."""
    rng = np.random.default_rng(6)
    buckets = sparse_buckets(rng, 3, 20_000, 0.5)
    cfg = HomomorphicConfig(cells_per_nnz=0.02, cells_slack=0)  # ~50 positions per cell
    results, hcs, group = run(buckets, cfg, lib=arraylib)
    for r in results:
        np.testing.assert_array_equal(host(r.values), dense_sum(buckets))
        assert r.coding == "support" and r.lanes == r.support.nnz
    assert hcs[0].stats.fallbacks == 1 and group.calls == 2


def test_indices_give_the_same_support_as_the_mask(arraylib):
    rng = np.random.default_rng(7)
    masks = [rng.random(3000) < 0.02 for _ in range(3)]
    group = LocalGroup(3)
    hc = HomomorphicAllreduce()

    def worker(w, reduce):
        by_mask = hc.agree_support(arraylib.to(masks[w]), reduce, exp=w, level=2 * w)
        by_idx = hc.agree_indices_steps(arraylib.to(np.flatnonzero(masks[w])), 3000, w, 2 * w)
        return by_mask, run_blocking(by_idx, plain(reduce))

    for by_mask, by_idx in group.run(worker):
        np.testing.assert_array_equal(by_mask.words, by_idx.words)
        union = np.flatnonzero(np.logical_or.reduce(masks))
        np.testing.assert_array_equal(host(by_idx.positions), union)
        assert (by_idx.exp, by_idx.level, by_idx.nnz) == (2, 4, union.size)


def test_two_step_api_quantize_after_round_one():
    """Round 1 with a float mask, int32 values chosen only after the exponent is agreed."""
    rng = np.random.default_rng(4)
    grads = [np.where(rng.random(500) < 0.1, rng.standard_normal(500), 0) for _ in range(3)]
    group = LocalGroup(3)
    hcs = [HomomorphicAllreduce() for _ in range(3)]

    def worker(w, reduce):
        support = hcs[w].agree_support(grads[w] != 0, reduce, exp=10 + w)
        q = np.round(grads[w] * 2.0 ** (20 - support.exp)).astype(np.int32)
        return hcs[w].reduce_values(q, support, reduce), q

    out = group.run(worker)
    expected = dense_sum([q for _, q in out])
    for r, _ in out:
        assert r.exp == 12
        np.testing.assert_array_equal(r.values, expected)


def test_values_outside_support_are_refused():
    group = LocalGroup(1)
    hc = HomomorphicAllreduce()

    def worker(w, reduce):
        support = hc.agree_support(np.array([True, False, False]), reduce)
        return hc.reduce_values(np.array([1, 2, 0], np.int32), support, reduce)

    with pytest.raises(ValueError, match="outside the agreed support"):
        group.run(worker)


def test_mismatched_seeds_are_detected_not_decoded():
    rng = np.random.default_rng(5)
    buckets = sparse_buckets(rng, 2, 20_000, 0.05)
    group = LocalGroup(2)
    hcs = [HomomorphicAllreduce(HomomorphicConfig(seed=s)) for s in (1, 2)]
    with pytest.raises(RuntimeError, match="inconsistent"):
        group.run(lambda w, reduce: hcs[w].allreduce_int(buckets[w], reduce))


def test_repair_function_and_combine():
    vals = [np.array([5, 6, 7, 8], np.int32), np.array([I32.max, 1, 1, 1], np.int32)]
    group = LocalGroup(2)
    out = group.run(lambda w, reduce: repair(vals[w], np.array([0, 2]), reduce))
    assert [o.tolist() for o in out] == [[I32.min + 4, 8]] * 2
    assert combine(Op.OR, [np.array([1]), np.array([2])]).tolist() == [3]
    assert combine(Op.MAX, [np.array([-1]), np.array([-5])]).tolist() == [-1]


def test_config_validation_and_group_errors():
    for bad in ({"cells_per_nnz": 0}, {"cells_slack": -1}, {"num_hashes": 0}, {"coding": "x"}):
        with pytest.raises(ValueError):
            HomomorphicConfig(**bad)
    with pytest.raises(ValueError):
        HomomorphicAllreduce().allreduce_int(np.zeros(3, np.int64), lambda *a: None)
    group = LocalGroup(2)
    with pytest.raises(ValueError, match="disagree"):
        group.run(lambda w, reduce: reduce(np.zeros(w + 1, np.int32), Op.SUM))


def test_group_names_missing_workers_on_timeout():
    group = LocalGroup(3, timeout=0.5)

    def worker(w, reduce):
        if w != 2:  # worker 2 never shows up
            reduce(np.zeros(4, np.int32), Op.SUM)

    with pytest.raises(TimeoutError, match=r"missing: \[2\]"):
        group.run(worker)


def test_transport_returning_wrong_length_is_refused():
    hc = HomomorphicAllreduce()
    with pytest.raises(RuntimeError, match="lanes"):
        hc.allreduce_int(np.ones(64, np.int32), lambda v, op, e=0, lv=0: (v[:1], e, lv))


def test_benchmark_quick_runs(capsys):
    from ina.bench import compression as bench

    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "vs dense int32" in out and "Independent top-k" in out and "Peeling failures" in out
