"""The step model (`ina.sim.step`): backward overlapped with each bucket's allreduce. Simulated
time is deterministic, so these tests assert it, including the physical invariants: a step
is never shorter than its compute, nor than a bucket's bytes over the link rate after its
gradients were ready; unbounded bandwidth leaves compute plus optimizer; zero compute is the
sequential schedule; no bucket starts before its last gradient."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ina.sim.backends import build
from ina.sim.network import LinkSpec, NetworkSpec, SwitchSpec, workers_for
from ina.sim.step import GRADIENT_BLOCK, CommConfig, shape_of, simulate
from ina.sim.stragglers import parse_stragglers
from ina.workload.buckets import assign_by_size
from ina.workload.compute import CodecModel
from ina.workload.devices import LayerTimes, device, layer_times
from ina.workload.layers import Layer, Workload


def toy(bwd=(2e-4, 3e-4, 1e-4, 4e-4), grads=((300_000,), (50_000, 1_000), (400_000,), (20_000,))):
    """Four layers, the big ones apart so that DDP's 1 MiB first bucket splits them."""
    layers = tuple(
        Layer(f"l{i}", g, fwd_s=b / 2, bwd_s=b)
        for i, (g, b) in enumerate(zip(grads, bwd, strict=True))
    )
    return Workload("toy", layers, samples=8, optimizer_s=5e-5)


def times_of(w: Workload) -> LayerTimes:
    return layer_times(w, None)


SPEC = NetworkSpec(workers=4, seed=1, rto_s=1e-3, min_rto_s=2e-4)


def ready_times(r: dict) -> list[float]:
    return r["bucket_ready_s"]


def test_buckets_and_ready_times_follow_ddp():
    w = toy()
    shape = shape_of(w, times_of(w), 4)
    grads = [n for _, n in w.gradients]
    assert grads == [20_000, 400_000, 50_000, 1_000, 300_000]  # backward order
    assert assign_by_size(grads, 4) == [[0, 1], [2, 3, 4]]
    assert shape.buckets == (420_000, 351_000)
    # the first bucket is ready when layer l2's backward ends, the second at backward's end
    assert shape.ready_s == pytest.approx((4e-4 + 1e-4, 1e-3))
    assert shape.backward_s == pytest.approx(1e-3) and shape.forward_s == pytest.approx(5e-4)


def test_the_step_is_never_shorter_than_compute_or_a_buckets_bytes():
    w = toy()
    shape = shape_of(w, times_of(w), 4)
    spec = SPEC.with_links(rate_bps=10e9)
    r = simulate(shape, spec, steps=3, trace_workers=1)
    assert r["exact"]
    rate = 10e9
    for s in r["steps"]:
        assert s["iteration_s"] >= s["compute_s"] + s["optimizer_s"]
        for n, ready in zip(r["buckets"], ready_times(r), strict=True):
            assert s["iteration_s"] >= shape.forward_s + ready + 4 * n * 8 / rate
    assert 0 < r["scaling_factor"] < 1


def test_no_bucket_starts_before_its_last_gradient_is_ready():
    w = toy()
    shape = shape_of(w, times_of(w), 4)
    r = simulate(shape, SPEC, steps=1, trace_workers=4)
    assert len(r["timelines"]) == 4
    for tl in r["timelines"]:
        starts = {int(name.split()[1][1:]): start for stream, name, start, _ in tl.rows
                  if stream == "comm" and name.startswith("allreduce b")}  # fmt: skip
        assert sorted(starts) == [0, 1]
        for b, start in starts.items():
            assert start >= shape.forward_s + shape.ready_s[b] - 1e-15


def test_unbounded_bandwidth_leaves_compute_plus_optimizer():
    w = toy()
    shape = shape_of(w, times_of(w), 4)
    free = LinkSpec(rate_bps=None, prop_delay_s=1e-9)  # a link takes no time but 1 ns
    spec = NetworkSpec(workers=4, up=free, down=free, switch=SwitchSpec(None, 0.0), seed=2)
    r = simulate(shape, spec, steps=2)
    for s in r["steps"]:
        # what is left is the last bucket's round trips: a few ns against 1.55 ms of compute
        assert 0 <= s["exposed_comm_s"] < 1e-7
        assert s["iteration_s"] == pytest.approx(shape.compute_s + shape.optimizer_s, abs=1e-7)
    with pytest.raises(ValueError, match="needs a propagation delay"):
        LinkSpec(rate_bps=None, prop_delay_s=0.0)


