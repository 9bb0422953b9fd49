"""Link emulation in our own code: delay, bandwidth and loss per link (this kernel has no
``tc netem``).

The worker transport asks a `LinkEmulator` when each packet may be delivered::

    link = make_link("high", seed=7, rate_bps=1e9, loss=0.001)
    release = link.admit(now, nbytes)   # absolute time in the caller's clock, or None: dropped
    releases = link.admit_batch(times, sizes)   # the same for many packets; NaN: dropped

A packet goes through three stages, in this order:

1. **Loss**: dropped with probability ``loss``, independently (at enqueue, like netem, so a
   dropped packet takes no link time).
2. **Serialization queue**: with ``rate_bps`` set, the link sends one packet at a time:
   ``departure = max(now, link_free_at) + nbytes * 8 / rate_bps``. Queueing delay therefore
   grows with the offered load: the signal DC2 reacts to. With ``buffer_bytes`` the queue is
   finite and a packet that does not fit is dropped (tail drop); with a `CapacityModel`
   cross traffic takes a share of the rate for a while (episodes, or a replayed trace); with
   `CrossTraffic` the cross traffic's own packets enter the same FIFO (a constant-rate
   schedule in episodes, or a replayed arrival trace such as the ns-3 backend records): they
   take the link's time and its buffer, so ours queue behind them as on a shared port.
3. **Propagation delay** from the link's `DelayModel` (constant, low or high variation, or a
   replayed trace): ``release = departure + delay``. Links are FIFO: unless built with
   ``reorder=True``, a packet never leaves before the one admitted ahead of it (``release`` is
   raised to the previous release), as on a real wire.

Everything random comes from numpy generators seeded from one ``seed`` (one independent stream
per purpose, so changing the loss rate does not change the delays a packet gets), and draws are
taken one per packet in admission order: the same seed and the same packets give the same
release times, whether admitted one at a time (`admit`) or in arrays (`admit_batch`).

Profiles (`make_link`): ``none`` (no delay), ``constant``, ``low`` (small Gaussian jitter),
``high`` (lognormal tail plus on/off congestion episodes), ``trace:PATH`` (one delay per
packet) and ``timeline:PATH`` (delay by time, from a capacity/delay trace). A profile name may
carry its delay model's parameters: ``high:episode_on_s=5:episode_off_s=5``.
"""

from __future__ import annotations

import abc
import inspect
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

_BLOCK = 4096  # random draws generated at a time: one numpy call per block, not per packet


class _Draws:
    """A buffered stream of standard normal or uniform draws.

    Blocks are always generated at the same size, so the n-th draw is the same whatever the
    sizes of the requests were: batch and one-at-a-time admission see the same numbers.
    """

    def __init__(self, rng: np.random.Generator, kind: str) -> None:
        self._fill = {"normal": rng.standard_normal, "uniform": rng.random}[kind]
        self._buf = np.empty(0)
        self._pos = 0

    def take(self, n: int) -> np.ndarray:
        parts = []
        while n > 0:
            if self._pos == len(self._buf):
                self._buf, self._pos = self._fill(_BLOCK), 0
            part = self._buf[self._pos : self._pos + n]
            self._pos += len(part)
            n -= len(part)
            parts.append(part)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _read_text(path: str | Path) -> str:
    """A trace file's text; a file that cannot be read is a ValueError (a one-line error)."""
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read trace {path}: {getattr(e, 'strerror', None) or e}") from None


def _fields(path: str | Path):
    """A trace file's data lines as (line number, fields): ``#`` comments and blank lines
    dropped, commas read as spaces."""
    for n, line in enumerate(_read_text(path).splitlines(), 1):
        line = line.partition("#")[0].strip()
        if line:
            yield n, line.replace(",", " ").split()


class DelayModel(abc.ABC):
    """Propagation delay of each packet, in seconds, given the packets' admission times."""

    @abc.abstractmethod
    def delays(self, times: np.ndarray) -> np.ndarray:
        """One delay per packet; ``times`` are nondecreasing admission times in seconds."""

    def min_delay(self) -> float:
        """A lower bound of every delay this model gives (the simulator's lookahead)."""
        return 0.0


class OffsetDelay(DelayModel):
    """Another model's delays plus a fixed ``offset_s`` (e.g. a propagation delay)."""

    def __init__(self, inner: DelayModel, offset_s: float) -> None:
        if not offset_s >= 0:
            raise ValueError(f"offset_s must be >= 0, got {offset_s}")
        self.inner, self.offset_s = inner, offset_s

    def delays(self, times: np.ndarray) -> np.ndarray:
        return self.inner.delays(times) + self.offset_s

    def min_delay(self) -> float:
        return self.inner.min_delay() + self.offset_s


class ConstantDelay(DelayModel):
    """Every packet waits ``delay_s``."""

    def __init__(self, delay_s: float = 0.0) -> None:
        if not delay_s >= 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        self.delay_s = delay_s

    def delays(self, times: np.ndarray) -> np.ndarray:
        return np.full(len(times), self.delay_s)

    def min_delay(self) -> float:
        return self.delay_s


