"""Named packet traces for the differential tests: lists of (ingress port, frame bytes).

A trace is built from a `Topology` (the switch's INA address, and jobs whose workers have a
MAC, an IP, a UDP port and a switch port) with scapy and `ina.scapy_layer`, and seeded: the
same name and seed give the same bytes. Each trace also states a few counter values that it
must produce on every target (``expect``), so that a trace cannot silently stop exercising
what its name says.

The default topology::

    port 1  host 1 (10.0.0.1)  job 1 worker 0 (UDP 50000), job 3 worker 0 (UDP 50100)
    port 2  host 2 (10.0.0.2)  job 1 worker 1 (UDP 50001), job 5 workers 0 and 2 (UDP 50200,
                               50202)
    port 3  host 3 (10.0.0.3)  job 1 worker 2 (UDP 50002), job 5 worker 1 (UDP 50201)
    port 4  host 4 (10.0.0.4)  job 2 worker 0 (UDP 51000), job 3 worker 1 (UDP 50101)
    port 5  host 5 (10.0.0.5)  the parent switch of job 6 (UDP 47000): this switch is a leaf
            of job 6 and is worker 1 of job 6 there
    port 2, 3                  job 6 workers 0, 1 (UDP 50300, 50301)

    job 1: 3 workers, pool slots 5..8   (pool_size 4), job_index 2, multicast group 7
    job 2: 1 worker,  pool slots 0..1   (pool_size 2), job_index 0, multicast group 8
    job 3: 2 workers, pool slots 16..23 (pool_size 8), job_index 5, multicast group 9
    job 5: 3 workers, pool slots 24..27 (pool_size 4), job_index 6, multicast group 10: two
           workers behind one port, so two replicas of a result leave by port 2
    job 6: 2 workers, pool slots 32..35 (pool_size 4), job_index 7, multicast group 11,
           parent_table entry: worker 1 of the parent on port 5
    forward_table: each host's MAC -> its port

Add a trace by writing a function ``def name(b: TraceBuilder) -> dict[str, int]`` that sends
frames through ``b`` and returns its expected counter packets, decorated with ``@trace``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scapy.layers.inet import ICMP, IP, UDP, IPOption
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether
from scapy.packet import Raw

from ina.compressors.base import float_bits
from ina.compressors.packing import Packing
from ina.protocol import P4_LANES, UDP_PORT, Flag, Op
from ina.scapy_layer import INA
from ina.switch_model.tables import JobSpec, ParentEntry, WorkerAddress

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
SEQ_MASK = 2**32 - 1
NOPS = [IPOption(b"\x01\x01\x01\x01")]  # four IPv4 NOP options: ihl 6


@dataclass(frozen=True)
class Host:
    """A machine on one switch port."""

    name: str
    mac: str
    ip: str
    port: int


@dataclass(frozen=True)
class Topology:
    """The switch's INA address, the hosts on its ports and the jobs they run."""

    switch_mac: str
    switch_ip: str
    hosts: tuple[Host, ...]
    jobs: tuple[JobSpec, ...]

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(sorted({h.port for h in self.hosts}))

    def job(self, job_id: int) -> JobSpec:
        return next(j for j in self.jobs if j.job_id == job_id)

    def worker(self, job_id: int, worker_id: int) -> WorkerAddress:
        return next(w for w in self.job(job_id).workers if w.worker_id == worker_id)

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def forward_entries(self) -> dict[str, int]:
        """``forward_table``: every host's MAC -> its port."""
        return {h.mac: h.port for h in self.hosts}


def default_topology() -> Topology:
    hosts = tuple(Host(f"h{i}", f"02:00:0a:00:00:{i:02x}", f"10.0.0.{i}", i) for i in range(1, 6))

    def worker(job_id: int, worker_id: int, host: Host, udp_port: int) -> WorkerAddress:
        return WorkerAddress(job_id, worker_id, host.ip, udp_port, host.mac, host.port)

    h1, h2, h3, h4, h5 = hosts
    jobs = (
        JobSpec(
            job_id=1,
            num_workers=3,
            pool_base=5,
            pool_size=4,
            workers=tuple(worker(1, w, h, 50000 + w) for w, h in enumerate((h1, h2, h3))),
            job_index=2,
            mcast_grp=7,
        ),
        JobSpec(
            job_id=2,
            num_workers=1,
            pool_base=0,
            pool_size=2,
            workers=(worker(2, 0, h4, 51000),),
            job_index=0,
            mcast_grp=8,
        ),
        JobSpec(
            job_id=3,
            num_workers=2,
            pool_base=16,
            pool_size=8,
            workers=(worker(3, 0, h1, 50100), worker(3, 1, h4, 50101)),
            job_index=5,
            mcast_grp=9,
        ),
        JobSpec(
            job_id=5,
            num_workers=3,
            pool_base=24,
            pool_size=4,
            workers=(worker(5, 0, h2, 50200), worker(5, 1, h3, 50201), worker(5, 2, h2, 50202)),
            job_index=6,
            mcast_grp=10,
        ),
        JobSpec(
            job_id=6,
            num_workers=2,
            pool_base=32,
            pool_size=4,
            workers=tuple(worker(6, w, h, 50300 + w) for w, h in enumerate((h2, h3))),
            job_index=7,
            mcast_grp=11,
            parent=ParentEntry(6, 1, h5.ip, UDP_PORT, h5.mac, h5.port),
        ),
    )
    return Topology("02:00:0a:00:00:fe", "10.0.0.254", hosts, jobs)


@dataclass(frozen=True)
class Trace:
    name: str
    frames: tuple[tuple[int, bytes], ...]
    expect: dict[str, int] = field(default_factory=dict)  # counter name -> packets


