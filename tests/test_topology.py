"""Topologies from data and hierarchical aggregation (issue 14, item 2).

Topology files parse into an aggregation tree, with a one-line error naming the culprit for
bad ones; a two-level tree sums exactly under loss on every level, in the simulator and
through the UDP switch model (leaf and spine pipelines served on loopback sockets). The P4
program's side is the ``hierarchical_leaf`` differential trace (tests/test_differential.py).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import threading

import numpy as np
import pytest
from conftest import ina_in_process

from ina.host import quantize
from ina.host.allreduce import Worker
from ina.host.launch import free_udp_ports
from ina.host.transport import WorkerConfig
from ina.protocol import Counter
from ina.sim.allreduce import run as sim_allreduce
from ina.sim.network import LinkSpec, NetworkSpec, SwitchSpec
from ina.switch_model.impair import Impairment
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.run import install_job_spec
from ina.switch_model.server import SwitchServer
from ina.topology import TopologyError, load, parse, two_level

TWO_LEVEL = two_level(2, 2)


def bad(mutate) -> str:
    """The one-line error for the two-level topology changed by ``mutate(data)``."""
    data = copy.deepcopy(TWO_LEVEL)
    mutate(data)
    with pytest.raises(TopologyError) as e:
        parse(data, "t")
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_two_level_tree():
    f = parse(TWO_LEVEL, "two_level_2x2")
    assert f.root == "s1" and f.top_down() == ["s1", "l1", "l2"]
    assert f.contributors("s1") == ["l1", "l2"]
    assert f.contributors("l2") == ["h3", "h4"]
    assert [f.leaf_of(g) for g in range(4)] == [("l1", 0), ("l1", 1), ("l2", 0), ("l2", 1)]
    spine, leaf = f.job_spec("s1"), f.job_spec("l2")
    assert spine.parent is None and spine.num_workers == 2
    assert [(w.ip, w.port) for w in spine.workers] == [("10.0.0.253", 1), ("10.0.0.252", 2)]
    p = leaf.parent
    assert (p.worker_id, p.ip, p.port) == (1, "10.0.0.254", 3)  # l2 is s1's worker 1, via p3
    assert [(w.ip, w.udp_port, w.port) for w in leaf.workers] == [
        ("10.0.0.3", 50002, 1),
        ("10.0.0.4", 50003, 2),
    ]


def test_single_switch_file_is_a_one_switch_tree():
    f = load("bmv2_topologies/single_4.json")
    assert not f.hierarchical and f.contributors("s1") == ["h1", "h2", "h3", "h4"]
    assert f.job_spec("s1").parent is None


def test_bad_topologies_name_the_culprit():
    assert "unknown node 'h9'" in bad(lambda d: d["links"].append(["h9", "l1-p9"]))
    assert "unknown node 'x1-p1'" in bad(lambda d: d["links"].append(["h1", "x1-p1"]))
    assert "parent 's9' is not a switch" in bad(lambda d: d["switches"]["l1"].update(parent="s9"))
    assert "loop l1 -> s1 -> l1" in bad(lambda d: d["switches"]["s1"].update(parent="l1"))
    msg = bad(lambda d: d["switches"]["l2"].update(parent="l2"))
    assert "loop l2 -> l2" in msg
    assert "worker h4 is on no switch" in bad(
        lambda d: (
            d.update(links=[x for x in d["links"] if x[0] != "h4"])
            or d["ina"].update(workers=["h1", "h2", "h3", "h4"])
        )
    )
    assert "exactly one switch has no parent" in bad(lambda d: d["switches"]["l1"].pop("parent"))
    assert "l2 has no link to its parent s1" in bad(
        lambda d: d.update(links=[x for x in d["links"] if x[0] != "l2-p3"])
    )
    msg = bad(
        lambda d: d["switches"].update(l3={"parent": "s1"}) or d["links"].append(["l3-p1", "s1-p3"])
    )
    assert "switch l3 has no workers below it" in msg
    msg = bad(lambda d: d["links"].append(["l1-p7", "l2-p7"]))
    assert "neither the other's parent" in msg
    assert "port is used twice: l1-p1" in bad(lambda d: d["links"].append(["h4", "l1-p1"]))
    assert "more than 32 contributors" in bad(lambda d: d.update(two_level(1, 33)))


def test_bad_file_is_one_line_exit_2(tmp_path):
    path = tmp_path / "t.json"
    data = copy.deepcopy(TWO_LEVEL)
    data["links"].append(["h9", "l1-p9"])
    path.write_text(json.dumps(data))
    r = ina_in_process("sim", "allreduce", "--topology", str(path))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "unknown node 'h9'" in r.stderr


# -- timing only on a tree ----------------------------------------------------------------------


@pytest.mark.parametrize("switch_rate", [None, 20e9])
def test_timing_only_tree_matches_every_worker_simulated(switch_rate):
    """One representative path stands for a symmetric tree: from the second call on (the
    first also joins the run) the same simulated times to the nanosecond as simulating all
    12 workers, also where the switches' processing rate is the bottleneck (each switch
    weighs its contributions by their number, its parent's results once)."""
    fabric = load("two_level:3x4")
    link = LinkSpec(rate_bps=10e9, prop_delay_s=1e-6)
    times = []
    for timing_only in (False, True):
        spec = NetworkSpec(
            workers=12, topology=fabric, lanes=256, pool_size=64, up=link, down=link,
            switch=SwitchSpec(rate_bps=switch_rate, latency_s=1e-6), timing_only=timing_only,
        )  # fmt: skip
        times.append(sim_allreduce(spec, 100_000, 3)["call_seconds"][1:])
    assert times[0] == pytest.approx(times[1], rel=0, abs=1e-12)  # float sums in other orders
    # the processing rate matters: a 20 Gbit/s pipeline at the spine takes 3 leaves' packets
    assert switch_rate is None or times[0][0] > 100_000 * 4 * 8 * 3 / switch_rate


