"""The simulated network: workers and a switch joined by links, in virtual time.

Every element is a small class; what it does is the real code, only the clock and the I/O
are simulated:

- a `WorkerNode` runs the worker transport's sans-I/O core (`TransportCore`, the same object
  the UDP transport drives) and a *program*: a generator that yields switch rounds
  (`ina.host.rounds.Round`, e.g. from `Worker.allreduce_steps`) and `Compute` delays;
- the `SwitchNode` runs the switch model's `Pipeline` (the executable spec of the P4
  program) on the packets in the order they arrive, behind a processing queue at the
  switch's rate and a fixed pipeline latency, and replicates results to the job's multicast
  group;
- links are `ina.netem.LinkEmulator`: rate, FIFO buffer with tail drop, random loss, delay
  profiles and capacity episodes, the same model the wall-clock emulated path uses.

**Exact times, few events.** Every packet carries its own time from the moment it is sent
to the moment it is processed, and each node processes a *window* of packets per event. That
is safe because of lookahead, as in conservative parallel simulation: nothing that has not
happened yet can reach the switch sooner than the shortest uplink latency after now, so at an
event at time t the switch may process, in time order and at their own times, every packet
already known to arrive before ``t + lookahead``; a worker likewise for every packet
arriving before ``t + the shortest round trip`` (its own reaction cannot come back sooner),
its next timer, or the next point its program resumes. The result is the same as one event
per packet, at a fraction of the cost.
"""

from __future__ import annotations

import math
import time as wallclock
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import numpy as np

from ina.host.rounds import Reduced, Round
from ina.host.transport_core import TransportCore
from ina.netem import LinkEmulator
from ina.protocol import FRAME_OVERHEAD, HEADER_DTYPE, Flag, Op
from ina.sim.engine import Engine
from ina.switch_model.pipeline import MULTICAST, PARENT, Outputs, Pipeline


@dataclass(frozen=True)
class Compute:
    """A program step that takes simulated time without the network (compute, codec).

    ``wall`` is how much of the wall time the program spent since its last yield was not
    codec work (e.g. the forward and backward pass this step stands for): it is not charged
    again as codec time."""

    seconds: float
    what: str = "compute"
    wall: float = 0.0


Program = Generator[Round | Compute, Reduced | None, object]
"""What a worker runs: yields rounds and compute steps; is sent each round's result."""


_FLAGS_FIELD = HEADER_DTYPE.fields["flags"][1]  # the flags' byte offset in the header
_WORKER_FIELD = HEADER_DTYPE.fields["worker_id"][1]
_OP_FIELD = HEADER_DTYPE.fields["op"][1]
_SEQ_LAST = HEADER_DTYPE.fields["seq"][1] + 3  # the last byte of the big-endian seq