class TraceBuilder:
    """Builds one trace's frames; ``rng`` is seeded from the trace's name and the seed."""

    def __init__(self, topo: Topology, rng: random.Random) -> None:
        self.topo = topo
        self.rng = rng
        self.frames: list[tuple[int, bytes]] = []
        self._ip_id = rng.randrange(1 << 16)

    # -- values ------------------------------------------------------------------------

    def lanes(self, kind: str = "random") -> list[int]:
        """P4_LANES int32 values: ``random``, ``extreme`` (wrap-around material), ``bits``
        (OR material: few bits set), ``small``."""
        r = self.rng
        if kind == "extreme":
            pool = (0, 1, -1, I32_MAX, I32_MIN, I32_MAX - 1, I32_MIN + 1)
            return [r.choice(pool) for _ in range(P4_LANES)]
        if kind == "bits":
            return [
                _signed((1 << r.randrange(32)) | (1 << r.randrange(32))) for _ in range(P4_LANES)
            ]
        if kind == "small":
            return [r.randrange(-1000, 1000) for _ in range(P4_LANES)]
        return [r.randrange(I32_MIN, I32_MAX + 1) for _ in range(P4_LANES)]

    # -- frames ------------------------------------------------------------------------

    def ina(
        self,
        job_id: int,
        worker_id: int,
        seq: int,
        lanes: list[int] | None = None,
        op: int = Op.SUM,
        retx: bool = False,
        port: int | None = None,
        sender: WorkerAddress | None = None,
        **fields,
    ) -> bytes:
        """An INA request of a worker and append it. ``slot`` and the SHADOW flag follow
        from ``seq`` and the job's pool unless given in ``fields`` (``slot=``, ``flags=``:
        then used as they are); any other header field can be overridden the same way.
        ``sender`` / ``port`` default to the worker's address (for a worker id the job does
        not have, worker 0's)."""
        spec = next((j for j in self.topo.jobs if j.job_id == job_id), self.topo.jobs[0])
        if sender is None:
            ids = {w.worker_id: w for w in spec.workers}
            sender = ids.get(worker_id, spec.workers[0])
        seq &= SEQ_MASK
        ps = spec.pool_size
        flags = fields.pop("flags", (Flag.SHADOW if seq & ps else 0) | (Flag.RETX if retx else 0))
        header = {
            "op": int(op),
            "flags": int(flags),
            "worker_id": worker_id,
            "job_id": job_id,
            # a JOIN names the worker's pool by its last slot (the switch checks it)
            "slot": fields.pop("slot", ps - 1 if op == Op.JOIN else seq % ps),
            "seq": seq,
            "num_lanes": P4_LANES,
            **fields,
        }
        pkt = (
            self.ether_ip(sender)
            / UDP(sport=sender.udp_port, dport=UDP_PORT)
            / INA(lanes=self.lanes() if lanes is None else lanes, **header)
        )
        return self.frame(sender.port if port is None else port, bytes(pkt))

    def ether_ip(self, sender: WorkerAddress | Host, dst_mac: str | None = None, **ip):
        """Ether / IPv4 from ``sender`` to the switch's INA address (IP id counts up)."""
        self._ip_id = (self._ip_id + 1) & 0xFFFF
        ip = {"id": self._ip_id, "ttl": 64, "tos": self.rng.choice((0, 0, 0, 0x28)), **ip}
        return Ether(src=sender.mac, dst=dst_mac or self.topo.switch_mac) / IP(
            src=sender.ip, dst=self.topo.switch_ip, **ip
        )

    def frame(self, port: int, data) -> bytes:
        """Append a frame (bytes or a scapy packet) received on ``port``; its bytes."""
        data = bytes(data)
        self.frames.append((port, data))
        return data

    def to_switch(self, sender: WorkerAddress, payload, **udp):
        """Ether / IPv4 / UDP from ``sender`` to the switch's INA port, with ``payload``."""
        return self.ether_ip(sender) / UDP(sport=sender.udp_port, dport=UDP_PORT, **udp) / payload

    def round(
        self, job_id: int, seq: int, op: int = Op.SUM, kind: str = "random", **fields
    ) -> None:
        """Every worker of the job contributes to ``seq``, in a random order."""
        workers = [w.worker_id for w in self.topo.job(job_id).workers]
        self.rng.shuffle(workers)
        for w in workers:
            self.ina(job_id, w, seq, self.lanes(kind), op=op, **fields)


def _signed(v: int) -> int:
    v &= SEQ_MASK
    return v - (1 << 32) if v >= 1 << 31 else v


TraceFn = Callable[[TraceBuilder], dict[str, int]]
TRACES: dict[str, TraceFn] = {}


def trace(fn: TraceFn) -> TraceFn:
    """Register a trace under its function's name."""
    TRACES[fn.__name__] = fn
    return fn


def build(name: str, topo: Topology | None = None, seed: int = 0) -> Trace:
    topo = topo or default_topology()
    b = TraceBuilder(topo, random.Random(f"{seed}:{name}"))
    expect = TRACES[name](b)
    return Trace(name, tuple(b.frames), expect)


# -- the traces -------------------------------------------------------------------------------


@trace
def sum_rounds(b: TraceBuilder) -> dict[str, int]:
    """Dense SUM rounds of job 1 through both shadow copies and into a second generation,
    with random and wrap-around lanes."""
    for seq in range(12):
        b.round(1, seq, Op.SUM, kind="extreme" if seq % 3 == 0 else "random")
    return {"packets_in": 36, "aggregated": 36, "results": 12, "result_packets": 36}