class LowVariationDelay(DelayModel):
    """``base_s`` plus Gaussian jitter of standard deviation ``jitter_s`` (clipped at 0)."""

    def __init__(self, seed: np.random.SeedSequence, base_s: float = 1e-3, jitter_s: float = 1e-4):
        if not (base_s >= 0 and jitter_s >= 0):
            raise ValueError("base_s and jitter_s must be >= 0")
        self.base_s, self.jitter_s = base_s, jitter_s
        self._normal = _Draws(np.random.default_rng(seed), "normal")

    def delays(self, times: np.ndarray) -> np.ndarray:
        return np.maximum(self.base_s + self.jitter_s * self._normal.take(len(times)), 0.0)


class HighVariationDelay(DelayModel):
    """Heavy-tailed delay with congestion episodes.

    ``delay = base_s + LogNormal(median median_s, shape sigma)`` (mean ``median_s *
    exp(sigma^2 / 2)``), plus ``episode_delay_s`` while a congestion episode is on. Episodes
    alternate with quiet periods; both durations are exponential with means ``episode_on_s`` and
    ``episode_off_s`` (an on/off Markov process), starting quiet at ``epoch`` (default: the
    first packet's time).

    By default every link draws its own episodes (congestion on one worker's access link).
    With ``episode_seed >= 0`` the schedule comes from that seed instead, so every link given
    the same ``episode_seed`` and ``epoch`` is congested at the same times: a shared bottleneck,
    such as the switch's own ports, which all of an INA job's traffic crosses.
    """

    def __init__(
        self,
        seed: np.random.SeedSequence,
        base_s: float = 1e-3,
        median_s: float = 2e-4,
        sigma: float = 1.0,
        episode_delay_s: float = 20e-3,
        episode_on_s: float = 1.0,
        episode_off_s: float = 3.0,
        episode_seed: float = -1,
        epoch: float = math.nan,
    ) -> None:
        if min(base_s, median_s, sigma, episode_delay_s) < 0:
            raise ValueError("delays and sigma must be >= 0")
        if not (episode_on_s > 0 and episode_off_s > 0):
            raise ValueError("episode durations must be > 0")
        if episode_seed >= 0 and episode_seed != int(episode_seed):
            raise ValueError(f"episode_seed must be a whole number, got {episode_seed}")
        self.base_s, self.median_s, self.sigma = base_s, median_s, sigma
        self.episode_delay_s = episode_delay_s
        self.episode_on_s, self.episode_off_s = episode_on_s, episode_off_s
        tail_seed, own_episode_seed = seed.spawn(2)
        if episode_seed >= 0:
            own_episode_seed = np.random.SeedSequence(int(episode_seed))
        self._normal = _Draws(np.random.default_rng(tail_seed), "normal")
        self._episode_rng = np.random.default_rng(own_episode_seed)
        self._episodes: list[tuple[float, float]] = []  # (start, end), generated ahead of time
        self._horizon = epoch  # schedule known up to here (NaN: starts at the first packet)

    def delays(self, times: np.ndarray) -> np.ndarray:
        tail = self.median_s * np.exp(self.sigma * self._normal.take(len(times)))
        return self.base_s + tail + self.episode_delay_s * self.in_episode(times)

    def min_delay(self) -> float:
        return self.base_s

    def _schedule(self, first: float, last: float) -> None:
        """Make the episode list cover [first, last]: extend it ahead, forget finished ones."""
        if math.isnan(self._horizon):
            self._horizon = first
        while self._horizon <= last:
            start = self._horizon + self._episode_rng.exponential(self.episode_off_s)
            self._horizon = start + self._episode_rng.exponential(self.episode_on_s)
            self._episodes.append((start, self._horizon))
        # Admission times do not go back, so finished episodes are not needed again.
        while len(self._episodes) > 1 and self._episodes[0][1] < first:
            self._episodes.pop(0)

    def in_episode(self, times: np.ndarray) -> np.ndarray:
        """Whether each time falls in a congestion episode (extends the schedule as needed)."""
        if len(times) == 0:
            return np.zeros(0, dtype=bool)
        self._schedule(float(times[0]), float(times[-1]))
        starts, ends = np.array(self._episodes).T
        idx = np.searchsorted(starts, times, side="right") - 1
        return (idx >= 0) & (times < ends[np.maximum(idx, 0)])


class TraceDelay(DelayModel):
    """Replays a delay trace: one delay in milliseconds per line (``#`` comments allowed),
    one line per packet in admission order, looped."""

    def __init__(self, path: str | Path) -> None:
        lines = (line.partition("#")[0].strip() for line in _read_text(path).splitlines())
        values = np.array([float(line) for line in lines if line])
        if len(values) == 0 or not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError(f"{path}: a delay trace needs one finite delay >= 0 (ms) per line")
        self.delays_s = values / 1000
        self._pos = 0

    def min_delay(self) -> float:
        return float(self.delays_s.min())

    def delays(self, times: np.ndarray) -> np.ndarray:
        idx = (self._pos + np.arange(len(times))) % len(self.delays_s)
        self._pos = (self._pos + len(times)) % len(self.delays_s)
        return self.delays_s[idx]


