"""GRACE's compressors (`ina.compressors`): contract, round trips, error feedback, and exact
in-network aggregation with N workers in one process (`LocalGroup`, the switch's arithmetic).

The same generators run through the real UDP switch model in tests/test_compressors_udp.py.
"""

import math

import numpy as np
import pytest

from ina.compressors import (
    COMPRESSORS,
    MEMORIES,
    Aggregation,
    make_communicator,
    make_compressor,
    parse_args,
)
from ina.compressors.base import bits_float, float_bits
from ina.compressors.natural import decode as natural_decode
from ina.compressors.natural import encode as natural_encode
from ina.compressors.powersgd import matrix_shape, orthonormalize
from ina.host import quantize
from ina.host.compression import LocalGroup

GRACE = {
    "dgc",
    "efsignsgd",
    "fp16",
    "natural",
    "none",
    "onebit",
    "powersgd",
    "qsgd",
    "randomk",
    "signsgd",
    "signum",
    "terngrad",
    "threshold",
    "topk",
    "u8bit",
}
# small settings so that sparse methods send something in small tests
ARGS = {
    "topk": {"ratio": 0.05},
    "randomk": {"ratio": 0.1},
    "dgc": {"ratio": 0.05, "sample": 0.2},
    "threshold": {"threshold": 1.5},
    "qsgd": {"levels": 7},
    "powersgd": {"rank": 2},
}


def grads(workers, n, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal(n) * np.exp(rng.standard_normal(n))).astype(dtype)
        for _ in range(workers)
    ]


def run_group(name, xs, steps=1, seed=5, **kw):
    """Every worker runs ``steps`` communicator steps on its tensor; Reductions per step."""
    workers = len(xs)
    args = {**ARGS.get(name, {}), **kw}
    comms = [make_communicator(name, workers, w, seed, args) for w in range(workers)]
    group = LocalGroup(workers, timeout=30)

    def body(w, reduce):
        return [comms[w].step(xs[w], "bucket", reduce) for _ in range(steps)]

    return group.run(body), comms


# --- the contract -------------------------------------------------------------------------


def test_registry_has_grace_methods():
    assert set(COMPRESSORS) >= GRACE and len(GRACE - {"none"}) >= 12
    assert {"none", "residual", "dgc", "momentum"} <= set(MEMORIES)
    for name, cls in COMPRESSORS.items():
        assert cls.name == name and isinstance(cls.aggregation, Aggregation)
        assert cls.memory in MEMORIES, name
        assert cls.summary, name
    paths = {n: COMPRESSORS[n].aggregation for n in GRACE}
    assert paths["natural"] is Aggregation.ALLGATHER
    assert {n for n, p in paths.items() if p is Aggregation.UNION} == {"topk", "threshold", "dgc"}
    assert COMPRESSORS["topk"].memory == "residual" and COMPRESSORS["dgc"].memory == "dgc"
    assert COMPRESSORS["signum"].memory == "momentum" and COMPRESSORS["qsgd"].memory == "none"


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: make_compressor("nope"), "unknown compressor 'nope'; known: dgc, "),
        (lambda: make_compressor("qsgd", levels=0), "qsgd: levels must be in 1.."),
        (lambda: make_compressor("qsgd", level=3), "qsgd: unknown argument 'level'; known: "),
        (lambda: make_compressor("topk", ratio="x"), "topk: ratio='x' is not a number"),
        (lambda: make_compressor("topk", ratio="2"), r"topk: ratio must be in \(0, 1\]"),
        (lambda: make_compressor("topk", coding="zip"), "topk: coding must be one of"),
        (lambda: make_communicator("qsgd", args=["levels"]), "'levels' is not key=value"),
        (lambda: make_communicator("qsgd", args=["=3"]), "'=3' is not key=value"),
        (lambda: make_communicator("qsgd", args=["a=1", "a=2"]), "'a' given twice"),
        (lambda: make_communicator("topk", args=["memory=zip"]), "topk: unknown memory 'zip'"),
        (lambda: make_communicator("dgc", args=["momentum=x"]), "momentum='x' is not a number"),
        (lambda: make_communicator("dgc", args=["momentum=1.5"]), "momentum must be in"),
        (lambda: make_communicator("qsgd", args=["foo=1"]), "qsgd: unknown argument 'foo'"),
        (lambda: make_communicator("signsgd", 40), "num_workers must be in 1..32"),
        (lambda: make_communicator("signsgd", 4, 4), "worker must be in 0..3"),
        (lambda: make_compressor("fp16", 2, bits="1"), "fp16: bits must be in 2..24"),
    ],
)
def test_bad_names_and_arguments_are_one_line_errors(call, message):
    with pytest.raises(ValueError, match=message) as err:
        call()
    assert "\n" not in str(err.value)