def test_timing_only_on_an_asymmetric_tree_simulates_a_class_per_leaf():
    data = two_level(2, 3)
    data["links"] = [link for link in data["links"] if link[0] != "h6"]  # leaves of 3 and 2
    del data["hosts"]["h6"]
    fabric = parse(data, "uneven")
    link = LinkSpec(rate_bps=10e9, prop_delay_s=1e-6)
    runs = [
        sim_allreduce(
            NetworkSpec(workers=5, topology=fabric, up=link, down=link, timing_only=t), 20_000, 2
        )
        for t in (False, True)
    ]
    assert [r["simulated_workers"] for r in runs] == [5, 2]  # a worker of each leaf
    assert runs[1]["call_seconds"] == pytest.approx(runs[0]["call_seconds"], rel=0, abs=1e-12)


# -- exact sums, every level lossy ------------------------------------------------------------


def test_a_tree_holds_more_workers_than_one_switch():
    """40 workers on two leaves of 20: each switch's bitmap holds its own contributors (20
    workers, or 2 leaves), the job counts 40 (every worker's int32 headroom is for 40)."""
    fabric = load("two_level:2x20")
    assert len(fabric.workers) == 40 and fabric.name == "two_level_2x20"
    link = LinkSpec(rate_bps=10e9, loss=0.02)
    spec = NetworkSpec(
        workers=40, topology=fabric, lanes=64, pool_size=16, up=link, down=link,
        rto_s=0.001, min_rto_s=0.0005, seed=5,
    )  # fmt: skip
    r = sim_allreduce(spec, 3_000, 2, seed=2)
    assert r["exact"] and r["retransmissions"] > 0
    assert quantize.mantissa_bits(40) == quantize.mantissa_bits(64) < quantize.mantissa_bits(32)
    # a worker's id is its bit on its own switch: never 32 or more, whatever the job's size
    with pytest.raises(ValueError, match="a switch's bitmap"):
        WorkerConfig(job_id=1, worker_id=32, num_workers=40)
    with pytest.raises(TopologyError, match=r"1\.\.32 switches or workers below each switch"):
        load("two_level:2x33")