@trace
def or_rounds(b: TraceBuilder) -> dict[str, int]:
    """OR rounds (index bitmaps of the compressed allreduce), job 3."""
    for seq in range(10):
        b.round(3, seq, Op.OR, kind="bits" if seq % 2 else "random")
    return {"aggregated": 20, "results": 10, "result_packets": 20}


@trace
def max_rounds(b: TraceBuilder) -> dict[str, int]:
    """MAX rounds: signed lanes (the scale round's ``[n, -n, exp...]``), and exp/level in
    the header, which are MAX-combined whatever the op."""
    for seq in range(8):
        workers = [0, 1, 2]
        b.rng.shuffle(workers)
        for w in workers:
            n = b.rng.randrange(1, 1 << 20)
            lanes = [n, -n, *(b.rng.randrange(0, 256) for _ in range(P4_LANES - 2))]
            if seq % 2:
                lanes = b.lanes("extreme")
            b.ina(1, w, seq, lanes, op=Op.MAX, exp=b.rng.randrange(256), level=b.rng.randrange(256))
    return {"aggregated": 24, "results": 8}


@trace
def allreduce_rounds(b: TraceBuilder) -> dict[str, int]:
    """The ops of one compressed allreduce on consecutive seqs (MAX scale, OR bitmap, SUM
    sketch), with fewer lanes in use (num_lanes) on some."""
    for seq, op in enumerate([Op.MAX, Op.OR, Op.SUM] * 3):
        b.round(1, seq, op, kind="small", num_lanes=b.rng.randrange(1, P4_LANES + 1))
    return {"aggregated": 27, "results": 9}


@trace
def packed_field_rounds(b: TraceBuilder) -> dict[str, int]:
    """The lanes of GRACE's methods (`ina.compressors`): low-bit fields packed with headroom
    for job 1's 3 workers (signs, ternary, 4-bit QSGD levels, fp16's 14-bit values), mostly
    at the top of their range, so that lane sums cross 2^31 and wrap as int32; and a MAX
    round of float32 bit patterns (agreed norms)."""
    ranges = [(0, 1), (-1, 1), (-7, 7), (-8191, 8191)]
    for seq, (lo, hi) in enumerate(ranges):
        pack = Packing.for_range(lo, hi, 3)
        workers = [0, 1, 2]
        b.rng.shuffle(workers)
        for w in workers:
            vals = [b.rng.choice((hi, hi, hi, lo, 0)) for _ in range(P4_LANES * pack.fields)]
            b.ina(1, w, seq, [int(v) for v in pack.pack(np.array(vals))], op=Op.SUM)
    for w in (2, 0, 1):
        norms = [b.rng.random() * 10.0 ** b.rng.randrange(-30, 30) for _ in range(P4_LANES)]
        b.ina(1, w, len(ranges), [int(v) for v in float_bits(np.array(norms))], op=Op.MAX)
    return {"aggregated": 15, "results": 5}


@trace
def retransmit_open_slot(b: TraceBuilder) -> dict[str, int]:
    """Retransmissions into a slot that is still open: PENDING replies with the bitmap so
    far and the packet's own lanes; a retransmission that was never counted contributes."""
    a, c, d = b.lanes(), b.lanes(), b.lanes()
    b.ina(1, 0, 0, a)
    b.ina(1, 0, 0, a, retx=True)  # PENDING, bitmap 001
    b.ina(1, 1, 0, c, retx=True)  # first copy of worker 1 that arrives: contributes
    b.ina(1, 0, 0, a, retx=True)  # PENDING, bitmap 011
    b.ina(1, 1, 0, c)  # a plain duplicate (no RETX flag): PENDING too
    b.ina(1, 2, 0, d)  # completes: multicast
    # the other copy of the slot, seq 4, same story with the SHADOW copy
    b.ina(1, 2, 4, d)
    b.ina(1, 2, 4, d, retx=True)
    b.ina(1, 0, 4, a)
    b.ina(1, 1, 4, c)
    return {"aggregated": 6, "duplicates": 4, "pending_replies": 4, "results": 2}


@trace
def retransmit_completed_slot(b: TraceBuilder) -> dict[str, int]:
    """Retransmissions into a completed slot get the stored result by unicast, also after
    the sender's bit was cleared by the other copy (the others moved on), and from a port
    that is not the worker's own (the reply leaves by the ingress port)."""
    b.round(1, 0)
    for w in (0, 1, 2):
        b.ina(1, w, 0, retx=True)  # RESULT by unicast
    b.ina(1, 0, 4)  # worker 0 moves on: clears its bit in seq 0's copy
    b.ina(1, 1, 4)
    b.ina(1, 0, 0, retx=True)  # complete: stored result even though its bit is clear
    b.ina(1, 2, 0, retx=True, port=1)  # from port 1: the reply goes out of port 1
    b.ina(1, 2, 4)  # completes seq 4
    b.ina(1, 1, 4, retx=True)
    return {"aggregated": 6, "duplicates": 6, "retx_replies": 6, "results": 2, "result_packets": 12}


@trace
def shadow_reuse(b: TraceBuilder) -> dict[str, int]:
    """Workers at different speeds that keep the protocol's window (send seq + pool_size
    only after the result of seq): both copies of every slot reused for six generations."""
    spec = b.topo.job(1)
    ps, last = spec.pool_size, 6 * spec.pool_size
    nxt = {w.worker_id: 0 for w in spec.workers}
    sent: dict[int, int] = {}  # seq -> contributions so far
    while any(s < last for s in nxt.values()):
        ready = [w for w, s in nxt.items() if s < last and (s < ps or sent.get(s - ps) == 3)]
        w = b.rng.choice(ready)
        s = nxt[w]
        b.ina(1, w, s)
        sent[s] = sent.get(s, 0) + 1
        nxt[w] = s + 1
        if b.rng.random() < 0.15:  # now and then a retransmission of the previous chunk
            b.ina(1, w, max(0, s - 1), retx=True)
    return {"aggregated": 3 * last, "results": last}


