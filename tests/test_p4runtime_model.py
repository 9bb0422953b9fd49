"""The switch model's P4Runtime service, driven by our control plane and by p4runtime-shell.

Real gRPC on 127.0.0.1 (a free port per test), no mocks: the same client code that drives
BMv2 installs jobs, reads counters and registers, and gets the P4Runtime error codes.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest
from conftest import bmv2_thrift_serving
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from ina import p4build
from ina.bench.bmv2 import notifications_args
from ina.cli import main as ina_main
from ina.control import jobs
from ina.control.counters import read_counters, reset_counters
from ina.control.counters_cli import main as counters_main
from ina.control.p4rt import (
    DEFAULT_DEVICE_ID,
    DELETE,
    INSERT,
    MODIFY,
    P4RuntimeError,
    SwitchConnection,
    encode_value,
)
from ina.p4 import entities
from ina.p4info import build_p4info, p4info_differences, read_p4info, write_p4info
from ina.procs import stop_process
from ina.protocol import FRAME_OVERHEAD, MAX_WORKERS, Counter, Flag, Header, Op, encode_packet
from ina.switch_model.p4runtime_server import start_server
from ina.switch_model.pipeline import MULTICAST, Pipeline, lanes_of
from ina.switch_model.tables import JobSpec, WorkerAddress, local_job

pytestmark = pytest.mark.network

LANES = 4
POOL = 64
SC = grpc.StatusCode


@pytest.fixture
def pipeline():
    return Pipeline(lanes=LANES, pool_total=POOL)


@pytest.fixture
def server(pipeline):
    srv = start_server(pipeline, "127.0.0.1:0")
    yield srv
    srv.stop(0)


@pytest.fixture
def conn(server):
    c = SwitchConnection(server.address, timeout=5)
    yield c
    c.close()


def packet(job_id, worker, slot, seq, lanes, flags=0, op=Op.SUM):
    h = Header(
        op=op, flags=flags, worker_id=worker, job_id=job_id, slot=slot, seq=seq, num_lanes=LANES
    )
    return encode_packet(h, np.asarray(lanes, dtype=np.int32))


def job_spec(job_id=3, num_workers=2, pool_base=8, pool_size=16, job_index=2):
    workers = tuple(
        WorkerAddress(
            job_id=job_id,
            worker_id=w,
            ip=f"10.0.0.{w + 1}",
            udp_port=4000 + w,
            mac=f"00:00:00:00:00:{w + 1:02x}",
            port=w + 1,
        )
        for w in range(num_workers)
    )
    return JobSpec(
        job_id=job_id,
        num_workers=num_workers,
        pool_base=pool_base,
        pool_size=pool_size,
        workers=workers,
        job_index=job_index,
    )


# -- P4Info ----------------------------------------------------------------------------------


def test_p4info_follows_entities_and_p4c_conventions(tmp_path):
    info = build_p4info()
    assert info.pkg_info.arch == "v1model"
    tables = {t.preamble.name: t for t in info.tables}
    assert set(tables) == {t.name for t in entities.TABLES}
    wt = tables["worker_table"]
    assert wt.preamble.id == entities.by_name(entities.TABLES)["worker_table"].id
    assert [(m.id, m.name, m.bitwidth) for m in wt.match_fields] == [
        (1, "job_id", 16),
        (2, "worker_id", 8),
    ]
    actions = {a.preamble.name: a for a in info.actions}
    assert "NoAction" not in actions  # p4c drops actions no table uses
    assert [(p.id, p.name, p.bitwidth) for p in actions["set_job"].params] == [
        (1, "job_index", 8),
        (2, "num_workers", 8),
        (3, "pool_base", 16),
        (4, "pool_size", 16),
        (5, "mcast_grp", 16),
    ]
    assert wt.const_default_action_id == actions["drop"].preamble.id
    counters = {c.preamble.name: c for c in info.counters}
    assert counters["ina_stats"].size == len(Counter)
    assert counters["ina_stats"].spec.unit == counters["ina_stats"].spec.BOTH
    regs = {r.preamble.name: r for r in info.registers}
    assert regs["slot_lane_31"].type_spec.bitstring.bit.bitwidth == 32
    assert regs["slot_count"].size == entities.POOL_SLOTS * 2
    # The text file p4runtime-shell reads round-trips.
    path = write_p4info(tmp_path / "ina.p4info.txtpb")
    assert read_p4info(path) == info
    assert p4info_differences(read_p4info(path)) == []


# -- pipeline config -------------------------------------------------------------------------


def test_push_our_p4info_accepted_other_program_rejected(conn, pipeline):
    conn.push_pipeline(device_config=b'{"program": "ignored by the model"}')
    assert conn.get_p4info() == build_p4info()

    other = build_p4info()
    other.tables[0].preamble.id += 7  # a program whose job_table has another id
    with pytest.raises(P4RuntimeError) as e:
        conn.push_pipeline(other)
    assert e.value.code == SC.INVALID_ARGUMENT and "job_table" in e.value.message

    # p4c also lists actions the controls call directly; no controller runs those.
    with_lane_actions = build_p4info()
    extra_action = with_lane_actions.actions.add()
    extra_action.preamble.id, extra_action.preamble.name = 0x01000099, "lane_aggregate.lanes_sum"
    conn.push_pipeline(with_lane_actions)

    foreign = build_p4info()
    extra = foreign.tables.add()
    extra.preamble.id, extra.preamble.name = 0x02000099, "ipv4_lpm"
    with pytest.raises(P4RuntimeError) as e:
        conn.push_pipeline(foreign)
    assert e.value.code == SC.INVALID_ARGUMENT and "ipv4_lpm" in e.value.message

    # VERIFY_AND_COMMIT starts from an empty forwarding state (as BMv2 does) ...
    jobs.install_job(conn, job_spec())
    pipeline.counters.stats[Counter.PACKETS_IN] = (5, 500)
    conn.push_pipeline()
    assert not pipeline.tables.jobs and not pipeline.tables.mcast_groups
    assert not pipeline.counters.stats.any()
    # ... RECONCILE_AND_COMMIT of the same program keeps it.
    jobs.install_job(conn, job_spec())
    conn.push_pipeline(action=p4runtime_pb2.SetForwardingPipelineConfigRequest.RECONCILE_AND_COMMIT)
    assert 3 in pipeline.tables.jobs


# -- jobs, counters, registers ---------------------------------------------------------------


def test_install_job_fills_the_model_tables(conn, pipeline):
    spec = job_spec()
    job = jobs.install_job(conn, spec)
    t = pipeline.tables
    assert t.jobs == {3: spec.entry()} and job == spec.entry()
    assert t.mcast_groups == {job.mcast_grp: [(1, 0), (2, 1)]}
    assert t.workers == {(3, w.worker_id): w for w in spec.workers}  # port from the group
    assert jobs.list_jobs(conn) == {3: spec.entry()}

    with pytest.raises(P4RuntimeError) as e:
        jobs.install_job(conn, spec)
    assert e.value.codes == {SC.ALREADY_EXISTS}
    jobs.install_job(conn, spec, replace=True)
    assert t.jobs == {3: spec.entry()}

    assert jobs.remove_job(conn, 3) == spec.entry()
    assert not t.jobs and not t.workers and not t.mcast_groups
    with pytest.raises(P4RuntimeError) as e:
        jobs.remove_job(conn, 3)
    assert e.value.code == SC.NOT_FOUND


def test_counters_count_what_the_pipeline_did(conn, server, pipeline):
    spec = job_spec()
    job = jobs.install_job(conn, spec)
    a, b = [1, -2, 3, 2**31 - 1], [10, 20, -30, 1]
    with server.lock:  # what the model's I/O loop does around each batch
        out0 = pipeline.process(packet(3, 0, slot=5, seq=5, lanes=a))
        out1 = pipeline.process(packet(3, 1, slot=5, seq=5, lanes=b))
        dup = pipeline.process(packet(3, 1, slot=5, seq=5, lanes=b))
        pipeline.process(packet(9, 0, slot=0, seq=0, lanes=a))  # unknown job
    assert out0 == [] and len(out1) == 1 and out1[0][0] == MULTICAST
    assert list(lanes_of(out1[0][3])) == list(
        (np.array(a, np.int64) + b).astype(np.int32)
    )  # wrap-around sum
    assert len(dup) == 1  # stored result by unicast

    frame = len(packet(3, 0, 0, 0, a)) + FRAME_OVERHEAD
    snap = read_counters(conn)
    assert snap.stats["packets_in"] == (4, 4 * frame)
    assert snap.stats["aggregated"] == (2, 2 * frame)
    assert snap.stats["results"] == (1, frame)
    assert snap.stats["result_packets"] == (2 + 1, 3 * frame)  # 2 replicas + 1 unicast
    assert snap.stats["duplicates"] == (1, frame)
    assert snap.stats["retx_replies"] == (1, frame)
    assert snap.stats["drop_unknown_job"] == (1, frame)
    assert snap.workers == {(job.job_index, 0): (1, frame), (job.job_index, 1): (1, frame)}
    assert snap.as_dict()["worker_contributions[2][1]"] == (1, frame)

    # One cell by index, through the generic entity builder.
    got = conn.read([conn.counter_entry("worker_contributions", job.job_index * MAX_WORKERS)])
    assert [(e.counter_entry.data.packet_count) for e in got] == [1]

    reset_counters(conn)
    assert not pipeline.counters.stats.any() and not pipeline.counters.workers.any()
    assert read_counters(conn).stats["aggregated"] == (0, 0)


def test_registers_read_and_write(conn, server, pipeline):
    spec = job_spec(pool_base=8)
    jobs.install_job(conn, spec)
    with server.lock:  # chunk 18 of a 16-slot pool: slot 2, shadow copy 1
        pipeline.process(packet(3, 0, slot=2, seq=18, lanes=[-1, 5, 0, 7], flags=Flag.SHADOW))
    row = (8 + 2) * 2 + 1  # (pool_base + slot) * 2 + shadow copy
    assert conn.read_register("slot_seq", row) == 18
    assert conn.read_register("slot_count", row) == 1
    assert conn.read_register("slot_bitmap", row) == 0b01
    assert conn.read_register("slot_lane_0", row) == 2**32 - 1  # int32 -1 in a bit<32>
    assert conn.read_register("slot_lane_1", row) == 5
    assert conn.read_register("slot_lane_9", row) == 0  # a lane this model does not run
    assert len(conn.read_register("slot_seq")) == 2 * POOL  # the cells the model has

    conn.write_register("slot_lane_1", 2**32 - 3, row)
    assert pipeline.registers.values[row, 1] == -3
    conn.write_register("slot_seq", 0)  # every cell
    assert not any(pipeline.registers.seq)

    # install_job's pool reset (for BMv2, which keeps registers across table writes).
    pipeline.registers.count[row] = pipeline.registers.count[0] = 3
    assert jobs.reset_pool(conn, spec.entry())
    assert pipeline.registers.count[row] == 0 and pipeline.registers.count[0] == 3

    with pytest.raises(P4RuntimeError) as e:
        conn.read_register("slot_seq", 2 * POOL)
    assert e.value.code == SC.OUT_OF_RANGE
    with pytest.raises(ValueError):
        conn.write_register("slot_count", 256, 0)  # the client checks widths ...
    wide = conn.register_entry("slot_count", 0)
    wide.register_entry.data.bitstring = b"\x01\x00"  # ... and so does the switch
    with pytest.raises(P4RuntimeError) as e:
        conn.write([conn.update(MODIFY, wide)])
    assert e.value.codes == {SC.OUT_OF_RANGE}


def test_table_and_group_entries_read_back(conn):
    jobs.install_job(conn, job_spec())
    fwd = conn.table_entry(
        "forward_table", {"dst_mac": "00:00:00:00:00:09"}, "forward", {"port": 4}
    )
    fwd.table_entry.metadata = b"cookie"
    conn.write([conn.update(INSERT, fwd)])
    got = conn.read([conn.table_entry("forward_table")])
    assert len(got) == 1 and got[0].table_entry.metadata == b"cookie"
    assert conn.decode_table_entry(got[0]) == (
        "forward_table",
        {"dst_mac": 9},
        "forward",
        {"port": 4},
    )
    # Canonical bytestrings on the way back (no leading zero bytes).
    assert got[0].table_entry.match[0].exact.value == b"\x09"

    workers = [conn.decode_table_entry(e) for e in conn.read([conn.table_entry("worker_table")])]
    assert workers[1] == (
        "worker_table",
        {"job_id": 3, "worker_id": 1},
        "set_worker",
        {"mac": 2, "ip": 0x0A000002, "udp_port": 4001},
    )
    all_tables = conn.read([p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())])
    assert len(all_tables) == 1 + 2 + 1

    default = p4runtime_pb2.Entity()
    default.table_entry.table_id = conn.p4.tables["job_table"].preamble.id
    default.table_entry.is_default_action = True
    (d,) = conn.read([default])
    assert d.table_entry.action.action.action_id == conn.p4.actions["drop"].preamble.id

    groups = conn.read([conn.multicast_group(0)])
    assert [
        (r.egress_port, r.instance)
        for r in groups[0].packet_replication_engine_entry.multicast_group_entry.replicas
    ] == [(1, 0), (2, 1)]


def test_job_entry_with_drop_action_drops_as_unknown_job(conn, server, pipeline):
    drop = conn.table_entry("job_table", {"job_id": 6}, "drop")
    conn.write([conn.update(INSERT, drop)])
    assert 6 not in pipeline.tables.jobs  # JobLookup: job_found stays false
    with server.lock:
        assert pipeline.process(packet(6, 0, slot=0, seq=0, lanes=[1] * LANES)) == []
    assert read_counters(conn, workers=False).stats["drop_unknown_job"][0] == 1
    (e,) = conn.read([conn.table_entry("job_table")])
    assert conn.decode_table_entry(e) == ("job_table", {"job_id": 6}, "drop", {})
    # MODIFY to set_job makes it a job; DELETE removes it.
    conn.write(
        [
            conn.update(
                MODIFY,
                conn.table_entry(
                    "job_table",
                    {"job_id": 6},
                    "set_job",
                    {
                        "job_index": 0,
                        "num_workers": 1,
                        "pool_base": 0,
                        "pool_size": 4,
                        "mcast_grp": 1,
                    },
                ),
            )
        ]
    )
    assert pipeline.tables.jobs[6].pool_size == 4
    conn.write([conn.update(DELETE, drop)])
    assert not pipeline.tables.jobs and not conn.read([conn.table_entry("job_table")])


# -- errors ----------------------------------------------------------------------------------


def write_one(conn, kind, entity):
    with pytest.raises(P4RuntimeError) as e:
        conn.write([conn.update(kind, entity)])
    assert e.value.code == SC.UNKNOWN and len(e.value.errors) == 1  # batch error format
    return e.value.errors[0].code


def test_write_errors_have_p4runtime_codes(conn, pipeline):
    job = conn.table_entry(
        "job_table",
        {"job_id": 1},
        "set_job",
        {"job_index": 0, "num_workers": 2, "pool_base": 0, "pool_size": 4, "mcast_grp": 1},
    )
    conn.write([conn.update(INSERT, job)])
    assert write_one(conn, INSERT, job) == SC.ALREADY_EXISTS
    missing = conn.table_entry("job_table", {"job_id": 2})
    assert write_one(conn, DELETE, missing) == SC.NOT_FOUND
    assert (
        write_one(
            conn,
            MODIFY,
            conn.table_entry(
                "job_table",
                {"job_id": 2},
                "set_job",
                {"job_index": 1, "num_workers": 2, "pool_base": 8, "pool_size": 4, "mcast_grp": 1},
            ),
        )
        == SC.NOT_FOUND
    )

    unknown_table = p4runtime_pb2.Entity()
    unknown_table.table_entry.table_id = 0x02000777
    assert write_one(conn, INSERT, unknown_table) in (SC.INVALID_ARGUMENT, SC.NOT_FOUND)

    no_key = conn.table_entry(
        "worker_table", {"job_id": 1}, "set_worker", {"mac": 1, "ip": 1, "udp_port": 1}
    )
    assert write_one(conn, INSERT, no_key) == SC.INVALID_ARGUMENT  # worker_id missing
    too_wide = conn.table_entry(
        "job_table",
        {"job_id": 3},
        "set_job",
        {"job_index": 0, "num_workers": 2, "pool_base": 0, "pool_size": 4, "mcast_grp": 1},
    )
    too_wide.table_entry.match[0].exact.value = b"\x01\x00\x00"  # 65536 > bit<16>
    assert write_one(conn, INSERT, too_wide) == SC.OUT_OF_RANGE
    padded = conn.table_entry(
        "job_table",
        {"job_id": 4},
        "set_job",
        {"job_index": 3, "num_workers": 2, "pool_base": 20, "pool_size": 4, "mcast_grp": 1},
    )
    padded.table_entry.match[0].exact.value = b"\x00\x00\x04"  # padded: fine
    conn.write([conn.update(INSERT, padded)])
    assert 4 in pipeline.tables.jobs
    overlap = conn.table_entry(
        "job_table",
        {"job_id": 5},
        "set_job",
        {"job_index": 4, "num_workers": 2, "pool_base": 2, "pool_size": 4, "mcast_grp": 1},
    )
    assert write_one(conn, INSERT, overlap) == SC.INVALID_ARGUMENT  # pool overlaps job 1's
    wrong_action = conn.table_entry("job_table", {"job_id": 6}, "forward", {"port": 1})
    assert write_one(conn, INSERT, wrong_action) == SC.INVALID_ARGUMENT
    worker_drop = conn.table_entry("worker_table", {"job_id": 1, "worker_id": 0}, "drop")
    assert write_one(conn, INSERT, worker_drop) == SC.UNIMPLEMENTED

    default = p4runtime_pb2.Entity()
    default.table_entry.table_id = conn.p4.tables["job_table"].preamble.id
    default.table_entry.is_default_action = True
    default.table_entry.action.action.action_id = conn.p4.actions["drop"].preamble.id
    assert write_one(conn, MODIFY, default) == SC.PERMISSION_DENIED  # const default action
    assert write_one(conn, INSERT, p4runtime_pb2.Entity()) == SC.INVALID_ARGUMENT
    assert write_one(conn, INSERT, conn.multicast_group(0, [(1, 0)])) == SC.INVALID_ARGUMENT
    assert (
        write_one(conn, INSERT, conn.counter_entry("ina_stats", 0, 1, 1)) == SC.INVALID_ARGUMENT
    )  # counters are MODIFY-only

    # A batch goes on past a failed update (CONTINUE_ON_ERROR) and reports each one.
    ok = conn.table_entry("forward_table", {"dst_mac": 1}, "forward", {"port": 1})
    with pytest.raises(P4RuntimeError) as e:
        conn.write([conn.update(INSERT, job), conn.update(INSERT, ok)])
    assert [(x.index, x.code) for x in e.value.errors] == [(0, SC.ALREADY_EXISTS)]
    assert conn.read([conn.table_entry("forward_table", {"dst_mac": 1})])


def test_read_errors_and_request_checks(server, conn):
    with pytest.raises(P4RuntimeError) as e:
        conn.read(
            [p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry(counter_id=0x12000777))]
        )
    assert e.value.code in (SC.INVALID_ARGUMENT, SC.NOT_FOUND)
    with pytest.raises(P4RuntimeError) as e:
        conn.read([p4runtime_pb2.Entity()])
    assert e.value.code == SC.INVALID_ARGUMENT
    with pytest.raises(P4RuntimeError) as e:
        conn.read([conn.counter_entry("ina_stats", len(Counter))])
    assert e.value.code == SC.OUT_OF_RANGE

    channel = grpc.insecure_channel(server.address)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    try:
        entry = conn.table_entry("forward_table", {"dst_mac": 1}, "forward", {"port": 1})
        req = p4runtime_pb2.WriteRequest(device_id=DEFAULT_DEVICE_ID)
        req.updates.add(type=INSERT, entity=entry)
        with pytest.raises(grpc.RpcError) as e:
            stub.Write(req, timeout=5)  # no election id: not the primary
        assert e.value.code() == SC.PERMISSION_DENIED
        req.election_id.high = 7  # an election id without a session
        with pytest.raises(grpc.RpcError) as e:
            stub.Write(req, timeout=5)
        assert e.value.code() == SC.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as e:
            stub.Read(p4runtime_pb2.ReadRequest(device_id=5), timeout=5).next()
        assert e.value.code() == SC.NOT_FOUND  # unknown device
        # Garbage bytes where a WriteRequest should be: rejected, server keeps going.
        garbage = channel.unary_unary("/p4.v1.P4Runtime/Write")
        with pytest.raises(grpc.RpcError):
            garbage(b"\xff\xff\xff", timeout=5)
    finally:
        channel.close()
    assert conn.capabilities() == "1.4.1"


def test_master_arbitration(server, conn):
    assert conn.is_primary
    with pytest.raises(P4RuntimeError) as e:
        SwitchConnection(server.address, election_id=(1, 0), timeout=5)  # taken
    assert e.value.code == SC.INVALID_ARGUMENT
    with pytest.raises(P4RuntimeError) as e:
        SwitchConnection(server.address, election_id=(0, 5), timeout=5)  # lower: backup
    assert e.value.code == SC.PERMISSION_DENIED
    backup = SwitchConnection(server.address, election_id=(0, 5), require_primary=False)
    try:
        assert not backup.is_primary
        assert read_counters(backup).stats["aggregated"] == (0, 0)  # reads are fine
        with pytest.raises(P4RuntimeError) as e:
            reset_counters(backup)
        assert e.value.code == SC.PERMISSION_DENIED
    finally:
        backup.close()

    with SwitchConnection(server.address, election_id=(2, 0)) as higher:
        assert higher.is_primary
        reset_counters(higher)
        with pytest.raises(P4RuntimeError) as e:
            reset_counters(conn)  # the old primary was demoted
        assert e.value.code == SC.PERMISSION_DENIED
    # The higher one left: the highest connected controller is primary again (as on BMv2).
    deadline = time.monotonic() + 5
    while not conn.is_primary and time.monotonic() < deadline:
        time.sleep(0.01)
    reset_counters(conn)


def test_data_path_and_control_plane_concurrently(conn, server, pipeline):
    jobs.install_job(conn, job_spec(num_workers=1))
    stop = threading.Event()
    errors = []

    def data_path():
        seq = 0
        try:
            while not stop.is_set():
                with server.lock:
                    flags = Flag.SHADOW if seq & 16 else 0  # copy = (seq // pool_size) % 2
                    pipeline.process(
                        packet(3, 0, slot=seq % 16, seq=seq, lanes=[seq] * LANES, flags=flags)
                    )
                seq += 1
                time.sleep(0)  # the I/O loop's receive, outside the lock
        except Exception as e:  # pragma: no cover (reported below)
            errors.append(e)

    t = threading.Thread(target=data_path)
    t.start()
    try:
        for _ in range(10):
            snap = read_counters(conn, workers=False)
            assert snap.stats["aggregated"][0] == snap.stats["results"][0]
            conn.write([conn.update(MODIFY, conn.counter_entry("ina_stats", 0, 0, 0))])
    finally:
        stop.set()
        t.join()
    assert not errors
    snap = read_counters(conn, workers=False)
    assert snap.stats["aggregated"][0] > 0
    assert snap.stats["drop_bad_slot"] == snap.stats["drop_stale"] == (0, 0)


# -- p4runtime-shell and the counters CLI ----------------------------------------------------


def test_p4runtime_shell_session(server, pipeline, tmp_path):
    sh = pytest.importorskip("p4runtime_sh.shell")
    p4info = write_p4info(tmp_path / "ina.p4info.txtpb")
    device_config = tmp_path / "ina.json"
    device_config.write_text("{}")  # BMv2 would need p4c-bm2-ss's JSON; the model ignores it
    sh.setup(
        device_id=DEFAULT_DEVICE_ID,
        grpc_addr=server.address,
        election_id=(1, 0),
        config=sh.FwdPipeConfig(str(p4info), str(device_config)),
        verbose=False,
    )
    try:
        te = sh.TableEntry("job_table")(action="set_job")
        te.match["job_id"] = "5"
        te.action.set(job_index="1", num_workers="2", pool_base="0", pool_size="8", mcast_grp="6")
        te.insert()
        sh.MulticastGroupEntry(6).add(1, 0).add(2, 1).insert()
        w = sh.TableEntry("worker_table")(action="set_worker")
        w.match.set(job_id="5", worker_id="1")
        w.action.set(mac="00:11:22:33:44:55", ip="10.0.0.2", udp_port="4000")
        w.insert()
        assert pipeline.tables.jobs[5].mcast_grp == 6
        assert pipeline.tables.workers[(5, 1)].ip == "10.0.0.2"
        assert pipeline.tables.workers[(5, 1)].port == 2

        with server.lock:
            pipeline.process(packet(5, 0, slot=1, seq=1, lanes=[1, 2, 3, 4]))
        stats = {
            c.index: (c.packet_count, c.byte_count) for c in sh.CounterEntry("ina_stats").read()
        }
        assert len(stats) == len(Counter) and stats[Counter.AGGREGATED][0] == 1
        (entry,) = list(sh.TableEntry("job_table").read())
        assert entry.action["pool_size"].value == b"\x08"
        with pytest.raises(Exception, match="ALREADY_EXISTS"):
            te.insert()
    finally:
        sh.teardown()


def test_counters_cli(server, conn, pipeline, capsys):
    jobs.install_job(conn, job_spec(num_workers=1))
    with server.lock:
        pipeline.process(packet(3, 0, slot=0, seq=0, lanes=[1] * LANES))
    assert ina_main(["counters", "--target", server.address, "--workers"]) == 0
    out = capsys.readouterr().out
    assert "aggregated" in out and "gradient payload aggregated: 16 B" in out
    assert (
        counters_main(
            [
                "--target",
                server.address,
                "--watch",
                "0.05",
                "--iterations",
                "2",
                "--lanes",
                str(LANES),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("packets/s") == 2 and "Gbit/s" in out

    free = start_server(Pipeline(lanes=1, pool_total=1), "127.0.0.1:0")
    port = free.port
    free.stop(0)
    assert counters_main(["--target", f"127.0.0.1:{port}", "--timeout", "0.3"]) == 2
    assert "no P4Runtime server" in capsys.readouterr().err


def test_local_job_installs_on_the_model(conn, pipeline):
    spec = local_job(job_id=1, num_workers=4, pool_size=8)
    jobs.install_job(conn, spec)
    assert pipeline.tables.jobs[1] == spec.entry()
    assert [w.udp_port for _, w in sorted(pipeline.tables.workers.items())] == [
        50000,
        50001,
        50002,
        50003,
    ]
    assert encode_value("10.0.0.1", 32) == b"\x0a\x00\x00\x01"
    assert encode_value(0, 16) == b"\x00"


# -- the same control plane against BMv2 -----------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def bmv2(tmp_path_factory):
    """simple_switch_grpc (no ports) with our program built by p4c, on loopback."""
    if shutil.which("simple_switch_grpc") is None or p4build.find_compiler() is None:
        pytest.skip("needs simple_switch_grpc and p4c-bm2-ss on PATH")
    out = tmp_path_factory.mktemp("bmv2")
    built = p4build.build(out)
    grpc_port, thrift_port = _free_port(), _free_port()
    log = open(out / "simple_switch_grpc.log", "w")  # closed in the finalizer
    proc = subprocess.Popen(
        [
            "simple_switch_grpc",
            "--device-id", str(DEFAULT_DEVICE_ID),
            "--thrift-port", str(thrift_port),
            *notifications_args(out),  # its own: the default one is shared per device id
            "--no-p4",
            "--",
            "--grpc-server-addr", f"127.0.0.1:{grpc_port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield f"127.0.0.1:{grpc_port}", thrift_port, built
    finally:
        stop_process(proc)
        log.close()


@pytest.mark.bmv2
def test_same_control_plane_drives_bmv2(bmv2, capsys):
    address, thrift_port, built = bmv2
    with SwitchConnection(address, timeout=15) as sw:
        sw.push_pipeline(built.p4info, built.json)
        assert p4info_differences(sw.get_p4info()) == []
        spec = job_spec()
        cli = shutil.which("simple_switch_CLI")
        jobs.install_job(
            sw, spec, thrift_port=thrift_port if cli and bmv2_thrift_serving(thrift_port) else None
        )
        assert jobs.list_jobs(sw) == {3: spec.entry()}
        (group,) = sw.read([sw.multicast_group(0)])
        replicas = group.packet_replication_engine_entry.multicast_group_entry.replicas
        assert sorted((r.egress_port, r.instance) for r in replicas) == [(1, 0), (2, 1)]
        assert len(sw.read([sw.table_entry("worker_table")])) == 2

        snap = read_counters(sw)
        assert set(snap.stats) == {c.name.lower() for c in Counter}
        reset_counters(sw)
        with pytest.raises(P4RuntimeError) as e:
            jobs.install_job(sw, spec)
        assert e.value.codes == {SC.ALREADY_EXISTS}
        with pytest.raises(P4RuntimeError) as e:
            sw.read_register("slot_seq", 0)  # PI has no RegisterEntry
        assert e.value.code == SC.UNIMPLEMENTED
        assert jobs.remove_job(sw, 3) == spec.entry()
        assert jobs.list_jobs(sw) == {}
    assert counters_main(["--target", address, "--device-id", str(DEFAULT_DEVICE_ID)]) == 0
    assert "drops:" in capsys.readouterr().out
