"""Round-trip delay monitor of one worker: the input of every DC2 control law.

The worker transport reports, for each completed chunk, the time from the chunk's first send to
its result. A retransmitted chunk's sample is ambiguous (which copy did the result answer?), so
it is ignored (Karn's rule). The transport filters those already; the ``retransmitted`` flag
here is a second line of defence. Invalid samples (not finite, not positive) are counted and
dropped, never fatal. From the accepted samples the monitor keeps:

* ``base_rtt``: the minimum over a sliding window of ``base_window_s`` seconds, kept as one
  minimum per ``base_bucket_s`` bucket (LEDBAT's base delay history, RFC 6817), so memory and
  cost do not grow with the sample rate. It stands for the delay of an empty network. It slides
  so that it follows a change of path or of link profile instead of holding a stale minimum for
  ever; it is long (60 s: many congestion episodes, many training steps) so that it does not
  absorb an episode's queueing delay. The price: a queue that never drains for a whole window
  becomes part of the base (LEDBAT's latecomer problem).
* ``srtt`` and ``rttvar``: the RFC 6298 estimators (EWMA gains 1/8 and 1/4). The laws steer on
  ``srtt - base_rtt``, the queueing delay; smoothing makes one late chunk move it by only
  ``srtt_gain`` times the spike.
* ``p50``, ``p95`` and ``trend`` over a short window (the last ``stats_window_samples`` samples
  at most ``stats_window_s`` old; the newest always counts): the spread of recent samples and
  their least-squares slope d(rtt)/dt, for laws that anticipate and for the decision log.
* Over the samples of the last round (those accepted since sample number ``since`` given to
  `snapshot`; the controller passes the count at its last decision, so a round is one
  training step; its newest ``round_window_samples``, 4096 by default, longer than the short
  window, since a large model's step has thousands of chunks): ``round_min``, ``round_p95``
  and ``round_stream``. Within a round the
  worker sends its chunks back to back. Their spread ``round_p95 - round_min`` is the queue
  they build while in flight, but the transport's window holds that queue near its own
  target, so on a slow path the bytes cost time, not queue: the results then stream in one
  bottleneck service time apart for as long as the step has bytes to move.
  ``round_stream``, the sum of the gaps between consecutive arrivals that are shorter than
  ``round_min`` (no result can follow another closer than its service time, and a new
  round's first result comes at least ``round_min`` after it left), is that time: the part
  of the step the job's own bytes take. A shift of the whole path's delay (a longer route,
  another flow's standing queue) moves every sample and the minimum with them and changes
  neither (issue 15; docs/dc2.md, `OwnQueueLaw`).

Samples come one at a time or as numpy arrays (one ``now`` for all, or one per sample); the
estimators give the same values either way (batching is cheaper: one call per step, not per
chunk). Time is whatever clock the caller uses, in seconds, and should not go back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# exp(-230) ~ 1e-100: EWMA chunks are cut so that gain powers stay far from float64 underflow.
_EWMA_LOG_RANGE = 230.0
_EWMA_MAX_CHUNK = 1024


@dataclass(frozen=True)
class DelayStats:
    """What the monitor knows at one instant; all delays in seconds, NaN before any sample."""

    time: float  # newest sample time (or the snapshot's ``now``)
    samples: int  # accepted samples since the start
    retransmitted: int  # samples ignored by Karn's rule
    rejected: int  # invalid samples (NaN, inf, <= 0)
    window_samples: int  # samples in the short window (p50, p95, trend)
    latest: float  # newest accepted sample
    base_rtt: float  # min over the base window
    srtt: float  # RFC 6298 smoothed RTT
    rttvar: float  # RFC 6298 mean deviation
    p50: float  # median over the short window
    p95: float  # 95th percentile over the short window
    trend: float  # d(rtt)/dt over the short window, seconds per second; 0 if undefined
    round_samples: int = 0  # samples since ``snapshot(since=...)`` (at most the ring's size)
    round_min: float = math.nan  # their minimum: the path's delay in this round
    round_p95: float = math.nan  # their 95th percentile: the path's delay + the job's queue
    round_stream: float = math.nan  # the time their results streamed in back to back

    @property
    def ready(self) -> bool:
        """True once at least one sample was accepted."""
        return self.samples > 0

    @property
    def queueing_delay(self) -> float:
        """``srtt - base_rtt`` (>= 0): the delay the network adds over its empty state."""
        return max(0.0, self.srtt - self.base_rtt) if self.ready else math.nan


def ewma(x: np.ndarray, start: float, gain: float) -> np.ndarray:
    """Successive values of ``s = (1 - gain) * s + gain * x_k`` from ``s = start``, vectorized.

    Closed form per chunk: ``s_k = keep^k * (start + gain * sum_{j<=k} x_j / keep^j)``; chunks
    are short enough that ``keep^k`` stays representable and the sum keeps full precision.
    """
    keep = 1.0 - gain
    chunk = int(min(_EWMA_MAX_CHUNK, max(1.0, _EWMA_LOG_RANGE / -math.log(keep))))
    out = np.empty(len(x))
    for lo in range(0, len(x), chunk):
        part = x[lo : lo + chunk]
        powers = keep ** np.arange(1, len(part) + 1)
        out[lo : lo + len(part)] = powers * (start + gain * np.cumsum(part / powers))
        start = out[lo + len(part) - 1]
    return out


class DelayMonitor:
    """Sliding-window RTT statistics of one worker (see the module docstring).

    Args:
        base_window_s: length of the window whose minimum is ``base_rtt``.
        base_bucket_s: granularity of that window (one stored minimum per bucket).
        stats_window_s: age limit of the short window (``p50``, ``p95``, ``trend``).
        stats_window_samples: count limit of the short window.
        round_window_samples: count limit of a round (its newest samples); a round of a
            large model's step is far longer than the short window, and its statistics need
            all of it.
        srtt_gain: EWMA gain of ``srtt`` (RFC 6298 alpha).
        rttvar_gain: EWMA gain of ``rttvar`` (RFC 6298 beta).

    Example::

        mon = DelayMonitor()
        mon.add(np.array([0.0021, 0.0020]), now=np.array([1.000, 1.001]))
        stats = mon.snapshot()  # DelayStats(base_rtt=0.002, ...)
    """

    def __init__(
        self,
        base_window_s: float = 60.0,
        base_bucket_s: float = 1.0,
        stats_window_s: float = 1.0,
        stats_window_samples: int = 256,
        round_window_samples: int = 4096,
        srtt_gain: float = 1 / 8,
        rttvar_gain: float = 1 / 4,
    ) -> None:
        if not 0 < base_bucket_s <= base_window_s:
            raise ValueError("need 0 < base_bucket_s <= base_window_s")
        if not (stats_window_s > 0 and stats_window_samples >= 1):
            raise ValueError("the short window needs stats_window_s > 0, stats_window_samples >= 1")
        if round_window_samples < 1:
            raise ValueError("round_window_samples must be >= 1")
        if not (0 < srtt_gain < 1 and 0 < rttvar_gain < 1):
            raise ValueError("EWMA gains must be in (0, 1)")
        # Hyperparameters.
        self.base_window_s = base_window_s
        self.base_bucket_s = base_bucket_s
        self.stats_window_s = stats_window_s
        self.stats_window_samples = stats_window_samples
        self.round_window_samples = round_window_samples
        self.srtt_gain = srtt_gain
        self.rttvar_gain = rttvar_gain
        # Internal state: bucket index -> min RTT; a ring buffer of (time, rtt) for the short
        # window and the round; the RFC 6298 estimators.
        self._buckets = math.ceil(base_window_s / base_bucket_s - 1e-9)
        self._base: dict[int, float] = {}
        self._ring = max(stats_window_samples, round_window_samples)
        self._times = np.zeros(self._ring)
        self._rtts = np.zeros(self._ring)
        self._srtt = math.nan
        self._rttvar = math.nan
        self._last_time = -math.inf
        # Stats.
        self.samples = 0
        self.retransmitted = 0
        self.rejected = 0

    def add(
        self,
        rtt: float | np.ndarray,
        now: float | np.ndarray,
        retransmitted: bool | np.ndarray = False,
    ) -> int:
        """Feed RTT samples (seconds) measured at ``now``; returns how many were accepted.

        ``now`` and ``retransmitted`` are scalars or arrays broadcastable to ``rtt``'s shape.
        """
        if np.ndim(rtt) == 0 and np.ndim(now) == 0 and np.ndim(retransmitted) == 0:
            return self._add1(float(rtt), float(now), bool(retransmitted))
        rtt = np.atleast_1d(np.asarray(rtt, dtype=np.float64)).ravel()
        now = np.broadcast_to(np.asarray(now, dtype=np.float64), rtt.shape)
        retx = np.broadcast_to(np.asarray(retransmitted, dtype=bool), rtt.shape)
        valid = np.isfinite(rtt) & (rtt > 0) & np.isfinite(now)
        take = valid & ~retx
        self.rejected += int(np.count_nonzero(~valid))
        self.retransmitted += int(np.count_nonzero(valid & retx))
        rtt, now = rtt[take], now[take]
        if len(rtt) == 0:
            return 0
        self._update_estimators(rtt)
        self._update_base(now, rtt)
        self._push(now, rtt)
        self._last_time = max(self._last_time, float(now.max()))
        return len(rtt)

    def _add1(self, rtt: float, now: float, retransmitted: bool) -> int:
        """`add` for one sample in scalar Python (the per-chunk path: no array overhead)."""
        if not (math.isfinite(rtt) and rtt > 0 and math.isfinite(now)):
            self.rejected += 1
            return 0
        if retransmitted:
            self.retransmitted += 1
            return 0
        if math.isnan(self._srtt):
            self._srtt, self._rttvar = rtt, rtt / 2
        else:
            gain = self.rttvar_gain
            self._rttvar = (1 - gain) * self._rttvar + gain * abs(self._srtt - rtt)
            self._srtt = (1 - self.srtt_gain) * self._srtt + self.srtt_gain * rtt
        bucket = math.floor(now / self.base_bucket_s)
        if bucket in self._base:
            self._base[bucket] = min(rtt, self._base[bucket])
        else:
            self._base[bucket] = rtt
            self._forget_old_buckets()
        slot = self.samples % self._ring
        self._times[slot], self._rtts[slot] = now, rtt
        self.samples += 1
        self._last_time = max(self._last_time, now)
        return 1

    def _update_estimators(self, rtt: np.ndarray) -> None:
        if math.isnan(self._srtt):  # RFC 6298 (2.2): first measurement
            self._srtt, self._rttvar = float(rtt[0]), float(rtt[0]) / 2
            rtt = rtt[1:]
            if len(rtt) == 0:
                return
        srtt = ewma(rtt, self._srtt, self.srtt_gain)
        # RFC 6298 (2.3): rttvar uses the srtt from *before* each sample.
        previous = np.concatenate(([self._srtt], srtt[:-1]))
        rttvar = ewma(np.abs(previous - rtt), self._rttvar, self.rttvar_gain)
        self._srtt, self._rttvar = float(srtt[-1]), float(rttvar[-1])

    def _update_base(self, now: np.ndarray, rtt: np.ndarray) -> None:
        ids = np.floor(now / self.base_bucket_s).astype(np.int64)
        for bucket in np.unique(ids).tolist():  # usually one bucket per call
            low = float(rtt[ids == bucket].min())
            self._base[bucket] = min(low, self._base.get(bucket, math.inf))
        self._forget_old_buckets()

    def _forget_old_buckets(self) -> None:
        oldest = max(self._base) - self._buckets + 1
        for bucket in [b for b in self._base if b < oldest]:
            del self._base[bucket]

    def _push(self, now: np.ndarray, rtt: np.ndarray) -> None:
        cap = self._ring
        slots = (self.samples + np.arange(len(rtt))) % cap
        self._times[slots[-cap:]], self._rtts[slots[-cap:]] = now[-cap:], rtt[-cap:]
        self.samples += len(rtt)

    def _base_rtt(self, ref: float) -> float:
        oldest = math.floor(ref / self.base_bucket_s) - self._buckets + 1
        fresh = [low for bucket, low in self._base.items() if bucket >= oldest]
        # Nothing measured for a whole window: the newest bucket is still the best estimate.
        return min(fresh) if fresh else self._base[max(self._base)]

    def _short_window(self, ref: float) -> tuple[np.ndarray, np.ndarray]:
        """(times, rtts) of the short window, oldest first; the newest sample always counts."""
        k = min(self.samples, self.stats_window_samples)
        slots = (self.samples - k + np.arange(k)) % self._ring
        times, rtts = self._times[slots], self._rtts[slots]
        fresh = times >= ref - self.stats_window_s
        fresh[-1] = True
        return times[fresh], rtts[fresh]

    def snapshot(self, now: float | None = None, since: int | None = None) -> DelayStats:
        """Current statistics; windows are aged against ``now`` (default: newest sample).
        ``since``: the round is the samples accepted after the first ``since`` (the newest
        ``round_window_samples`` of them at most); None: no round statistics."""
        ref = self._last_time if now is None else max(now, self._last_time)
        if self.samples == 0:
            nan = math.nan
            return DelayStats(ref, 0, self.retransmitted, self.rejected, 0, *[nan] * 6, 0.0)
        times, rtts = self._short_window(ref)
        p50, p95 = _percentiles(np.sort(rtts), (0.50, 0.95))
        round_n, round_min, round_p95, stream = 0, math.nan, math.nan, math.nan
        if since is not None and self.samples > since:
            round_n = min(self.samples - max(since, 0), self._ring)
            slots = (self.samples - round_n + np.arange(round_n)) % self._ring
            ordered = np.sort(self._rtts[slots])
            round_min, round_p95 = float(ordered[0]), _percentiles(ordered, (0.95,))[0]
            gaps = np.diff(np.sort(self._times[slots]))
            stream = float(gaps[gaps < round_min].sum())
        return DelayStats(
            time=ref,
            samples=self.samples,
            retransmitted=self.retransmitted,
            rejected=self.rejected,
            window_samples=len(rtts),
            latest=float(rtts[-1]),
            base_rtt=self._base_rtt(ref),
            srtt=self._srtt,
            rttvar=self._rttvar,
            p50=p50,
            p95=p95,
            trend=_slope(times, rtts),
            round_samples=round_n,
            round_min=round_min,
            round_p95=round_p95,
            round_stream=stream,
        )


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of y over x; 0.0 when x has no spread (e.g. one shared timestamp)."""
    dx = x - x.mean()
    var = float(dx @ dx)
    return float(dx @ (y - y.mean())) / var if var > 0 else 0.0


def _percentiles(ordered: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """Linearly interpolated quantiles of sorted data, as ``np.percentile`` computes them
    (which costs ten times more for a few hundred values)."""
    values = []
    for q in qs:
        pos = q * (len(ordered) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(ordered) - 1)
        values.append(float(ordered[lo] + (pos - lo) * (ordered[hi] - ordered[lo])))
    return values