def read_timeline(path: str | Path, column: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Columns 0 (time, s) and ``column`` of a timeline file: lines ``TIME_S SHARE
    [DELAY_MS]`` (``#`` comments, blank lines, commas allowed), times rising from 0; the last
    line's time is the period after which it repeats. A capacity/delay trace is one such
    file: the capacity reads column 1, the delay column 2."""
    rows = []
    for n, parts in _fields(path):
        try:
            rows.append((float(parts[0]), float(parts[column])))
        except (ValueError, IndexError):
            names = ["TIME_S", "SHARE", "DELAY_MS"][: column + 1]
            raise ValueError(
                f"{path}:{n}: need '{' '.join(names)}', got {' '.join(parts)!r}"
            ) from None
    if len(rows) < 2:
        raise ValueError(f"{path}: a {what} trace needs at least two lines")
    t, value = np.array(rows).T
    if t[0] != 0 or np.any(np.diff(t) <= 0) or not np.all(np.isfinite(value)):
        raise ValueError(f"{path}: times must rise from 0 and every {what} be a finite number")
    return t, value


class TimelineDelay(DelayModel):
    """Replays the delay column of a timeline (``TIME_S SHARE DELAY_MS`` lines, `read_timeline`)
    by time: a packet admitted at time t gets the delay of the last line at or before t
    (modulo the period). Unlike ``trace:PATH`` (one delay per packet, in order), the delay
    belongs to the moment, so every link replaying the file sees the same delay at once, and
    the capacity trace of the same file lines up with it."""

    def __init__(self, path: str | Path) -> None:
        t, delay_ms = read_timeline(path, 2, "delay")
        if np.any(delay_ms[:-1] < 0):
            raise ValueError(f"{path}: delays must be >= 0 ms")
        self.times, self.delays_s, self.period = t[:-1], delay_ms[:-1] / 1000, float(t[-1])

    def min_delay(self) -> float:
        return float(self.delays_s.min())

    def delays(self, times: np.ndarray) -> np.ndarray:
        phase = np.mod(np.asarray(times, dtype=np.float64), self.period)
        return self.delays_s[np.searchsorted(self.times, phase, side="right") - 1]


class CapacityModel(abc.ABC):
    """The share of a link's rate left to our traffic over time (cross traffic takes the
    rest): 1.0 is the whole link."""

    @abc.abstractmethod
    def share(self, times: np.ndarray) -> np.ndarray:
        """The share at each of the nondecreasing ``times``, in (0, 1]."""

    def constant_over(self, first: float, last: float) -> float | None:
        """The share if it is the same at every time in [first, last], else None."""
        return None


class CapacityEpisodes(CapacityModel):
    """Cross traffic in on/off episodes: while an episode is on, our traffic gets only
    ``share`` of the link. Durations are exponential with means ``on_s`` and ``off_s`` (or
    exactly those with ``fixed=True``: a square wave of duty cycle ``on_s / (on_s + off_s)``),
    starting quiet at ``epoch``. Links given the same ``seed`` and ``epoch`` share one
    schedule: a bottleneck every worker's traffic crosses."""

    def __init__(
        self,
        share: float = 0.1,
        on_s: float = 1.0,
        off_s: float = 3.0,
        seed: int = 0,
        epoch: float = 0.0,
        fixed: bool = False,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"capacity share must be in (0, 1], got {share}")
        if not (on_s > 0 and off_s > 0):
            raise ValueError("capacity episode durations must be > 0")
        self.share_on, self.on_s, self.off_s, self.fixed = share, on_s, off_s, fixed
        self._rng = np.random.default_rng(np.random.SeedSequence([0xCA9, int(seed)]))
        self._starts: list[float] = []
        self._ends: list[float] = []
        self._horizon = epoch

    def _draw(self, mean: float) -> float:
        return mean if self.fixed else float(self._rng.exponential(mean))

    def episodes_until(self, last: float) -> tuple[np.ndarray, np.ndarray]:
        """Start and end times of every episode that begins before ``last``."""
        while self._horizon <= last:
            start = self._horizon + self._draw(self.off_s)
            self._horizon = start + self._draw(self.on_s)
            self._starts.append(start)
            self._ends.append(self._horizon)
        return np.array(self._starts), np.array(self._ends)

    def share(self, times: np.ndarray) -> np.ndarray:
        times = np.asarray(times, dtype=np.float64)
        if times.size == 0:
            return np.ones(0)
        starts, ends = self.episodes_until(float(times.max()))
        idx = np.searchsorted(starts, times, side="right") - 1
        on = (idx >= 0) & (times < ends[np.maximum(idx, 0)])
        return np.where(on, self.share_on, 1.0)

    def constant_over(self, first: float, last: float) -> float | None:
        s = self.share(np.array([first, last]))
        starts, ends = self.episodes_until(last)
        inside = np.any((starts > first) & (starts <= last)) or np.any(
            (ends > first) & (ends <= last)
        )
        return None if inside else float(s[0])


class CapacityTrace(CapacityModel):
    """Replays a capacity trace: lines ``TIME_S SHARE`` (``#`` comments allowed), times
    increasing from 0, the share holding until the next line; looped after the last line
    (whose time is the period)."""

    def __init__(self, path: str | Path) -> None:
        t, share = read_timeline(path, 1, "capacity")
        if np.any((share[:-1] <= 0) | (share[:-1] > 1)):
            raise ValueError(f"{path}: times must rise from 0 and shares be in (0, 1]")
        self.times, self.shares, self.period = t[:-1], share[:-1], float(t[-1])

    def share(self, times: np.ndarray) -> np.ndarray:
        phase = np.mod(np.asarray(times, dtype=np.float64), self.period)
        return self.shares[np.searchsorted(self.times, phase, side="right") - 1]

    def constant_over(self, first: float, last: float) -> float | None:
        # within one period and one line of the trace: the link's vectorized path applies
        if last - first >= self.period:
            return None
        a, b = np.mod([first, last], self.period)
        i, j = np.searchsorted(self.times, [a, b], side="right") - 1
        return float(self.shares[i]) if a <= b and i == j else None


class CrossTraffic(abc.ABC):
    """Cross traffic as packets: their arrivals at a link's FIFO, which they share with ours.

    Unlike a `CapacityModel` (a share of the rate taken away, a fluid), these packets sit in
    the queue ahead of ours and fill its buffer: a TCP flow that keeps the port's buffer full
    delays every packet of ours behind its standing queue, which a share does not. They are
    tail-dropped like ours when the buffer is full, and take no loss draw or delay of ours.
    The arrivals are open loop: they do not react to our traffic (a trace of a closed-loop
    flow, e.g. TCP recorded by the ns-3 backend, replays what that flow did there)."""

    @abc.abstractmethod
    def arrivals(self, until: float) -> tuple[np.ndarray, np.ndarray]:
        """Times and sizes (bytes on the wire) of the packets arriving at or before ``until``
        that earlier calls did not return, in time order."""


class CrossEpisodes(CrossTraffic):
    """Constant-rate cross traffic while episodes are on: packets of ``size`` bytes every
    ``size * 8 / rate_bps`` seconds from each episode's start to its end (the episodes of a
    `CapacityEpisodes` schedule: ``on_s``, ``off_s``, ``fixed``, ``seed``, ``epoch``)."""

    def __init__(self, rate_bps: float, size: float, episodes: CapacityEpisodes) -> None:
        if not (rate_bps > 0 and size > 0):
            raise ValueError("cross traffic needs a rate > 0 and a packet size > 0")
        self.rate_bps, self.size, self.episodes = rate_bps, size, episodes
        # the next packet not yet returned: episode index, packet index in it (integers, so
        # that what a call returns does not depend on where earlier calls stopped)
        self._episode = 0
        self._k = 0

    def arrivals(self, until: float) -> tuple[np.ndarray, np.ndarray]:
        gap = self.size * 8 / self.rate_bps
        starts, ends = self.episodes.episodes_until(until)
        times = []
        i, k = self._episode, self._k
        while i < len(starts) and starts[i] <= until:
            start = float(starts[i])
            count = math.ceil((float(ends[i]) - start) / gap - 1e-9)  # the episode's packets
            t = start + gap * np.arange(k, count)
            t = t[t <= until]
            times.append(t)
            k += t.size
            if k < count:
                break  # the episode goes on after ``until``
            i, k = i + 1, 0
        self._episode, self._k = i, k
        if not times:
            return np.zeros(0), np.zeros(0)
        t = np.concatenate(times)
        return t, np.full(t.size, float(self.size))


class CrossTrace(CrossTraffic):
    """Replays recorded cross-traffic arrivals: lines ``TIME_S BYTES [LINK]`` (``#``
    comments, commas allowed), times nondecreasing. With a LINK column a link replays only
    its own lines (``link``: its index, e.g. the worker's) and the lines without one; a
    link given no index replays every line. Nothing arrives after the last line (a recording
    of one run, not looped)."""

    def __init__(self, path: str | Path, link: int | None = None) -> None:
        rows = []
        for n, parts in _fields(path):
            try:
                if len(parts) not in (2, 3):
                    raise ValueError
                rows.append([float(x) for x in parts] + ([-1.0] if len(parts) == 2 else []))
            except ValueError:
                raise ValueError(
                    f"{path}:{n}: need 'TIME_S BYTES [LINK]', got {' '.join(parts)!r}"
                ) from None
        t, size, which = np.array(rows, dtype=np.float64).reshape(-1, 3).T
        if np.any(np.diff(t) < 0) or not np.all(np.isfinite(t)) or np.any(size <= 0):
            raise ValueError(f"{path}: times must not decrease and every size be > 0 bytes")
        mine = (which < 0) | (which == link) if link is not None else np.ones(t.size, bool)
        self.times, self.sizes = t[mine], size[mine]
        self._pos = 0

    def arrivals(self, until: float) -> tuple[np.ndarray, np.ndarray]:
        end = int(np.searchsorted(self.times, until, side="right"))
        t, s = self.times[self._pos : end], self.sizes[self._pos : end]
        self._pos = max(self._pos, end)
        return t, s


# The serializer counts time in whole picoseconds, held in float64 (exact integers up to
# 2**53 ps, 2.5 hours): arrival times are rounded to the nearest picosecond and service
# times too (exact at decimal rates: 852,800 ps for 1,066 bytes at 10 Gbit/s). Its sums are
# then exact, so a queue's departures are the same whether its packets came one at a time
# or in a batch (in seconds a running sum over a batch and one packet at a time round
# differently, and a one-ulp difference flips a tie with a cross-traffic packet:
# `tests/test_netem.py`), and ties are ties, as in ns-3's integer time.
_PS = 1e12


def to_ps(t):
    """Seconds as whole picoseconds (float64), the serializer's clock."""
    return np.rint(np.asarray(t, dtype=np.float64) * _PS)


def _service_ps(size, rate, count=None):
    """Service times, in picoseconds, of packets of ``size`` bytes at ``rate`` bit/s. A
    packet that stands for ``count`` packets of ``size / count`` bytes each (timing only's
    representative, `ina.sim.nodes.SwitchNode`) takes ``count`` of their service times, as
    they would back to back: the same sum to the bit."""
    if count is None:
        return np.rint(size * 8 / rate * _PS)
    return count * np.rint(size / count * 8 / rate * _PS)


# The last plain-wire admission (`LinkEmulator.admit_batch`): its input arrays, the wire's
# parameters and state, its result and the state after. The arrays are held, so ``is`` means
# the very same arrays (callers never write to arrays they handed over, or to results).
_last_plain: list[tuple | None] = [None]


class LinkEmulator:
    """One direction of one link: loss, a FIFO queue served at ``rate_bps`` (or the share of
    it that ``capacity`` leaves), then delay; FIFO delivery by default.

    Args:
        delay: the propagation delay model (default: none).
        rate_bps: link rate in bit/s; None: infinitely fast (no serialization queue).
        loss: probability that a packet is dropped, in [0, 1).
        reorder: allow a packet to overtake an earlier one when its delay is shorter.
        seed: seed of the loss stream (delay models carry their own streams).
        buffer_bytes: the queue's size (packets waiting plus the one being sent); a packet
            that does not fit is dropped (tail drop). None: unbounded.
        capacity: cross traffic over time (`CapacityModel`); None: the whole rate.
        cross: cross traffic's packets in the same FIFO (`CrossTraffic`); None: none.
    """

    def __init__(
        self,
        delay: DelayModel | None = None,
        rate_bps: float | None = None,
        loss: float = 0.0,
        reorder: bool = False,
        seed: int | np.random.SeedSequence = 0,
        buffer_bytes: float | None = None,
        capacity: CapacityModel | None = None,
        cross: CrossTraffic | None = None,
    ) -> None:
        if rate_bps is not None and not rate_bps > 0:
            raise ValueError(f"rate_bps must be > 0 or None, got {rate_bps}")
        if not 0 <= loss < 1:
            raise ValueError(f"loss must be in [0, 1), got {loss}")
        if buffer_bytes is not None and not buffer_bytes > 0:
            raise ValueError(f"buffer_bytes must be > 0 or None, got {buffer_bytes}")
        if rate_bps is None and not (buffer_bytes is None and capacity is None and cross is None):
            raise ValueError("a buffer, a capacity model or cross traffic needs a link rate")
        # Hyperparameters.
        self.delay = delay if delay is not None else ConstantDelay(0.0)
        self.rate_bps = rate_bps
        self.loss = loss
        self.reorder = reorder
        self.buffer_bytes = buffer_bytes
        self.capacity = capacity
        self.cross = cross
        # Internal state.
        self._uniform = _Draws(np.random.default_rng(seed), "uniform")
        self._free_ps = -math.inf  # when the serializer finishes the last admitted packet
        self._last_release = -math.inf
        self._q_dep = np.zeros(0)  # departures (ps) and sizes of packets maybe still queued
        self._q_size = np.zeros(0)
        # Stats.
        self.packets = 0
        self.dropped = 0  # lost (random loss) or tail-dropped
        self.overflows = 0  # tail drops of a full buffer
        self.bytes = 0  # bytes of the packets not dropped
        self.cross_packets = 0  # cross traffic's packets that arrived (`CrossTraffic`)
        self.cross_dropped = 0  # ... and were tail-dropped

    @property
    def released_until(self) -> float:
        """No packet admitted from now on is released before this time: a FIFO link's last
        release (-inf for a link that may reorder). A simulator's channel clock."""
        return -math.inf if self.reorder else self._last_release

    @property
    def lossless(self) -> bool:
        """No packet is ever dropped (no random loss, no finite buffer)."""
        return self.loss == 0 and self.buffer_bytes is None

    def admit(self, now: float, nbytes: int) -> float | None:
        """Release time of one packet admitted at ``now``, or None if it is dropped."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        release = float(self.admit_batch(np.array([now]), nbytes)[0])
        return None if release != release else release

    def _fixed_delay(self) -> float | None:
        """The delay, if it is the same for every packet (a plain wire), else None."""
        d = self.delay
        offset = 0.0
        if isinstance(d, OffsetDelay):
            d, offset = d.inner, d.offset_s
        return d.delay_s + offset if isinstance(d, ConstantDelay) else None

    def admit_batch(
        self, times: np.ndarray, nbytes: np.ndarray | int, count: np.ndarray | None = None
    ) -> np.ndarray:
        """Release times of packets admitted at nondecreasing ``times``; NaN where dropped.
        ``count``: how many back-to-back packets each one stands for (its ``nbytes`` is
        theirs together; default one). The arrays handed in must not change afterwards,
        and the result is read-only: it may be another call's."""
        times = np.asarray(times, dtype=np.float64)
        fixed = self._fixed_delay()
        if (
            fixed is not None
            and self.buffer_bytes is None
            and self.capacity is None
            and self.cross is None
            and times.ndim == 1
            and times.size
            and isinstance(nbytes, np.ndarray)
            and nbytes.shape == times.shape
        ):
            # A plain wire, the simulator's common case: no delay draws, no queue accounting,
            # and FIFO by construction (a constant delay after a FIFO serializer). The same
            # arithmetic as below, without its per-call overhead.
            if self.loss == 0:
                return self._admit_plain(times, nbytes, fixed, count, memo=True)
            if times.size > 1 and (times[1:] < times[:-1]).any():
                raise ValueError("admit_batch needs 1-D nondecreasing times and sizes >= 0")
            # one loss draw per packet, in order, as below; the kept ones go through the wire
            kept = self._uniform.take(times.size) >= self.loss
            if kept.all():
                return self._admit_plain(times, nbytes, fixed, count, memo=False)
            release = np.full(times.size, np.nan)
            lost = times.size - int(np.count_nonzero(kept))
            self.packets += lost
            self.dropped += lost
            if lost < times.size:
                per = None if count is None else np.asarray(count)[kept]
                release[kept] = self._admit_plain(times[kept], nbytes[kept], fixed, per, memo=False)
            return release
        sizes = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), times.shape)
        if times.ndim != 1 or np.any(np.diff(times) < 0) or np.any(sizes < 0):
            raise ValueError("admit_batch needs 1-D nondecreasing times and sizes >= 0")
        release = np.full(len(times), np.nan)
        if len(times) == 0:
            return release
        # Every packet consumes one loss draw and one delay, dropped or not, so the n-th packet
        # gets the same numbers whatever the loss rate and whatever the batching.
        kept = self._uniform.take(len(times)) >= self.loss if self.loss > 0 else slice(None)
        delay = self.delay.delays(times)[kept]
        t, size = times[kept], sizes[kept]
        per = None if count is None else np.asarray(count, dtype=np.float64)[kept]
        self.packets += len(times)
        self.dropped += len(times) - len(t)
        if len(t) == 0:
            return release
        departure = (
            self._serialize(t, size, per) if self.cross is None else self._among_cross(t, size, per)
        )
        queued = ~np.isnan(departure)  # not tail-dropped
        self.overflows += int((~queued).sum())
        self.dropped += int((~queued).sum())
        self.bytes += int(size[queued].sum())
        out = departure + delay
        if not self.reorder:
            ok = out[queued]
            ok = np.maximum.accumulate(np.maximum(ok, self._last_release))
            if ok.size:
                self._last_release = float(ok[-1])
            out[queued] = ok
        idx = np.flatnonzero(kept) if isinstance(kept, np.ndarray) else np.arange(len(times))
        release[idx] = out
        return release

    def _admit_plain(
        self, times: np.ndarray, nbytes: np.ndarray, fixed: float, count, memo: bool
    ) -> np.ndarray:
        """`admit_batch` on a plain wire, every packet kept. ``memo``: a lossless wire may
        answer the same arrays with the last result (a multicast into identical downlinks);
        one that draws losses never does, as it must draw for every packet."""
        state = (self.rate_bps, fixed, self.reorder, self._free_ps, self._last_release)
        last = _last_plain[0] if memo else None
        if (
            last is not None
            and last[0] is times
            and last[1] is nbytes
            and last[2] == state
            and last[7] is count
        ):
            # the same arrays into a wire of the same rate, delay and state (a switch's
            # multicast into identical downlinks): the same result, computed once
            _, _, _, release, nsum, self._free_ps, self._last_release, _ = last
            self.packets += times.size
            self.bytes += nsum
            return release
        if times.size > 1 and (times[1:] < times[:-1]).any():
            raise ValueError("admit_batch needs 1-D nondecreasing times and sizes >= 0")
        nsum = int(nbytes.sum())
        self.packets += times.size
        self.bytes += nsum
        if self.rate_bps is None:
            departure = times
        else:
            done = self._serialize_fast(to_ps(times), nbytes, self.rate_bps, count)
            self._free_ps = float(done[-1])
            departure = done / _PS
        release = departure + fixed
        if not self.reorder:
            release = np.maximum(release, self._last_release)
            self._last_release = float(release[-1])
        if memo:
            _last_plain[0] = (
                times, nbytes, state, release, nsum, self._free_ps, self._last_release, count
            )  # fmt: skip
        return release

    def _among_cross(self, t: np.ndarray, size: np.ndarray, count=None) -> np.ndarray:
        """`_serialize` with the cross traffic that arrived up to our last packet merged in,
        in time order (cross traffic first on a tie): our packets' departures."""
        ct, cs = self.cross.arrivals(float(t[-1]))
        if not ct.size:
            return self._serialize(t, size, count)
        order = np.argsort(np.concatenate([ct, t]), kind="stable")
        ours = order >= ct.size
        if count is not None:
            count = np.concatenate([np.ones(ct.size), count])[order]
        departure = self._serialize(
            np.concatenate([ct, t])[order], np.concatenate([cs, size])[order], count
        )
        self.cross_packets += ct.size
        self.cross_dropped += int(np.isnan(departure[~ours]).sum())
        return departure[ours]

    def _serialize(self, t: np.ndarray, size: np.ndarray, count=None) -> np.ndarray:
        """Departure times through the queue, in seconds (NaN: tail-dropped)."""
        if self.rate_bps is None:
            return t
        t_ps = to_ps(t)
        share = 1.0
        if self.capacity is not None:
            share = self.capacity.constant_over(float(t[0]), float(t[-1]) + self._busy_span(t))
        if share is not None:
            done = self._serialize_fast(t_ps, size, self.rate_bps * share, count)
            if self.buffer_bytes is None or not self._overflows(t_ps, size, done):
                self._remember(float(t_ps[-1]), done, size)
                return done / _PS
        return self._serialize_loop(t_ps, size, count) / _PS

    def _busy_span(self, t: np.ndarray) -> float:
        """How far past the last arrival the queue may still be busy (for the capacity
        check): at least what is queued already."""
        return max(self._free_ps / _PS - float(t[-1]), 0.0) + 1e-3

    def _serialize_fast(
        self, t: np.ndarray, size: np.ndarray, rate: float, count=None
    ) -> np.ndarray:
        """``d_k = max(t_k, d_{k-1}) + s_k`` at a constant rate, vectorized: it unrolls to
        ``d_k = S_k + max(free_at, max_{j<=k} (t_j - S_{j-1}))`` with ``S`` the running sum of
        service times ``s = 8 * size / rate``: a running maximum instead of a Python loop.
        Times in picoseconds (`to_ps`), whole numbers: this is exactly the loop's arithmetic."""
        service = _service_ps(size, rate, count)
        done = np.cumsum(service)
        start = np.maximum(np.maximum.accumulate(t - (done - service)), self._free_ps)
        return done + start

    def _overflows(self, t: np.ndarray, size: np.ndarray, departure: np.ndarray) -> bool:
        """Whether any packet finds the buffer too full for it (vectorized check). A packet
        that arrives in the very picosecond another's transmission ends finds it still
        there (`_serialize_loop`)."""
        cum = np.concatenate([[0.0], np.cumsum(size)])
        i = np.arange(t.size)
        first = np.minimum(np.searchsorted(departure, t, side="left"), i)
        backlog = cum[i] - cum[first]  # this batch's packets still queued at t_i
        if self._q_dep.size:
            qcum = np.concatenate([[0.0], np.cumsum(self._q_size)])
            backlog += qcum[-1] - qcum[np.searchsorted(self._q_dep, t, side="left")]
        return bool(np.any(backlog + size > self.buffer_bytes))

    def _remember(self, last_arrival: float, departure: np.ndarray, size: np.ndarray) -> None:
        self._free_ps = float(departure[-1])
        if self.buffer_bytes is None:
            return
        dep = np.concatenate([self._q_dep, departure])
        sz = np.concatenate([self._q_size, size])
        keep = dep >= last_arrival  # a later packet arrives no earlier: the rest has left
        self._q_dep, self._q_size = dep[keep], sz[keep]

    def _serialize_loop(self, t: np.ndarray, size: np.ndarray, count=None) -> np.ndarray:
        """One packet at a time: a buffer that overflows, or a rate that changes (times in
        picoseconds)."""
        rate = self.rate_bps
        share = (
            self.capacity.share(t / _PS) if self.capacity is not None else np.ones(t.size)
        ).tolist()
        q_dep, q_size = self._q_dep.tolist(), self._q_size.tolist()
        head = 0
        backlog = sum(q_size)
        limit = math.inf if self.buffer_bytes is None else self.buffer_bytes
        free = self._free_ps
        out = np.full(t.size, np.nan)
        copies = [1.0] * t.size if count is None else count.tolist()
        for k, (tk, sk, n) in enumerate(zip(t.tolist(), size.tolist(), copies, strict=True)):
            # a transmission ending in the very picosecond of an arrival still holds its
            # place: the arrival comes first, as in ns-3, where it was scheduled (one link
            # delay before) ahead of the end of the transmission (one service time before)
            while head < len(q_dep) and q_dep[head] < tk:
                backlog -= q_size[head]
                head += 1
            if backlog + sk > limit:
                continue  # tail drop
            start = max(tk, free)
            if self.capacity is not None and start > tk:
                share[k] = float(self.capacity.share(np.array([start / _PS]))[0])
            free = start + float(_service_ps(sk, rate * share[k], None if count is None else n))
            out[k] = free
            q_dep.append(free)
            q_size.append(sk)
            backlog += sk
        self._free_ps = free
        self._q_dep = np.array(q_dep[head:])
        self._q_size = np.array(q_size[head:])
        return out


