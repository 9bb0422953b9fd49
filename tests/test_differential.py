"""Differential tests: the same traces on every available target, byte for byte.

Invariant 2 of the design (docs/architecture.md), "the switch model is the P4 program": each
named trace of `differential.traces` is replayed on a clean switch of every target, installed
through the same P4Runtime control plane (`ina.control.jobs.install_job`, ``forward_table``
writes), and every target must send the model's frames (bytes, per egress port, in order) and
end with the model's counters (``ina_stats`` and ``worker_contributions``, packets and
bytes, read over P4Runtime):

- ``model``: `ina.switch_model.frames.FramePipeline` in this process, always; it is also
  checked against each trace's own expectations, and one batch against frame by frame;
- ``model-veth``: the same model as a process on veths (``ina.switch_model.rawio``), as root;
- ``bmv2``: ``simple_switch_grpc`` running ``ina/p4/ina.p4`` compiled by ``p4c-bm2-ss``, on
  veths, as root with both tools on PATH (``PATH=PREFIX/bin:$PATH, docs/testing.md``).

A target that cannot run here is skipped with the reason. docs/testing.md has the details.
"""

from __future__ import annotations

import functools
import os
import random

import grpc
import pytest
from conftest import require_bmv2_thrift
from differential.fuzz import read_state
from differential.targets import (
    ModelTarget,
    Replay,
    Target,
    differences,
    install_topology,
    veth_target_for,
)
from differential.traces import TRACES as TRACE_FNS
from differential.traces import Topology, TraceBuilder, build, default_topology

from ina.control import jobs
from ina.control.jobs import install_job, remove_job
from ina.control.p4rt import DELETE, INSERT, MODIFY, P4RuntimeError, UpdateError
from ina.p4.entities import MAX_MCAST_GROUP, REGISTERS
from ina.protocol import NUM_COUNTERS, Flag, Op
from ina.switch_model.tables import JobSpec, WorkerAddress

SEED = int(os.environ.get("INA_TRACE_SEED", "0"))  # another seed explores other traces
TOPO = default_topology()
NAMES = list(TRACE_FNS)


@functools.cache
def trace_named(name: str):
    """A trace, built when a test first needs it (not at collection, in every process)."""
    return build(name, TOPO, SEED)


@pytest.fixture
def trace(request):
    return trace_named(request.param)


# -- targets ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model():
    target = ModelTarget()
    yield target
    target.close()


@pytest.fixture(scope="module")
def model_replays(model):
    """The model's replay of a trace, computed once per module."""
    done: dict[str, Replay] = {}

    def replay(trace) -> Replay:
        if trace.name not in done:
            done[trace.name] = model.replay(TOPO, trace)
        return done[trace.name]

    return replay