@trace
def stale_and_foreign_seq(b: TraceBuilder) -> dict[str, int]:
    """Seqs that are not the copy's current or next generation are STALE; a seq from
    another run (a random seq_start) is accepted only by a copy never used."""
    for seq in range(8):  # both copies of each slot used once, then copy 0 again
        b.round(1, seq)
    b.round(1, 8)
    b.ina(1, 0, 0)  # an old generation of copy 0 of slot 0 (now holds 8)
    b.ina(1, 1, 0, retx=True)
    b.ina(1, 2, 24)  # two generations ahead
    b.ina(1, 0, 8 + 2**31)  # another run's seq: same slot and copy, wrong generation
    b.ina(1, 1, 1 + 2**20 * 8)  # far future, consistent slot and shadow
    b.ina(1, 2, 16)  # the next generation of copy 0 of slot 0: NEW
    # job 3 has never been used: any consistent seq starts a copy
    start = 2**31 + 3 * 16
    b.ina(3, 0, start)
    b.ina(3, 1, start)
    b.ina(3, 0, start - 16)  # then older ones are stale
    return {"drop_stale": 6, "results": 10, "aggregated": 30}


@trace
def runs(b: TraceBuilder) -> dict[str, int]:
    """Runs of a job: JOINs start a run (a new epoch) and complete it, duplicate JOINs are
    answered (RESULT once complete, PENDING before), a worker that restarts mid-join starts
    the run over; data of any other run than the current one is STALE, and a slot copy
    written by an earlier run starts afresh (never answered with that run's sums)."""

    def join(job_id: int, w: int, nonce: int, retx: bool = False) -> None:
        b.ina(job_id, w, nonce, op=Op.JOIN, flags=Flag.RETX if retx else 0)

    b.round(1, 0)  # no run joined yet: epoch 0 (clients that never JOIN)
    for w, nonce in ((0, 0xA0A0A0A0), (1, 0xB1), (2, 0xC2C2)):
        join(1, w, nonce)  # the first starts run 1, the last completes it: multicast
    join(1, 1, 0xB1, retx=True)  # a copy of a counted join: the stored RESULT, unicast
    b.ina(1, 0, 1, epoch=0)  # the old run's data: STALE
    b.round(1, 0, epoch=1)  # seq 0 again: its copy holds run 0's seq 0, complete: NEW
    join(1, 2, 0xD3)  # a new run (the last join was complete): run 2
    join(1, 2, 0xD3, retx=True)  # a copy while the join is incomplete: PENDING
    join(1, 2, 0xF5)  # worker 2 restarted mid-join: run 3
    join(1, 0, 0x60)
    join(1, 1, 0x71)  # run 3 complete
    b.ina(1, 1, 0, epoch=2)  # run 2 never completed its join: its data is STALE
    b.round(1, 0, epoch=3)
    b.ina(1, 3, 0x99, op=Op.JOIN, flags=0)  # a worker id the job does not have
    b.ina(77, 0, 0x99, op=Op.JOIN, flags=0)  # a job that is not installed
    join(2, 0, 0x1234)  # a one-worker job: every JOIN completes a run at once
    join(2, 0, 0x5678)
    return {
        "joins": 9,
        "runs": 4,
        "duplicates": 2,
        "retx_replies": 1,
        "pending_replies": 1,
        "drop_stale": 2,
        "aggregated": 9,
        "results": 3,
        "result_packets": 18,
        "drop_bad_worker": 1,
        "drop_unknown_job": 1,
    }


@trace
def join_rejects(b: TraceBuilder) -> dict[str, int]:
    """JOINs of workers configured otherwise than the job: another pool (the JOIN's slot is
    not the job's last), other lanes in a packet of the switch's size, and packets of the
    size of 16, 64 and 0 lanes that say so in num_lanes: each is answered by unicast with
    REJECT, the job's last slot and the switch's lanes, in a header without lanes, and never
    counted into a run. A REJECT sent to the switch, and a JOIN whose num_lanes does not
    match its length, are MALFORMED. A run joined afterwards is not disturbed."""

    def join(w: int, nonce: int, **fields) -> None:
        b.ina(1, w, nonce, op=Op.JOIN, **{"flags": 0, **fields})

    join(0, 0x10)  # run 1 begins
    join(1, 0x21, slot=7)  # a pool of 8 (the job's is 4)
    join(1, 0x22, slot=0)  # a pool of 1
    join(1, 0x23, num_lanes=P4_LANES - 1)  # a packet of the switch's size, other lanes
    join(1, 0x24, lanes=[7] * 16, num_lanes=16)  # a worker with 16 lanes
    join(2, 0x25, lanes=[7] * 64, num_lanes=64)  # and one with 64
    join(2, 0x26, lanes=[], num_lanes=0)  # a header alone
    join(2, 0x27, lanes=[7] * 16, num_lanes=P4_LANES)  # too short for what it says
    join(2, 0x28, lanes=[7] * 16, num_lanes=15)  # num_lanes not its length
    join(2, 0x29, flags=Flag.REJECT)  # only switches send REJECT
    join(1, 0x21, slot=7, flags=Flag.RETX)  # a retransmission: refused again
    join(1, 0x2A, slot=7, flags=Flag.SHADOW | Flag.RETX)  # the reply's flags: REJECT alone
    join(1, 0x11)
    join(2, 0x12)  # run 1 complete: multicast
    b.round(1, 0, epoch=1)
    return {
        "join_rejects": 8,
        "drop_malformed": 3,
        "joins": 3,
        "runs": 1,
        "results": 1,
        "result_packets": 6,
    }