def _trace_profile(seed: np.random.SeedSequence, path: str = "") -> DelayModel:
    if not path:
        raise ValueError("the trace profile needs a file: 'trace:PATH'")
    return TraceDelay(path)


def _timeline_profile(seed: np.random.SeedSequence, path: str = "") -> DelayModel:
    if not path:
        raise ValueError("the timeline profile needs a file: 'timeline:PATH'")
    return TimelineDelay(path)


# Profile name -> factory(seed, **params) of the delay model. ``trace:PATH`` passes PATH.
PROFILES: dict[str, Callable[..., DelayModel]] = {
    "none": lambda seed: ConstantDelay(0.0),
    "constant": lambda seed, **p: ConstantDelay(**{"delay_s": 1e-3, **p}),
    "low": LowVariationDelay,
    "high": HighVariationDelay,
    "trace": _trace_profile,
    "timeline": _timeline_profile,
}


def check_profile(profile: str) -> None:
    """ValueError, in one line, if ``profile`` would not make a delay model (an unknown name
    or parameter, a trace file that cannot be read): for a command to refuse up front."""
    name, params = parse_profile(profile)
    try:
        PROFILES[name](np.random.SeedSequence(0), **params)
    except TypeError as e:
        raise ValueError(f"link profile {profile!r}: {e}") from None


