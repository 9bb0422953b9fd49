"""The switch model sharded over processes, as a hardware switch runs parallel pipelines.

``ina switch --shards K`` runs K shard processes. Each binds the switch's UDP port with
SO_REUSEPORT, and a classic BPF program attached to the group (SO_ATTACH_REUSEPORT_CBPF)
picks the socket of every datagram: for UDP the kernel runs that program with the packet data
positioned after the UDP header (``reuseport_select_sock(..., sizeof(struct udphdr))`` in
net/ipv4/udp.c), so it reads the INA header directly. It sends

- a data packet to shard ``slot % K`` (``slot`` is the job-relative slot of the header): all
  packets of a slot, both shadow copies, and their retransmissions reach one shard, which
  therefore alone reads and writes that slot's registers and sends its results;
- a JOIN to shard 0, the only writer of the per-job run registers.

Every shard runs the one `Pipeline` on state that lives in one shared anonymous mapping:
the slot registers and run registers are shared (each cell has one writer: the shard that
owns the slot, shard 0 for runs; the other shards only read ``job_epoch``, which shard 0
writes before it sends the RESULT that lets workers send data of the new run), and each
shard counts into counters of its own. Nothing is exchanged per packet.

One P4Runtime service (in the parent process) serves a front `Pipeline` over the same shared
registers, whose counters are the sum over the shards (`ShardedCounters`). Its pipeline lock
(`FrontLock`) takes every shard's lock, so a Read or Write sees all shards between batches;
on release it publishes the tables (job_table, worker_table, parent_table, multicast groups) to the
shards when they changed, and each shard reloads them before its next batch.

A shard of the same P4 program meaning: a packet's outputs depend only on the state of its
slot and its job's run, which no other shard writes, so the shards together behave as the
single pipeline does for some interleaving of the packets, as a network may reorder them.
"""

from __future__ import annotations

import ctypes
import mmap
import multiprocessing as mp
import pickle
import signal
import socket
import struct
import threading
from collections.abc import Sequence

import numpy as np

from ina.netio import BatchSocket
from ina.procs import die_with_parent
from ina.protocol import HEADER_DTYPE, Op
from ina.switch_model.impair import Impairment
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.server import SwitchServer
from ina.switch_model.state import Counters
from ina.switch_model.tables import Tables

MAX_SHARDS = 64
SO_ATTACH_REUSEPORT_CBPF = 51  # include/uapi/asm-generic/socket.h
TABLES_BYTES = 8 << 20  # room for the pickled tables (a full worker_table is ~1 MiB)

_OP_OFFSET = HEADER_DTYPE.fields["op"][1]
_SLOT_OFFSET = HEADER_DTYPE.fields["slot"][1]


# -- steering ------------------------------------------------------------------------------


def shard_of(op: int, slot: int, shards: int) -> int:
    """The shard the steering program picks for a packet (the same rule, in Python)."""
    return 0 if op == Op.JOIN else slot % shards


def shard_of_payload(payload: bytes, shards: int) -> int:
    """`shard_of` for a datagram, as the program reads it: a runt goes to shard 0."""
    if len(payload) < _SLOT_OFFSET + 2:
        return 0
    slot = int.from_bytes(payload[_SLOT_OFFSET : _SLOT_OFFSET + 2], "big")
    return shard_of(payload[_OP_OFFSET], slot, shards)


def steering_program(shards: int) -> list[tuple[int, int, int, int]]:
    """Classic BPF (code, jt, jf, k) returning the socket index of a datagram's payload:
    0 for a JOIN, else the big-endian slot field mod ``shards``. A load past a short
    datagram's end returns 0, so runts reach shard 0 (which drops them as MALFORMED)."""
    ld_b_abs, ld_h_abs, jeq_k, mod_k, ret_a, ret_k = 0x30, 0x28, 0x15, 0x94, 0x16, 0x06
    return [
        (ld_b_abs, 0, 0, _OP_OFFSET),
        (jeq_k, 3, 0, int(Op.JOIN)),  # JOIN: jump to "ret #0"
        (ld_h_abs, 0, 0, _SLOT_OFFSET),
        (mod_k, 0, 0, shards),
        (ret_a, 0, 0, 0),
        (ret_k, 0, 0, 0),
    ]


