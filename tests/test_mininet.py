"""Mininet topologies (`bmv2_topologies`): the files, and a whole network with an allreduce.

The topology files are checked without root. The network test builds single_3 (three worker
hosts on one switch) in Mininet with the switch model on the switch's interfaces (and again
with BMv2 when ``simple_switch_grpc`` and the compiled program are there), pings across the
switch, runs ``ina allreduce`` on every host at once, checks the sums and the switch's
counters, tears it all down and checks that none of the interfaces, namespaces and processes
it made is left.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from bmv2_topologies import topology
from bmv2_topologies.network import (
    Target,
    cmdline_of,
    interface_exists,
    same_process,
    stop_leftovers,
)
from ina import topology as ina_topology
from ina.protocol import HEADER_BYTES, P4_LANES

HERE = Path(__file__).resolve().parent.parent / "bmv2_topologies"


# -- topology files (no root) -----------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_single_topologies_give_one_job_over_every_host(n):
    topo = topology.load(f"single_{n}")
    assert topo.workers == [f"h{i}" for i in range(1, n + 1)]
    spec = topo.job()
    assert spec.num_workers == n
    for w, addr in enumerate(spec.workers):
        assert addr.worker_id == w
        assert addr.ip == f"10.0.0.{w + 1}" and addr.port == w + 1
        assert addr.mac == f"00:00:0a:00:00:{w + 1:02x}"
        assert addr.udp_port == 50000 + w
    assert topo.forward_entries() == {a.mac: a.port for a in spec.workers}
    entries = topo.runtime_json()["table_entries"]
    assert [e["action_params"]["port"] for e in entries] == list(range(1, n + 1))
    assert topo.switch_ip == "10.0.0.254" and topo.switch_mac == "00:00:0a:00:00:fe"


def test_every_topology_file_parses():
    files = sorted(HERE.glob("*.json"))
    assert len(files) >= 4
    for f in files:
        data = json.loads(f.read_text())
        if len(data["switches"]) > 1:  # a tree of switches: hierarchical aggregation
            assert ina_topology.parse(data, f.stem).hierarchical
        else:
            topology.parse(data, f.stem)


def test_link_forms_bandwidth_delay_and_worker_order():
    data = {
        "hosts": {
            "h10": {"ip": "10.0.0.10/24", "mac": "00:00:0a:00:00:0a"},
            "h2": {"ip": "10.0.0.2/24", "mac": "00:00:0a:00:00:02"},
        },
        "switches": {"s1": {}},
        "links": [["h10", "s1-p1", "0ms", 100], {"node1": "s1-p2", "node2": "h2", "delay": "5ms"}],
    }
    topo = topology.parse(data)
    assert topo.workers == ["h2", "h10"]  # natural order
    assert [(lk.host, lk.port, lk.bw, lk.delay) for lk in topo.links] == [
        ("h10", 1, 100, None),
        ("h2", 2, None, "5ms"),
    ]
    assert topo.job().workers[0].port == 2


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["switches"].update({"s2": {}}), "one"),
        (lambda d: d["links"].append(["h1", "s1-p9"]), "two links"),
        (lambda d: d["links"].__setitem__(1, ["h2", "s1-p1"]), "port is used twice"),
        (lambda d: d["links"].__setitem__(0, ["h1", "s7-p1"]), "unknown node 's7-p1'"),
        (lambda d: d.update(ina={"workers": ["h9"]}), "not a linked host"),
    ],
)
def test_bad_topologies_are_refused_with_a_reason(change, message):
    data = topology.single(2)
    change(data)
    with pytest.raises(ValueError, match=message):
        topology.parse(data)


def test_stop_without_state_file_does_nothing(tmp_path):
    assert stop_leftovers(tmp_path) == 0


def test_recorded_processes_are_recognised_by_command_line():
    me = {"pid": os.getpid(), "cmdline": cmdline_of(os.getpid())}
    assert same_process(me)
    assert not same_process({**me, "cmdline": ["something", "else"]})
    assert not same_process({"pid": 2**22 + 1, "cmdline": ["x"]})


# -- a whole network (root, Mininet) ---------------------------------------------------------


def _mininet_or_skip() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: Mininet makes namespaces and veths")
    from bmv2_topologies import mnpath

    try:
        mnpath.ensure_mininet()
    except mnpath.MininetMissing as e:
        pytest.skip(f"Mininet cannot run here: {e}")
    if shutil.which("ping") is None:
        pytest.skip(f"needs ping in the hosts: {mnpath.INSTALL_HINT}")


@pytest.mark.root
@pytest.mark.network
def test_the_cli_prints_what_mininets_prints(tmp_path, capfd, monkeypatch):
    """`make topo` opens Mininet's CLI: ``nodes`` and ``pingall`` must print their answers
    (the launcher builds the network at log level warning, which silenced them)."""
    _mininet_or_skip()
    from bmv2_topologies.launch import open_cli
    from bmv2_topologies.network import InaNetwork, choose_target

    commands = tmp_path / "commands"
    commands.write_text("nodes\npingall\n")  # then end of file: the CLI exits
    name = f"s{os.getpid() % 100000}"
    net = InaNetwork(
        topology.load("single_2"), choose_target("model", 128), state_dir=tmp_path,
        switch_name=name, pool_size=8,
    )  # fmt: skip
    try:
        net.start()
        with open(commands) as stdin:
            monkeypatch.setattr(sys, "stdin", stdin)
            open_cli(net)
    finally:
        net.stop()
    out = "".join(capfd.readouterr())  # Mininet's log writes to stderr
    assert "available nodes are" in out and f"h1 h2 {name}" in out, out
    assert "Results: 0% dropped (2/2 received)" in out, out


@pytest.mark.root
@pytest.mark.network
@pytest.mark.parametrize(
    "kind",
    [
        "model",
        pytest.param(
            "bmv2",
            marks=[
                pytest.mark.bmv2,
                pytest.mark.skipif(
                    shutil.which("simple_switch_grpc") is None,
                    reason="needs simple_switch_grpc (BMv2) on PATH",
                ),
            ],
        ),
    ],
)
def test_allreduce_across_three_mininet_hosts(kind, tmp_path, request):
    _mininet_or_skip()
    from bmv2_topologies.network import InaNetwork, choose_target

    # BMv2 runs the program compiled for this session (p4_program skips without p4c)
    program = None
    if kind == "bmv2":
        built = request.getfixturevalue("p4_program")
        program = (built.json, built.p4info)
    topo = topology.load("single_3")
    target = choose_target(kind, 128 if kind == "model" else None, program=program)
    assert isinstance(target, Target) and target.kind == kind
    # a switch name of our own: its interfaces live in the root namespace
    name = f"s{os.getpid() % 100000}"
    net = InaNetwork(topo, target, state_dir=tmp_path, switch_name=name, pool_size=32)
    made_ifs: list[str] = []
    pids: list[int] = []
    try:
        net.start()
        made_ifs = list(net.state.interfaces)
        assert sorted(made_ifs) == [f"{name}-eth{i}" for i in (1, 2, 3)]
        pids = [p["pid"] for p in net.state.processes]
        assert (tmp_path / "state.json").exists()

        ping = net.host("h1").cmd("ping -c 1 -W 2 10.0.0.3")
        assert " 0% packet loss" in ping, ping

        size = 30_000
        args = ["--size", str(size), "--iters", "2"]
        cmds = {h: net.worker_cmd("allreduce", w, args) for w, h in enumerate(topo.workers)}
        results = net.run_on_hosts(cmds, timeout=120)
        for h, (rc, text) in results.items():
            assert rc == 0 and "allreduce: OK, every sum exact" in text, f"{h}:\n{text}"
        c = net.counters()
    finally:
        net.stop()

    lanes = target.lanes
    chunks = -(-size // lanes)
    assert c["drop_malformed"][0] == c["drop_unknown_job"][0] == c["drop_bad_worker"][0] == 0
    assert c["drop_bad_slot"][0] == 0
    # every slot completes with each worker's contribution counted exactly once
    assert c["results"][0] >= 2 * chunks  # data rounds of 2 calls, plus meta rounds
    assert c["aggregated"][0] == 3 * c["results"][0]
    # every packet in is one of: a counted contribution, a counted JOIN, a duplicate, stale
    counted = c["aggregated"][0] + c["joins"][0] + c["duplicates"][0] + c["drop_stale"][0]
    assert counted == c["packets_in"][0]
    # result copies: 3 per completed slot and per completed run join (docs/protocol.md)
    runs = c["runs"][0]
    assert c["result_packets"][0] == 3 * (c["results"][0] + runs) + c["retx_replies"][0]
    frame = 42 + HEADER_BYTES + 4 * lanes
    assert c["packets_in"][1] == c["packets_in"][0] * frame
    per_worker = [c[f"worker_contributions[0][{w}]"][0] for w in range(3)]
    assert per_worker == [c["results"][0]] * 3

    # nothing we made is left: interfaces, host namespaces (their shells), processes
    assert not [i for i in made_ifs if interface_exists(i)]
    assert not [p for p in pids if cmdline_of(p) is not None]
    assert not (tmp_path / "state.json").exists()
    if kind == "bmv2":
        assert lanes == P4_LANES


@pytest.mark.root
@pytest.mark.network
@pytest.mark.parametrize(
    "kind",
    [
        "model",
        pytest.param(
            "bmv2",
            marks=[
                pytest.mark.bmv2,
                pytest.mark.skipif(
                    shutil.which("simple_switch_grpc") is None,
                    reason="needs simple_switch_grpc (BMv2) on PATH",
                ),
            ],
        ),
    ],
)
def test_two_level_allreduce_in_mininet(kind, tmp_path, request):
    """two_level_2x2: a spine and two leaves, each its own switch process; the leaves send
    their racks' partial sums up, the spine's result comes back down; every sum exact."""
    _mininet_or_skip()
    from bmv2_topologies.network import choose_target
    from bmv2_topologies.tree import TreeNetwork

    program = None
    if kind == "bmv2":
        built = request.getfixturevalue("p4_program")
        program = (built.json, built.p4info)
    fabric = ina_topology.load(HERE / "two_level_2x2.json")
    target = choose_target(kind, 128 if kind == "model" else None, program=program)
    prefix = f"t{os.getpid() % 10000}"  # interfaces of our own in the root namespace
    net = TreeNetwork(fabric, target, state_dir=tmp_path, pool_size=32, prefix=prefix)
    made_ifs: list[str] = []
    try:
        net.start()
        made_ifs = list(net.state.interfaces)
        ping = net.host("h1").cmd("ping -c 1 -W 2 10.0.0.4")  # across the spine
        assert " 0% packet loss" in ping, ping
        size = 20_000
        args = ["--size", str(size), "--iters", "2"]
        cmds = {h: net.worker_cmd("allreduce", w, args) for w, h in enumerate(fabric.workers)}
        results = net.run_on_hosts(cmds, timeout=180)
        for h, (rc, text) in results.items():
            assert rc == 0 and "allreduce: OK, every sum exact" in text, f"{h}:\n{text}"
        c = net.all_counters()
    finally:
        net.stop()
    spine, leaves = c["s1"], [c["l1"], c["l2"]]
    # every slot completes once on every switch; each leaf is one contributor of the spine
    assert spine["aggregated"][0] == 2 * spine["results"][0]
    for leaf in leaves:
        assert leaf["results"][0] == spine["results"][0]
        assert leaf["aggregated"][0] == 2 * leaf["results"][0]
        assert leaf["up_packets"][0] >= leaf["results"][0]  # partial sums (and re-sends)
        assert leaf["runs"][0] == spine["runs"][0] == 1
    assert not [i for i in made_ifs if interface_exists(i)]
    assert not (tmp_path / "state.json").exists()