def test_arguments_from_strings_and_memory_override():
    comm = make_communicator("dgc", 2, 1, 3, ["ratio=0.002", "momentum=0.5", "coding=support"])
    assert comm.compressor.params() == {"ratio": 0.002, "sample": 0.01, "coding": "support"}
    assert comm.memory.momentum == 0.5 and comm.compressor.worker == 1
    assert type(make_communicator("topk", args={"memory": "none"}).memory).name == "none"
    comm = make_communicator("qsgd", 4, args={"levels": "7", "memory": "residual", "beta": "0.9"})
    assert comm.compressor.levels == 7 and comm.memory.beta == 0.9
    assert parse_args(["a=1", "b = x=y"]) == {"a": "1", "b": " x=y"}


def test_non_finite_and_integer_tensors_refused():
    comp = make_compressor("qsgd")
    with pytest.raises(ValueError, match=r"non-finite value \(nan\) at index 1"):
        comp.compress(np.array([1.0, np.nan], np.float32))
    with pytest.raises(ValueError, match="floating-point"):
        comp.compress(np.arange(3))


def test_float_bits_max_is_the_float_max():
    rng = np.random.default_rng(0)
    a = np.abs(rng.standard_normal(1000)) * np.exp(10 * rng.standard_normal(1000))
    a[:3] = [0.0, 1e-40, 3e38]
    bits = float_bits(a)
    assert np.all(bits_float(bits) >= a)  # rounded up, never below
    assert np.all(bits_float(bits) <= a * (1 + 2**-23) + 1e-45)
    order = np.argsort(a, kind="stable")
    assert np.all(np.diff(bits[order]) >= 0)  # int32 order is float order


# --- round trips on one worker (GRACE's compress / decompress) -----------------------------


def test_round_trip_fixed_point():
    x = grads(1, 5000, 1)[0]
    for name in ("fp16", "u8bit"):
        comp = make_compressor(name, 8)
        payload, ctx = comp.compress(x.reshape(50, 100))
        y = comp.decompress(payload, ctx)
        assert y.shape == (50, 100) and y.dtype == np.float32
        err = np.abs(y.reshape(-1).astype(np.float64) - x)
        assert np.all(err <= comp.error_bound(ctx).reshape(-1) + np.abs(x) * 2**-23)
    assert make_compressor("fp16", 8).value_bits == 13  # 16 - log2 8
    assert make_compressor("fp16", 5).value_bits == 13 and make_compressor("fp16").value_bits == 16
    comp = make_compressor("none", 4)
    (q,), ctx = comp.compress(x)
    bound = quantize.error_bound(ctx.exps, ctx.block, 4, x.size) / 4  # one worker's rounding
    assert np.all(np.abs(comp.decompress((q,), ctx) - x) <= bound + np.abs(x) * 2**-23)