@trace
def late_worker_of_the_previous_run(b: TraceBuilder) -> dict[str, int]:
    """A worker of a finished run retransmits for its lost result after the others have
    begun the next run (their JOINs): a complete copy of its run answers it by unicast, with
    its run's epoch. Its data for a copy that is not complete, or that the next run has
    written since, and data of an older run, are STALE: never added to any sum."""

    def join(w: int, nonce: int) -> None:
        b.ina(1, w, nonce, op=Op.JOIN, flags=0)

    for w, nonce in ((0, 0x10), (1, 0x11), (2, 0x12)):
        join(w, nonce)  # run 1, its join complete: multicast
    b.round(1, 0, epoch=1)  # seq 0 complete: multicast (worker 2's copy is lost)
    b.ina(1, 0, 1, epoch=1)
    b.ina(1, 1, 1, epoch=1)  # seq 1: two of three
    join(0, 0x20)  # worker 0 is done with run 1 and begins run 2
    b.ina(1, 2, 0, retx=True, epoch=1)  # worker 2 asks again for seq 0: RESULT, unicast, epoch 1
    b.ina(1, 2, 1, epoch=1)  # run 1's seq 1 is not complete: STALE
    join(1, 0x21)
    join(2, 0x22)  # run 2's join complete: multicast
    b.round(1, 0, epoch=2)  # run 2's seq 0 takes the copy afresh
    b.ina(1, 2, 0, retx=True, epoch=1)  # the copy holds run 2's seq 0 now: STALE
    b.ina(1, 2, 0, retx=True, epoch=0)  # an older run: STALE
    return {
        "joins": 6,
        "runs": 2,
        "aggregated": 8,
        "results": 2,
        "duplicates": 1,
        "retx_replies": 1,
        "drop_stale": 3,
        "result_packets": 13,
    }


@trace
def hierarchical_leaf(b: TraceBuilder) -> dict[str, int]:
    """This switch as a leaf of job 6 (docs/protocol.md, "Hierarchical aggregation"): the
    run join and completed slots go UP to the parent (port 5) as its worker 1; duplicates
    from the workers send them up again until the parent's RESULT comes down; that RESULT is
    taken in once (multicast to the workers, then answered from the copy); a parent's
    PENDING, a second RESULT or one for a copy not complete here is STALE; a RESULT for a
    job without a parent is MALFORMED."""
    spine = b.topo.job(6).parent
    parent = WorkerAddress(6, spine.worker_id, spine.ip, spine.udp_port, spine.mac, spine.port)

    def join(w: int, nonce: int, retx: bool = False) -> None:
        b.ina(6, w, nonce, op=Op.JOIN, flags=Flag.RETX if retx else 0)

    def down(seq: int, flags: int, epoch: int, op: int = Op.SUM, worker: int = 0) -> None:
        shadow = Flag.SHADOW if seq & b.topo.job(6).pool_size else 0
        b.ina(
            6,
            worker,
            seq,
            op=op,
            sender=parent,
            flags=flags | shadow,
            epoch=epoch,
            exp=b.rng.randrange(256),
            level=b.rng.randrange(256),
            **({"slot": 0} if op == Op.JOIN else {}),
        )

    join(0, 0xA0)
    join(1, 0xB1)  # the local join is complete: UP, as the parent's worker 1, nonce 0xB1
    join(0, 0xA0, retx=True)  # the parent has not answered: UP again
    down(0xEE, Flag.RESULT, 5, op=Op.JOIN)  # another leaf's nonce: ask again (UP)
    down(0xB1, Flag.PENDING, 5, op=Op.JOIN)  # a PENDING: STALE
    down(0xB1, Flag.RESULT, 5, op=Op.JOIN)  # our run: epoch 5, multicast to the workers
    down(0xB1, Flag.RESULT, 5, op=Op.JOIN)  # again: STALE
    join(1, 0xB1, retx=True)  # the stored answer, unicast
    b.round(6, 0, epoch=5)  # complete here: the partial sum goes UP
    b.ina(6, 1, 0, retx=True, epoch=5)  # the result has not come down: UP again
    down(0, Flag.PENDING, 5)  # STALE
    down(1, Flag.RESULT, 5)  # seq 1's copy is unused here: STALE
    down(0, Flag.RESULT, 4)  # another run's: STALE
    down(0, Flag.RESULT, 5)  # taken in: multicast to the workers
    down(0, Flag.RESULT, 5)  # again: STALE
    b.ina(6, 0, 0, retx=True, epoch=5)  # the parent's result, unicast from the copy
    b.ina(6, 0, 1, epoch=5)
    b.ina(6, 0, 1, retx=True, epoch=5)  # incomplete here: PENDING
    down(1, Flag.RESULT, 5)  # not complete here: STALE
    b.ina(6, 1, 1, epoch=5)  # complete: UP
    down(1, Flag.RESULT, 5, op=Op.MAX, worker=3)  # any worker id of the parent's job
    b.round(6, 4, epoch=5)  # seq 4: the slot's other copy, complete: UP
    b.ina(1, 0, 0, flags=Flag.RESULT)  # job 1 has no parent: MALFORMED
    join(1, 0xC2)  # a new run here: no new epoch until the parent answers
    join(0, 0xD3)  # complete: UP with nonce 0xD3
    down(0xB1, Flag.RESULT, 6, op=Op.JOIN)  # the old run's nonce: ask again (UP, 0xD3)
    down(0xD3, Flag.RESULT, 6, op=Op.JOIN)  # epoch 6
    b.ina(6, 0, 0, epoch=5)  # the run before: its complete copy answers (unicast, epoch 5)
    b.ina(6, 0, 0, epoch=4)  # an older run: STALE
    return {
        "joins": 4,
        "runs": 2,
        "up_packets": 9,
        "results": 2,
        "duplicates": 8,
        "retx_replies": 3,
        "pending_replies": 1,
        "drop_stale": 8,
        "drop_malformed": 1,
        "aggregated": 6,
        "result_packets": 11,
    }