def attach_steering(sock: socket.socket, shards: int) -> None:
    """Attach `steering_program` to ``sock``'s SO_REUSEPORT group (the kernel copies it)."""
    prog = steering_program(shards)
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in prog))
    fprog = struct.pack("HL", len(prog), ctypes.addressof(code))  # struct sock_fprog
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, fprog)


def bind_group(address: tuple[str, int], shards: int, batch: int, stride: int) -> list:
    """``shards`` sockets in one SO_REUSEPORT group on ``address``, socket i = shard i.

    A probe bind without SO_REUSEPORT first, so that a port some other process serves
    (even another sharded switch, whose group we would silently join) fails as EADDRINUSE.
    """
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.bind(address)
        address = probe.getsockname()  # port 0: the one the kernel picked
    finally:
        probe.close()
    socks: list[BatchSocket] = []
    try:
        for _ in range(shards):
            socks.append(BatchSocket(address, batch=batch, stride=stride, reuseport=True))
        attach_steering(socks[0].sock, shards)
    except OSError:
        for s in socks:
            s.close()
        raise
    return socks


# -- shared state --------------------------------------------------------------------------


class _Cursor:
    """A `ina.switch_model.state.Storage` handing out consecutive regions of ``mem``; with
    ``mem`` None it hands out private zeros and only counts the bytes (to size ``mem``)."""

    def __init__(self, mem: mmap.mmap | None = None) -> None:
        self.mem = mem
        self.offset = 0

    def __call__(self, kind: str, *args):
        shape, dtype = ((args[0],), np.int64) if kind == "cells" else args
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        off = self.offset
        self.offset += -(-nbytes // 64) * 64  # cache-line aligned regions
        if self.mem is None:
            return [0] * args[0] if kind == "cells" else np.zeros(shape, dtype)
        if kind == "cells":
            return memoryview(self.mem)[off : off + nbytes].cast("q")
        return np.ndarray(shape, dtype, buffer=self.mem, offset=off)


class ShardedCounters:
    """The counters of all shards as one: reads sum them; a write sets shard 0's cells to
    the value and the others' to zero, so the sum is the value written."""

    def __init__(self, shards: Sequence[Counters]) -> None:
        self.shards = list(shards)

    def size(self, p4_name: str) -> int:
        return self.shards[0].size(p4_name)

    def read(self, p4_name: str, lo: int, hi: int) -> np.ndarray:
        return sum(c.read(p4_name, lo, hi) for c in self.shards)

    def write(self, p4_name: str, lo: int, hi: int, packets: int, nbytes: int) -> None:
        for i, c in enumerate(self.shards):
            c.write(p4_name, lo, hi, packets if i == 0 else 0, nbytes if i == 0 else 0)

    def reset(self) -> None:
        for c in self.shards:
            c.reset()

    @property
    def stats(self) -> np.ndarray:
        return sum(c.stats for c in self.shards)

    @property
    def workers(self) -> np.ndarray:
        return sum(c.workers for c in self.shards)

    def snapshot(self) -> dict[str, tuple[int, int]]:
        total: dict[str, tuple[int, int]] = {}
        for c in self.shards:
            for k, (p, b) in c.snapshot().items():
                p0, b0 = total.get(k, (0, 0))
                total[k] = (p0 + p, b0 + b)
        return total


class SharedState:
    """Registers, per-shard counters and the published tables of a sharded switch, in one
    shared anonymous mapping that the forked shard processes inherit."""

    def __init__(self, lanes: int, pool_total: int, shards: int) -> None:
        self.lanes, self.pool_total, self.num_shards = lanes, pool_total, shards
        size = self._carve(_Cursor()).offset
        self.mem = mmap.mmap(-1, size)  # MAP_SHARED | MAP_ANONYMOUS, zero-filled, lazy
        self._carve(_Cursor(self.mem))

    def _carve(self, cur: _Cursor) -> _Cursor:
        """Lay out the mapping; `shard_pipeline` replays the first part (the registers)."""
        counters = [Counters(cur) for _ in range(self.num_shards)]
        self.counters = ShardedCounters(counters)
        self._control = cur("cells", 2)  # tables generation, pickled length
        self._blob = cur("array", (TABLES_BYTES,), np.uint8)
        self.front = Pipeline(self.lanes, self.pool_total, storage=cur, counters=self.counters)
        return cur

    def _registers_cursor(self) -> _Cursor:
        """A cursor positioned where `_carve` put the front pipeline's registers."""
        cur = _Cursor(self.mem)
        for _ in range(self.num_shards):
            Counters(cur)
        cur("cells", 2)
        cur("array", (TABLES_BYTES,), np.uint8)
        return cur

    def shard_pipeline(self, index: int) -> Pipeline:
        """Shard ``index``'s pipeline: the shared registers, its own counters."""
        return Pipeline(
            self.lanes,
            self.pool_total,
            storage=self._registers_cursor(),
            counters=self.counters.shards[index],
        )

    # -- tables: the front pipeline's are the truth; shards reload them when they change ---

    def publish(self) -> None:
        """Publish the front's tables if they changed (caller holds every shard's lock)."""
        t = self.front.tables
        blob = pickle.dumps(
            (t.jobs, t.workers, t.parents, t.mcast_groups), protocol=pickle.HIGHEST_PROTOCOL
        )
        n = len(blob)
        if n > TABLES_BYTES:
            raise RuntimeError(f"tables take {n} bytes pickled, more than {TABLES_BYTES}")
        if n == self._control[1] and self._blob[:n].tobytes() == blob:
            return
        self._blob[:n] = np.frombuffer(blob, np.uint8)
        self._control[1] = n
        self._control[0] += 1

    def syncer(self, tables: Tables):
        """A function that loads published tables into ``tables`` (in place: the pipeline
        and the I/O loop hold it) when their generation moved; call it under the shard lock."""
        seen = [-1]

        def sync() -> None:
            gen = self._control[0]
            if gen != seen[0]:
                blob = self._blob[: self._control[1]].tobytes()
                jobs, workers, parents, groups = pickle.loads(blob)
                for mine, new in (
                    (tables.jobs, jobs),
                    (tables.workers, workers),
                    (tables.parents, parents),
                ):
                    mine.clear()
                    mine.update(new)
                tables.mcast_groups.clear()
                tables.mcast_groups.update(groups)
                seen[0] = gen

        return sync


class FrontLock:
    """The P4Runtime service's pipeline lock: every shard's lock, taken in shard order (one
    holder at a time in this process), released after publishing changed tables."""

    def __init__(self, state: SharedState, locks: Sequence) -> None:
        self.state = state
        self.locks = list(locks)
        self._mutex = threading.Lock()

    def __enter__(self) -> FrontLock:
        self._mutex.acquire()
        for lk in self.locks:
            lk.acquire()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.state.publish()
        finally:
            for lk in reversed(self.locks):
                lk.release()
            self._mutex.release()


# -- shard processes -----------------------------------------------------------------------


def serve_shard(
    state: SharedState, index: int, socks: list[BatchSocket], lock, impairment: Impairment
) -> None:
    """A shard process: serve socket ``index`` of the group until SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us (Ctrl-C reaches all)
    parent = mp.parent_process().pid
    server_stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: server_stop.set())
    # A parent killed outright (SIGKILL) must not leave shards serving its port.
    if not die_with_parent(parent) or server_stop.is_set():
        return
    for i, s in enumerate(socks):
        if i != index:
            s.close()  # the other shards' sockets stay open in their own processes
    pipeline = state.shard_pipeline(index)
    server = SwitchServer(
        pipeline,
        lock=lock,
        impairment=impairment,
        sock=socks[index],
        sync=state.syncer(pipeline.tables),
        stop_event=server_stop,  # set by SIGTERM, even before the server existed
    )
    server.serve_forever()
    server.close()