class _Inbox:
    """Packets on their way into a node, each with its arrival time and the port (input
    link) it came in on.

    Packets are taken in time order; packets of the same time in the order of their ports,
    and of one port in the order the port delivered them (its FIFO order). That order is a
    property of the packets alone, not of when (in which event) each port handed its packets
    over, so the simulator may batch arrivals as it likes without changing any result."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._times: list[np.ndarray] = []
        self._data: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self._ports: list[int | np.ndarray] = []  # each part's port, or one per packet
        self.first = math.inf  # the earliest arrival held

    def add(self, times: np.ndarray, data: np.ndarray, lengths: np.ndarray, port: int = 0) -> None:
        """Packets that came in on ``port``, in the order the port delivered them."""
        self._times.append(times)
        self._data.append(data)
        self._lengths.append(lengths)
        self._ports.append(port)
        self.first = min(self.first, float(times.min()))

    def _in_order(self) -> bool:
        """Whether the parts, one after another, are already in the order to take them."""
        times, ports = self._times, self._ports
        for i in range(1, len(times)):
            t0, t1 = times[i - 1][-1], times[i][0]
            if t1 < t0:
                return False
            if t1 == t0:  # a tie across parts: the lower port first
                p0, p1 = ports[i - 1], ports[i]
                if (p0 if isinstance(p0, int) else p0[-1]) > (p1 if isinstance(p1, int) else p1[0]):
                    return False
        return True

    def take_before(self, horizon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every packet arriving before ``horizon``, in order (see the class)."""
        times = self._times
        if not times:
            return np.zeros(0), np.zeros((0, self.width), np.uint8), np.zeros(0, np.int64)
        if self._in_order():
            # Parts already in order one after another (one link's deliveries): take whole
            # parts and cut one, copying only what is taken.
            whole = 0
            for part in times:
                if part[-1] >= horizon:
                    break
                whole += 1
            cut = 0 if whole == len(times) else int(np.searchsorted(times[whole], horizon))
            out = []
            for held in (times, self._data, self._lengths, self._ports):
                got = held[:whole]
                if cut:
                    port = held[whole]
                    if isinstance(port, int):  # (a port number, not a part to cut)
                        got.append(port)
                    else:
                        got.append(held[whole][:cut])
                        held[whole] = held[whole][cut:]
                del held[:whole]
                out.append(got)
            self.first = float(times[0][0]) if times else math.inf
            if not out[0]:
                return np.zeros(0), np.zeros((0, self.width), np.uint8), np.zeros(0, np.int64)
            if len(out[0]) == 1:
                return out[0][0], out[1][0], out[2][0]
            return np.concatenate(out[0]), np.concatenate(out[1]), np.concatenate(out[2])
        t = np.concatenate(times)
        ports = [
            np.full(x.size, p) if isinstance(p, int) else p
            for x, p in zip(times, self._ports, strict=True)
        ]
        p = np.concatenate(ports)
        order = np.lexsort((p, t))  # stable: each port's own order within a tie
        t, p = t[order], p[order]
        d = np.concatenate(self._data)[order]
        n = np.concatenate(self._lengths)[order]
        cut = int(np.searchsorted(t, horizon, side="left"))
        if cut < t.size:
            self._times, self._data, self._lengths = [t[cut:]], [d[cut:]], [n[cut:]]
            self._ports = [p[cut:]]
            self.first = float(t[cut])
        else:
            self._times, self._data, self._lengths, self._ports = [], [], [], []
            self.first = math.inf
        return t[:cut], d[:cut], n[:cut]


class _Wakeup:
    """One pending event of a node: scheduled again only when it must come earlier."""

    def __init__(self, engine: Engine, fn: Callable[[], None]) -> None:
        self.engine = engine
        self.fn = fn
        self.at = math.inf

    def request(self, t: float) -> None:
        t = max(t, self.engine.now)
        if t < self.at:
            self.at = t
            self.engine.at(t, self._fire)

    def _fire(self) -> None:
        if self.engine.now != self.at:  # superseded by an earlier request that already ran
            return
        self.at = math.inf
        self.fn()


# The last frame sizes and queueing delay a `Link` computed, with the arrays they came from
# (held, so ``is`` means the same arrays; packets handed to a link are never written to): a
# switch's multicast hands the same arrays to many links.
_last_frame: list[tuple | None] = [None]
_last_queued: list[tuple | None] = [None]


