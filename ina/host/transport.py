"""The worker's transport: an exact int32 reduction through the switch over UDP.

`Transport.reduce(values, op)` cuts a vector into chunks of ``lanes`` values, one packet per
chunk, and sends them through the job's pool of ``pool_size`` slots (SwitchML):

- chunk ``c`` of a call has the job-wide sequence number ``seq = base + c``; it uses slot
  ``seq % pool_size`` and shadow copy ``(seq // pool_size) % 2``. All workers of a job make
  the same calls, so they agree on every sequence number without talking to each other;
- self-clocked window: chunk ``c + pool_size`` (same slot, other copy) is sent as soon as the
  result of chunk ``c`` arrives, so at most ``pool_size`` chunks are in flight;
- a chunk without its result after the retransmission timeout is sent again (flag RETX), the
  timeout doubling per retry up to ``max_rto``; the switch answers a retransmission with the
  stored result (slot complete) or with PENDING + the bitmap of workers it has heard from,
  so a chunk that never completes fails with an error naming the workers that are missing;
- every chunk completed without retransmission yields a round-trip sample (Karn's rule) for
  the delay monitor of DC2 (`rtt_listener`).

Everything per packet is vectorized over the batch of datagrams a system call returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ina.netio import BatchSocket
from ina.protocol import (
    HEADER_BYTES,
    HEADER_DTYPE,
    LANE_DTYPE,
    MAX_LANES,
    MAX_WORKERS,
    UDP_PORT,
    VERSION,
    Flag,
    Op,
    packet_bytes,
)

_MASK32 = (1 << 32) - 1


def run_seq_start(pool_size: int, rng=None) -> int:
    """A random first sequence number for a run: a 32-bit multiple of ``2 * pool_size``."""
    import secrets

    step = 2 * pool_size
    r = (
        secrets.randbelow((1 << 32) // step)
        if rng is None
        else int(rng.integers((1 << 32) // step))
    )
    return r * step


class ReduceTimeout(TimeoutError):
    """A chunk got no result in time; the message names the job, slot and missing workers."""


@dataclass(frozen=True)
class WorkerConfig:
    """What one worker needs to know to use the switch."""

    job_id: int
    worker_id: int
    num_workers: int
    switch: tuple[str, int] = ("127.0.0.1", UDP_PORT)
    bind: tuple[str, int] = ("127.0.0.1", 0)
    pool_size: int = 64  # the job's pool on the switch: also the window
    lanes: int = 256  # lanes per packet: must match the switch
    rto: float = 0.05  # retransmission timeout before any RTT sample, seconds
    min_rto: float = 0.02  # the adaptive timeout (srtt + 4 rttvar, RFC 6298) stays in
    max_rto: float = 1.0  # [min_rto, max_rto]
    timeout: float = 10.0  # give up on a chunk after this long without its result
    batch: int = 64  # datagrams per system call
    # First sequence number; every worker of a run must use the same. Launchers draw a
    # random multiple of 2 * pool_size per run (`run_seq_start`) so that a run can never be
    # answered from a previous run's slots; 0 is fine on a freshly installed job.
    seq_start: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.worker_id < self.num_workers <= MAX_WORKERS:
            raise ValueError(
                f"worker_id {self.worker_id} must be < num_workers {self.num_workers} "
                f"<= {MAX_WORKERS}"
            )
        if not 1 <= self.lanes <= MAX_LANES:
            raise ValueError(f"lanes must be 1..{MAX_LANES}")
        if self.pool_size < 1 or self.pool_size & (self.pool_size - 1):
            raise ValueError("pool_size must be a power of two")
        if self.seq_start % (2 * self.pool_size) or not 0 <= self.seq_start < 1 << 32:
            raise ValueError("seq_start must be a 32-bit multiple of 2 * pool_size")


@dataclass
class TransportStats:
    """Counts since the transport was created."""

    reduces: int = 0
    chunks: int = 0
    packets_sent: int = 0
    bytes_sent: int = 0
    retransmissions: int = 0
    results: int = 0
    duplicate_results: int = 0  # results for chunks already complete (lost-then-resent)
    ignored: int = 0  # datagrams that were not ours (stale seq, other job, malformed)
    rtt_samples: int = 0
    rtt_sum: float = 0.0
    pending_bitmaps: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ReduceResult:
    values: np.ndarray  # int32
    exp: int  # MAX over workers (and chunks) of the header exp
    level: int  # MAX over workers of the header level


class Transport:
    """One worker's socket and sequence space for a job; reusable across calls."""

    def __init__(
        self,
        cfg: WorkerConfig,
        rtt_listener: Callable[[np.ndarray], None] | None = None,
        link=None,
    ) -> None:
        self.cfg = cfg
        self.lanes = cfg.lanes
        self.pb = packet_bytes(cfg.lanes)
        self.sock = BatchSocket(cfg.bind, batch=cfg.batch, stride=self.pb + 1)
        self.switch_index = self.sock.addresses.add(*cfg.switch)
        self.next_seq = cfg.seq_start
        self.stats = TransportStats()
        self.rtt_listener = rtt_listener
        self.link = link  # optional ina.netem link emulation (delay, bandwidth, loss)
        self.rto = cfg.rto
        self._srtt = 0.0
        self._rttvar = 0.0

    @property
    def address(self) -> tuple[str, int]:
        return self.sock.address

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- one reduction -----------------------------------------------------------------

    def reduce(
        self,
        values: np.ndarray,
        op: Op = Op.SUM,
        exp: int = 0,
        level: int = 0,
        on_chunk: Callable[[int, np.ndarray], None] | None = None,
    ) -> ReduceResult:
        """Exact reduction of int32 ``values`` over all workers of the job.

        SUM wraps around like int32, OR is bitwise, MAX is signed; ``exp`` and ``level`` are
        MAX-combined. ``on_chunk(c, lanes)`` sees each chunk's result as it arrives (it may
        raise to abort, e.g. on a length disagreement found in chunk 0).
        """
        cfg = self.cfg
        v = np.ascontiguousarray(values, dtype=np.int32).reshape(-1)
        n = v.size
        if n == 0:
            return ReduceResult(v.copy(), exp, level)
        L = self.lanes
        C = -(-n // L)
        S = cfg.pool_size
        base = self.next_seq
        self.next_seq = (base + C) & _MASK32
        self.stats.reduces += 1
        self.stats.chunks += C

        # All C packets, built at once.
        tx = np.zeros((C, self.pb), np.uint8)
        hdr = np.zeros(C, HEADER_DTYPE)
        seqs = (base + np.arange(C, dtype=np.int64)) & _MASK32
        hdr["version"] = VERSION
        hdr["op"] = int(op)
        hdr["flags"] = np.where((seqs // S) % 2 == 1, int(Flag.SHADOW), 0)
        hdr["worker_id"] = cfg.worker_id
        hdr["job_id"] = cfg.job_id
        hdr["slot"] = seqs % S
        hdr["seq"] = seqs
        hdr["exp"] = exp
        hdr["level"] = level
        hdr["num_lanes"] = L
        hdr["num_lanes"][-1] = n - (C - 1) * L
        tx[:, :HEADER_BYTES] = hdr.view(np.uint8).reshape(C, HEADER_BYTES)
        lanes = np.zeros(C * L, dtype=LANE_DTYPE)
        lanes[:n] = v
        tx[:, HEADER_BYTES:] = lanes.view(np.uint8).reshape(C, L * 4)

        out = np.zeros((C, L), np.int32)
        done = np.zeros(C, bool)
        sent = np.zeros(C, bool)
        first_sent = np.zeros(C)
        deadline = np.full(C, np.inf)
        retries = np.zeros(C, np.int32)
        exp_max, level_max = exp, level
        ndone = 0
        pending: dict[int, int] = {}

        now = time.monotonic()
        first = np.arange(min(S, C))
        self._send(tx, first, now)
        sent[first] = True
        first_sent[first] = now
        deadline[first] = now + self.rto

        sock = self.sock
        link = self.link
        while ndone < C:
            now = time.monotonic()
            wait = float(deadline.min()) - now
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
            if lengths.size:
                res = self._accept(rx, lengths, base, C)
                if res is not None:
                    chunks, rows, is_result = res
                    # PENDING replies: remember who the switch has heard from.
                    if (~is_result).any():
                        for c, r in zip(
                            chunks[~is_result].tolist(), rows[~is_result].tolist(), strict=True
                        ):
                            pending[c] = int(self._rx_hdr[r]["bitmap"])
                    rc = chunks[is_result]
                    rr = rows[is_result]
                    fresh = ~done[rc]
                    self.stats.duplicate_results += int((~fresh).sum())
                    rc, rr = rc[fresh], rr[fresh]
                    # the same chunk twice in one batch: keep the first
                    rc, first_idx = np.unique(rc, return_index=True)
                    rr = rr[first_idx]
                    if rc.size:
                        out[rc] = self._rx_lanes[rr]
                        done[rc] = True
                        deadline[rc] = np.inf
                        ndone += rc.size
                        self.stats.results += rc.size
                        exp_max = max(exp_max, int(self._rx_hdr["exp"][rr].max()))
                        level_max = max(level_max, int(self._rx_hdr["level"][rr].max()))
                        clean = retries[rc] == 0
                        if clean.any():
                            rtt = now - first_sent[rc[clean]]
                            self._update_rto(rtt)
                            self.stats.rtt_samples += rtt.size
                            self.stats.rtt_sum += float(rtt.sum())
                            if self.rtt_listener is not None:
                                self.rtt_listener(rtt)
                        if on_chunk is not None:
                            for c in rc.tolist():
                                on_chunk(c, out[c])
                        nxt = rc + S
                        nxt = nxt[nxt < C]
                        nxt = nxt[~sent[nxt]]
                        if nxt.size:
                            self._send(tx, nxt, now)
                            sent[nxt] = True
                            first_sent[nxt] = now
                            deadline[nxt] = now + self.rto
            # Retransmit what timed out.
            expired = np.flatnonzero(deadline <= now)
            if expired.size:
                too_old = expired[now - first_sent[expired] > cfg.timeout]
                if too_old.size:
                    raise self._timeout_error(int(too_old[0]), base, pending, retries)
                retries[expired] += 1
                # Back the timeout off for new chunks too (RFC 6298 5.5): otherwise, when the
                # RTT jumps above the RTO, every chunk is retransmitted, Karn's rule leaves
                # no sample, and the estimator (and DC2) never learns the new delay.
                self.rto = min(2 * self.rto, cfg.max_rto)
                rto = np.minimum(self.rto * (2.0 ** (retries[expired] - 1)), cfg.max_rto)
                deadline[expired] = now + rto
                tx_hdr = tx[expired, :HEADER_BYTES].copy().view(HEADER_DTYPE).reshape(-1)
                tx_hdr["flags"] |= int(Flag.RETX)
                tx[expired, :HEADER_BYTES] = tx_hdr.view(np.uint8).reshape(-1, HEADER_BYTES)
                self._send(tx, expired, now)
                self.stats.retransmissions += int(expired.size)
        self.stats.pending_bitmaps = pending
        return ReduceResult(out.reshape(-1)[:n].copy(), exp_max, level_max)

    # -- helpers -----------------------------------------------------------------------

    def _update_rto(self, rtt: np.ndarray) -> None:
        """RFC 6298's estimator, fed the batch's samples in one step (their mean and spread):
        the timeout follows the queueing delay a full window builds up."""
        m = float(rtt.mean())
        if self._srtt == 0.0:
            self._srtt, self._rttvar = m, m / 2
        else:
            dev = abs(self._srtt - m) + (float(rtt.max()) - m)  # cheaper than a std
            self._rttvar = 0.75 * self._rttvar + 0.25 * dev
            self._srtt = 0.875 * self._srtt + 0.125 * m
        self.rto = min(max(self._srtt + 4 * self._rttvar, self.cfg.min_rto), self.cfg.max_rto)

    def _send(self, tx: np.ndarray, rows: np.ndarray, now: float) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        self.stats.packets_sent += int(rows.size)
        self.stats.bytes_sent += int(rows.size) * self.pb
        if self.link is not None:  # an emulated path holds packets back (ina.host.emulated_path)
            self.link.enqueue(now, tx, rows, self)
            return
        self.sock.send_batch(
            tx, rows, np.full(rows.size, self.pb), np.full(rows.size, self.switch_index)
        )

    def send_now(self, data: np.ndarray) -> None:
        """Send whole packets (rows of ``data``) to the switch immediately (link emulation)."""
        k = data.shape[0]
        self.sock.send_batch(data, np.arange(k), np.full(k, self.pb), np.full(k, self.switch_index))

    def _accept(self, rx: np.ndarray, lengths: np.ndarray, base: int, C: int):
        """Parse a received batch: (chunk index, rx row, is RESULT) of our replies, or None."""
        k = lengths.size
        if rx.shape[1] < self.pb:  # nothing this narrow can be ours
            self.stats.ignored += k
            return None
        hdr = rx[:k, :HEADER_BYTES].copy().view(HEADER_DTYPE).reshape(k)
        self._rx_hdr = hdr
        self._rx_lanes = rx[:k, HEADER_BYTES : self.pb].copy().view(LANE_DTYPE)
        chunk = (hdr["seq"].astype(np.int64) - base) & _MASK32
        ok = (
            (lengths == self.pb)
            & (hdr["version"] == VERSION)
            & (hdr["job_id"] == self.cfg.job_id)
            & ((hdr["flags"] & (Flag.RESULT | Flag.PENDING)) != 0)
            & (chunk < C)
        )
        self.stats.ignored += int((~ok).sum())
        rows = np.flatnonzero(ok)
        if rows.size == 0:
            return None
        is_result = (hdr["flags"][rows] & Flag.RESULT) != 0
        return chunk[rows], rows, is_result

    def _timeout_error(
        self, c: int, base: int, pending: dict[int, int], retries: np.ndarray
    ) -> ReduceTimeout:
        cfg = self.cfg
        seq = (base + c) & _MASK32
        slot = seq % cfg.pool_size
        everyone = set(range(cfg.num_workers))
        if c in pending:
            heard = {w for w in everyone if pending[c] >> w & 1}
            who = (
                f"the switch has contributions from workers {sorted(heard)}; "
                f"missing workers {sorted(everyone - heard)}"
            )
        else:
            who = (
                f"the switch at {cfg.switch[0]}:{cfg.switch[1]} never answered "
                f"(unreachable? job {cfg.job_id} not installed? or the job ran before on "
                f"this switch and was not re-installed: sequence numbers restart at 0); "
                f"workers possibly missing: all but {cfg.worker_id} of {sorted(everyone)}"
            )
        return ReduceTimeout(
            f"job {cfg.job_id}, worker {cfg.worker_id}: slot {slot} (seq {seq}, chunk {c}) "
            f"got no result within {cfg.timeout:.1f} s after {int(retries[c])} "
            f"retransmissions; {who}"
        )