@trace
def random_leaf_mix(b: TraceBuilder) -> dict[str, int]:
    """300 seeded random packets for the leaf job 6: workers' contributions, duplicates and
    JOINs near a moving window, and the parent's RESULTs and PENDINGs (data and JOIN) with
    nonces, seqs and epochs that are right, stale or wrong; replays of earlier frames."""
    spec = b.topo.job(6)
    ps = spec.pool_size
    spine = spec.parent
    parent = WorkerAddress(6, spine.worker_id, spine.ip, spine.udp_port, spine.mac, spine.port)
    nonces = (0x11, 0x22, 0x33, 0x44)
    base = 0
    history: list[tuple[int, bytes]] = []
    for _ in range(300):
        r = b.rng.random()
        if history and r < 0.1:
            b.frame(*b.rng.choice(history))
            continue
        seq = max(0, base + b.rng.randrange(-ps, 2 * ps))
        ep = int(b.rng.random() < 0.1)  # mostly the run the parent answers with (0)
        shadow = Flag.SHADOW if seq & ps else 0
        extra = {"exp": b.rng.randrange(256), "level": b.rng.randrange(256)}
        if r < 0.2:  # a worker's JOIN
            b.ina(6, b.rng.randrange(2), b.rng.choice(nonces), op=Op.JOIN, **extra)
        elif r < 0.3:  # the parent's answer to a join
            flags = b.rng.choice((Flag.RESULT, Flag.RESULT, Flag.PENDING))
            b.ina(6, b.rng.randrange(4), b.rng.choice(nonces), op=Op.JOIN,
                  sender=parent, flags=flags, epoch=ep, **extra)  # fmt: skip
        elif r < 0.55:  # the parent's reply for a slot
            flags = b.rng.choice((Flag.RESULT, Flag.RESULT, Flag.PENDING)) | shadow
            b.ina(6, b.rng.randrange(4), seq, sender=parent, flags=flags, epoch=ep, **extra)
        else:  # a worker's contribution, sometimes a retransmission
            b.ina(6, b.rng.randrange(2), seq, retx=b.rng.random() < 0.3, epoch=ep, **extra)
        history.append(b.frames[-1])
        if b.rng.random() < 0.2:
            base += 1
    return {}


@trace
def malformed(b: TraceBuilder) -> dict[str, int]:
    """Every MALFORMED kind: version, op, RESULT/PENDING flags, num_lanes, truncated and
    over-long datagrams, a UDP length that disagrees; all dropped and counted."""
    n = 0
    for version in (0, 2, 255):
        b.ina(1, 0, 0, version=version)
        n += 1
    for op in (0, max(Op) + 1, 255):
        b.ina(1, 1, 0, op=op)
        n += 1
    for flags in (Flag.RESULT, Flag.PENDING, Flag.RESULT | Flag.PENDING | Flag.SHADOW):
        b.ina(1, 2, 0, flags=flags)
        n += 1
    for num_lanes in (P4_LANES + 1, 0xFFFF):
        b.ina(1, 0, 0, num_lanes=num_lanes)
        n += 1
    w = b.topo.worker(1, 1)
    whole = bytes(INA(worker_id=1, job_id=1, seq=0, lanes=b.lanes()))
    for cut in (0, 1, 19, 20, 21, 23, 24, 25, len(whole) - 4, len(whole) - 1):  # truncated
        b.frame(w.port, b.to_switch(w, Raw(whole[:cut])))
        n += 1
    for extra in (1, 4, 64):  # over-long datagrams (UDP length says so)
        b.frame(w.port, b.to_switch(w, Raw(whole + bytes(extra))))
        n += 1
    for udp_len in (8, 8 + len(whole) - 4, 8 + len(whole) + 4, 0xFFFF):  # length field lies
        b.frame(w.port, b.to_switch(w, Raw(whole), len=udp_len))
        n += 1
    b.ina(99, 0, 0, version=2)  # malformed wins over the unknown job
    n += 1
    b.round(1, 0)  # and the slot still works
    return {"drop_malformed": n, "packets_in": n + 3, "results": 1}


@trace
def padded_frames(b: TraceBuilder) -> dict[str, int]:
    """Bytes after the INA packet that the UDP length does not cover (Ethernet padding,
    trailers) do not make it malformed; they leave with every copy of the reply."""
    for i in range(3):
        w = b.topo.worker(1, i)
        pkt = b.to_switch(w, INA(worker_id=i, job_id=1, seq=0, lanes=b.lanes()))
        b.frame(w.port, bytes(pkt) + bytes(range(i * 7 + 1)))
    w = b.topo.worker(1, 1)
    retx = b.to_switch(w, INA(worker_id=1, job_id=1, seq=0, flags=Flag.RETX, lanes=b.lanes()))
    b.frame(w.port, bytes(retx) + b"\xaa" * 12)
    return {"aggregated": 3, "results": 1, "retx_replies": 1}