class Link:
    """One direction of a link: a `LinkEmulator` that hands packets to ``deliver``."""

    def __init__(
        self, emulator: LinkEmulator, deliver: Callable[[np.ndarray, np.ndarray, np.ndarray], None]
    ) -> None:
        self.emulator = emulator
        self.deliver = deliver
        self.packets = 0
        self.bytes = 0
        # seconds beyond an unloaded path (serialization at the full rate, the shortest
        # delay) summed over delivered packets: the queueing delay, as the ns-3 backend
        # measures it (`ina.sim.ns3net.Ns3Link`)
        self.queue_delay_sum = 0.0

    @property
    def mean_queue_delay(self) -> float:
        return self.queue_delay_sum / self.packets if self.packets else 0.0

    def _queued(self, times: np.ndarray, frame: np.ndarray, release: np.ndarray) -> np.ndarray:
        """The queueing delays above 0 of packets entering at ``times``, in order."""
        rate = self.emulator.rate_bps
        floor = self.emulator.delay.min_delay()
        last = _last_queued[0]  # a multicast's copies: the same arrays into identical links
        if (
            last is not None
            and last[0] is times
            and last[1] is frame
            and last[2] is release
            and last[3:5] == (rate, floor)
        ):
            return last[5]
        unloaded = floor + (0.0 if rate is None else frame * 8 / rate)
        queued = release - times - unloaded
        queued = queued[queued > 0]
        _last_queued[0] = (times, frame, release, rate, floor, queued)
        return queued

    def _add_queued(self, queued: np.ndarray) -> None:
        """Add to the sum one packet at a time, in the link's order (as the ns-3 backend's
        `Ns3Link` does), so that the sum does not depend on how packets were batched."""
        if queued.size:
            total = np.add.accumulate(np.concatenate(([self.queue_delay_sum], queued)))
            self.queue_delay_sum = float(total[-1])

    def send(self, times: np.ndarray, data: np.ndarray, lengths: np.ndarray, port: int = 0) -> None:
        """Packets ``data`` (rows, not to be written to again) enter the link at ``times``
        (nondecreasing); ``port``: which of a shared link's senders (`OrderedLink`)."""
        if not times.size:
            return
        last = _last_frame[0]
        if last is not None and last[0] is lengths:
            frame = last[1]  # the same packets as the last link's (a multicast): same frames
        else:
            frame = lengths + FRAME_OVERHEAD  # what occupies the wire: the whole frame
            _last_frame[0] = (lengths, frame)
        release = self.emulator.admit_batch(times, frame)
        ok = None if self.emulator.lossless else release == release  # not NaN: not dropped
        if ok is None or ok.all():
            self.packets += times.size
            self.bytes += int(frame.sum())
            self._add_queued(self._queued(times, frame, release))
            self.deliver(release, data, lengths)
        elif ok.any():
            self.packets += int(ok.sum())
            self.bytes += int(frame[ok].sum())
            self._add_queued(self._queued(times[ok], frame[ok], release[ok]))
            self.deliver(release[ok], data[ok], lengths[ok])


class OrderedLink(Link):
    """A link that several workers share (workers of several jobs on one host).

    A worker hands its packets over ahead of their time (lookahead), so two workers' packets
    do not reach the link in time order. They wait here until the clock reaches their time
    and then enter the link in time order, as on a host's one NIC queue. That delays nothing
    downstream: a packet sent at t cannot reach the switch before t + the uplink's least
    latency, which is the switch's lookahead. ``late`` counts packets handed over after the
    clock passed their time (they enter the link behind later ones; 0 in every test)."""

    def __init__(
        self,
        engine: Engine,
        emulator: LinkEmulator,
        deliver: Callable[[np.ndarray, np.ndarray, np.ndarray], None],
    ) -> None:
        super().__init__(emulator, deliver)
        self.engine = engine
        self.inbox = _Inbox(0)
        self._wake = _Wakeup(engine, self._run)
        self._admitted = -math.inf  # the time of the last packet into the link
        self.late = 0

    def send(self, times: np.ndarray, data: np.ndarray, lengths: np.ndarray, port: int = 0) -> None:
        if times.size:
            self.late += int((times < self._admitted).sum())
            self.inbox.add(times, data, lengths, port)
            self._wake.request(self.inbox.first)

    def _run(self) -> None:
        t, data, lengths = self.inbox.take_before(np.nextafter(self.engine.now, math.inf))
        if t.size:
            self._admitted = max(self._admitted, float(t[-1]))
            super().send(t, data, lengths)
        if self.inbox.first < math.inf:
            self._wake.request(self.inbox.first)