def test_round_trip_qsgd_and_terngrad_unbiased_within_one_level():
    x = grads(1, 2000, 2, np.float64)[0]
    for name, kw in (("qsgd", {"levels": 7, "bucket": 128}), ("terngrad", {"clip": 0.0})):
        outs = []
        for seed in range(300):
            comp = make_compressor(name, seed=seed, **kw)
            payload, ctx = comp.compress(x)
            y = comp.decompress(payload, ctx)
            if name == "qsgd":
                level = np.repeat(ctx.norms / ctx.levels, ctx.block)[: x.size]
            else:
                level = np.full(x.size, ctx.scales[0])
            assert np.all(np.abs(y - x) <= level * (1 + 1e-9))  # within one level
            outs.append(y)
        # unbiased: the mean of 300 is within ~level / (2 sqrt(300)) = 0.03 level of x;
        # rounding to the nearest level would be 0.25 level off on average
        assert np.mean(np.abs(np.mean(outs, axis=0) - x) / level) < 0.04, name
    comp = make_compressor("terngrad", clip=2.5)
    (q,), ctx = comp.compress(x)
    assert set(np.unique(q)) <= {-1, 0, 1} and ctx.scales[0] <= 2.5 * np.std(x) * (1 + 1e-6)


def test_round_trip_signs():
    x = np.array([-2.0, -0.5, 0.0, 0.25, 3.0], np.float32)
    comp = make_compressor("signsgd")
    p, ctx = comp.compress(x)
    assert np.array_equal(comp.decompress(p, ctx), [-1, -1, 1, 1, 1])
    comp = make_compressor("efsignsgd")
    p, ctx = comp.compress(x)
    assert np.allclose(comp.decompress(p, ctx), np.mean(np.abs(x)) * np.array([-1, -1, 1, 1, 1]))
    comp = make_compressor("onebit")
    p, ctx = comp.compress(x)
    assert np.allclose(comp.decompress(p, ctx), [-1.25, -1.25, 3.25 / 3, 3.25 / 3, 3.25 / 3])
    comp = make_compressor("onebit", block=2)
    p, ctx = comp.compress(x)
    assert np.allclose(comp.decompress(p, ctx), [-1.25, -1.25, 0.125, 0.125, 3.0])


def test_round_trip_natural():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(4000) * np.exp(3 * rng.standard_normal(4000))
    x[:3] = [0.0, 1e-30, -1e-30]  # zero, and values far below the 7-bit exponent range
    outs = []
    for seed in range(200):
        comp = make_compressor("natural", seed=seed)
        p, ctx = comp.compress(x)
        assert p.codes.dtype == np.uint8 and p.codes.size == x.size
        y = comp.decompress(p, ctx)
        big = np.abs(x) >= np.ldexp(1.0, p.top - 126)
        m = np.abs(y[big])
        assert np.all(np.log2(m) == np.round(np.log2(m)))  # powers of two
        assert np.all((m <= 2 * np.abs(x[big])) & (m >= np.abs(x[big]) / 2))
        assert np.all(np.sign(y[big]) == np.sign(x[big])) and y[0] == 0
        outs.append(y)
    # unbiased: the mean of 200 is within a few % of x (rounding to the nearer power of two
    # would be ~10 % off on average)
    assert np.mean(np.abs(np.mean(outs, axis=0) - x)[3:] / np.abs(x[3:])) < 0.04
    p = natural_encode(np.zeros(5), np.random.default_rng(0))
    assert np.array_equal(natural_decode(p), np.zeros(5))


def test_round_trip_sparsifiers():
    x = grads(1, 10_000, 4)[0]
    for name, kw in (("topk", {"ratio": 0.01}), ("randomk", {"ratio": 0.01})):
        comp = make_compressor(name, **kw)
        p, ctx = comp.compress(x.reshape(100, 100))
        assert p.indices.size == 100 and np.array_equal(p.values, x[p.indices])
        y = comp.decompress(p, ctx).reshape(-1)
        assert np.array_equal(y[p.indices], x[p.indices]) and np.count_nonzero(y) == 100
    comp = make_compressor("topk", ratio=0.01)
    p, _ = comp.compress(x)
    assert np.min(np.abs(x[p.indices])) >= np.partition(np.abs(x), x.size - 100)[x.size - 100]
    p, _ = make_compressor("threshold", threshold=2.0).compress(x)
    assert np.array_equal(p.indices, np.flatnonzero(np.abs(x) >= 2.0))
    p, _ = make_compressor("dgc", ratio=0.01, sample=0.05).compress(x)
    assert 70 <= p.indices.size <= 130  # within DGC's 0.7x..1.3x of the target