def test_zero_compute_is_the_sequential_schedule():
    """With no compute, a step is today's sequential timing: one allreduce per bucket, in
    DDP's order, one after the other, as `ina sim allreduce` runs them."""
    w = toy()
    zero = LayerTimes(tuple(0.0 for _ in w.layers), tuple(0.0 for _ in w.layers), 0.0)
    shape = shape_of(w, zero, 4)
    r = simulate(shape, SPEC, steps=2, seed=5)

    net = build(SPEC)
    workers = workers_for(net)
    block = np.random.default_rng(5).standard_normal(GRADIENT_BLOCK, dtype=np.float32) * 1e-2
    grads = [np.resize(block, n) for n in shape.buckets]

    def program(k):
        ends = []
        for _ in range(2):
            t0 = net.now
            for b, x in enumerate(grads):
                yield from workers[k].allreduce_steps(x, key=b)
            ends.append(net.now - t0)
        return ends

    per = net.run([program(k) for k in range(SPEC.workers)])
    expected = [max(p[s] for p in per) for s in range(2)]
    assert [s["iteration_s"] for s in r["steps"]] == pytest.approx(expected, rel=0, abs=1e-15)


def test_overlap_hides_communication_behind_backward():
    """A late, large backward layer: the first bucket's allreduce runs during it."""
    w = toy(bwd=(1e-4, 1e-4, 1e-4, 5e-3))
    shape = shape_of(w, times_of(w), 4)
    r = simulate(shape, SPEC, steps=2)
    again = simulate(shape_of(w, times_of(w), 4), SPEC, steps=2)
    assert r["steps"] == again["steps"]  # deterministic
    s = r["steps"][1]
    # bucket 0 (ready at the start of backward's 4th ms) is hidden: only the last bucket shows
    last_alone = simulate(
        shape_of(
            Workload("one", (Layer("x", (shape.buckets[1],)),), 8),
            LayerTimes((0.0,), (0.0,), 0.0),
            4,
        ),
        SPEC,
        steps=2,
    )["steps"][1]["iteration_s"]
    assert s["exposed_comm_s"] == pytest.approx(last_alone, rel=0.25)


def test_stragglers_slow_the_step_and_timing_only_agrees_with_every_worker():
    w = toy()
    shape = shape_of(w, times_of(w), 4)
    fast = LinkSpec(rate_bps=25e9)
    base = NetworkSpec(workers=4, up=fast, down=fast, seed=3, rto_s=1e-3, min_rto_s=2e-4)
    slow = parse_stragglers("slow:2=1.8")
    f = slow.factor_matrix(4, 3, 0)
    everyone = simulate(shape, base, steps=3, factors=f)
    alone = simulate(shape, base, steps=3)
    one = simulate(shape, replace(base, timing_only=True), steps=3, factors=f)
    assert everyone["exact"]
    for a, b, c in zip(everyone["steps"][1:], one["steps"][1:], alone["steps"][1:], strict=True):
        assert a["iteration_s"] == pytest.approx(b["iteration_s"], rel=1e-9)
        assert a["iteration_s"] > c["iteration_s"] + 0.7 * shape.compute_s
    assert one["simulated_workers"] == 2  # the slow worker, and a class of the three others
    # jitter: every worker differs, so timing only simulates each as itself (4 classes)
    jitter = parse_stragglers("jitter:0.2").factor_matrix(4, 3, 0)
    everyone = simulate(shape, base, steps=3, factors=jitter)
    classes = simulate(shape, replace(base, timing_only=True), steps=3, factors=jitter)
    assert classes["simulated_workers"] == 4
    for a, b in zip(everyone["steps"], classes["steps"], strict=True):
        assert a["iteration_s"] == pytest.approx(b["iteration_s"], rel=1e-9)