class SwitchNode:
    """The switch: `Pipeline` behind a processing queue, then the job's multicast groups.

    Args:
        engine: the simulation kernel.
        pipeline: the switch model's pipeline, jobs installed.
        lookahead: the shortest time from "now" to any packet not yet known arriving.
        rate_bps: how fast the pipeline takes packets (bits of frame per second); None:
            at any rate (the ports are the bottleneck, as on a line-rate switch).
        latency: the pipeline's latency, seconds.
        weight: how many contributors' packets each packet from below stands for in the
            processing queue (timing only: one representative for a class of alike
            contributors, `ina.sim.classes`), one number for all or one per worker id;
            results coming down from a parent count once.
    """

    def __init__(
        self,
        engine: Engine,
        pipeline: Pipeline,
        lookahead: float,
        rate_bps: float | None = None,
        latency: float = 0.0,
        weight: int | Sequence[int] = 1,
    ) -> None:
        self.engine = engine
        self.pipeline = pipeline
        # by worker id (the header's): every id a byte can hold, so no lookup fails
        self.weights = np.ones(256, np.int64)
        if isinstance(weight, int):
            self.weights[:] = weight
        else:
            self.weights[: len(weight)] = weight
        self.weighted = bool((self.weights != 1).any())
        self._class_nonces: set[bytes] = set()  # JOIN nonces of weighted contributors
        self._last_joiners: set[bytes] = set()  # nonces whose class had the run's last JOIN
        self.lookahead = lookahead
        self.latency = latency
        self.queue = LinkEmulator(rate_bps=rate_bps)  # the processing queue (no loss, no delay)
        self.inbox = _Inbox(pipeline.payload_bytes + 1)
        # (job_id, worker_id) -> downlink; on a leaf, (job_id, PARENT) -> the uplink to its
        # parent switch (hierarchical aggregation, `ina.sim.network`)
        self.ports: dict[tuple[int, int], Link] = {}
        # the links into the switch, by port (`attach`): their channel clocks let it take
        # more than ``lookahead`` at once (`_horizon`)
        self.inputs: list[Link] = []
        self.run_ahead = True  # False: exactly ``lookahead`` per event (`ina.sim.allreduce.run`)
        self._wake = _Wakeup(engine, self._run)
        self._out = Outputs.allocate(256, pipeline.payload_bytes)
        self.batches = 0
        self.unroutable = 0

    def arrive(
        self, times: np.ndarray, data: np.ndarray, lengths: np.ndarray, port: int = 0
    ) -> None:
        """Packets coming in on input ``port``, in its order."""
        self.inbox.add(times, data, lengths, port)
        self._wake.request(self.inbox.first)

    def attach(self, link: Link) -> Link:
        """Make ``link`` the switch's next input port: it delivers here (packets of the same
        time are taken in the order of their ports), and its channel clock bounds what the
        switch may take at once (`_horizon`)."""
        port = len(self.inputs)
        link.deliver = lambda times, data, lengths: self.arrive(times, data, lengths, port)
        self.inputs.append(link)
        return link

    def _horizon(self) -> float:
        """Every packet arriving before this time is in the inbox already.

        Nothing not yet sent arrives sooner than ``now + lookahead``; and each input link is
        FIFO, so nothing it has still to deliver arrives before the last packet it delivered
        (its channel clock, as in conservative parallel simulation). The earliest of those
        clocks bounds every input at once: while the workers are busy it lies about a round
        trip ahead, where ``lookahead`` is one link's latency. Packets at exactly that time
        stay for later: a link may still deliver another one at the same time."""
        horizon = self.engine.now + self.lookahead
        if self.run_ahead and self.inputs:
            clock = min(link.emulator.released_until for link in self.inputs)
            if clock > horizon:
                return clock
        return horizon

    def _run(self) -> None:
        t, data, lengths = self.inbox.take_before(self._horizon())
        if t.size:
            self._process(t, data, lengths)
        if self.inbox.first < math.inf:
            self._wake.request(max(self.inbox.first, self.engine.now))

    def _process(self, t: np.ndarray, data: np.ndarray, lengths: np.ndarray) -> None:
        size = unit = lengths + FRAME_OVERHEAD
        count = None
        if self.weighted:  # a contribution stands for its class; a parent's results once
            result = (data[:, _FLAGS_FIELD] & int(Flag.RESULT)) != 0
            count = np.where(result, 1, self.weights[data[:, _WORKER_FIELD]])
            size = size * count
            joins = np.flatnonzero((count > 1) & (data[:, _OP_FIELD] == int(Op.JOIN)))
            for r in joins.tolist():
                nonce = bytes(data[r, _SEQ_LAST - 3 : _SEQ_LAST + 1])
                self._class_nonces.add(nonce)
                if nonce in self._last_joiners:  # its member that joined last does not ask
                    self._last_joiners.discard(nonce)
                    count[r] -= 1
                    size[r] -= unit[r]
        done = self.queue.admit_batch(t, size, count) + self.latency
        if self._out.data.shape[0] < t.size:
            self._out = Outputs.allocate(2 * t.size, self.pipeline.payload_bytes)
        out = self._out
        m = self.pipeline.process_batch(data, lengths, out)
        self.batches += 1
        if m == 0:
            return
        # egress: one copy per destination worker, each port's copies in time order (outputs
        # are in input order, which is time order)
        dest, job, group = out.dest[:m], out.job_id[:m], out.group[:m]
        when = done[out.src[:m]]
        pb = self.pipeline.payload_bytes
        lengths = out.length[:m].copy()
        rows_data = out.data
        if self._class_nonces:
            self._rename_runs(out, m)
        if self.weighted and (out.answer[:m] & (dest == PARENT)).any():
            dest, job, group, when, lengths, rows_data = self._per_member(out, m, data, unit, when)
        multicast = dest == MULTICAST
        targets: dict[tuple[int, int], np.ndarray] = {}  # (job_id, worker) -> output mask
        kinds = set(zip(dest.tolist(), group.tolist(), job.tolist(), strict=True))
        for d, g, j in kinds:
            if d != MULTICAST:
                continue
            # the common case, one group's results only: every output, no mask to build
            rows = multicast & (group == g) & (job == j) if len(kinds) > 1 else multicast
            for _, rid in self.pipeline.tables.mcast_groups.get(g, ()):
                targets[(j, rid)] = targets.get((j, rid), False) | rows
        for j, w in {(j, d) for d, _, j in kinds if d != MULTICAST}:
            rows = ~multicast & (job == j) & (dest == w)
            targets[(j, w)] = targets.get((j, w), False) | rows
        # a port that several workers share (jobs on one host) takes all their rows at once,
        # in time order
        per_link: dict[int, tuple[Link, np.ndarray]] = {}
        for key, rows in targets.items():
            link = self.ports.get(key)
            if link is None:
                self.unroutable += int(rows.sum())
                continue
            had = per_link.get(id(link))
            per_link[id(link)] = (link, rows if had is None else had[1] | rows)
        copies: dict[bytes, tuple] = {}  # the same rows for many ports: one copy
        for link, rows in per_link.values():
            shared = copies.get(rows.tobytes())
            if shared is None:
                r = np.flatnonzero(rows)
                shared = copies[rows.tobytes()] = (when[r], rows_data[r, :pb], lengths[r])
            link.send(*shared)

    def _rename_runs(self, out: Outputs, m: int) -> None:
        """A run's multicast JOIN reply names the nonce of the JOIN that completed it. When
        that is a class's representative, in the run of every worker it was one member of
        the class, and the class's other members, not recognising it, ask again (and get
        the reply that names their own): so the reply leaves naming nobody's nonce, and the
        representative asks again as they do (`ina.host.transport_core`, "Run join"), its
        question counted for one member fewer (`_process`): the last joiner's."""
        rows = np.flatnonzero(
            (out.dest[:m] == MULTICAST) & (out.data[:m, _OP_FIELD] == int(Op.JOIN))
        )
        for r in rows.tolist():
            nonce = bytes(out.data[r, _SEQ_LAST - 3 : _SEQ_LAST + 1])
            if nonce in self._class_nonces:
                out.data[r, _SEQ_LAST] ^= 1
                self._last_joiners.add(nonce)

    def _per_member(self, out: Outputs, m: int, data, unit, when):
        """The outputs with every UP that answers a weighted contributor's duplicate once
        per member of its class: each member's retransmission is a duplicate of its own
        and sends the leaf's partial sum up again, all on the one uplink. The members' copies
        leave one processing time apart, the last when the weighted packet is done.
        (Answers that go down need no copies: each member has a link of its own, and the
        class's one link stands for each.)"""
        src = out.src[:m]
        up = out.answer[:m] & (out.dest[:m] == PARENT)
        times = np.where(up, self.weights[data[src, _WORKER_FIELD]], 1)
        order = np.repeat(np.arange(m), times)
        # how many of its class's copies still follow each copy
        after = np.concatenate([np.arange(k - 1, -1, -1) for k in times.tolist()])
        rate = self.queue.rate_bps
        service = 0.0 if rate is None else (unit[src] * 8 / rate)[order]
        return (
            out.dest[order], out.job_id[order], out.group[order],
            when[order] - after * service, out.length[order], out.data[order],
        )  # fmt: skip


