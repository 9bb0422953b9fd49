"""The worker's transport as a sans-I/O state machine: the protocol rules, written once.

`TransportCore` knows everything a worker's transport does on the wire and nothing about
sockets or clocks (the h11 / aioquic core pattern). A driver feeds it "now", the datagrams
it received and timer expiries, and sends what it hands back::

    core.start(Round(values, Op.SUM), now)       # joins the run first if needed
    while not core.idle:
        send(core.pop_sends())                    # [(buffer, rows, times)]: datagrams to send
        wait until a datagram arrives or core.deadline()
        core.receive(rx, lengths, now); core.tick(now)
    result = core.result()

Time is whatever clock the driver has, in seconds. ``receive`` also takes one time per
datagram (when each arrived), and every datagram handed back carries the time it is sent:
the arrival of the result that let it out (the one that freed its slot, or the one that
made room in the window, whichever came later). The core walks a batch's results in
arrival order, growing the window and updating the retransmission timeout per sample, so
a simulator that feeds a batch of arrivals at their exact times in one call gets the sends
and the timeouts it would get feeding them one by one. The UDP driver passes one "now" and
sends everything at once.

Two drivers use it: the UDP transport (`ina.host.transport.Transport`, wall clock) and the
simulator (`ina.sim`, virtual time). The rules, in the order a call meets them:

**Run join.** A worker's first call joins a *run* of its job (docs/protocol.md, "Runs"):
it sends JOIN with a random 32-bit nonce in ``seq`` until the switch answers with a RESULT
carrying its own nonce; the reply's ``epoch`` field names the run. Every later packet
carries that epoch and the switch drops (and counts as STALE) packets of any other epoch, so
no run ever sees another run's sums. The switch multicasts a JOIN RESULT when the last worker
of the run joins; a worker that sees a JOIN RESULT with someone else's nonce resends its JOIN
at once and gets the unicast reply that names its own (a stale multicast from an earlier run
can therefore never hand it a wrong epoch).

**Chunks and slots (SwitchML).** A round of ``n`` int32 values is cut into ``C`` chunks of
``lanes`` values, one packet each. Chunk ``c`` has the run-wide sequence number
``seq = base + c`` (every worker of the run makes the same calls, so they agree on every
seq without talking), lives in slot ``seq % pool_size``, shadow copy
``(seq // pool_size) % 2``. Chunk ``c + pool_size`` reuses the slot of chunk ``c`` and is
sent only once chunk ``c``'s result is in; at most ``window`` chunks are in flight.

**Window (congestion control).** At most ``window`` chunks are in flight (sent, result not
yet in), new ones in ascending order, with one exception: a worker may always send its
lowest chunk without a result. That keeps any window deadlock-free: the lowest chunk the
switch still waits for is, for every worker, either that worker's lowest unfinished chunk
or above chunks the switch has completed (whose results a retransmission fetches), so
every worker eventually sends it. Without the exception, two workers can each fill their
windows with chunks the other has not sent, and wait forever; a TCP-style sliding window
(``c < lowest unfinished + window``) avoids that too, but blocks every slot behind one lost
chunk where SwitchML's slots proceed independently (3x slower at 10 % loss).

The window adapts within the pool so that a worker keeps the queues on its path short,
instead of filling them with a whole pool and waiting for timeouts (a retransmission storm:
8 workers, each with a whole pool in flight, queued at the switch until the queueing delay
outgrew the timeout). It is delay-based, like TCP Vegas:

- the base round trip is the least sample ever seen; while the *least of the last*
  ``RECENT_SAMPLES`` samples exceeds it by more than ``queue_target`` base round trips (and
  a quarter of ``min_rto``), the window shrinks in proportion to the excess, at most once
  per round trip. The least of several, because a queue delays every packet while random
  loss delays only some chunks (a chunk's round trip includes the slowest worker's
  recovery): loss does not shrink the window, queueing does. Timeouts leave the window
  alone too (halving on each, as TCP does, collapsed it to one chunk at 5 % loss). The
  delay target sits far below the timeout, so a growing queue is caught before it causes
  one. (Two designs that failed: suppressing cuts while timeouts were recovering, where
  queue-induced timeouts froze the window open and retransmissions fed the queue; and the
  least sample of a whole round trip, which includes packets sent before the window grew
  and so hid the queue a doubling was building);
- otherwise it grows by about one chunk per window's worth of results. It starts at a few
  chunks and doubles per round trip (TCP's slow start) until a round's least sample passes
  half the target: a whole pool sent at once on a slow link queued past the first timeout
  before any round trip had been measured, and a doubling past the target did the same.
  (An earlier design suppressed cuts while timeouts were recovering; queue-induced
  timeouts then froze the window open, and retransmissions fed the queue: a storm.)

``window_control=False`` keeps the window at the pool.

**Retransmission.** A chunk still without its result when the results of chunks sent a
reordering window after it are in is sent again (flag RETX) at once: every worker sends new
chunks in the same order over FIFO links, so a result overtakes an earlier chunk's only when
something was lost (RACK, RFC 8985; the window, ``REORDER_*``, absorbs the workers' skew). Once
every chunk of a call is out, nothing later can show a loss: each chunk in flight gets one tail
loss probe, ``PROBE_SRTT`` smoothed round trips after its send (and at least half
``min_rto``), which leaves the timeout alone. Otherwise a chunk without its result after the
retransmission timeout is sent again, at most a window's worth per timeout, those sent
longest ago first (the rest wait a round trip: a burst of every expired chunk at once would
overflow the same queue again and drop the same last chunks every time; and lowest first, as
it once was, put a higher chunk off for good while lower ones kept expiring). The timeout doubles on expiry, once per timeout period,
up to ``max_rto``, for new chunks too (RFC 6298 5.5), until a clean sample resets it. The
switch answers a retransmission with the stored result (slot complete) or with PENDING and
the bitmap of workers it has heard from, so a chunk that never completes fails after
``timeout`` with an error naming the missing workers.
The timeout follows RFC 6298's estimator (and at least twice the smoothed round trip), fed
with Karn samples: only chunks never
retransmitted give round-trip samples, which also go to ``rtt_listener`` (DC2's monitor).

Per-packet work is vectorized over the batch of datagrams a driver hands in, except the walk
through a batch's results when chunks wait for the window or the window changes (one
result at a time, in arrival order, so that a batch gives the sends one by one would).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from heapq import heappop, heappush

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ina.host.rounds import LaneSource, Reduced, Round
from ina.protocol import (
    HEADER_BYTES,
    HEADER_DTYPE,
    LANE_DTYPE,
    MAX_JOB_WORKERS,
    MAX_LANES,
    MAX_WORKERS,
    UDP_PORT,
    VERSION,
    Flag,
    Op,
    packet_bytes,
)

_MASK32 = (1 << 32) - 1
# The timers' defaults, sized for the wall clock: a worker on a busy host is late by its
# scheduling jitter (milliseconds), which a timeout must ride out. The simulator, whose
# modelled clock has no such jitter, derives its own from the path (`ina.sim.network`).
WALL_RTO = 0.05  # seconds, before any round-trip sample
WALL_MIN_RTO = 0.02  # seconds, the floor of the adaptive timeout
# Early retransmission (RACK, RFC 8985): a chunk still without its result when the result
# of a chunk sent a reordering window after it arrives is lost, and goes again at once. The
# window is RACK's quarter of the least round trip, widened to half a smoothed one: a chunk's
# result waits for every worker, and a worker that lost a result lets the next chunk of that
# slot out later than the others, so results overtake by up to a round trip without a loss;
# and a late retransmission costs little (the other slots go on) while a needless one costs a
# packet on the busiest link (8 workers, 1 % loss: 16,700 retransmissions with the quarter
# alone, 9,200 with the half). A chunk sent again already waits a whole round trip: its loss
# may be another worker's, whose retransmission can queue behind a window.
REORDER_MIN_RTT = 0.25  # least round trips
REORDER_SRTT = 0.5  # smoothed round trips, first loss
REORDER_AGAIN_SRTT = 1.0  # smoothed round trips, a chunk sent again already
# Tail loss probe (RFC 8985 7): once every chunk of a call is out, no later result can show
# one lost, so a chunk in flight is sent again, once, this many smoothed round trips after
# its send (and at least half min_rto), without backing the timeout off
PROBE_SRTT = 2.0
INITIAL_WINDOW = 8  # chunks: a whole pool at once can queue past the first timeout
# With early retransmission the window never shrinks below this many chunks (or the pool):
# a loss shows only by the results of chunks sent after it, so a window of one or two leaves
# every loss to the timeout. Under host jitter that looks like queueing (a loaded machine,
# where the delay-based control took windows to 1-3 chunks), a slow worker then recovered
# each loss only at max_rto and fell a whole pool behind the others, who waited past their
# chunk timeout for it (TCP keeps room for its duplicate ACKs likewise, RFC 3042).
RACK_WINDOW = 4
# the window is judged on the least of this many latest samples: a queue delays them all,
# while if each chunk's round trip were stretched by a loss somewhere with probability 1/2,
# all 8 would be with probability 1/256
RECENT_SAMPLES = 8
_REPLY = int(Flag.RESULT | Flag.PENDING)
_RESULT = int(Flag.RESULT)  # (a plain int: an enum in a numpy expression costs ~10 us)
_RETX = int(Flag.RETX)
_FLAGS_AT = HEADER_DTYPE.fields["flags"][1]  # the flags' byte (one byte) in the header
assert HEADER_DTYPE.fields["flags"][0].itemsize == 1
_REJECT = int(Flag.REJECT)
_JOIN = int(Op.JOIN)


class ReduceTimeout(TimeoutError):
    """A chunk got no result in time; the message names the job, slot and missing workers."""


class JoinTimeout(ReduceTimeout):
    """The run's workers did not all join in time; the message names the missing ones.
    ``switch_silent``: the switch never answered at all (no switch there, or not this job)."""

    switch_silent: bool = False


class JoinRejected(ValueError):
    """The switch refused the worker's JOIN: the job there has another pool or other lanes
    per packet than the worker's configuration; the message names both."""

    def __init__(self, job_id: int, worker_id: int, switch: tuple[int, int], ours: tuple[int, int]):
        self.job_id, self.worker_id = job_id, worker_id
        self.switch_pool, self.switch_lanes = switch
        self.pool, self.lanes = ours
        super().__init__(
            f"job {job_id}, worker {worker_id}: the switch refused to join the run: {self.differ()}"
        )

    def differ(self) -> str:
        """What differs, both values each: 'its job has ... (this worker: ...)'."""
        parts = []
        if self.switch_pool != self.pool:
            parts.append(f"a pool of {self.switch_pool} slots (this worker: {self.pool})")
        if self.switch_lanes != self.lanes:
            parts.append(f"{self.switch_lanes} lanes per packet (this worker: {self.lanes})")
        return "its job has " + (" and ".join(parts) or "another configuration")