def test_round_trip_powersgd_exact_for_low_rank():
    rng = np.random.default_rng(5)
    m = rng.standard_normal((40, 2)) @ rng.standard_normal((2, 30))
    comp = make_compressor("powersgd", rank=2)
    p, ctx = comp.compress(m)
    assert np.allclose(comp.decompress(p, ctx), m, atol=1e-9)
    assert np.allclose(p.p.T @ p.p, np.eye(2), atol=1e-12)
    assert matrix_shape((10,)) == (4, 3) and matrix_shape((16,)) == (4, 4)
    assert matrix_shape((3, 4, 5)) == (3, 20) and matrix_shape((1,)) == (1, 1)
    z = orthonormalize(np.array([[1.0, 2.0], [0.0, 0.0]]))
    assert np.allclose(z, [[1.0, 0.0], [0.0, 0.0]])  # a dependent column becomes zero


def test_single_worker_reduce_matches_grace_round_trip():
    """With one worker the switch path decodes what GRACE's compress/decompress gives."""
    x = grads(1, 3000, 6)[0]
    for name in ("none", "fp16", "u8bit", "qsgd", "terngrad", "signsgd", "topk", "threshold"):
        kw = ARGS.get(name, {})
        payload, ctx = make_compressor(name, 1, 0, 9, **kw).compress(x, "bucket")
        want = make_compressor(name, 1, 0, 9, **kw).decompress(payload, ctx)
        (red,), _ = run_group(name, [x], seed=9)
        tol = np.abs(x) * 2**-20 if name in ("topk", "threshold") else 0
        assert np.all(np.abs(red[0].sent - want) <= tol), name


# --- error feedback -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["topk", "randomk", "threshold", "efsignsgd", "onebit", "powersgd"]
)
def test_error_feedback_accumulates_what_was_not_sent(name):
    """residual memory: after T steps, sum of what was sent + residual == sum of gradients."""
    workers, steps = 3, 4
    rng = np.random.default_rng(7)
    gs = [[rng.standard_normal(400) for _ in range(workers)] for _ in range(steps)]
    comms = [make_communicator(name, workers, w, 1, ARGS.get(name, {})) for w in range(workers)]
    group = LocalGroup(workers)
    sent = [np.zeros(400) for _ in range(workers)]
    for t in range(steps):
        before = [comms[w].memory.residual("b") for w in range(workers)]
        reds = group.run(lambda w, reduce, t=t: comms[w].step(gs[t][w], "b", reduce))
        for w in range(workers):
            sent[w] += reds[w].sent
            compensated = gs[t][w] + (0 if before[w] is None else before[w])
            assert np.array_equal(comms[w].memory.residual("b"), compensated - reds[w].sent)
    for w in range(workers):
        residual = comms[w].memory.residual("b")
        assert np.allclose(sent[w] + residual, sum(gs[t][w] for t in range(steps)), atol=1e-9)
        assert np.linalg.norm(residual) > 0  # something was held back


def test_residual_is_compensated_minus_sent_exactly():
    comm = make_communicator("topk", args={"ratio": 0.1})
    g = np.random.default_rng(1).standard_normal(100).astype(np.float32)
    (red,) = LocalGroup(1).run(lambda w, reduce: comm.step(g, "k", reduce))
    assert np.array_equal(comm.memory.residual("k"), g - red.sent)
    x2 = comm.memory.compensate(g, "k")
    assert np.array_equal(x2, g + (g - red.sent))
    with pytest.raises(ValueError, match="changed shape"):
        comm.memory.compensate(np.zeros(5, np.float32), "k")


