"""The worker's transport over UDP: the sans-I/O core (`ina.host.transport_core`) driven by a
real socket on the wall clock.

`Transport.reduce(values, op)` is an exact int32 reduction over all workers of the job
through the switch (SUM wraps like int32, OR is bitwise, MAX is signed; ``exp`` and ``level``
are MAX-combined). The protocol (joining a run, chunks, slots and shadow copies, the window,
retransmission and Karn samples, timeouts naming the missing workers) lives in the core,
written once; this driver only moves datagrams between the core and a batched UDP socket
(`ina.netio.BatchSocket`: recvmmsg/sendmmsg), passes it ``time.monotonic()``, and optionally
runs every datagram through an emulated path (`ina.host.emulated_path`: delay, bandwidth,
loss in both directions, since this kernel has no ``tc netem``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import numpy as np

from ina.host.rounds import Reduced, Round
from ina.host.transport_core import (
    JoinRejected,
    JoinTimeout,
    ReduceTimeout,
    TransportCore,
    TransportStats,
    WorkerConfig,
)
from ina.netio import BatchSocket
from ina.protocol import Op

ReduceResult = Reduced  # the name callers used before rounds became generic

__all__ = [
    "JoinRejected",
    "JoinTimeout",
    "ReduceResult",
    "ReduceTimeout",
    "Transport",
    "TransportStats",
    "WorkerConfig",
]


class Transport:
    """One worker's socket and protocol state for a job; reusable across calls."""

    def __init__(
        self,
        cfg: WorkerConfig,
        rtt_listener: Callable[[np.ndarray, np.ndarray], None] | None = None,
        link=None,
    ) -> None:
        self.cfg = cfg
        self.core = TransportCore(cfg, nonce=secrets.randbits(32), rtt_listener=rtt_listener)
        self.pb = self.core.pb
        self.sock = BatchSocket(cfg.bind, batch=cfg.batch, stride=self.pb + 1)
        self.switch_index = self.sock.addresses.add(*cfg.switch)
        self.link = link  # optional ina.netem link emulation (delay, bandwidth, loss)

    @property
    def stats(self) -> TransportStats:
        return self.core.stats

    @property
    def address(self) -> tuple[str, int]:
        return self.sock.address

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def reduce(self, values: np.ndarray, op: Op = Op.SUM, exp: int = 0, level: int = 0) -> Reduced:
        """Exact reduction of int32 ``values`` over all workers of the job."""
        return self.reduce_round(Round(values, op, exp, level))

    def reduce_round(self, rnd: Round) -> Reduced:
        """Run one `Round` to completion (the blocking round function of `ina.host.rounds`)."""
        core, sock, link = self.core, self.sock, self.link
        core.start(rnd, time.monotonic())
        self._send(time.monotonic())
        while not core.idle:
            now = time.monotonic()
            wait = core.deadline() - now
            if link is not None:
                wait = min(wait, link.next_event(now) - now)
            if wait > 0 and not sock.wait_readable(wait):
                lengths = np.zeros(0, np.int64)
            else:
                lengths = sock.recv_batch()
            now = time.monotonic()
            rx = sock.rx
            if link is not None:
                link.flush(now, self)
                rx, lengths = link.receive(now, rx[: lengths.size], lengths)
            core.receive(rx, lengths, now)
            core.tick(now)
            self._send(now)
        return core.result()

    def _send(self, now: float) -> None:
        for buf, rows, _ in self.core.pop_sends():
            if self.link is not None:  # an emulated path holds packets back
                self.link.enqueue(now, buf, rows, self)
            else:
                self.sock.send_batch(
                    buf, rows, np.full(rows.size, self.pb), np.full(rows.size, self.switch_index)
                )

    def send_now(self, data: np.ndarray) -> None:
        """Send whole packets (rows of ``data``) to the switch immediately (link emulation)."""
        k = data.shape[0]
        self.sock.send_batch(data, np.arange(k), np.full(k, self.pb), np.full(k, self.switch_index))