@pytest.mark.parametrize("loss", [0.0, 0.05])
def test_simulated_two_level_sums_are_exact_under_loss(loss):
    fabric = parse(two_level(2, 3), "two_level_2x3")
    link = LinkSpec(rate_bps=10e9, loss=loss)
    spec = NetworkSpec(
        workers=6,
        topology=fabric,
        lanes=64,
        pool_size=16,
        up=link,
        down=link,
        rto_s=0.001,
        min_rto_s=0.0005,
        seed=3,
    )
    r = sim_allreduce(spec, 5_000, 2, seed=1)
    assert r["exact"]
    if loss:
        assert r["retransmissions"] > 0
    # same simulated times on a second run (deterministic from the seed)
    assert sim_allreduce(spec, 5_000, 2, seed=1)["call_seconds"] == r["call_seconds"]


def test_udp_model_two_level_sums_are_exact_under_loss():
    """Three switch models (spine, two leaves) on loopback sockets, each dropping,
    duplicating and reordering its traffic both ways; six workers on real UDP sockets, two
    runs one after the other (the second must never see the first's sums: every run joins
    the spine's run through its leaf and gets a new epoch)."""
    fabric = parse(two_level(2, 3), "two_level_2x3")
    lanes, pool = 64, 16
    servers: dict[str, SwitchServer] = {}
    threads = []
    impairs = {}
    for i, s in enumerate(fabric.top_down()):
        impairs[s] = Impairment(loss=0.05, dup=0.02, reorder=0.3, seed=i)
        servers[s] = SwitchServer(
            Pipeline(lanes=lanes, pool_total=256), bind=("127.0.0.1", 0), impairment=impairs[s]
        )
    ports = free_udp_ports(len(fabric.workers))
    hosts = {h: ("127.0.0.1", p) for h, p in zip(fabric.workers, ports, strict=True)}
    addresses = {s: (*srv.address, "00:00:00:00:00:00") for s, srv in servers.items()}
    for s, srv in servers.items():
        spec = fabric.job_spec(s, addresses, hosts)
        install_job_spec(srv.pipeline, dataclasses.replace(spec, pool_size=pool))
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll": 0.01}, daemon=True)
        t.start()
        threads.append(t)
    n = len(fabric.workers)
    rng = np.random.default_rng(7)
    runs = [[rng.standard_normal(3_000).astype(np.float32) for _ in range(n)] for _ in range(2)]
    results: dict[int, object] = {}
    # The second run starts once every worker has finished the first, as two invocations
    # do: a JOIN while a worker still retransmits for the last run's final result starts
    # the new run under it, and that worker's packets are STALE from then on (on one switch
    # as on a tree: docs/protocol.md, "Runs").
    between = threading.Barrier(n, timeout=120)

    def work(g: int) -> None:
        leaf, local = fabric.leaf_of(g)
        cfg = WorkerConfig(
            job_id=fabric.job_id,
            worker_id=local,
            num_workers=n,
            switch=servers[leaf].address,
            bind=hosts[fabric.workers[g]],
            pool_size=pool,
            lanes=lanes,
            rto=0.01,
            min_rto=0.005,
        )
        try:
            out = []
            for i, xs in enumerate(runs):  # each Worker is a new run (a new JOIN nonce)
                if i:
                    between.wait()
                with Worker(cfg) as w:
                    w.allreduce(xs[g])
                    out.append((w.last, w.last_int_sums, w.transport.core.epoch))
            results[g] = out
        except BaseException as e:  # examined below
            results[g] = e

    try:
        workers = [threading.Thread(target=work, args=(g,), daemon=True) for g in range(n)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(120)
            assert not t.is_alive(), "a worker hung"
    finally:
        for srv in servers.values():
            srv.stop()
        for t in threads:
            t.join(5)
        for srv in servers.values():
            srv.close()
    for g, r in results.items():
        assert not isinstance(r, BaseException), f"worker {g}: {r!r}"
    for i, xs in enumerate(runs):
        exps = results[0][i][0].exponents
        expected = np.zeros(3_000, np.int32)
        for x in xs:
            expected += quantize.encode(x, exps, lanes, n)
        for r in results.values():
            assert np.array_equal(r[i][1], expected)  # bit-exact, every worker, both leaves
    epochs = {tuple(e for _, _, e in r) for r in results.values()}
    ((first, second),) = epochs  # every worker joined the same two runs
    assert second > first
    leaf = servers["l1"].pipeline.counters.stats
    spine = servers["s1"].pipeline.counters.stats
    assert leaf[Counter.UP_PACKETS, 0] > 0 and spine[Counter.AGGREGATED, 0] > 0
    assert all(i.dropped > 0 for i in impairs.values())


def three_levels() -> dict:
    """A top switch t over two middle switches, each over two leaves of two workers."""
    data = {"hosts": {}, "switches": {"t": {}}, "links": [], "ina": {"pool_size": 16}}
    n = 0
    for m in (1, 2):
        data["switches"][f"m{m}"] = {"parent": "t"}
        data["links"].append([f"m{m}-p9", f"t-p{m}"])
        for leaf in (1, 2):
            name = f"l{m}{leaf}"
            data["switches"][name] = {"parent": f"m{m}"}
            data["links"].append([f"{name}-p9", f"m{m}-p{leaf}"])
            for p in (1, 2):
                n += 1
                data["hosts"][f"h{n}"] = {"ip": f"10.0.0.{n}/24", "mac": f"00:00:0a:00:00:{n:02x}"}
                data["links"].append([f"h{n}", f"{name}-p{p}"])
    return data


def test_three_levels_are_exact_under_loss_in_the_simulator():
    """A middle switch is a leaf of the top and a parent of its leaves: results come down
    two levels, re-sends go up two levels."""
    fabric = parse(three_levels(), "three_levels")
    assert fabric.top_down()[:3] == ["t", "m1", "m2"] and len(fabric.workers) == 8
    assert fabric.job_spec("m2").parent.worker_id == 1
    link = LinkSpec(rate_bps=10e9, loss=0.03)
    spec = NetworkSpec(
        workers=8, topology=fabric, lanes=32, pool_size=16, up=link, down=link,
        rto_s=0.001, min_rto_s=0.0005, seed=5,
    )  # fmt: skip
    r = sim_allreduce(spec, 2_000, 2, seed=2)
    assert r["exact"] and r["retransmissions"] > 0


def test_loss_only_between_leaves_and_spine_is_repaired_by_the_workers():
    """20 % loss on the leaf-spine links only (the file's per-link ``loss``): partial sums
    and results lost there are re-sent by the leaves when their workers retransmit."""
    data = two_level(2, 2)
    data["links"] = [
        {"node1": a, "node2": b, "loss": 0.2} if a.startswith("l") else [a, b]
        for a, b in data["links"]
    ]
    fabric = parse(data, "lossy_spine")
    assert [k.loss for k in fabric.links if k.a_port is not None] == [0.2, 0.2]
    link = LinkSpec(rate_bps=10e9)
    spec = NetworkSpec(
        workers=4, topology=fabric, lanes=64, pool_size=16, up=link, down=link,
        rto_s=0.001, min_rto_s=0.0005,
    )  # fmt: skip
    r = sim_allreduce(spec, 5_000, 2, seed=4)
    assert r["exact"] and r["retransmissions"] > 0
    assert r["counters"]["duplicates"] > 0  # on the spine: leaves' re-sent partial sums
    msg = bad(lambda d: d["links"].append({"node1": "h9", "node2": "l1-p9", "loss": 2}))
    assert "loss must be in [0, 1)" in msg
