"""The switch model's I/O loop: the pipeline served on a UDP socket.

Workers send INA payloads to the switch's UDP port; results go back to the addresses the
control plane installed in ``worker_table`` (one datagram per replica of the job's multicast
group; unicast replies to the worker that retransmitted; a leaf's packets up to its parent
switch's address in ``parent_table``). A batch of datagrams per
recvmmsg, one `Pipeline.process_batch` per batch, one sendmmsg per batch of outputs.

The loop holds ``lock`` while it runs a batch, so the P4Runtime service (another thread of
the same process) sees tables, registers and counters between batches, never mid-batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from ina.netio import BatchSocket
from ina.protocol import UDP_PORT
from ina.switch_model.impair import Impairment
from ina.switch_model.pipeline import MULTICAST, PARENT, Outputs, Pipeline


class SwitchServer:
    """Serve ``pipeline`` on ``bind`` until `stop` is called."""

    def __init__(
        self,
        pipeline: Pipeline,
        bind: tuple[str, int] = ("127.0.0.1", UDP_PORT),
        batch: int = 128,
        lock: threading.Lock | None = None,
        impairment: Impairment | None = None,
        sock: BatchSocket | None = None,
        sync: Callable[[], None] | None = None,
        stop_event: threading.Event | None = None,
    ) -> None:
        """``sock``: serve on this socket instead of binding ``bind`` (a shard's socket of a
        SO_REUSEPORT group); ``sync``: called under ``lock`` before every batch (a shard
        picks up the control plane's table writes there); ``stop_event``: `stop` sets it,
        and setting it stops the loop (a shard's SIGTERM handler may set it early)."""
        self.pipeline = pipeline
        self.sync = sync
        self.impairment = impairment if impairment is not None and impairment.active else None
        self.lock = lock or threading.Lock()
        # One byte more than a valid packet so that oversized datagrams show up as such.
        self.sock = sock or BatchSocket(bind, batch=batch, stride=pipeline.payload_bytes + 1)
        batch = self.sock.batch
        # room for one output per input, and an impairment may duplicate every input once
        self.out = Outputs.allocate(2 * batch, pipeline.payload_bytes)
        self._stop = stop_event if stop_event is not None else threading.Event()
        self.unroutable = 0  # outputs for a worker with no worker_table entry (dropped)
        self.batches = 0

    @property
    def address(self) -> tuple[str, int]:
        return self.sock.address

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.sock.close()

    def serve_forever(self, poll: float = 0.05) -> None:
        sock = self.sock
        while not self._stop.is_set():
            if not sock.wait_readable(poll):
                continue
            while True:
                lengths = sock.recv_batch()
                if lengths.size == 0:
                    break
                self.run_batch(lengths)
                if lengths.size < sock.batch:
                    break

    def run_batch(self, lengths: np.ndarray) -> None:
        """Process the datagrams in ``sock.rx`` and send the outputs."""
        data = self.sock.rx
        if self.impairment is not None:
            got = self.impairment.apply(np.arange(lengths.size))
            data, lengths = data[got], lengths[got]
        with self.lock:
            if self.sync is not None:
                self.sync()
            m = self.pipeline.process_batch(data, lengths, self.out)
            self.batches += 1
            if m == 0:
                return
            rows, dests = self._route(m)
        if rows.size:
            r, d = rows, dests
            if self.impairment is not None:
                got = self.impairment.apply(np.arange(r.size))
                r, d = r[got], d[got]
            self.sock.send_batch(self.out.data, r, self.out.length[r], d)

    def _route(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        """Output rows and address-book entries of every datagram to send (egress), in
        output order, each multicast's replicas in `Tables.replicas` order.

        Each distinct destination (a job's multicast group, or one worker) is resolved once
        per batch: a batch's results mostly go to one group, so the per-output work is one
        dict lookup, not a table lookup per replica."""
        tables = self.pipeline.tables
        book = self.sock.addresses
        out = self.out
        resolved: dict[tuple[int, int, int], tuple[list[int], int]] = {}
        rows: list[int] = []
        dests: list[int] = []
        for i, key in enumerate(
            zip(out.dest[:m].tolist(), out.job_id[:m].tolist(), out.group[:m].tolist(), strict=True)
        ):
            hit = resolved.get(key)
            if hit is None:
                dest, job_id, group = key
                targets = (
                    [rid for _, rid in tables.replicas(group)] if dest == MULTICAST else [dest]
                )
                entries = []
                for w in targets:
                    # a leaf's partial sum goes up to its parent (parent_table), else a worker
                    addr = (
                        tables.parents.get(job_id)
                        if dest == PARENT
                        else tables.workers.get((job_id, w))
                    )
                    if addr is not None:
                        entries.append(book.add(addr.ip, addr.udp_port))
                hit = resolved[key] = (entries, len(targets) - len(entries))
            entries, missing = hit
            self.unroutable += missing  # replicas to a worker with no worker_table entry
            rows.extend([i] * len(entries))
            dests.extend(entries)
        return np.asarray(rows, np.int64), np.asarray(dests, np.int64)