def test_dgc_momentum_correction_and_factor_masking():
    mem = make_communicator("dgc", args={"momentum": 0.5}).memory
    g1, g2 = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0])
    assert np.array_equal(mem.compensate(g1, "b"), g1)  # u = g, v = u
    mem.update("b", g1, np.array([0.0, 0.0, 3.0]))  # the third was sent: cleared
    assert np.array_equal(mem.state("b", "momentum"), [1.0, 2.0, 0.0])
    # u = 0.5 u + g = [1.5, 2, 1]; v = v + u = [2.5, 4, 1]
    assert np.array_equal(mem.compensate(g2, "b"), [2.5, 4.0, 1.0])


def test_signum_votes_with_momentum():
    mem = make_communicator("signum", args={"momentum": 0.9}).memory
    assert np.array_equal(mem.compensate(np.array([1.0, -1.0]), "b"), [1.0, -1.0])
    assert np.allclose(mem.compensate(np.array([-1.0, -1.0]), "b"), [0.8, -1.0])


# --- in the network: exact with respect to the integer encoding ----------------------------


@pytest.mark.parametrize("workers", [2, 3, 5, 8, 16])
@pytest.mark.parametrize("name", sorted(GRACE))
def test_switch_sum_equals_host_side_integer_sum(name, workers):
    xs = grads(workers, 1500, workers)
    reds, _ = run_group(name, xs, steps=2)
    for t in range(2):
        per = [reds[w][t] for w in range(workers)]
        first = per[0]
        stages = len(first.encoded)
        assert stages >= 1 or COMPRESSORS[name].aggregation is Aggregation.UNION
        for s in range(stages):
            if COMPRESSORS[name].aggregation is Aggregation.ALLGATHER:
                host = np.concatenate([r.encoded[s] for r in per])  # the concatenation
            else:
                host = np.sum([r.encoded[s] for r in per], axis=0)  # exact int64 sum
            for r in per:
                assert np.array_equal(r.summed[s], host), (name, s)
        for r in per:  # every worker decodes the same aggregate
            assert np.array_equal(r.grad, first.grad) and np.array_equal(r.total, first.total)
        contributions = np.sum([r.sent.astype(np.float64) for r in per], axis=0)
        scale = np.max(np.abs(contributions)) + 1e-30
        assert np.allclose(first.total, contributions, rtol=1e-5, atol=1e-6 * scale), name


@pytest.mark.parametrize("workers", [2, 4, 7, 16])
def test_aggregates_are_what_the_method_promises(workers):
    xs = grads(workers, 2000, 10 + workers)
    mean = np.mean(np.asarray(xs, np.float64), axis=0)
    rms = np.sqrt(np.mean(mean**2))

    (reds, _) = run_group("none", xs)
    assert np.max(np.abs(reds[0][0].grad - mean)) <= 1e-6 * np.max(np.abs(mean))
    reds, _ = run_group("fp16", xs)
    assert np.sqrt(np.mean((reds[0][0].grad - mean) ** 2)) <= 2**-8 * rms
    reds, _ = run_group("signsgd", xs)
    votes = np.sum([np.where(x >= 0, 1, -1) for x in xs], axis=0)
    assert np.array_equal(reds[0][0].grad, np.sign(votes))  # majority vote, ties 0
    reds, _ = run_group("terngrad", xs, clip=0.0)
    agreed = max(np.max(np.abs(x)) for x in xs)
    assert set(np.unique(reds[0][0].sent / np.float32(agreed))) <= {-1.0, 0.0, 1.0}
    reds, _ = run_group("qsgd", xs, levels=7, bucket=100)
    norms = np.max(
        [np.linalg.norm(x.reshape(-1, 100).astype(np.float64), axis=1) for x in xs], axis=0
    )
    level = np.repeat(norms / 7, 100)
    assert np.all(np.abs(reds[0][0].sent - xs[0]) <= level * (1 + 1e-6))
    reds, _ = run_group("efsignsgd", xs)
    scale = np.mean([np.mean(np.abs(x.astype(np.float64))) for x in xs])
    assert np.allclose(np.abs(reds[0][0].sent), scale, rtol=1e-6)
    reds, _ = run_group("randomk", xs, ratio=0.05)
    kept = [np.flatnonzero(r[0].sent) for r in reds]
    assert all(np.array_equal(k, kept[0]) for k in kept) and kept[0].size <= 100  # shared
    top = max(np.max(np.abs(x)) for x in xs)
    assert np.allclose(reds[0][0].grad[kept[0]], mean[kept[0]], rtol=1e-6, atol=1e-6 * top)
    assert [op.name for op, _ in reds[0][0].rounds] == ["MAX", "SUM"]
    assert reds[0][0].rounds[1][1] == 100  # a dense sum of k lanes, no union round