class WorkerNode:
    """A worker: its transport core, its links, and the program it runs.

    ``codec_time(wall_seconds)`` turns the wall time the program's own code took between two
    yields (quantizing, compressing, peeling...) into simulated time (`ina.workload.compute`).
    """

    def __init__(
        self,
        engine: Engine,
        core: TransportCore,
        lookahead: float,
        codec_time: Callable[[float], float] = lambda wall: 0.0,
    ) -> None:
        self.engine = engine
        self.core = core
        self.lookahead = lookahead
        self.codec_time = codec_time
        self.uplink: Link | None = None
        self.port = 0  # which of its uplink's senders it is (a host shared by several jobs)
        # Take every packet its link has delivered, up to its next timer or program step:
        # its one input link is FIFO, so nothing can still arrive before them, and what it
        # sends in reply cannot come back within ``lookahead`` anyway. (False: at most
        # ``lookahead`` per event, `ina.sim.allreduce.run`.)
        self.run_ahead = True
        self.inbox = _Inbox(core.pb + 1)
        self._wake = _Wakeup(engine, self._on_inbox)
        self._timer = _Wakeup(engine, self._on_timer)
        self._program: Program | None = None
        self._resume_at = math.inf  # when the program continues (inf: waiting on a round)
        self._in_round = False
        self.on_done: Callable[[WorkerNode, object], None] | None = None
        self.result: object = None
        self.error: BaseException | None = None
        self.finished_at = math.nan
        self.crashed_at = math.nan  # when `crash` stopped it (nan: it runs to its end)
        # stats
        self.wall_in_program = 0.0  # wall seconds spent in the program's own code
        self.rounds = 0
        self.round_time = 0.0  # simulated seconds inside rounds
        self.compute_time = 0.0  # simulated seconds of Compute steps and codec time

    # -- the program ---------------------------------------------------------------------

    def run(self, program: Program, at: float | None = None) -> None:
        """Start ``program`` at ``at`` (default: now)."""
        self._program = program
        start = self.engine.now if at is None else at
        self._resume_at = start
        self.engine.at(start, lambda: self._step(None))

    def _step(self, value: Reduced | None) -> None:
        if self._program is None:  # crashed while this step was scheduled
            return
        now = self.engine.now
        self._resume_at = math.inf
        t0 = wallclock.perf_counter()
        try:
            item = self._program.send(value)
        except StopIteration as stop:
            self.wall_in_program += wallclock.perf_counter() - t0
            self.result, self.finished_at = stop.value, now
            self._program = None
            if self.on_done is not None:
                self.on_done(self, stop.value)
            return
        except Exception as e:  # the program failed (e.g. LengthMismatch): stop this worker
            self.error, self.finished_at = e, now
            self._program = None
            if self.on_done is not None:
                self.on_done(self, e)
            return
        wall = wallclock.perf_counter() - t0
        self.wall_in_program += wall
        if isinstance(item, Compute):
            wall = max(wall - item.wall, 0.0)
        codec = self.codec_time(wall)
        self.compute_time += codec
        if isinstance(item, Compute):
            self.compute_time += item.seconds
            self._continue_at(now + codec + item.seconds, None)
        elif isinstance(item, Round):
            self._start_round(now + codec, item)
        else:
            raise TypeError(f"a worker program yields Round or Compute, not {item!r}")

    def _continue_at(self, t: float, value: Reduced | None) -> None:
        self._resume_at = t
        self.engine.at(t, lambda: self._step(value))

    def _start_round(self, t: float, rnd: Round) -> None:
        def start() -> None:
            if self._program is None:  # crashed before the round began
                return
            self._resume_at = math.inf  # the program waits on the round now
            self.rounds += 1
            self._round_started = self.engine.now
            self.core.start(rnd, self.engine.now)
            if self.core.idle:  # an empty round: nothing to send
                self._step(self.core.result())
                return
            self._in_round = True
            self._after_core()

        self._resume_at = t
        self.engine.at(t, start)

    def crash(self, at: float) -> None:
        """Stop this worker dead at simulated time ``at``, as a host that fails: its program
        ends where it is, it sends nothing more and whatever reaches it is lost. The job's
        other workers find out as on the wire: their chunks time out."""

        def now_dead() -> None:
            if self._program is None:  # finished before
                return
            self.crashed_at = self.finished_at = self.engine.now
            self._program, self._in_round, self._resume_at = None, False, math.inf
            self.core.pop_sends()
            if self.on_done is not None:
                self.on_done(self, None)

        self.engine.at(at, now_dead)

    # -- packets and timers --------------------------------------------------------------

    def deliver(self, times: np.ndarray, data: np.ndarray, lengths: np.ndarray) -> None:
        if self.crashed_at == self.crashed_at:  # (not nan) a dead host receives nothing
            return
        self.inbox.add(times, data, lengths)
        self._wake.request(self.inbox.first)

    def _on_inbox(self) -> None:
        if self._program is None and self.crashed_at == self.crashed_at:
            return
        now = self.engine.now
        deadline = self.core.deadline()
        if deadline <= now:
            self._tick(now)
            deadline = self.core.deadline()
        ahead = self.lookahead
        if self.run_ahead:
            ahead = max(ahead, self.core.least_timeout())
        horizon = min(now + ahead, deadline, self._resume_at)
        t, data, lengths = self.inbox.take_before(max(horizon, now + 1e-12))
        if t.size:
            try:
                self.core.receive(data, lengths, t)
            except Exception as e:
                self._fail(e)
                return
            self._after_core()
        if self.inbox.first < math.inf:
            self._wake.request(max(self.inbox.first, now))

    def _on_timer(self) -> None:
        if self.crashed_at == self.crashed_at:  # dead: its timers do nothing
            return
        self._tick(self.engine.now)
        self._after_core()

    def _tick(self, now: float) -> None:
        try:
            self.core.tick(now)
        except Exception as e:  # a ReduceTimeout: the program sees it
            self._fail(e)

    def _fail(self, e: BaseException) -> None:
        self._in_round = False
        if self._program is None:
            return
        try:
            self._program.throw(e)
        except BaseException as err:  # the program did not handle it
            self.error, self.finished_at = err, self.engine.now
            self._program = None
            if self.on_done is not None:
                self.on_done(self, err)

    def _after_core(self) -> None:
        """Send what the core wants sent, arm its timer, resume the program if the round
        is complete."""
        sends = self.core.pop_sends()
        if sends and self.uplink is not None:

            def times_of(rows: np.ndarray, at) -> np.ndarray:
                return at if isinstance(at, np.ndarray) else np.full(rows.size, float(at))

            if len(sends) == 1:
                buf, rows, at = sends[0]
                data, times = buf[rows], times_of(rows, at)
            else:
                times = np.concatenate([times_of(rows, at) for _, rows, at in sends])
                order = np.argsort(times, kind="stable")
                times = times[order]
                buf = sends[0][0]
                if all(b is buf for b, _, _ in sends):  # (the usual: one call's buffer)
                    data = buf[np.concatenate([rows for _, rows, _ in sends])[order]]
                else:
                    data = np.concatenate([b[rows] for b, rows, _ in sends])[order]
            lengths = np.full(times.size, self.core.pb, np.int64)
            self.uplink.send(times, data, lengths, self.port)
        if self._in_round and self.core.idle:
            self._in_round = False
            done = max(self.core.finished_at, self.engine.now)
            self.round_time += done - self._round_started
            self._continue_at(done, self.core.result())
        d = self.core.deadline()
        if d < math.inf:
            self._timer.request(max(d, self.engine.now))