@trace
def unknown_job(b: TraceBuilder) -> dict[str, int]:
    """Jobs that are not installed (a job table miss) are dropped and counted."""
    for job_id in (0, 4, 99, 0xFFFF):
        b.ina(job_id, 0, 0, sender=b.topo.worker(1, 0))
    b.ina(2, 0, 0)  # and an installed one still works
    return {"drop_unknown_job": 4, "results": 1}


@trace
def bad_worker_and_slot(b: TraceBuilder) -> dict[str, int]:
    """Worker ids >= num_workers (BAD_WORKER); slots >= pool_size, a slot or SHADOW copy that
    is not the one of seq (BAD_SLOT)."""
    for w in (3, 31, 32, 255):
        b.ina(1, w, 0)
    b.ina(2, 1, 0)  # the one-worker job has only worker 0
    b.ina(1, 0, 0, slot=4)  # == pool_size
    b.ina(1, 0, 0, slot=0xFFFF)
    b.ina(1, 0, 1, slot=2)  # seq 1 lives in slot 1
    b.ina(1, 0, 4, flags=0)  # seq 4 lives in the SHADOW copy
    b.ina(1, 0, 0, flags=Flag.SHADOW)
    b.ina(3, 1, 3, slot=3 + 8, flags=0)  # slot of the right seq but outside job 3's pool
    b.ina(1, 5, 0, slot=9)  # a bad worker wins over a bad slot
    b.round(1, 0)
    return {"drop_bad_worker": 6, "drop_bad_slot": 6, "results": 1}


@trace
def one_worker_job(b: TraceBuilder) -> dict[str, int]:
    """A one-worker job: every contribution completes its slot (a multicast with one
    replica); seqs wrap around 2**32; retransmissions get the stored result back."""
    start = 2**32 - 6
    for i in range(12):
        seq = start + i
        b.ina(2, 0, seq, b.lanes("extreme" if i % 2 else "random"))
        if i % 3 == 0:
            b.ina(2, 0, seq, retx=True)
    return {"aggregated": 12, "results": 12, "retx_replies": 4, "result_packets": 16}


@trace
def two_jobs_interleaved(b: TraceBuilder) -> dict[str, int]:
    """Three jobs at once: host 1 and host 4 work for two jobs each (one worker_table entry
    per job and worker; multicast groups that share ports)."""
    order = [(1, s) for s in range(8)] + [(2, s) for s in range(6)] + [(3, s) for s in range(10)]
    b.rng.shuffle(order)
    for job_id, seq in sorted(order, key=lambda js: js[1]):
        b.round(job_id, seq)
    return {"results": 24, "aggregated": 8 * 3 + 6 + 10 * 2}


@trace
def shared_port_replicas(b: TraceBuilder) -> dict[str, int]:
    """Job 5 has workers 0 and 2 behind port 2: every result leaves port 2 twice, and the
    copies' order there is the replication engine's (BMv2: the attach order of its nodes,
    `ina.switch_model.replica_order`), seen by the workers as which one hears first."""
    for seq in range(6):
        b.round(5, seq)
    b.ina(5, 2, 0, retx=True)  # a stored result by unicast, between the multicasts
    b.round(5, 6)
    return {"aggregated": 21, "results": 7, "result_packets": 22, "retx_replies": 1}


