"""The switch model on Ethernet frames: the P4 program's parser, ingress and egress.

`ina.switch_model.pipeline` runs the aggregation on INA payloads; this module puts the rest
of the P4 program (`ina/p4/ina.p4`) around it, so that the model can sit where BMv2 sits (on
Mininet's or a test's veths, through `ina.switch_model.rawio`) and send the same frames out,
byte for byte. Its steps carry the names of the P4 controls:

1. ``InaParser``      Ethernet; IPv4 if ether_type is 0x0800; UDP if the IPv4 header has no
                      options (ihl 5) and protocol 17; INA if the UDP destination port is
                      `UDP_PORT`. A frame too short for a header stops the parser there
                      (v1model runs the ingress anyway): a short IPv4 or UDP header makes the
                      frame plain L2 traffic; a short INA packet is MALFORMED (step 2).
2. ``InaIngress``     INA: the payload goes through `Pipeline.process_batch`, whose byte
                      counters count the whole frame (``frame_overhead`` = frame length -
                      payload length, 42 for Ethernet/IPv4/UDP without options). The payload
                      length is the UDP length - 8 when the frame holds a whole INA packet, so
                      that a wrong UDP length is MALFORMED as in ``Validate``.
                      Not INA: ``Forward``, ``forward_table`` exact on the destination MAC ->
                      port; a miss drops (no flooding: hosts use static ARP entries).
3. Replication        a RESULT for the job's multicast group leaves once per replica (egress
                      port, rid) of the group, in the order BMv2 sends them (`Tables.replicas`,
                      `replica_order`); a unicast reply (stored
                      RESULT or PENDING for a retransmission) leaves by the port it came in on;
                      a leaf's packet UP to its parent by the parent_table entry's port.
4. ``WorkerRewrite``  each copy is addressed from ``worker_table[(job_id, worker)]`` (worker =
                      the replica's rid, or the header's worker_id for a unicast reply):
                      eth.dst := worker mac, eth.src := the request's eth.dst, ipv4.src := the
                      request's ipv4.dst, ipv4.dst := worker ip, udp.src := `UDP_PORT`,
                      udp.dst := worker udp_port, udp checksum := 0; TTL and the rest unchanged.
                      A copy without an entry is dropped. An UP packet is addressed the same
                      way from ``parent_table[job_id]``.
5. ``EgressStats``    RESULT_PACKETS counts the result copies that leave. The pipeline counts
                      one per replica when it decides to multicast; a copy dropped at step 4
                      is taken back out, as the P4 egress never counts it.
6. ``InaComputeChecksum``  the IPv4 checksum of every rewritten copy is recomputed; forwarded
                      frames leave untouched.

Frames leave in the order their inputs came in (a packet's replicas together), as a single
ingress thread would send them.

Why the batch may be split: the pipeline does not say which input produced an output, so
outputs are matched to their requests by (job_id, worker_id, seq), which every reply copies
from its request. A batch where that key repeats (a retransmission right behind its original)
is run as several consecutive calls in which it does not; the result is the same as one call,
since a batch behaves exactly like its packets one at a time.

Model-only diagnostics (the P4 program has no counter for them) are in `FrameCounters`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ina.protocol import (
    FIELD_OFFSETS,
    HEADER_BYTES,
    UDP_PORT,
    Counter,
    Flag,
)
from ina.switch_model.pipeline import MULTICAST, PARENT, Outputs, Pipeline
from ina.switch_model.tables import WorkerAddress

# Byte offsets in an untagged Ethernet / IPv4 (no options) / UDP frame.
ETH_DST, ETH_SRC, ETH_TYPE = 0, 6, 12
IP = 14  # version/ihl byte
IP_LEN = IP + 2
IP_PROTO = IP + 9
IP_CSUM = IP + 10
IP_SRC = IP + 12
IP_DST = IP + 16
UDP = IP + 20  # 34
UDP_SPORT, UDP_DPORT, UDP_LEN, UDP_CSUM = UDP, UDP + 2, UDP + 4, UDP + 6
INA = UDP + 8  # 42: the INA payload

ETH_HEADER = 14
ETHERTYPE_IPV4 = 0x0800
IPV4_IHL_NO_OPTIONS = 5
IP_PROTOCOL_UDP = 17

_WORKER = INA + FIELD_OFFSETS["worker_id"]
_JOB = INA + FIELD_OFFSETS["job_id"]
_SEQ = INA + FIELD_OFFSETS["seq"]
_FLAGS = FIELD_OFFSETS["flags"]


def mac_to_int(mac: str | int | bytes) -> int:
    """``"aa:bb:cc:dd:ee:ff"``, 6 bytes or an int -> the 48-bit integer."""
    if isinstance(mac, int):
        value = mac
    elif isinstance(mac, bytes):
        if len(mac) != 6:
            raise ValueError(f"a MAC address has 6 bytes, got {len(mac)}")
        value = int.from_bytes(mac, "big")
    else:
        parts = mac.split(":")
        if len(parts) != 6:
            raise ValueError(f"not a MAC address: {mac!r}")
        value = int("".join(p.zfill(2) for p in parts), 16)
    if not 0 <= value < 1 << 48:
        raise ValueError(f"MAC address out of range: {mac!r}")
    return value


def int_to_mac(value: int) -> str:
    return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))


def _be16(cols: np.ndarray) -> np.ndarray:
    """(n, 2) uint8 -> n big-endian 16-bit values (int64)."""
    c = cols.astype(np.int64)
    return (c[:, 0] << 8) | c[:, 1]


def _be_int(cols: np.ndarray) -> np.ndarray:
    """(n, k <= 7) uint8 -> n big-endian integers (int64)."""
    c = cols.astype(np.int64)
    v = np.zeros(c.shape[0], np.int64)
    for j in range(c.shape[1]):
        v = (v << 8) | c[:, j]
    return v


def ipv4_checksum(headers: np.ndarray) -> np.ndarray:
    """Internet checksums of (m, 20) IPv4 headers whose checksum field is zero (uint16)."""
    w = headers.astype(np.uint32)
    s = ((w[:, 0::2] << 8) | w[:, 1::2]).sum(axis=1)
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return (~s & 0xFFFF).astype(np.uint16)


@dataclass
class FrameCounters:
    """Model-only diagnostics of the frame layer (not part of ``ina_stats``)."""

    frames_in: int = 0
    ina_frames: int = 0  # frames that went to the INA pipeline (valid or not)
    forwarded: int = 0  # non-INA frames sent out by forward_table
    forward_miss: int = 0  # non-INA frames dropped: no forward_table entry
    runts: int = 0  # frames shorter than an Ethernet header, dropped
    copies_out: int = 0  # INA reply copies sent out (multicast replicas + unicast)
    no_worker: int = 0  # INA copies dropped at egress: no worker_table entry

    def snapshot(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class FrameOutputs:
    """Frames to send: row ``i < n`` of ``data`` is ``length[i]`` bytes for ``port[i]``."""

    data: np.ndarray  # (capacity, stride) uint8
    length: np.ndarray  # int64
    port: np.ndarray  # int64
    n: int = 0

    @classmethod
    def allocate(cls, capacity: int, stride: int) -> FrameOutputs:
        return cls(
            np.zeros((capacity, stride), np.uint8),
            np.zeros(capacity, np.int64),
            np.zeros(capacity, np.int64),
        )

    def reserve(self, capacity: int, stride: int) -> None:
        """Make room for ``capacity`` frames of ``stride`` bytes (keeps nothing)."""
        if capacity > self.data.shape[0] or stride > self.data.shape[1]:
            cap = max(capacity, self.data.shape[0])
            st = max(stride, self.data.shape[1])
            self.data = np.zeros((cap, st), np.uint8)
            self.length = np.zeros(cap, np.int64)
            self.port = np.zeros(cap, np.int64)

    def frames(self) -> list[tuple[int, bytes]]:
        """(port, frame bytes) of each output (for tests and tools)."""
        return [
            (int(self.port[i]), self.data[i, : self.length[i]].tobytes()) for i in range(self.n)
        ]


@dataclass
class _Sends:
    """Output frames of one batch before they are put in input order."""

    order: list[np.ndarray] = field(default_factory=list)  # input row of each frame
    src: list[np.ndarray] = field(default_factory=list)  # row whose bytes it starts from
    port: list[np.ndarray] = field(default_factory=list)
    # INA copies only: position among all frames is found after sorting, so keep their
    # rewritten first 42 bytes and payload rows alongside a marker.
    is_ina: list[np.ndarray] = field(default_factory=list)
    ina_head: list[np.ndarray] = field(default_factory=list)
    ina_payload: list[np.ndarray] = field(default_factory=list)
    # a copy's frame length when it is not its request's (a REJECT: the header, no lanes)
    length: list[np.ndarray] = field(default_factory=list)  # -1: the request's
    cut: bool = False  # some copy is shorter than its request


class FramePipeline:
    """The whole switch on Ethernet frames: `Pipeline` plus parser, forwarding and egress.

    ``forward`` is ``forward_table``: destination MAC (48-bit int) -> port. Jobs, workers and
    multicast groups live in ``pipeline.tables`` as for the UDP model.
    """

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.forward: dict[int, int] = {}
        self.counters = FrameCounters()
        self._pout: Outputs | None = None
        self._addr_bytes: dict[WorkerAddress, bytes] = {}

    # -- control plane -------------------------------------------------------------------

    def add_forward(self, mac: str | int | bytes, port: int) -> None:
        """``forward_table`` entry: frames to ``mac`` leave by ``port``."""
        if not 0 <= port < 1 << 9:
            raise ValueError(f"port {port} does not fit 9 bits")
        self.forward[mac_to_int(mac)] = int(port)

    def remove_forward(self, mac: str | int | bytes) -> None:
        self.forward.pop(mac_to_int(mac), None)

    def load_forward(self, path: str | Path) -> int:
        """Install the ``forward_table`` entries of a runtime file; returns how many.

        The file follows the p4lang tutorials' runtime JSON: ``{"table_entries": [{"table":
        "forward_table", "match": {"dst_mac": "..."}, "action_name": "forward",
        "action_params": {"port": 1}}]}`` (a ``"Ingress."``-style prefix on the names is
        accepted); entries of other tables are ignored (jobs come from the jobs file).
        """
        data = json.loads(Path(path).read_text())
        n = 0
        for e in data.get("table_entries", []):
            if e.get("table", "").rsplit(".", 1)[-1] != "forward_table":
                continue
            if e.get("action_name", "").rsplit(".", 1)[-1] != "forward":
                raise ValueError(f"forward_table entry with action {e.get('action_name')!r}")
            self.add_forward(e["match"]["dst_mac"], int(e["action_params"]["port"]))
            n += 1
        return n

    # -- data plane ----------------------------------------------------------------------

    def process_frames(self, frames: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        """(ingress port, frame) in -> (egress port, frame) out, in order (tests, tools)."""
        if not frames:
            return []
        stride = max(max(len(f) for _, f in frames), INA + self.pipeline.payload_bytes)
        buf = np.zeros((len(frames), stride), np.uint8)
        for i, (_, f) in enumerate(frames):
            buf[i, : len(f)] = np.frombuffer(f, np.uint8)
        lengths = np.array([len(f) for _, f in frames], np.int64)
        ports = np.array([p for p, _ in frames], np.int64)
        out = FrameOutputs.allocate(1, stride)
        self.process(buf, lengths, ports, out)
        return out.frames()

    def process(
        self, frames: np.ndarray, lengths: np.ndarray, ports: np.ndarray, out: FrameOutputs
    ) -> int:
        """Run ``lengths.size`` frames (rows of ``frames``, received on ``ports``).

        ``frames`` is (n, stride) uint8 with ``lengths <= stride``. The frames to send are
        left in ``out`` (grown if needed). Returns their number.
        """
        n = int(lengths.size)
        out.n = 0
        if n == 0:
            return 0
        lengths = np.asarray(lengths, np.int64)
        ports = np.asarray(ports, np.int64)
        c = self.counters
        c.frames_in += n
        stride = frames.shape[1]
        pb = self.pipeline.payload_bytes
        f = frames[:n]

        # -- InaParser (vectorized) --------------------------------------------------------
        eth = lengths >= ETH_HEADER
        if stride >= INA:
            head = f[:, :INA]
            is_ip = (
                eth & (lengths >= UDP) & (_be16(head[:, ETH_TYPE : ETH_TYPE + 2]) == ETHERTYPE_IPV4)
            )
            is_udp = (
                is_ip
                & (lengths >= INA)
                & ((head[:, IP] & 0x0F) == IPV4_IHL_NO_OPTIONS)
                & (head[:, IP_PROTO] == IP_PROTOCOL_UDP)
            )
            is_ina = is_udp & (_be16(head[:, UDP_DPORT : UDP_DPORT + 2]) == UDP_PORT)
        else:
            is_ina = np.zeros(n, bool)
        runt = ~eth
        if runt.any():
            c.runts += int(runt.sum())
        sends = _Sends()

        # -- Forward: plain L2 for everything else ------------------------------------------
        fwd_rows = np.flatnonzero(eth & ~is_ina)
        if fwd_rows.size:
            macs = _be_int(f[fwd_rows, ETH_DST : ETH_DST + 6]).tolist()
            table = self.forward
            egress = [table.get(m, -1) for m in macs]
            e = np.asarray(egress, np.int64)
            hit = e >= 0
            c.forward_miss += int((~hit).sum())
            c.forwarded += int(hit.sum())
            if hit.any():
                rows = fwd_rows[hit]
                sends.order.append(rows)
                sends.src.append(rows)
                sends.port.append(e[hit])
                sends.is_ina.append(np.zeros(rows.size, bool))

        # -- INA: the aggregation pipeline ----------------------------------------------------
        ina_rows = np.flatnonzero(is_ina)
        if ina_rows.size:
            c.ina_frames += int(ina_rows.size)
            self._ina(f, lengths, ports, ina_rows, pb, sends)

        return self._emit(f, lengths, sends, out)

    def _ina(
        self,
        f: np.ndarray,
        lengths: np.ndarray,
        ports: np.ndarray,
        rows: np.ndarray,
        pb: int,
        sends: _Sends,
    ) -> None:
        stride = f.shape[1]
        # Payload length as Validate sees it: UDP length - 8 if the whole packet was parsed,
        # else what there is (shorter than a packet, so MALFORMED either way).
        parsed = lengths[rows] >= INA + pb
        udp_len = _be16(f[rows, UDP_LEN : UDP_LEN + 2])
        plen = np.where(parsed, udp_len - 8, lengths[rows] - INA)
        overhead = lengths[rows] - plen
        width = min(pb, stride - INA)
        for seg in self._segments(f, rows, plen == pb):
            payload = f[rows[seg], INA : INA + width]
            pout = self._outputs(seg.size)
            m = self.pipeline.process_batch(payload, plen[seg], pout, frame_overhead=overhead[seg])
            if m:
                self._egress(f, lengths, ports, rows[seg], plen[seg] == pb, pout, m, sends)

    def _segments(self, f: np.ndarray, rows: np.ndarray, full: np.ndarray) -> list[np.ndarray]:
        """Consecutive index ranges into ``rows`` in which no full-length packet repeats the
        key (job_id, worker_id, seq) of another (see the module docstring)."""
        cand = np.flatnonzero(full)
        if cand.size < 2:
            return [np.arange(rows.size)]
        keys = self._keys(f, rows[cand])
        if np.unique(keys).size == keys.size:
            return [np.arange(rows.size)]
        segments = []
        start = 0
        seen: set[int] = set()
        for pos, key in zip(cand.tolist(), keys.tolist(), strict=True):
            if key in seen:
                segments.append(np.arange(start, pos))
                start = pos
                seen = set()
            seen.add(key)
        segments.append(np.arange(start, rows.size))
        return segments

    @staticmethod
    def _keys(f: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """(job_id, worker_id, seq) of INA frames as one int64 each."""
        job = _be16(f[rows, _JOB : _JOB + 2])
        worker = f[rows, _WORKER].astype(np.int64)
        seq = _be_int(f[rows, _SEQ : _SEQ + 4])
        return (job << 40) | (worker << 32) | seq

    def _outputs(self, n: int) -> Outputs:
        pout = self._pout
        if pout is None or pout.data.shape[0] < n:
            pout = Outputs.allocate(max(n, 64), self.pipeline.payload_bytes)
            self._pout = pout
        return pout

    def _egress(
        self,
        f: np.ndarray,
        lengths: np.ndarray,
        ports: np.ndarray,
        rows: np.ndarray,
        full: np.ndarray,
        pout: Outputs,
        m: int,
        sends: _Sends,
    ) -> None:
        """Replicate and address the pipeline's ``m`` outputs (requests: ``rows``)."""
        pb = self.pipeline.payload_bytes
        # Which request each output answers: the pipeline names its input row (a leaf's UP
        # packet carries another worker_id and, for a JOIN, seq than its request).
        hdr = pout.data[:m, :HEADER_BYTES]
        src = rows[pout.src[:m]]

        # -- Replication: the copies of each output, in output order (a group's replicas
        # in BMv2's order, `Tables.replicas`), with the egress port and worker_table's bytes.
        dest = pout.dest[:m]
        mc = dest == MULTICAST
        job = pout.job_id[:m].astype(np.int64)
        gj = np.where(mc, (pout.group[:m].astype(np.int64) << 16) | job, -1)
        is_result = (hdr[:, _FLAGS] & Flag.RESULT) != 0
        counts = np.zeros(m, np.int64)
        tabs = {}
        for key in np.unique(gj[mc]).tolist():
            rp, book, missing = tabs[key] = self._replicas(key >> 16, key & 0xFFFF)
            of_key = np.flatnonzero(gj == key)
            counts[of_key] = rp.size
            for i in of_key.tolist() if missing else ():
                self._dropped_copy(bool(is_result[i]), int(lengths[src[i]]), missing)
        uni_book: list[bytes] = []
        uni_port: list[int] = []  # -1: back out of the ingress port
        tables = self.pipeline.tables
        for i in np.flatnonzero(~mc).tolist():
            if dest[i] == PARENT:
                addr = tables.parents.get(int(job[i]))
            else:
                addr = tables.workers.get((int(job[i]), int(dest[i])))
            if addr is None:
                self._dropped_copy(bool(is_result[i]), int(lengths[src[i]]))
            else:
                counts[i] = 1
                uni_book.append(self._address(addr))
                uni_port.append(addr.port if dest[i] == PARENT else -1)
        k = int(counts.sum())
        if not k:
            return
        o = np.repeat(np.arange(m), counts)  # the output each copy is of
        j = np.arange(k) - np.repeat(np.cumsum(counts) - counts, counts)  # its replica index
        s = src[o]
        cp_port = np.empty(k, np.int64)
        book = np.empty((k, 12), np.uint8)
        for key, (rp, rb, _) in tabs.items():
            sel = np.flatnonzero(gj[o] == key)
            cp_port[sel] = rp[j[sel]]
            book[sel] = rb[j[sel]]
        if uni_book:
            sel = np.flatnonzero(~mc[o])  # unicast: back out of the ingress port, or UP
            up = np.asarray(uni_port, np.int64)
            cp_port[sel] = np.where(up >= 0, up, ports[s[sel]])
            book[sel] = np.frombuffer(b"".join(uni_book), np.uint8).reshape(-1, 12)
        self.counters.copies_out += k
        # -- WorkerRewrite + InaComputeChecksum, on the request's first 42 bytes ------------
        head = f[s, :INA].copy()
        head[:, ETH_SRC : ETH_SRC + 6] = head[:, ETH_DST : ETH_DST + 6]
        head[:, ETH_DST : ETH_DST + 6] = book[:, 0:6]
        head[:, IP_SRC : IP_SRC + 4] = head[:, IP_DST : IP_DST + 4]
        head[:, IP_DST : IP_DST + 4] = book[:, 6:10]
        head[:, UDP_SPORT] = UDP_PORT >> 8
        head[:, UDP_SPORT + 1] = UDP_PORT & 0xFF
        head[:, UDP_DPORT : UDP_DPORT + 2] = book[:, 10:12]
        head[:, UDP_CSUM : UDP_CSUM + 2] = 0
        head[:, IP_CSUM : IP_CSUM + 2] = 0
        plen = pout.length[o]
        short = np.flatnonzero(plen < pb)  # a REJECT: cut after the INA header (truncate)
        length = np.full(k, -1, np.int64)
        if short.size:
            udp_len = plen[short] + 8
            ip_len = udp_len + 20
            head[short, UDP_LEN] = udp_len >> 8
            head[short, UDP_LEN + 1] = udp_len & 0xFF
            head[short, IP_LEN] = ip_len >> 8
            head[short, IP_LEN + 1] = ip_len & 0xFF
            length[short] = INA + plen[short]
            sends.cut = True
        csum = ipv4_checksum(head[:, IP:UDP])
        head[:, IP_CSUM] = csum >> 8
        head[:, IP_CSUM + 1] = csum & 0xFF
        sends.order.append(s)
        sends.src.append(s)
        sends.port.append(cp_port)
        sends.is_ina.append(np.ones(k, bool))
        sends.ina_head.append(head)
        sends.ina_payload.append(pout.data[o, :pb].copy())
        sends.length.append(length)

    def _replicas(self, group: int, job: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Replicas of ``group`` that have a worker_table entry: their egress ports, the
        12 bytes WorkerRewrite writes for each, and how many have no entry."""
        tables = self.pipeline.tables
        ports, books, missing = [], [], 0
        for port, rid in tables.replicas(group):
            addr = tables.workers.get((job, rid))
            if addr is None:
                missing += 1
                continue
            ports.append(port)
            books.append(self._address(addr))
        book = np.frombuffer(b"".join(books), np.uint8).reshape(len(books), 12)
        return np.asarray(ports, np.int64), book, missing

    def _dropped_copy(self, result: bool, frame_len: int, copies: int = 1) -> None:
        """worker_table miss: WorkerRewrite drops the copy and EgressStats does not count it,
        but the pipeline counted it in RESULT_PACKETS when it replicated: take it back."""
        self.counters.no_worker += copies
        if result:
            stats = self.pipeline.counters.stats
            stats[Counter.RESULT_PACKETS, 0] -= copies
            stats[Counter.RESULT_PACKETS, 1] -= copies * frame_len

    def _address(self, addr: WorkerAddress) -> bytes:
        """mac (6) + ip (4) + udp port (2) of a worker, as set_worker writes them."""
        b = self._addr_bytes.get(addr)
        if b is None:
            ip = bytes(int(x) for x in addr.ip.split("."))
            if len(ip) != 4:
                raise ValueError(f"worker address {addr.ip!r} is not IPv4")
            b = mac_to_int(addr.mac).to_bytes(6, "big") + ip + addr.udp_port.to_bytes(2, "big")
            if len(self._addr_bytes) > 4096:
                self._addr_bytes.clear()
            self._addr_bytes[addr] = b
        return b

    def _emit(self, f: np.ndarray, lengths: np.ndarray, sends: _Sends, out: FrameOutputs) -> int:
        """Put the batch's frames into ``out`` in input order."""
        if not sends.order:
            return 0
        order = np.concatenate(sends.order)
        src = np.concatenate(sends.src)
        port = np.concatenate(sends.port)
        ina = np.concatenate(sends.is_ina)
        perm = np.argsort(order, kind="stable")
        total = int(order.size)
        out.reserve(total, f.shape[1])
        s = src[perm]
        out.data[:total, : f.shape[1]] = f[s]
        out.length[:total] = lengths[s]
        if sends.cut:
            own = np.full(total, -1, np.int64)
            own[np.flatnonzero(ina)] = np.concatenate(sends.length)
            own = own[perm]
            cut = own >= 0
            out.length[:total][cut] = own[cut]
        out.port[:total] = port[perm]
        if sends.ina_head:
            # where each INA copy ended up: positions of the marked frames, in input order
            at = np.empty(total, np.int64)
            at[perm] = np.arange(total)
            dst = at[np.flatnonzero(ina)]
            head = np.concatenate(sends.ina_head)
            payload = np.concatenate(sends.ina_payload)
            out.data[dst, :INA] = head
            out.data[dst, INA : INA + payload.shape[1]] = payload
        out.n = total
        return total


__all__ = [
    "INA",
    "FrameCounters",
    "FrameOutputs",
    "FramePipeline",
    "int_to_mac",
    "ipv4_checksum",
    "mac_to_int",
]