def test_ring_of_bf16_gradients_sends_half_the_bytes():
    w = toy()
    shape = shape_of(w, times_of(w), 2)
    r32 = simulate(shape, SPEC, steps=1, comm=CommConfig("ring", bytes_per_value=4))
    r16 = simulate(shape, SPEC, steps=1, comm=CommConfig("ring", bytes_per_value=2))
    assert r16["bytes_sent_per_worker"] < 0.51 * r32["bytes_sent_per_worker"]
    assert r16["steps"][0]["iteration_s"] < r32["steps"][0]["iteration_s"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("slow:3", "use slow:WORKER=FACTOR"),
        ("slow:x=2", "use slow:WORKER=FACTOR"),
        ("jitter:-1", "must be > 0"),
        ("jitter:abc", "is not a number"),
        ("bursty:2", "use none"),
    ],
)
def test_bad_stragglers_are_one_line_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_stragglers(text)


def test_a_straggler_out_of_range_names_the_range():
    with pytest.raises(ValueError, match="worker 9 of 4"):
        parse_stragglers("slow:9=2").factor_matrix(4, 1, 0)


def test_jitter_is_seeded_and_has_mean_one():
    j = parse_stragglers("jitter:0.1")
    a, b = j.factor_matrix(64, 200, 7), j.factor_matrix(64, 200, 7)
    assert np.array_equal(a, b) and a.mean() == pytest.approx(1, abs=0.01)


def test_roofline_takes_the_larger_bound_and_refuses_a_missing_precision():
    h100 = device("h100")
    w = Workload("w", (Layer("a", (10,), fwd_flops=989.5e12, fwd_bytes=1.0),), 1, "bf16")
    t = layer_times(w, h100, 1.0)
    assert t.fwd[0] == pytest.approx(1.0)  # one second of bf16 tensor-core peak
    w2 = Workload("w", (Layer("a", (10,), fwd_flops=1.0, fwd_bytes=3.35e12),), 1, "fp32")
    assert layer_times(w2, h100, 0.5).fwd[0] == pytest.approx(2.0)  # memory-bound, half
    with pytest.raises(ValueError, match="v100 has no bf16"):
        layer_times(w, device("v100"))
    with pytest.raises(ValueError, match=r"efficiency must be in \(0, 1\]"):
        layer_times(w, h100, 1.5)


def test_dc2_in_the_step_model_lowers_the_density_on_a_slow_link():
    w = toy()
    shape = shape_of(w, times_of(w), 4)
    slow = NetworkSpec(workers=4, seed=1, rto_s=5e-3, min_rto_s=1e-3).with_links(rate_bps=1e9)
    r = simulate(shape, slow, steps=6, comm=CommConfig(law="ownq"))
    densities = [s["density"] for s in r["steps"]]
    assert densities[0] == 1.0 and min(densities) < 0.5
    assert r["exact"] is None  # compressed: the codec checks its own decode
    with pytest.raises(ValueError, match="choose one of"):
        CommConfig(law="ownq", density=0.1)


def test_mergecomp_groups_cover_the_gradients_in_order_and_run_exactly():
    from ina.sim.step import mergecomp_groups

    w = toy()
    groups = mergecomp_groups(w, times_of(w), SPEC, CodecModel(scale=0.0), points=4)
    flat = [k for g in groups for k in g]
    assert flat == list(range(len(w.gradients)))  # contiguous, in backward order, all of them
    merged = shape_of(replace(w, buckets=groups), times_of(w), 4)
    assert sum(merged.buckets) == w.params
    assert simulate(merged, SPEC, steps=1)["exact"]


def test_a_tree_of_switches_runs_the_step_exactly():
    from ina import topology

    w = toy()
    shape = shape_of(w, times_of(w), 4)
    fabric = topology.load("two_level:2x2")
    r = simulate(shape, replace(SPEC, topology=fabric), steps=2)
    flat = simulate(shape, SPEC, steps=2)
    assert r["exact"] and r["steps"][1]["iteration_s"] > flat["steps"][1]["iteration_s"]