def test_powersgd_low_rank_is_recovered_through_the_switch():
    rng = np.random.default_rng(11)
    workers = 4
    base = rng.standard_normal((60, 2))
    xs = [base @ rng.standard_normal((2, 50)) for _ in range(workers)]  # shared column space
    reds, comms = run_group("powersgd", xs, steps=2, rank=2)
    mean = np.mean(xs, axis=0)
    assert np.allclose(reds[0][0].grad, mean, atol=1e-6 * np.max(np.abs(mean)))
    assert [op.name for op, _ in reds[0][0].rounds] == ["MAX", "SUM", "MAX", "SUM"]
    assert reds[0][0].rounds[1][1] == 120 and reds[0][0].rounds[3][1] == 100  # P, Q lanes
    qs = [c.compressor._q["bucket"] for c in comms]
    assert all(np.array_equal(q, qs[0]) for q in qs)  # the warm start is shared


def test_bits_per_value_for_the_four_bit_method():
    """QSGD with 7 levels a side (4 bits per value): lanes on the wire per value."""
    for workers in (2, 4, 8, 16):
        xs = grads(workers, 4096, workers)
        reds, _ = run_group("qsgd", xs, levels=7, bucket=4096)
        _, data = reds[0][0].rounds
        fields = math.floor(32 / math.log2(14 * workers + 1))
        assert data[1] == math.ceil(4096 / fields)
        lanes = reds[0][0].rounds[0][1] + data[1]  # the MAX round of norms, the SUM round
        assert reds[0][0].bits_per_value() == pytest.approx(32 * lanes / 4096)
        if workers == 16:
            assert reds[0][0].bits_per_value() < 8.03  # 4 + log2 16, plus the norm lanes


def test_nothing_to_send_and_empty_tensors():
    xs = [np.zeros(100, np.float32) for _ in range(3)]
    for name in ("topk", "threshold", "signsgd", "qsgd", "natural", "powersgd"):
        reds, _ = run_group(name, xs)
        assert np.all(reds[0][0].grad == (0 if name != "signsgd" else 1)), name
    reds, _ = run_group("threshold", grads(2, 50, 1), threshold=1e9)
    assert [op.name for op, _ in reds[0][0].rounds] == ["OR"] and not reds[0][0].grad.any()


# --- the benchmark's command line ---------------------------------------------------------


def test_bench_compressors_runs_and_refuses_bad_rows(capsys):
    from ina.cli import main

    argv = ["bench", "compressors", "--quick", "--workers", "3", "--repeats", "1"]
    assert main([*argv, "--method", "qsgd:levels=7", "--method", "natural"]) == 0
    out = capsys.readouterr().out
    assert "| qsgd levels=7 | sum | MAX SUM |" in out and "| natural | allgather | SUM |" in out
    assert "| NO |" not in out
    for row, message in (
        ("nope", "unknown compressor 'nope'; known: dgc, "),
        ("qsgd:levels", "compressor argument 'levels' is not key=value"),
        ("qsgd:level=3", "qsgd: unknown argument 'level'"),
        ("topk:ratio=abc", "topk: ratio='abc' is not a number"),
    ):
        assert main([*argv, "--method", "signsgd", "--method", row]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err
        assert err.startswith("ina bench compressors: error: ")