@pytest.fixture(scope="module", params=["model-veth", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def veth_target(request, tmp_path_factory):
    """A switch on veths: the model as a process (root), or BMv2 (root, tools on PATH)."""
    target = veth_target_for(request.param, TOPO, request.config, tmp_path_factory)
    yield target
    target.close()


# -- the traces --------------------------------------------------------------------------------


@pytest.mark.parametrize("trace", NAMES, indirect=True)
def test_trace_does_what_it_says_on_the_model(trace, model_replays):
    replay = model_replays(trace)
    for name, packets in trace.expect.items():
        assert replay.counters[name][0] == packets, f"{trace.name}: {name}"


@pytest.mark.parametrize("trace", NAMES, indirect=True)
def test_one_batch_equals_frame_by_frame_on_the_model(trace, model):
    runs = []
    for batch in (False, True):
        model.reset()
        install_topology(model.conn, TOPO)
        runs.append(Replay(model.run(trace.frames, batch=batch), model.local_counters()))
    assert differences(runs[1], runs[0], "one batch") == []


@pytest.mark.network
@pytest.mark.root
@pytest.mark.parametrize("trace", NAMES, indirect=True)
def test_trace_on_veths_equals_the_model(trace, veth_target, model_replays):
    got = veth_target.replay(TOPO, trace)
    assert differences(got, model_replays(trace), veth_target.name) == []


# -- replica order on a shared port ------------------------------------------------------------


def regrouped(target: Target, descending: bool) -> Replay:
    """Two rounds of job 5 after its group was written again with its replicas in ascending
    or descending (port, rid) order; workers 0 and 2 are both behind port 2."""
    spec = TOPO.job(5)
    replicas = sorted(((w.port, w.worker_id) for w in spec.workers), reverse=descending)
    target.reset()
    install_topology(target.conn, TOPO)
    conn = target.conn
    conn.write([conn.update(MODIFY, conn.multicast_group(spec.mcast_grp, replicas))])
    b = TraceBuilder(TOPO, random.Random(f"{SEED}:regrouped"))
    b.round(5, 0)
    b.round(5, 1)
    return Replay(target.run(b.frames), target.counters())


@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
def test_a_modify_keeps_the_replica_order_the_insert_made_on_the_model(model, descending):
    """BMv2 keeps a group's nodes across a MODIFY that lists the same replicas in another
    order (`ina.switch_model.replica_order`): the copies leave as the install made them."""
    ports = {w.udp_port: w.worker_id for w in TOPO.job(5).workers}
    out = regrouped(model, descending).outputs
    rids = [ports[int.from_bytes(f[36:38], "big")] for f in out[2]]  # UDP destination port
    assert rids == [2, 0, 2, 0] and len(out[3]) == 2


@pytest.mark.network
@pytest.mark.root
@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
def test_replica_order_whatever_the_group_order_on_veths(veth_target, model, descending):
    want = regrouped(model, descending)
    got = regrouped(veth_target, descending)
    assert differences(got, want, veth_target.name) == []


def fan_out_job(topo: Topology) -> JobSpec:
    """Job 9: one worker (every packet completes its slot) on host 1; its group is written
    by `replica_sweep`."""
    h1 = topo.host("h1")
    return JobSpec(
        job_id=9,
        num_workers=1,
        pool_base=0,
        pool_size=2,
        workers=(WorkerAddress(9, 0, h1.ip, SWEEP_UDP, h1.mac, h1.port),),
        job_index=1,
        mcast_grp=3,
    )


SWEEP_UDP = 53000  # a copy for replica id r goes to UDP port SWEEP_UDP + r
SWEEP_MAX = 64


def replica_sweep(
    target: Target, sizes=range(1, SWEEP_MAX + 1)
) -> dict[str, list[tuple[int, int]]]:
    """Groups of 1..64 replicas spread over the host ports (several replica ids on
    every port), written by INSERT in ascending, descending and a random order, then
    rewritten by a MODIFY that drops a few and adds others back: after each write one
    packet, and the (port, replica id) of its copies, port by port, in the order they left
    each port."""
    spec = fan_out_job(TOPO)
    ports = [h.port for h in TOPO.hosts]
    rng = random.Random(f"{SEED}:replica-sweep")
    b = TraceBuilder(Topology(TOPO.switch_mac, TOPO.switch_ip, TOPO.hosts, (spec,)), rng)
    target.reset()
    conn = target.conn
    install_job(conn, spec)
    h1 = TOPO.host("h1")
    conn.write(
        [
            conn.update(
                INSERT,
                conn.table_entry(
                    "worker_table",
                    {"job_id": 9, "worker_id": rid},
                    "set_worker",
                    {"mac": h1.mac, "ip": h1.ip, "udp_port": SWEEP_UDP + rid},
                ),
            )
            for rid in range(1, SWEEP_MAX)  # (0: the job's worker)
        ]
    )
    seq = 0
    seen: dict[str, list[tuple[int, int]]] = {}

    def send(name: str) -> None:
        nonlocal seq
        b.frames.clear()
        b.ina(9, 0, seq)
        seq += 1
        copies = [
            (port, int.from_bytes(f[36:38], "big") - SWEEP_UDP)
            for port, frames in sorted(target.run(b.frames).items())
            for f in frames
        ]
        seen[name] = copies

    def write(kind, replicas) -> None:
        conn.write([conn.update(kind, conn.multicast_group(spec.mcast_grp, replicas))])

    for n in sizes:
        replicas = [(ports[rid % len(ports)], rid) for rid in range(n)]
        shuffled = rng.sample(replicas, n)
        for order, listed in (
            ("ascending", replicas),
            ("descending", replicas[::-1]),
            ("random", shuffled),
        ):
            conn.write([conn.update(DELETE, conn.multicast_group(spec.mcast_grp, []))])
            write(INSERT, listed)
            send(f"{n} {order}")
        # a MODIFY: some replicas out, the rest in another order, the dropped ones back last
        out = set(rng.sample(range(n), n // 3))
        kept = [r for r in shuffled if r[1] not in out]
        write(MODIFY, rng.sample(kept, len(kept)) + [r for r in replicas if r[1] in out])
        send(f"{n} modify")
    return seen


@pytest.mark.network
@pytest.mark.root
def test_replica_sweep_on_veths_equals_the_model(veth_target, model):
    # BMv2 every size; the model as a process (the same code as in this one) a few, around
    # the map's rehash at 14 and the largest
    sizes = range(1, SWEEP_MAX + 1) if veth_target.name == "bmv2" else (1, 2, 13, 14, 15, 64)
    want = replica_sweep(model, sizes)
    ports = [h.port for h in TOPO.hosts]
    for name, copies in want.items():  # every replica once (the order is what differs)
        n = int(name.split()[0])
        assert sorted(copies) == sorted((ports[r % len(ports)], r) for r in range(n)), name
    got = replica_sweep(veth_target, sizes)
    assert {k: v for k, v in got.items() if v != want[k]} == {}


# -- status codes ------------------------------------------------------------------------------

OK = "OK"
# What each target answers; docs/control-plane.md lists where they differ ("Where the targets
# differ"). Out-of-range counter cells: BMv2 answers UNKNOWN, the model the spec's code.
STATUS = {
    "group 32767": {"model": OK, "bmv2": OK},
    "group 32768": {"model": "OUT_OF_RANGE", "bmv2": "OUT_OF_RANGE"},
    "group 65535": {"model": "OUT_OF_RANGE", "bmv2": "OUT_OF_RANGE"},
    "counter read beyond": {"model": "OUT_OF_RANGE", "bmv2": "UNKNOWN"},
    "counter write beyond": {"model": "OUT_OF_RANGE", "bmv2": "UNKNOWN"},
}


def status_codes(target: Target) -> dict[str, str]:
    """The code each of `STATUS`'s requests gets from a clean ``target``."""
    target.reset()
    conn = target.conn

    def code(fn) -> str:
        try:
            fn()
        except P4RuntimeError as e:
            return "/".join(sorted(c.name for c in e.codes))
        return OK

    def group(gid: int):
        return lambda: conn.write([conn.update(INSERT, conn.multicast_group(gid, [(1, 0)]))])

    beyond = conn.counter_entry("ina_stats", NUM_COUNTERS, packets=1, bytes_=1)
    return {
        "group 32767": code(group(MAX_MCAST_GROUP)),
        "group 32768": code(group(MAX_MCAST_GROUP + 1)),
        "group 65535": code(group(0xFFFF)),
        "counter read beyond": code(
            lambda: conn.read([conn.counter_entry("ina_stats", NUM_COUNTERS)])
        ),
        "counter write beyond": code(lambda: conn.write([conn.update(MODIFY, beyond)])),
    }


def test_status_codes_on_the_model(model):
    assert status_codes(model) == {k: v["model"] for k, v in STATUS.items()}


@pytest.mark.network
@pytest.mark.root
def test_status_codes_on_veths(veth_target):
    kind = "bmv2" if veth_target.name == "bmv2" else "model"
    assert status_codes(veth_target) == {k: v[kind] for k, v in STATUS.items()}


# -- pool resets through the control plane ---------------------------------------------------


def full_pool_job(topo: Topology) -> JobSpec:
    """Job 9: hosts 1 and 2, the whole 1024-slot pool."""
    h1, h2 = topo.host("h1"), topo.host("h2")
    return JobSpec(
        job_id=9,
        num_workers=2,
        pool_base=0,
        pool_size=1024,
        workers=(
            WorkerAddress(9, 0, h1.ip, 52000, h1.mac, h1.port),
            WorkerAddress(9, 1, h2.ip, 52001, h2.mac, h2.port),
        ),
        job_index=1,
        mcast_grp=3,
    )


def reinstall(target: Target) -> Replay:
    """Jobs installed again over used pools start fresh: seq 0 aggregates anew instead of
    meeting the old copy (a DUPLICATE answered with the old result). On BMv2 this is
    install_job's Thrift reset: ``register_reset`` when the job is alone, else
    ``register_write`` of its own ``slot_count`` cells (job 3's half-full slot survives)."""
    big = full_pool_job(TOPO)
    topo = Topology(TOPO.switch_mac, TOPO.switch_ip, TOPO.hosts, (*TOPO.jobs, big))
    b = TraceBuilder(topo, random.Random(f"{SEED}:reinstall"))
    outputs: dict[int, list[bytes]] = {}

    def send() -> None:
        for port, frames in target.run(b.frames).items():
            outputs.setdefault(port, []).extend(frames)
        b.frames.clear()

    thrift = target.thrift_port
    if thrift is not None:
        require_bmv2_thrift(thrift)
    target.reset()
    install_job(target.conn, big, thrift_port=thrift)  # 1024 slots: 2048 cells to reset
    for seq in (0, 1023, 1024):
        b.round(9, seq)
    send()
    remove_job(target.conn, 9)
    install_job(target.conn, big, thrift_port=thrift)  # alone on the switch
    b.round(9, 0)
    send()
    remove_job(target.conn, 9)
    install_topology(target.conn, TOPO, thrift_port=thrift)
    b.round(1, 0)
    b.ina(3, 0, 0)  # job 3's slot 0: half full
    send()
    remove_job(target.conn, 1)
    install_job(target.conn, TOPO.job(1), thrift_port=thrift)  # jobs 2 and 3 stay
    b.round(1, 0)
    b.ina(3, 1, 0)  # completes job 3's slot with both contributions
    send()
    return Replay(outputs, target.counters())


def test_reinstalled_jobs_start_fresh_on_the_model(model):
    replay = reinstall(model)
    c = replay.counters
    assert c["results"][0] == 7 and c["aggregated"][0] == 16
    assert c["duplicates"][0] == 0 and c["drop_stale"][0] == 0


@pytest.mark.network
@pytest.mark.root
def test_reinstalled_jobs_start_fresh_on_veths(veth_target, model):
    want = reinstall(model)
    got = reinstall(veth_target)
    assert differences(got, want, veth_target.name) == []


class NoRegisterWrites:
    """A P4Runtime session with a switch that, like BMv2, has no register writes."""

    def __init__(self) -> None:
        self.updates: list = []

    @staticmethod
    def update(kind, entity):
        return kind, entity

    @staticmethod
    def register_entry(name, index, value):
        return name, index, value

    def write(self, updates) -> None:
        updates = list(updates)
        self.updates += updates
        failed = UpdateError(0, grpc.StatusCode.UNIMPLEMENTED, "no register writes")
        raise P4RuntimeError(grpc.StatusCode.UNKNOWN, "write failed", (failed,) * len(updates))


def test_pool_reset_without_register_writes_probes_once(monkeypatch, caplog):
    """BMv2: one failed probe (not 2048 failed writes, whose error details overflow gRPC's
    metadata limit), then Thrift: register_reset when the job is alone, else its cells."""
    conn = NoRegisterWrites()
    job = full_pool_job(TOPO).entry()
    sent = []
    monkeypatch.setattr(jobs, "run_thrift_cli", lambda cmds, port: sent.append((cmds, port)))
    monkeypatch.setattr(jobs, "list_jobs", lambda c: {})
    assert not jobs.reset_pool(conn, job)  # no thrift port: a warning, nothing reset
    assert "NOT reset" in caplog.text and sent == []
    assert jobs.reset_pool(conn, job, thrift_port=9999)
    assert sent[-1] == ([f"register_reset {r.name}" for r in REGISTERS], 9999)
    monkeypatch.setattr(jobs, "list_jobs", lambda c: {1: TOPO.job(1).entry()})
    assert jobs.reset_pool(conn, job, thrift_port=9999)
    cells = sent[-1][0]
    assert cells[: 2 * 1024] == [f"register_write slot_count {i} 0" for i in range(2 * 1024)]
    i = job.job_index  # and the job's runs: no run joined yet
    runs = ("job_epoch", "join_bitmap", "join_count", "up_nonce", "up_joined")
    assert cells[2 * 1024 : 2 * 1024 + 5] == [f"register_write {name} {i} 0" for name in runs]
    assert cells[2 * 1024 + 5 :] == [f"register_write join_nonce {i * 32 + w} 0" for w in range(32)]
    assert len(conn.updates) == 3  # one probe per call


# -- a leaf's up_nonce when its parent entry goes and comes back mid-run -----------------------


def parent_entry_back_mid_run(target: Target) -> tuple[Replay, int]:
    """Job 6 (a leaf): a run joined through the parent; its parent_table entry deleted; a
    JOIN, now a flat new run; the entry inserted again; the JOIN that completes the local
    join. The frames out, and ``up_nonce`` of the job after it."""
    from ina.control.jobs import _parent_entity

    spec = TOPO.job(6)
    target.reset()
    install_topology(target.conn, TOPO)
    conn = target.conn
    b = TraceBuilder(TOPO, random.Random(f"{SEED}:parent-back"))
    spine = spec.parent
    parent = WorkerAddress(6, spine.worker_id, spine.ip, spine.udp_port, spine.mac, spine.port)
    b.ina(6, 0, 0xA0, op=Op.JOIN)
    b.ina(6, 1, 0xB1, op=Op.JOIN)  # complete: UP with 0xB1
    b.ina(6, 0, 0xB1, op=Op.JOIN, sender=parent, flags=Flag.RESULT, epoch=5)
    first = target.run(b.frames)
    conn.write([conn.update(DELETE, _parent_entity(conn, spec.parent))])
    b.frames.clear()
    b.ina(6, 0, 0xC2, op=Op.JOIN)  # no parent now: a flat new run
    second = target.run(b.frames)
    conn.write([conn.update(INSERT, _parent_entity(conn, spec.parent))])
    b.frames.clear()
    b.ina(6, 1, 0xD3, op=Op.JOIN)  # completes the local join, the parent back
    b.ina(6, 1, 0xD3, op=Op.JOIN, flags=Flag.RETX)  # and asks again
    third = target.run(b.frames)
    outputs = {p: first.get(p, []) + second.get(p, []) + third.get(p, [])
               for p in {*first, *second, *third}}  # fmt: skip
    # over Thrift on BMv2, whose P4Runtime server reads no registers
    state = read_state(target, [], [("up_nonce", spec.job_index)])
    return Replay(outputs, target.counters()), state.get(f"up_nonce[{spec.job_index}]", 0)


def test_the_leafs_up_nonce_names_its_current_run_as_the_p4_program_writes_it(model):
    """join_run.p4 writes up_nonce whenever a JOIN completes the local join while the job
    has a parent entry, whether or not that JOIN goes up (docs/protocol.md): the model too."""
    replay, nonce = parent_entry_back_mid_run(model)
    assert nonce == 0xD3
    assert replay.counters["runs"][0] >= 2 and replay.counters["joins"][0] == 4


@pytest.mark.network
@pytest.mark.root
def test_parent_entry_back_mid_run_on_veths(veth_target, model):
    want, want_nonce = parent_entry_back_mid_run(model)
    got, got_nonce = parent_entry_back_mid_run(veth_target)
    assert differences(got, want, veth_target.name) == [] and got_nonce == want_nonce