@trace
def l2_forwarding(b: TraceBuilder) -> dict[str, int]:
    """Everything that is not INA goes through forward_table on the destination MAC, as it
    is; a miss (unknown MAC, broadcast, the switch's own MAC) drops it."""
    h1, h2, h3, h4 = (b.topo.host(f"h{i}") for i in range(1, 5))
    sw_mac, sw_ip = b.topo.switch_mac, b.topo.switch_ip

    def eth(src: Host, dst: Host | str, **kw):
        return Ether(src=src.mac, dst=dst if isinstance(dst, str) else dst.mac, **kw)

    def udp(src: Host, dst: Host, sport: int, dport: int, **ip):
        return eth(src, dst) / IP(src=src.ip, dst=dst.ip, **ip) / UDP(sport=sport, dport=dport)

    b.frame(1, eth(h1, "ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=h1.mac, psrc=h1.ip, pdst=h2.ip))
    b.frame(2, eth(h2, h1) / ARP(op=2, hwsrc=h2.mac, psrc=h2.ip, hwdst=h1.mac, pdst=h1.ip))
    b.frame(1, eth(h1, h3) / IP(src=h1.ip, dst=h3.ip) / ICMP() / Raw(bytes(56)))
    b.frame(2, udp(h2, h3, 40000, 40001) / Raw(b"hello"))
    b.frame(3, udp(h3, h1, UDP_PORT, 40001) / Raw(b"from the INA port, to another: not INA"))
    b.frame(4, udp(h4, h2, 40000, UDP_PORT, options=NOPS) / Raw(b"IPv4 options: not INA"))
    # An INA packet to the switch, but IPv4 with options: not INA, so forward_table: miss
    w = b.topo.worker(1, 0)
    ina = INA(worker_id=0, job_id=1, seq=0, lanes=b.lanes())
    with_options = IP(src=w.ip, dst=sw_ip, options=NOPS)
    b.frame(1, eth(h1, sw_mac) / with_options / UDP(sport=w.udp_port, dport=UDP_PORT) / ina)
    b.frame(1, eth(h1, h4) / IPv6(src="fd00::1", dst="fd00::4") / UDP(dport=UDP_PORT) / ina)
    b.frame(3, eth(h3, h2, type=0x88B5) / Raw(b"local experimental ethertype"))
    b.frame(2, eth(h2, "02:00:0a:00:00:77") / Raw(bytes(50)))  # nobody's MAC: miss
    b.frame(3, bytes(udp(h3, h4, 40000, 40002))[: 14 + 10])  # a truncated IPv4 header
    b.frame(4, eth(h4, h1) / IP(src=h4.ip, dst=h1.ip, proto=6) / Raw(bytes(20)))  # TCP
    b.frame(2, eth(h2, sw_mac) / IP(src=h2.ip, dst=sw_ip) / UDP(sport=1, dport=2))  # miss
    return {"packets_in": 0}


@trace
def vlan_tagged(b: TraceBuilder) -> dict[str, int]:
    """802.1Q (and 802.1ad) tagged frames are not INA, whatever they carry: the parser takes
    IPv4 only from ether_type 0x0800, so they go through forward_table and leave with their
    tags. On veths the kernel takes the tag off every received frame: the switch (libpcap for
    BMv2, `ina.packet_socket` for the model) and the harness must put it back."""
    h1, h2, h3, h4 = (b.topo.host(f"h{i}") for i in range(1, 5))
    w = b.topo.worker(1, 0)
    ina = UDP(sport=w.udp_port, dport=UDP_PORT) / INA(worker_id=0, job_id=1, seq=0, lanes=b.lanes())
    to_switch = IP(src=w.ip, dst=b.topo.switch_ip) / ina
    sw = b.topo.switch_mac
    b.frame(1, Ether(src=h1.mac, dst=sw) / Dot1Q(vlan=10) / to_switch)  # to the switch: miss
    b.frame(1, Ether(src=h1.mac, dst=h2.mac) / Dot1Q(vlan=10) / to_switch)  # to host 2
    b.frame(1, Ether(src=h1.mac, dst=h3.mac) / Dot1Q(vlan=0, prio=5) / to_switch)  # priority
    b.frame(4, Ether(src=h4.mac, dst=h1.mac) / Dot1Q(vlan=4094) / IP(src=h4.ip, dst=h1.ip) / ICMP())
    b.frame(
        2,
        Ether(src=h2.mac, dst=h4.mac)
        / Dot1AD(vlan=100)
        / Dot1Q(vlan=20)
        / IP(src=h2.ip, dst=h4.ip)
        / UDP(sport=40000, dport=40001)
        / Raw(b"QinQ"),
    )
    b.frame(3, Ether(src=h3.mac, dst=h2.mac) / Dot1Q(vlan=7) / ARP(psrc=h3.ip, pdst=h2.ip))
    b.round(1, 0)  # and untagged INA still aggregates
    return {"packets_in": 3, "aggregated": 3, "results": 1}


@trace
def random_mix(b: TraceBuilder) -> dict[str, int]:
    """A seeded random mix over every job: mostly valid contributions near a moving window,
    retransmissions and replays of earlier frames, JOINs and other runs' packets, and every
    kind of bad packet."""
    base = {1: 0, 2: 2**32 - 10, 3: 2**31}
    epochs: dict[int, int] = {}  # the trace's guess of each job's run; wrong now and then
    history: list[tuple[int, bytes]] = []
    for _ in range(400):
        r = b.rng.random()
        if history and r < 0.12:
            b.frame(*b.rng.choice(history))
            continue
        job_id = b.rng.choice((1, 1, 1, 2, 3, 3)) if b.rng.random() > 0.03 else 77
        spec = b.topo.job(job_id) if job_id != 77 else b.topo.jobs[0]
        ps = spec.pool_size
        w = b.rng.randrange(spec.num_workers) if b.rng.random() > 0.03 else spec.num_workers
        seq = base.get(job_id, 0) + b.rng.randrange(-2 * ps, 3 * ps)
        fields: dict = {}
        op = b.rng.choice((Op.SUM, Op.OR, Op.MAX))
        m = b.rng.random()  # what, if anything, is wrong with this packet
        if m < 0.03:
            fields["slot"] = b.rng.choice(((seq + 1) % ps, ps + 1))
        elif m < 0.06:
            fields["flags"] = Flag.SHADOW if not seq & ps else 0
        elif m < 0.08:
            fields["version"] = 2
        elif m < 0.10:
            op = b.rng.choice((0, max(Op) + 1, 255))
        elif m < 0.12:
            fields["num_lanes"] = P4_LANES + 1
        elif m < 0.16:  # a JOIN, a nonce from a small set so that some are duplicates
            op = Op.JOIN
            seq = b.rng.randrange(4)
            fields.update(slot=0, flags=Flag.RETX if b.rng.random() < 0.3 else 0)
        if op != Op.JOIN:  # data of the current run, mostly; of another run now and then
            fields["epoch"] = epochs.get(job_id, 0) + (b.rng.random() < 0.1)
        kind = b.rng.choice(("random", "extreme", "bits", "small"))
        if op == Op.JOIN and b.rng.random() < 0.5:
            epochs[job_id] = epochs.get(job_id, 0) + 1  # a guess; the model decides
        b.ina(
            job_id,
            w,
            seq,
            b.lanes(kind),
            op=op,
            retx=b.rng.random() < 0.2,
            exp=b.rng.randrange(256),
            level=b.rng.randrange(256),
            **fields,
        )
        history.append(b.frames[-1])
        if b.rng.random() < 0.25:  # the window moves on now and then
            base[job_id] = base.get(job_id, 0) + 1
    return {}


__all__ = [
    "TRACES",
    "Host",
    "Topology",
    "Trace",
    "TraceBuilder",
    "build",
    "default_topology",
    "trace",
]