def parse_profile(profile: str) -> tuple[str, dict]:
    """``NAME[:PARAM=VALUE...]`` -> (name, parameters); ``trace:PATH`` -> ("trace", {path}).

    Parameters are the keyword arguments of the profile's delay model, as floats:
    ``high:episode_on_s=5:episode_off_s=5`` gives five-second episodes. They are checked by
    `make_link` (an unknown name is a ValueError there).
    """
    name, _, rest = profile.partition(":")
    if name not in PROFILES:
        raise ValueError(f"unknown link profile {profile!r}; known: {sorted(PROFILES)}")
    if name in ("trace", "timeline"):
        return name, ({"path": rest} if rest else {})  # a path may itself contain ':' or '='
    params = {}
    for item in (i for i in rest.split(":") if i):
        key, eq, value = item.partition("=")
        try:
            if not eq or not key:
                raise ValueError
            params[key] = float(value)
        except ValueError:
            raise ValueError(
                f"bad link profile parameter {item!r} in {profile!r}: use NAME=NUMBER"
            ) from None
    return name, params


def make_link(
    profile: str = "none",
    seed: int = 0,
    *,
    rate_bps: float | None = None,
    loss: float = 0.0,
    reorder: bool = False,
    buffer_bytes: float | None = None,
    capacity: CapacityModel | None = None,
    cross: CrossTraffic | None = None,
    **delay_params: float,
) -> LinkEmulator:
    """A link with the named delay profile (``none``, ``constant``, ``low``, ``high``,
    ``trace:PATH``, each optionally with parameters as in `parse_profile`); ``delay_params``
    override the profile's delay defaults and the parameters in ``profile``.

    Give each link its own seed: the delay and loss streams are derived from it.
    """
    name, spec_params = parse_profile(profile)
    factory = PROFILES[name]
    delay_seed, loss_seed = np.random.SeedSequence(seed).spawn(2)
    params = {**spec_params, **delay_params}
    try:
        delay = factory(delay_seed, **params)
    except TypeError as e:  # a parameter this profile does not have
        raise ValueError(f"link profile {name!r}: {e}") from None
    return LinkEmulator(delay, rate_bps, loss, reorder, loss_seed, buffer_bytes, capacity, cross)


def congested_fraction(profile: str, workers: int) -> tuple[float, bool]:
    """(fraction of time some link is in an episode, whether episodes are shared)."""
    name, params = parse_profile(profile)
    if name != "high":
        raise ValueError(f"the bound needs a profile with congestion episodes (high), not {name!r}")
    defaults = inspect.signature(HighVariationDelay).parameters
    on = params.get("episode_on_s", defaults["episode_on_s"].default)
    off = params.get("episode_off_s", defaults["episode_off_s"].default)
    shared = params.get("episode_seed", -1) >= 0
    p_on = on / (on + off)
    return (p_on if shared else 1 - (1 - p_on) ** (2 * workers)), shared
