"""The switch model's P4Runtime service under load never stalls (issue 11, item 2).

- Many controllers: each StreamChannel holds a gRPC thread, and with 16 open every RPC used
  to hang. Now the service serves up to `MAX_STREAMS` and refuses more with
  RESOURCE_EXHAUSTED (P4Runtime spec, "Client arbitration"), and the other RPCs go on.
- Large reads: a wildcard Read of every register (75,776 cells then) used to be built under
  the pipeline lock, freezing aggregation for 10-20 s. Now the state is copied under the lock
  and the reply is encoded after it.
- A second switch on a P4Runtime port in use must not come up.

Real gRPC on 127.0.0.1 and real UDP workers; no timings are asserted (``ina bench
p4runtime`` measures them), only that work completes within generous timeouts.
"""

from __future__ import annotations

import queue
import threading
import time

import grpc
import numpy as np
import pytest
from conftest import wait_for
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from ina.control import jobs
from ina.control.counters import read_counters
from ina.control.counters_cli import main as counters_main
from ina.control.p4rt import P4RuntimeError, SwitchConnection
from ina.p4 import entities
from ina.p4info import build_p4info
from ina.switch_model.p4runtime_server import MAX_STREAMS, start_server
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.tables import local_job

pytestmark = pytest.mark.network

SC = grpc.StatusCode
DEVICE_ID = 1


class RawStream:
    """One controller's StreamChannel, on its own channel, that asks to be primary with
    ``election_id``; ``first()`` is the first reply (or the RpcError that ended it)."""

    def __init__(self, address: str, election_id: int) -> None:
        self.channel = grpc.insecure_channel(address)
        self._out: queue.Queue = queue.Queue()
        self._replies: queue.Queue = queue.Queue()
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = DEVICE_ID
        req.arbitration.election_id.low = election_id
        self._out.put(req)
        stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.call = stub.StreamChannel(iter(self._out.get, None))
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self) -> None:
        try:
            for msg in self.call:
                self._replies.put(msg)
        except grpc.RpcError as e:
            self._replies.put(e)

    def first(self, timeout: float = 30.0):
        return self._replies.get(timeout=timeout)

    def close(self) -> None:
        self._out.put(None)
        self.call.cancel()
        self.channel.close()


def register_cells(pipeline: Pipeline) -> int:
    """Cells a wildcard Read of every register returns: each register's P4Info size, or
    fewer where the model has fewer (a smaller pool)."""
    total = 0
    for r in build_p4info().registers:
        name = r.preamble.name
        if name.startswith("slot_lane_"):
            total += min(r.size, 2 * pipeline.pool_total)
        else:
            total += min(r.size, len(pipeline.register_cells(name)))
    return total


def count_entities(reply: bytes) -> int:
    """Entities in a serialized ReadResponse of counter/register entries (one-byte lengths),
    without parsing them."""
    n = i = 0
    while i < len(reply):
        assert reply[i] == 0x0A and reply[i + 1] < 0x80  # ReadResponse.entities, length
        i += 2 + reply[i + 1]
        n += 1
    return n


@pytest.fixture
def model():
    pipeline = Pipeline(lanes=4, pool_total=64)
    server = start_server(pipeline, "127.0.0.1:0")
    yield server, pipeline
    server.stop(0)


def test_64_controllers_get_served_or_refused_and_rpcs_go_on(model, capsys):
    server, pipeline = model
    streams = [RawStream(server.address, election_id=i + 1) for i in range(64)]
    try:
        deadline = time.monotonic() + 30
        firsts = [s.first(max(0.1, deadline - time.monotonic())) for s in streams]
        served = [f for f in firsts if isinstance(f, p4runtime_pb2.StreamMessageResponse)]
        refused = [f for f in firsts if isinstance(f, grpc.RpcError)]
        assert len(served) == MAX_STREAMS and len(refused) == 64 - MAX_STREAMS
        assert {e.code() for e in refused} == {SC.RESOURCE_EXHAUSTED}
        assert all(f.HasField("arbitration") for f in served)
        assert server.service.open_streams == MAX_STREAMS

        # Every other RPC still answers: Capabilities, Read, `ina counters`, ...
        stub = p4runtime_pb2_grpc.P4RuntimeStub(streams[0].channel)
        stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=10)
        with SwitchConnection(server.address, arbitrate=False, timeout=10) as watcher:
            assert read_counters(watcher).stats["packets_in"] == (0, 0)
        assert counters_main(["--target", server.address, "--timeout", "10"]) == 0
        assert "drops:" in capsys.readouterr().out
        # ... and one more controller is told why it cannot join, at once.
        with pytest.raises(P4RuntimeError) as e:
            SwitchConnection(server.address, election_id=(1, 0), timeout=10)
        assert e.value.code == SC.RESOURCE_EXHAUSTED
    finally:
        for s in streams:
            s.close()
    wait_for(lambda: server.service.open_streams == 0, what="the streams to be released")
    with SwitchConnection(server.address, timeout=10) as controller:  # served again
        jobs.install_job(controller, local_job(num_workers=2, pool_size=8))
    assert 1 in pipeline.tables.jobs