@dataclass(frozen=True)
class WorkerConfig:
    """What one worker needs to know to use the switch."""

    job_id: int
    worker_id: int
    num_workers: int
    switch: tuple[str, int] = ("127.0.0.1", UDP_PORT)
    bind: tuple[str, int] = ("127.0.0.1", 0)
    pool_size: int = 64  # the job's pool on the switch: also the largest window
    lanes: int = 256  # lanes per packet: must match the switch
    rto: float = WALL_RTO  # retransmission timeout before any RTT sample, seconds
    min_rto: float = WALL_MIN_RTO  # the adaptive timeout (srtt + 4 rttvar, RFC 6298) stays in
    max_rto: float = 1.0  # [min_rto, max_rto]
    timeout: float = 10.0  # give up on a chunk after this long without its result
    # give up joining a run after this long (None: ``timeout``); the run's workers must all
    # start within it
    join_timeout: float | None = None
    batch: int = 64  # datagrams per system call (UDP driver)
    window_control: bool = True  # adapt the window to the queueing delay (else: the pool)
    queue_target: float = 3.0  # queueing delay allowed, in base round trips
    # resend a chunk at once when results for chunks sent well after it are in (else: only
    # on its timeout; the window then keeps RACK_WINDOW chunks), and probe the call's last
    # window two round trips after its send (RFC 8985's tail loss probe). On for a worker on
    # the wall clock; the simulator turns both off unless `ina sim ... --early-retransmit`
    # (with them its ns-3 backend and fast engine part ways under tail drops,
    # docs/simulation.md, "Limits").
    early_retransmit: bool = True
    tail_probe: bool = True

    def __post_init__(self) -> None:
        # worker_id is the worker's bit on its own switch; num_workers counts the whole job,
        # which a tree of switches lets exceed one switch's bitmap
        if not (
            0 <= self.worker_id < min(self.num_workers, MAX_WORKERS)
            and self.num_workers <= MAX_JOB_WORKERS
        ):
            raise ValueError(
                f"worker_id {self.worker_id} must be < num_workers {self.num_workers} and "
                f"< {MAX_WORKERS} (a switch's bitmap); num_workers <= {MAX_JOB_WORKERS}"
            )
        if not 1 <= self.lanes <= MAX_LANES:
            raise ValueError(f"lanes must be 1..{MAX_LANES}, got {self.lanes}")
        if self.pool_size < 1 or self.pool_size & (self.pool_size - 1):
            raise ValueError(f"pool_size must be a power of two, got {self.pool_size}")
        if not 0 < self.min_rto <= self.max_rto or not self.rto > 0:
            raise ValueError("need rto > 0 and 0 < min_rto <= max_rto")
        if not self.timeout > 0 or not (self.join_timeout is None or self.join_timeout > 0):
            raise ValueError("timeout and join_timeout must be > 0")
        if not self.queue_target > 0:
            raise ValueError(f"queue_target must be > 0, got {self.queue_target}")

    @property
    def join_wait(self) -> float:
        """Seconds a worker waits for the rest of its run to join."""
        return self.timeout if self.join_timeout is None else self.join_timeout


