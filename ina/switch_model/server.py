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
    ) -> None:
        self.pipeline = pipeline
        self.impairment = impairment if impairment is not None and impairment.active else None
        self.lock = lock or threading.Lock()
        # One byte more than a valid packet so that oversized datagrams show up as such.
        self.sock = BatchSocket(bind, batch=batch, stride=pipeline.payload_bytes + 1)
        # room for one output per input, and an impairment may duplicate every input once
        self.out = Outputs.allocate(2 * batch, pipeline.payload_bytes)
        self._stop = threading.Event()
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
            m = self.pipeline.process_batch(data, lengths, self.out)
            self.batches += 1
            if m == 0:
                return
            rows, dests = self._route(m)
        if rows:
            pb = self.pipeline.payload_bytes
            r = np.asarray(rows, np.int64)
            d = np.asarray(dests, np.int64)
            if self.impairment is not None:
                got = self.impairment.apply(np.arange(r.size))
                r, d = r[got], d[got]
            self.sock.send_batch(self.out.data, r, np.full(r.size, pb), d)

    def _route(self, m: int) -> tuple[list[int], list[int]]:
        """Output rows and address-book entries of every datagram to send (egress)."""
        tables = self.pipeline.tables
        book = self.sock.addresses
        rows: list[int] = []
        dests: list[int] = []
        out = self.out
        rids: dict[int, list[int]] = {}  # group -> its replicas' rids, once per batch
        for i, (dest, job_id, group) in enumerate(
            zip(out.dest[:m].tolist(), out.job_id[:m].tolist(), out.group[:m].tolist(), strict=True)
        ):
            if dest == MULTICAST:
                targets = rids.get(group)
                if targets is None:
                    targets = rids[group] = [rid for _, rid in tables.replicas(group)]
            else:
                targets = [dest]
            for w in targets:
                if dest == PARENT:
                    addr = tables.parents.get(job_id)
                else:
                    addr = tables.workers.get((job_id, w))
                if addr is None:
                    self.unroutable += 1
                    continue
                rows.append(i)
                dests.append(book.add(addr.ip, addr.udp_port))
        return rows, dests