def _set_registers(pipeline: Pipeline, rng) -> None:
    regs = pipeline.registers
    n = 2 * pipeline.pool_total
    regs.seq[:] = rng.integers(0, 1 << 32, n).tolist()
    regs.bitmap[:] = rng.integers(0, 1 << 32, n).tolist()
    regs.count[:] = rng.integers(0, 256, n).tolist()
    regs.values[:] = rng.integers(-(1 << 31), 1 << 31, regs.values.shape, dtype=np.int64)


def test_a_wildcard_read_of_every_register_is_exact():
    """Every cell of every register through a real client's Read: ids, indices, widths, and
    lanes the model does not run (20 of the P4Info's 32) reading as zero."""
    pipeline = Pipeline(lanes=20, pool_total=64)
    _set_registers(pipeline, np.random.default_rng(7))
    server = start_server(pipeline, "127.0.0.1:0")
    try:
        with SwitchConnection(server.address, arbitrate=False, timeout=10) as sw:
            got = sw.read([p4runtime_pb2.Entity(register_entry=p4runtime_pb2.RegisterEntry())])
    finally:
        server.stop(0)
    assert len(got) == register_cells(pipeline)
    regs = pipeline.registers
    by_id = {r.id: r.name for r in entities.REGISTERS}
    seen: dict[str, list[int]] = {}
    for e in got:
        r = e.register_entry
        name = by_id[r.register_id]
        assert r.index.index == len(seen.setdefault(name, []))
        seen[name].append(int.from_bytes(r.data.bitstring, "big"))
    for name, cells in seen.items():
        if name.startswith("slot_lane_"):
            lane = int(name.removeprefix("slot_lane_"))
            if lane >= regs.lanes:
                assert cells == [0] * 128, name
                continue
            want = regs.values[:, lane].astype(np.int64)
            assert cells == (want & 0xFFFFFFFF).tolist(), name
        else:
            assert cells == list(pipeline.register_cells(name)), name


def test_aggregation_goes_on_while_large_reads_are_served(harness_factory):
    """Workers allreduce while a Read of 4 x 80,064 register cells is being served. The
    reader takes its time over the reply; the data path must not wait for it (it used to
    wait for the whole reply to be built: tens of seconds, past the workers' timeout)."""
    from ina.host.allreduce import Worker

    h = harness_factory(2, lanes=64, pool_size=32, pool_total=1024)
    server = start_server(h.pipeline, "127.0.0.1:0", h.server.lock)
    channel = grpc.insecure_channel(server.address)
    try:
        query = p4runtime_pb2.Entity(register_entry=p4runtime_pb2.RegisterEntry())
        request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID, entities=[query] * 4)
        # Replies as bytes: decoding 300k entities with pure-Python protobuf takes a minute.
        read = channel.unary_stream(
            "/p4.v1.P4Runtime/Read",
            request_serializer=p4runtime_pb2.ReadRequest.SerializeToString,
            response_deserializer=bytes,
        )
        replies = read(request, timeout=120)
        x = [np.arange(64 * 8, dtype=np.float32) * (w + 1) for w in range(2)]

        def work(w: int) -> int:
            with Worker(h.config(w, timeout=5.0)) as worker:
                for _ in range(30):
                    out = worker.allreduce(x[w])
                    assert np.allclose(out, x[0] + x[1])
            return 30

        results = h.run(work)
        assert results == {0: 30, 1: 30}, results
        cells = sum(count_entities(r) for r in replies)  # only now is the reply read
        assert cells == 4 * register_cells(h.pipeline)
    finally:
        channel.close()
        server.stop(0)


def test_a_second_server_on_a_port_in_use_is_refused(model):
    server, _ = model
    with pytest.raises(OSError, match="the port is in use"):
        start_server(Pipeline(lanes=4, pool_total=8), server.address)
    with SwitchConnection(server.address, arbitrate=False, timeout=10) as sw:
        assert sw.capabilities()  # the first one still answers, alone