@dataclass
class TransportStats:
    """Counts since the transport was created."""

    reduces: int = 0
    chunks: int = 0
    packets_sent: int = 0
    bytes_sent: int = 0  # INA payload bytes (header + lanes) of every packet sent
    retransmissions: int = 0
    early_retransmissions: int = 0  # of those, sent on a gap in the results, not a timeout
    probes: int = 0  # and those sent as tail loss probes
    results: int = 0
    duplicate_results: int = 0  # results for chunks already complete (lost-then-resent)
    ignored: int = 0  # datagrams that were not ours (other run or job, stale, malformed)
    rtt_samples: int = 0
    rtt_sum: float = 0.0
    joins: int = 0  # runs joined
    join_probes: int = 0  # JOINs re-sent at once to get the reply with our own nonce
    pending_bitmaps: dict[int, int] = field(default_factory=dict)


@dataclass
class _Join:
    """The join handshake in progress."""

    tx: np.ndarray  # (1, pb) the JOIN packet
    first_sent: float
    deadline: float
    retries: int = 0
    bitmap: int = -1  # last PENDING bitmap: who the switch has heard from (-1: nothing yet)


class _Call:
    """One round in progress: its packets and per-chunk state."""

    def __init__(self, rnd: Round, values: np.ndarray | LaneSource, lanes: int, pool: int) -> None:
        self.round = rnd
        self.n = values.size
        self.C = C = -(-self.n // lanes)
        self.base = 0  # seq of chunk 0, assigned at launch (after the join)
        # the result's lanes as they arrive (none kept for a round that keeps no result)
        self.out = np.zeros((C, lanes), np.int32) if rnd.keep else None
        self.done = np.zeros(C, bool)
        self.sent = np.zeros(C, bool)
        self.first_sent = np.zeros(C)
        self.last_sent = np.zeros(C)  # the latest send, first or retransmission
        self.deadline = np.full(C, np.inf)
        self.retries = np.zeros(C, np.int32)
        self.unsent = C  # chunks never sent: at 0 the call's tail begins (probes)
        self.probe = np.zeros(C, bool)  # whose timer is a tail loss probe, not a timeout
        self.probing = False  # the tail's probes are armed (which needs a round trip)
        self.exp_max = rnd.exp
        self.level_max = rnd.level
        self.ndone = 0
        self.pending: dict[int, int] = {}
        # chunks whose slot is free (their predecessor c - pool_size is done) but that the
        # window has not let out yet: a heap of (chunk, when it became ready), lowest first
        self.ready: list[tuple[int, float]] = []
        # chunks let out (and their send times) not yet handed to the driver
        self.go: list[int] = []
        self.go_at: list[float] = []
        self.go_rto: list[float] = []  # the timeout when each was let out
        self.go_srtt: list[float] = []  # and the smoothed round trip
        # the latest first send of a chunk whose result is in: a chunk sent a reordering
        # window before it and still without its result is lost (`_lost_in_batch`)
        self.rack_sent = -np.inf
        self.low = 0  # the lowest chunk without its result (always allowed out)
        self.high = 0  # above the highest chunk sent: chunks in flight lie in [low, high)
        self.flying = 0  # chunks sent whose results are not in
        self.tx: np.ndarray | None = None  # (C, pb) built once the epoch is known
        self.head: np.ndarray | None = None  # (C, HEADER_BYTES): each chunk's header
        # a round's lanes made as they go out (`LaneSource`): no tx, each send built from
        # ``head`` and these (timing only: no array of the round's size)
        self.source: LaneSource | None = None


class TransportCore:
    """One worker's protocol state for a job: its run, sequence space, timers and stats.

    Args:
        cfg: the worker's configuration (only its protocol fields matter here).
        nonce: this worker's random 32-bit nonce for joining a run; drivers draw it (the
            UDP driver from the OS, the simulator from its seed).
        rtt_listener: called with each batch of Karn round-trip samples (seconds) and the
            time each arrived (the driver's clock): a simulator's batching of arrivals
            changes neither.
    """

    def __init__(
        self,
        cfg: WorkerConfig,
        nonce: int,
        rtt_listener: Callable[[np.ndarray, np.ndarray], None] | None = None,
    ) -> None:
        if not 0 <= nonce <= _MASK32:
            raise ValueError("nonce must be a 32-bit unsigned integer")
        # Hyperparameters.
        self.cfg = cfg
        self.lanes = cfg.lanes
        self.pb = packet_bytes(cfg.lanes)
        self.nonce = nonce
        self.rtt_listener = rtt_listener
        # chunks in flight at most, 1..pool_size: from a few, doubling per round trip (slow
        # start) until the first sign of a queue
        self.window = float(
            min(cfg.pool_size, INITIAL_WINDOW) if cfg.window_control else cfg.pool_size
        )
        self._slow_start = cfg.window_control
        # Internal state.
        self.epoch: int | None = None  # the run joined (None: not yet)
        self.next_seq = 0
        self.rto = cfg.rto
        self._srtt = 0.0
        self._rttvar = 0.0
        self._base_rtt = np.inf  # the least round trip seen: the path without queues
        self._backoff_until = -np.inf  # the timeout doubles at most once per timeout period
        self._recent: deque[float] = deque(maxlen=RECENT_SAMPLES)  # the latest samples
        self._last_cut = -np.inf  # when the window last shrank (once per round trip)
        self._join: _Join | None = None
        self._call: _Call | None = None
        self._result: Reduced | None = None
        self._sends: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.finished_at = -np.inf  # when the last round's last result arrived
        # Stats.
        self.stats = TransportStats()

    # -- driver interface ------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """No round in progress: `result` holds the last one's."""
        return self._call is None

    def start(self, rnd: Round, now: float) -> None:
        """Begin an exact reduction of ``rnd.values`` (int32, or a `LaneSource` whose
        packets are made as they go out) over all workers of the job."""
        if self._call is not None:
            raise RuntimeError("a round is already in progress on this transport")
        if rnd.check is not None and not rnd.keep:
            raise ValueError("a round with a check keeps its result (keep=True)")
        v = rnd.values
        if isinstance(v, np.ndarray) or not hasattr(v, "rows"):  # else a LaneSource
            v = np.ascontiguousarray(v, dtype=np.int32).reshape(-1)
        self._result = None
        if v.size == 0:
            self._result = Reduced(np.zeros(0, np.int32) if rnd.keep else None, rnd.exp, rnd.level)
            return
        self._call = _Call(rnd, v, self.lanes, self.cfg.pool_size)
        self._values = v
        self.stats.reduces += 1
        self.stats.chunks += self._call.C
        if self.epoch is None:
            self._start_join(now)
        else:
            self._launch(now)

    def result(self) -> Reduced:
        """The last round's result (after the core went idle)."""
        if self._result is None:
            raise RuntimeError("no round has completed")
        return self._result

    def pop_sends(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Datagrams to send, as (buffer, rows, times): each row of ``buffer[rows]`` is one
        INA payload of ``pb`` bytes for the switch, to be sent at its time (one time for all,
        or one per row, nondecreasing). The buffers stay valid until the next call into the core (a driver
        that holds packets longer must copy them)."""
        out, self._sends = self._sends, []
        return out

    def deadline(self) -> float:
        """When `tick` has work to do next (inf: nothing pending)."""
        if self._join is not None:
            return self._join.deadline
        if self._call is None:
            return np.inf
        lo, hi = self._span(self._call)
        return float(self._call.deadline[lo:hi].min()) if hi > lo else np.inf

    def least_timeout(self) -> float:
        """The least time from a send to its timeout: no timer that `receive` sets fires
        sooner than this after the earliest datagram it is given."""
        if self._call is not None:  # a tail loss probe: at least half min_rto after
            return min(self.rto, self.cfg.min_rto / 2)
        return min(self.rto, self.cfg.min_rto)

    def tick(self, now: float) -> None:
        """Timers: retransmit what timed out; raise `ReduceTimeout` for what gave up."""
        if self._join is not None:
            self._tick_join(now)
            return
        call = self._call
        if call is None:
            return
        lo, hi = self._span(call)
        expired = lo + np.flatnonzero(call.deadline[lo:hi] <= now)
        if not expired.size:
            return
        too_old = expired[now - call.first_sent[expired] > self.cfg.timeout]
        if too_old.size:
            err = self._timeout_error(call, int(too_old[0]))
            self._abort()
            raise err
        probes = call.probe[expired]
        # Back the timeout off for new chunks too (RFC 6298 5.5): otherwise, when the RTT
        # jumps above the RTO, every chunk is retransmitted, Karn's rule leaves no sample,
        # and the estimator (and DC2) never learns the new delay.
        # One shared backoff, doubled at most once per timeout period: chunks expiring one
        # after another are one loss event, not many (doubling per chunk as well made the
        # timeout grow doubly exponentially, to max_rto after a few losses).
        # (a tail loss probe is no timeout: it leaves the timeout alone)
        if now >= self._backoff_until and not probes.all():
            self.rto = min(2 * self.rto, self.cfg.max_rto)
            self._backoff_until = now + self.rto
        k = max(1, int(self.window))
        if expired.size > k:
            # A window's worth, those sent longest ago first (the lowest first among equals):
            # every expired chunk goes within a few round trips, the lowest unfinished one
            # included, so no window deadlocks. Lowest first for all starved a higher chunk
            # whose first send was lost: lower chunks waiting for a slow worker expired again
            # every timeout and took the whole window each time, so the higher one was put
            # off until its own timeout (and the other workers waited for it at the switch).
            go = np.sort(expired[np.argsort(call.last_sent[expired], kind="stable")[:k]])
            later = np.setdiff1d(expired, go, assume_unique=True)
            call.deadline[later] = now + (self._srtt or self.rto)  # paced: wait a round trip
        else:
            go = expired
        self.stats.probes += int(call.probe[go].sum())
        self._retransmit(call, go, now, now + self.rto)  # (one probe, then the timeout)

    def _retransmit(
        self, call: _Call, go: np.ndarray, at: float | np.ndarray, deadline: float | np.ndarray
    ) -> None:
        """Send chunks ``go`` again (flag RETX) at ``at`` (nondecreasing), their timers set
        to ``deadline``."""
        call.retries[go] += 1
        call.last_sent[go] = at
        call.deadline[go] = deadline
        call.probe[go] = False
        call.head[go, _FLAGS_AT] |= _RETX
        self._queue_chunks(call, go, at)
        self.stats.retransmissions += int(go.size)

    def _lost_in_batch(
        self,
        call: _Call,
        chunks: np.ndarray,
        rtt: np.ndarray,
        clean: np.ndarray,
        srtt: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The chunks a batch of fresh results (``chunks``, with their round trips and
        whether each is a clean sample; ``srtt``: the smoothed round trip before each) shows
        lost: (lost chunks in the order they are shown, the index of the result showing each,
        the index of each one's own result in the batch or ``len(chunks)``).

        RACK's rule (RFC 8985) without its timer: a chunk in flight is lost once the result
        of a chunk first sent at least a reordering window after the chunk's latest send is
        in (``REORDER_*``, as of that result). Every worker sends new chunks in the same
        order and links are FIFO, so a result overtakes an earlier chunk only when some
        worker's packet or result was lost (or a worker let a chunk out late, having lost
        the result before it): the chunk goes again about a round trip after its loss, not
        a timeout after. Results walked in arrival order, as one by one."""
        n = chunks.size
        none = np.zeros(0, np.int64)
        first = np.concatenate(([call.rack_sent], call.first_sent[chunks]))
        latest = np.maximum.accumulate(first)[1:]
        base = np.minimum.accumulate(
            np.concatenate(([self._base_rtt], np.where(clean, rtt, np.inf)))
        )[1:]
        least = REORDER_MIN_RTT * base
        # a chunk last sent at or before edge[i] is lost at result i (the running maximum:
        # the first i where it is); one sent again already, at or before again[i]: its loss
        # may be another worker's, whose own retransmission can queue behind a window
        edge = np.maximum.accumulate(latest - np.maximum(least, REORDER_SRTT * srtt))
        again = np.maximum.accumulate(latest - np.maximum(least, REORDER_AGAIN_SRTT * srtt))
        lo, hi = self._span(call)
        retried = call.retries[lo:hi] != 0
        flying = lo + np.flatnonzero(
            (call.deadline[lo:hi] < np.inf)
            & (call.last_sent[lo:hi] <= np.where(retried, again[-1], edge[-1]))
        )
        if not flying.size:
            return none, none, none
        sent = call.last_sent[flying]
        shown_by = np.where(
            call.retries[flying] == 0,
            np.searchsorted(edge, sent, side="left"),
            np.searchsorted(again, sent, side="left"),
        )
        # its own result in this batch, before the one that shows it lost: not lost
        by_chunk = np.argsort(chunks, kind="stable")
        i = np.minimum(np.searchsorted(chunks[by_chunk], flying), n - 1)
        own = np.where(chunks[by_chunk][i] == flying, by_chunk[i], n)
        keep = shown_by < own  # (and not shown at all: index n)
        order = np.argsort(shown_by[keep], kind="stable")  # in time order
        return flying[keep][order], shown_by[keep][order], own[keep][order]

    def receive(self, rx: np.ndarray, lengths: np.ndarray, now: float | np.ndarray) -> None:
        """Datagrams from the switch: rows of ``rx`` with their ``lengths``, received at
        ``now`` (one time, or one per datagram, nondecreasing)."""
        k = int(lengths.size)
        if k == 0:
            return
        if not (isinstance(now, np.ndarray) and now.shape == (k,)):
            now = np.broadcast_to(np.asarray(now, dtype=np.float64), (k,))
        if rx.shape[1] < self.pb:  # nothing this narrow can be ours
            self.stats.ignored += k
            return
        hdr = rx[:k, :HEADER_BYTES].copy().view(HEADER_DTYPE).reshape(k)
        if self._join is not None:
            self._check_rejected(hdr, lengths)
        ours = (
            (lengths == self.pb)
            & (hdr["version"] == VERSION)
            & (hdr["job_id"] == self.cfg.job_id)
            & ((hdr["flags"] & _REPLY) != 0)
        )
        joins = ours & (hdr["op"] == _JOIN)
        n_joins = int(np.count_nonzero(joins))
        if n_joins:
            self._receive_join(hdr[joins], now[joins])
            ours &= ~joins
        call = self._call
        if call is None or self.epoch is None:
            self.stats.ignored += k - n_joins
            return
        chunk = (hdr["seq"].astype(np.int64) - call.base) & _MASK32
        rows = np.flatnonzero(ours & (hdr["epoch"] == self.epoch) & (chunk < call.C))
        self.stats.ignored += k - n_joins - rows.size
        if rows.size:
            self._receive_data(call, hdr, rx, rows, chunk[rows], now)

    # -- join ------------------------------------------------------------------------

    def _start_join(self, now: float) -> None:
        h = np.zeros(1, HEADER_DTYPE)
        h["version"] = VERSION
        h["op"] = _JOIN
        h["worker_id"] = self.cfg.worker_id
        h["job_id"] = self.cfg.job_id
        h["seq"] = self.nonce
        # what the switch checks against the job: our pool (its last slot) and lanes
        h["slot"] = self.cfg.pool_size - 1
        h["num_lanes"] = self.cfg.lanes
        tx = np.zeros((1, self.pb), np.uint8)
        tx[0, :HEADER_BYTES] = h.view(np.uint8)
        self._join = _Join(tx, now, now + self.rto)
        self._queue(tx, np.zeros(1, np.int64), now)

    def _resend_join(self, now: float, probe: bool = False) -> None:
        j = self._join
        j.tx[0, 2] |= int(Flag.RETX)  # flags byte
        self._queue(j.tx, np.zeros(1, np.int64), now)
        if probe:
            self.stats.join_probes += 1
        else:
            self.stats.retransmissions += 1

    def _tick_join(self, now: float) -> None:
        j = self._join
        if now < j.deadline:
            return
        if now - j.first_sent > self.cfg.join_wait:
            err = self._join_timeout_error()
            self._join = None
            self._abort()
            raise err
        j.retries += 1
        self.rto = min(2 * self.rto, self.cfg.max_rto)
        j.deadline = now + min(self.rto * 2.0 ** (j.retries - 1), self.cfg.max_rto)
        self._resend_join(now)

    def _check_rejected(self, hdr: np.ndarray, lengths: np.ndarray) -> None:
        """Raise `JoinRejected` if the switch refused our JOIN (a header without lanes)."""
        mine = (
            (lengths == HEADER_BYTES)
            & (hdr["version"] == VERSION)
            & (hdr["op"] == _JOIN)
            & ((hdr["flags"] & _REJECT) != 0)
            & (hdr["job_id"] == self.cfg.job_id)
            & (hdr["worker_id"] == self.cfg.worker_id)
            & (hdr["seq"] == self.nonce)
        )
        if not mine.any():
            return
        r = hdr[int(np.argmax(mine))]
        cfg = self.cfg
        self._abort()
        raise JoinRejected(
            cfg.job_id,
            cfg.worker_id,
            (int(r["slot"]) + 1, int(r["num_lanes"])),
            (cfg.pool_size, cfg.lanes),
        )

    def _receive_join(self, replies: np.ndarray, times: np.ndarray) -> None:
        j = self._join
        if j is None:  # joined already: late copies of the multicast or of our replies
            self.stats.duplicate_results += replies.size
            return
        mine = replies["seq"] == self.nonce
        results = (replies["flags"] & _RESULT) != 0
        done = np.flatnonzero(mine & results)
        if done.size:
            self.epoch = int(replies["epoch"][done[0]])
            self._join = None
            self.stats.joins += 1
            self.next_seq = 0  # a run's sequence numbers start at 0
            self._launch(float(times[done[0]]))
            return
        pend = np.flatnonzero(mine & ~results)
        if pend.size:
            j.bitmap = int(replies["bitmap"][pend[-1]])
        others = np.flatnonzero(results & ~mine)
        if others.size:
            # The run is complete, announced with another worker's nonce: ask for our own
            # answer now rather than at the next timeout.
            self._resend_join(float(times[others[0]]), probe=True)

    # -- data ------------------------------------------------------------------------

    def _launch(self, now: float) -> None:
        """Build the round's packets (the epoch is known now) and send the first window."""
        call = self._call
        cfg = self.cfg
        C, L, S = call.C, self.lanes, cfg.pool_size
        call.base = self.next_seq
        self.next_seq = (call.base + C) & _MASK32
        hdr = np.zeros(C, HEADER_DTYPE)
        seqs = (call.base + np.arange(C, dtype=np.int64)) & _MASK32
        hdr["version"] = VERSION
        hdr["op"] = int(call.round.op)
        hdr["flags"] = np.where((seqs // S) % 2 == 1, int(Flag.SHADOW), 0)
        hdr["worker_id"] = cfg.worker_id
        hdr["job_id"] = cfg.job_id
        hdr["slot"] = seqs % S
        hdr["seq"] = seqs
        hdr["exp"] = call.round.exp
        hdr["level"] = call.round.level
        hdr["num_lanes"] = L
        hdr["num_lanes"][-1] = call.n - (C - 1) * L
        hdr["epoch"] = self.epoch
        head = hdr.view(np.uint8).reshape(C, HEADER_BYTES)
        if isinstance(self._values, np.ndarray):
            tx = np.zeros((C, self.pb), np.uint8)
            tx[:, :HEADER_BYTES] = head
            # the values byte-swapped straight into the packets (the last one's tail stays 0)
            lanes = tx[:, HEADER_BYTES:].view(LANE_DTYPE)  # (C, L), a view into tx
            full = call.n // L
            lanes[:full] = self._values[: full * L].reshape(full, L)
            if full < C:
                lanes[full, : call.n - full * L] = self._values[full * L :]
            call.tx, call.head = tx, tx[:, :HEADER_BYTES]
        else:
            call.head, call.source = head, self._values
        self._values = None
        call.ready = [(c, now) for c in range(min(cfg.pool_size, C))]  # sorted: a heap
        self._release(call, now)
        self._flush(call)

    def _release(self, call: _Call, now: float) -> None:
        """Let out the lowest ready chunks the window has room for, at ``now`` (or when each
        became ready, if later)."""
        ready = call.ready
        if not ready:
            return
        C, done, low = call.C, call.done, call.low
        while low < C and done[low]:
            low += 1
        call.low = low
        n = int(self.window) - call.flying
        if n < 1:
            if ready[0][0] != low:
                return
            n = 1  # the lowest unfinished chunk may always go: no deadlock
        n = min(n, len(ready))
        call.flying += n
        go, at, rto = call.go, call.go_at, call.go_rto
        for _ in range(n):
            c, t = heappop(ready)
            go.append(c)
            at.append(t if t > now else now)
            rto.append(self.rto)
            call.go_srtt.append(self._srtt)

    def _flush(self, call: _Call) -> None:
        """Hand the chunks let out since the last flush to the driver, in time order."""
        if not call.go:
            return
        go = np.array(call.go, dtype=np.int64)
        at = np.array(call.go_at)
        rto = np.array(call.go_rto)
        srtt = call.go_srtt[-1]
        call.go, call.go_at, call.go_rto, call.go_srtt = [], [], [], []
        call.sent[go] = True
        call.first_sent[go] = at
        call.last_sent[go] = at
        call.deadline[go] = at + rto
        call.high = max(call.high, int(go.max()) + 1)
        self._queue_chunks(call, go, at)
        self._sent_first(call, go.size, float(at.max()), srtt)

    def _span(self, call: _Call) -> tuple[int, int]:
        """[lo, hi): the chunks that may be in flight (from the lowest without its result
        to above the highest sent), so that timers are found without a scan of the call."""
        lo, hi = call.low, call.high
        if lo < hi and call.done[lo]:
            left = np.flatnonzero(~call.done[lo:hi])
            lo = call.low = lo + int(left[0]) if left.size else hi
        return lo, hi

    def _sent_first(self, call: _Call, n: int, at: float, srtt: float) -> None:
        """``n`` chunks went out for the first time, the last at ``at`` (``srtt``: the
        smoothed round trip then); when they were the call's last, its tail begins: every
        chunk in flight gets a tail loss probe."""
        call.unsent -= n
        if not call.unsent:
            self._start_probing(call, at, srtt)

    def _start_probing(self, call: _Call, at: float, srtt: float) -> None:
        """The tail began (or its first round trip was measured) at ``at``: every chunk in
        flight gets a tail loss probe, from then at the earliest (a probe is not a late
        timeout)."""
        if srtt > 0 and not call.probing and self.cfg.tail_probe:
            call.probing = True
            lo, hi = self._span(call)
            flying = lo + np.flatnonzero(call.deadline[lo:hi] < np.inf)
            self._arm_probes(call, flying, np.maximum(call.last_sent[flying], at), srtt)

    def _probe_after(self, srtt: float | np.ndarray) -> float | np.ndarray:
        """How long after its send a chunk of the tail is probed (RFC 8985 7.2: two
        smoothed round trips; here also at least half ``min_rto``, the clock's floor)."""
        return np.where(srtt > 0, np.maximum(PROBE_SRTT * srtt, self.cfg.min_rto / 2), np.inf)

    def _arm_probes(
        self, call: _Call, chunks: np.ndarray, sent: np.ndarray, srtt: float | np.ndarray
    ) -> None:
        """Probe ``chunks``, sent at ``sent`` (``srtt``: the smoothed round trip then), if
        that comes before their timeouts."""
        at = sent + self._probe_after(srtt)
        sooner = at < call.deadline[chunks]
        call.deadline[chunks[sooner]] = at[sooner]
        call.probe[chunks[sooner]] = True

    def _receive_data(
        self,
        call: _Call,
        hdr: np.ndarray,
        rx: np.ndarray,
        rows: np.ndarray,
        chunks: np.ndarray,
        now: np.ndarray,
    ) -> None:
        is_result = (hdr["flags"][rows] & _RESULT) != 0
        if not is_result.all():  # PENDING replies: remember who the switch has heard from
            replies = ~is_result
            call.pending.update(
                zip(chunks[replies].tolist(), hdr["bitmap"][rows[replies]].tolist(), strict=True)
            )
            chunks, rows = chunks[is_result], rows[is_result]
        fresh = ~call.done[chunks]
        if not fresh.all():
            self.stats.duplicate_results += int((~fresh).sum())
            chunks, rows = chunks[fresh], rows[fresh]
        rc = chunks.tolist()
        if len(set(rc)) != len(rc):  # the same chunk twice in one batch: the first counts
            first = np.sort(np.unique(chunks, return_index=True)[1])
            self.stats.duplicate_results += len(rc) - len(first)
            chunks, rows = chunks[first], rows[first]
            rc = chunks.tolist()
        if not rc:
            return
        # the lanes, byte-swapped into place; the usual batch is a run of rows carrying a run
        # of chunks, copied through slices (fancy indexing would copy the bytes twice)
        r0, c0 = int(rows[0]), rc[0]
        src = rx[r0 : r0 + len(rc)] if rows[-1] - r0 + 1 == len(rc) else rx[rows]
        lanes = src[:, HEADER_BYTES : self.pb].view(LANE_DTYPE)
        if call.out is None:
            pass  # a round that keeps no result
        elif rc[-1] - c0 + 1 == len(rc) and rc == list(range(c0, c0 + len(rc))):
            call.out[c0 : c0 + len(rc)] = lanes
        else:
            call.out[chunks] = lanes
        t = now[rows]  # when each result arrived
        clean = call.retries[chunks] == 0
        rtt = t - call.first_sent[chunks]
        # the timeout after each result, as if they had come one by one (RFC 6298 per
        # sample): a chunk let out at a result's arrival times out on that timeout
        before = self._srtt, self._rttvar, self.rto
        rto_after, srtt_after = self._update_rto(rtt, clean)
        lost = np.zeros(0, np.int64)
        if self.cfg.early_retransmit:  # (before these results leave the chunks in flight)
            # A chunk shown lost before its own result in this batch was sent again: that
            # result is no clean sample, which changes the estimator after it, and so what
            # later results show. One by one would see each in turn; here, repeat until
            # nothing changes (rare: a result overtaken by more than the window).
            ambiguous = np.zeros(0, np.int64)
            for _ in range(len(rc) + 1):
                srtt = np.concatenate(([before[0]], srtt_after[:-1]))
                lost, shown_by, own = self._lost_in_batch(call, chunks, rtt, clean, srtt)
                resent = own[own < len(rc)]
                if np.array_equal(resent, ambiguous):
                    break
                ambiguous = resent
                clean = call.retries[chunks] == 0
                clean[ambiguous] = False
                self._srtt, self._rttvar, self.rto = before
                rto_after, srtt_after = self._update_rto(rtt, clean)
            call.rack_sent = max(call.rack_sent, float(call.first_sent[chunks].max()))
        call.deadline[chunks] = np.inf
        call.ndone += len(rc)
        self.stats.results += len(rc)
        h = hdr[rows]
        call.exp_max = max(call.exp_max, int(h["exp"].max()))
        call.level_max = max(call.level_max, int(h["level"].max()))
        samples = rtt[clean] if not clean.all() else rtt
        if not call.unsent and not call.probing and srtt_after[-1] > 0:
            i = int(np.argmax(srtt_after > 0))  # the tail's first round trip measured
            self._start_probing(call, float(t[i]), float(srtt_after[i]))
        if lost.size:  # sent again when the result that showed it lost arrived
            at = t[shown_by]
            # (a chunk whose result comes later in this batch has no timer to run any more)
            deadline = np.where(own < len(rc), np.inf, at + rto_after[shown_by])
            self._retransmit(call, lost, at, deadline)
            self.stats.early_retransmissions += int(lost.size)
            if call.probing:  # in the tail nothing later can show it lost again
                alone = own == len(rc)
                self._arm_probes(call, lost[alone], at[alone], srtt_after[shown_by][alone])
        if samples.size:
            self.stats.rtt_samples += samples.size
            self.stats.rtt_sum += float(samples.sum())
            if self.rtt_listener is not None:  # with each sample's own arrival time
                self.rtt_listener(samples, t[clean] if samples is not rtt else t)
        check = call.round.check
        if check is not None and 0 in rc:
            check(call.out[0])  # may raise (e.g. LengthMismatch): the call is abandoned
        # One result at a time, in arrival order, as if each had come alone: the window
        # grows per sample and a chunk it lets out leaves when the result that made room for
        # it arrived (all at the batch's first arrival would send bursts earlier than
        # one-by-one delivery).
        finishing = call.ndone == call.C
        pool, C = self.cfg.pool_size, call.C
        done, sent, ready = call.done, call.sent, call.ready
        if (
            not ready
            and call.flying <= pool
            and sent[chunks].all()
            and self._window_stays_full(samples)
        ):
            # The common case, vectorized: nothing waits for the window and it stays the
            # whole pool, so one by one each result's successor would leave at once.
            done[chunks] = True
            call.flying -= len(rc)
            if finishing:
                self.finished_at = float(t.max())
                self._finish(call)
                return
            nxt = chunks + pool
            keep = nxt < C
            go, at = nxt[keep], t[keep]
            if go.size:
                call.flying += go.size
                sent[go] = True
                call.first_sent[go] = at
                call.last_sent[go] = at
                call.deadline[go] = at + rto_after[keep]
                call.high = max(call.high, int(go.max()) + 1)
                self._queue_chunks(call, go, at)
                self._sent_first(call, go.size, float(at[-1]), float(srtt_after[keep][-1]))
            return
        adapt = self.cfg.window_control
        final = self.rto, self._srtt
        for c, ti, ok, sample, rto, srtt in zip(
            rc,
            t.tolist(),
            clean.tolist(),
            rtt.tolist(),
            rto_after.tolist(),
            srtt_after.tolist(),
            strict=True,
        ):
            # the estimator as of this result: the timeout its successor leaves with, the
            # round trip that paces the window's cuts
            self.rto, self._srtt = rto, srtt
            done[c] = True
            if sent[c]:
                call.flying -= 1
            if ok and adapt:
                self._adapt_window(sample, ti)
            if finishing:
                continue
            if c + pool < C:  # its slot is free from now on
                if not ready and call.flying < int(self.window):
                    call.go.append(c + pool)  # nothing waits and the window has room: now
                    call.go_at.append(ti)
                    call.go_rto.append(rto)
                    call.go_srtt.append(srtt)
                    call.flying += 1
                    continue
                heappush(ready, (c + pool, ti))
            self._release(call, ti)
        self.rto, self._srtt = final
        if finishing:
            self.finished_at = float(t.max())
            self._finish(call)
            return
        self._flush(call)

    def _finish(self, call: _Call) -> None:
        self.stats.pending_bitmaps = call.pending
        # the call ends here: its buffer is the result
        values = call.out.reshape(-1)[: call.n] if call.out is not None else None
        self._result = Reduced(values, call.exp_max, call.level_max)
        self._call = None

    def _abort(self) -> None:
        """Drop the round in progress (after an error); the run and its seqs go on."""
        if self._call is not None:
            self.stats.pending_bitmaps = self._call.pending
        self._call = None
        self._join = None
        self._sends = []

    # -- helpers ---------------------------------------------------------------------

    def _queue_chunks(self, call: _Call, chunks: np.ndarray, at: float | np.ndarray) -> None:
        """Queue the packets of ``chunks``: rows of the call's packets, or built now from
        their headers and the `LaneSource`'s lanes (the same bytes)."""
        if call.tx is not None:
            self._queue(call.tx, chunks, at)
            return
        k = chunks.size
        buf = np.empty((k, self.pb), np.uint8)
        buf[:, :HEADER_BYTES] = call.head[chunks]
        buf[:, HEADER_BYTES:].view(LANE_DTYPE)[:] = call.source.rows(chunks, self.lanes)
        self._queue(buf, np.arange(k), at)

    def _queue(self, buf: np.ndarray, rows: np.ndarray, at: float | np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        self.stats.packets_sent += int(rows.size)
        self.stats.bytes_sent += int(rows.size) * self.pb
        self._sends.append((buf, rows, at))

    def _window_stays_full(self, samples: np.ndarray) -> bool:
        """`_adapt_window` over a batch of samples at once, for a window that is the whole
        pool: it stays there (growth is capped at the pool) unless a sample would shrink it.
        Applies what the samples one by one would do (base round trip, latest samples, the
        end of slow start) and returns True; or returns False, changing nothing, when the
        window is not the pool or a sample would shrink it (the caller then goes one by
        one)."""
        if not self.cfg.window_control:
            return True
        if self.window != self.cfg.pool_size:
            return False
        n = samples.size
        if not n:
            return True
        cfg = self.cfg
        base_end = min(self._base_rtt, float(samples.min()))
        queue_end = max(cfg.queue_target * base_end, cfg.min_rto / 4)
        top = float(samples.max())
        # Below the least threshold any sample would meet (the base only falls, so the
        # thresholds do), no sample shrinks the window or ends slow start: the usual case.
        if top <= base_end + (queue_end / 2 if self._slow_start else queue_end):
            self._base_rtt = base_end
            self._recent.extend(samples.tolist())
            return True
        # the base round trip after each sample, and the least of the latest samples
        base = np.minimum.accumulate(np.concatenate(([self._base_rtt], samples)))[1:]
        r0 = len(self._recent)
        recent = np.concatenate((np.array(self._recent, dtype=np.float64), samples))
        first = max(0, RECENT_SAMPLES - 1 - r0)  # the first sample with a full history
        slow_start = self._slow_start
        if first < n:
            least = sliding_window_view(recent, RECENT_SAMPLES).min(axis=1)[
                r0 + first - (RECENT_SAMPLES - 1) :
            ]
            b = base[first:]
            queue = np.maximum(self.cfg.queue_target * b, self.cfg.min_rto / 4)
            if (least > b + queue).any():
                return False
            if slow_start and (least > b + queue / 2).any():
                slow_start = False
        self._slow_start = slow_start
        self._base_rtt = float(base[-1])
        self._recent.extend(samples.tolist())
        return True

    def _adapt_window(self, rtt: float, now: float) -> None:
        """Delay-based window control (see the module docstring), one sample at a time: the
        least of the last ``RECENT_SAMPLES`` samples against the base round trip."""
        if rtt < self._base_rtt:
            self._base_rtt = rtt
        pool = float(self.cfg.pool_size)
        if self._slow_start:  # one more chunk per result: doubles every round trip
            self.window = min(self.window + 1.0, pool)
        else:  # one more chunk per window of results
            self.window = min(self.window + 1.0 / self.window, pool)
        recent = self._recent
        recent.append(rtt)
        if len(recent) < RECENT_SAMPLES:
            return
        least = min(recent)
        # queueing allowed: queue_target base round trips, and never less than a quarter of
        # min_rto (a storm needs queues near the timeout; below that, host jitter on a busy
        # machine looks like queueing and would shrink the window for nothing)
        queue = max(self.cfg.queue_target * self._base_rtt, self.cfg.min_rto / 4)
        if least > self._base_rtt + queue:
            self._slow_start = False
            if now - self._last_cut >= self._srtt:  # once per round trip
                excess = least - self._base_rtt - queue
                floor = min(pool, RACK_WINDOW) if self.cfg.early_retransmit else 1.0
                self.window = max(floor, self.window * max(0.5, 1 - excess / least))
                self._last_cut = now
        elif self._slow_start and least > self._base_rtt + queue / 2:
            self._slow_start = False  # half the target already: leave slow start before a
            # doubling overshoots it (HyStart's idea); the queue must stay under the timeout

    def _update_rto(self, rtt: np.ndarray, clean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """RFC 6298's estimator, fed the clean samples (Karn) one by one in arrival order;
        returns the timeout and the smoothed round trip in force after each result of the
        batch. The timeout follows the queueing delay a full window builds up."""
        srtt, rttvar = self._srtt, self._rttvar
        cfg = self.cfg
        if rtt.size and srtt != 0.0:
            # The estimator running (every batch but a run's first): the recurrence over the
            # clean samples one at a time; the timeout from it in array steps (the same float
            # operations as below: max and min only select); each result's values are those
            # after the last clean sample at or before it (a retransmitted chunk's result
            # changes nothing, Karn).
            every = bool(clean.all())
            smoothed, var = [], []
            keep_srtt, keep_var = smoothed.append, var.append
            for r in (rtt if every else rtt[clean]).tolist():
                rttvar = 0.75 * rttvar + 0.25 * abs(srtt - r)
                srtt = 0.875 * srtt + 0.125 * r
                keep_srtt(srtt)
                keep_var(rttvar)
            if not smoothed:  # no clean sample
                return np.full(rtt.size, self.rto), np.full(rtt.size, srtt)
            s, v = np.array(smoothed), np.array(var)
            out = np.minimum(np.maximum(np.maximum(s + 4 * v, 2 * s), cfg.min_rto), cfg.max_rto)
            if not every:
                # result i takes the values after the clean samples up to it: entry
                # cumsum(clean)[i] of the list that starts with those before the batch
                last = np.cumsum(clean)
                out = np.concatenate(([self.rto], out))[last]
                s = np.concatenate(([self._srtt], s))[last]
            self._srtt, self._rttvar, self.rto = srtt, rttvar, float(out[-1])
            return out, s
        rto = self.rto
        out, smoothed = [], []
        for r, ok in zip(rtt.tolist(), clean.tolist(), strict=True):
            if ok:
                if srtt == 0.0:
                    srtt, rttvar = r, r / 2
                else:
                    rttvar = 0.75 * rttvar + 0.25 * abs(srtt - r)
                    srtt = 0.875 * srtt + 0.125 * r
                # and never under twice the smoothed round trip: on a steady path rttvar
                # falls to almost nothing, and the next burst (a call's first window, sent
                # at once) would time out spuriously (TCP gets this margin from its 200 ms
                # minimum)
                rto = min(max(srtt + 4 * rttvar, 2 * srtt, cfg.min_rto), cfg.max_rto)
            out.append(rto)
            smoothed.append(srtt)
        self._srtt, self._rttvar, self.rto = srtt, rttvar, rto
        return np.array(out), np.array(smoothed)

    def _where(self) -> str:
        return f"job {self.cfg.job_id}, worker {self.cfg.worker_id}"

    def _timeout_error(self, call: _Call, c: int) -> ReduceTimeout:
        cfg = self.cfg
        seq = (call.base + c) & _MASK32
        slot = seq % cfg.pool_size
        # the bitmap names workers of this worker's own switch (all of the job on one switch)
        everyone = set(range(min(cfg.num_workers, MAX_WORKERS)))
        if c in call.pending:
            heard = {w for w in everyone if call.pending[c] >> w & 1}
            who = (
                f"the switch has contributions from workers {sorted(heard)}; "
                f"missing workers {sorted(everyone - heard)}"
            )
        else:
            who = (
                f"the switch at {cfg.switch[0]}:{cfg.switch[1]} never answered this chunk "
                f"(unreachable? or a newer run of job {cfg.job_id} joined the switch, so "
                f"this run's packets (epoch {self.epoch}) are dropped as stale); workers "
                f"possibly missing: all but {cfg.worker_id} of {sorted(everyone)}"
            )
        return ReduceTimeout(
            f"{self._where()}: slot {slot} (seq {seq}, chunk {c}, epoch {self.epoch}) got no "
            f"result within {cfg.timeout:.1f} s after {int(call.retries[c])} "
            f"retransmissions; {who}"
        )

    def _join_timeout_error(self) -> JoinTimeout:
        cfg = self.cfg
        j = self._join
        everyone = set(range(cfg.num_workers))
        if j.bitmap >= 0:
            heard = {w for w in everyone if j.bitmap >> w & 1}
            who = (
                f"joined so far: workers {sorted(heard)}; missing workers "
                f"{sorted(everyone - heard)} (not started, crashed, or given another job id)"
            )
        else:
            who = (
                f"the switch at {cfg.switch[0]}:{cfg.switch[1]} never answered (not running? "
                f"job {cfg.job_id} not installed on it?)"
            )
        err = JoinTimeout(
            f"{self._where()}: could not join a run of the job within "
            f"{cfg.join_wait:.1f} s ({j.retries} retransmissions); {who}"
        )
        err.switch_silent = j.bitmap < 0
        return err
