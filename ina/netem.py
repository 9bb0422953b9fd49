"""Link emulation in our own code: delay, bandwidth and loss per link (this kernel has no
``tc netem``).

The worker transport asks a `LinkEmulator` when each packet may be delivered::

    link = make_link("high", seed=7, rate_bps=1e9, loss=0.001)
    release = link.admit(now, nbytes)   # absolute time in the caller's clock, or None: dropped

A packet goes through three stages, in this order:

1. **Loss**: dropped with probability ``loss``, independently (at enqueue, like netem, so a
   dropped packet takes no link time).
2. **Serialization queue**: with ``rate_bps`` set, the link sends one packet at a time:
   ``departure = max(now, link_free_at) + nbytes * 8 / rate_bps``. Queueing delay therefore
   grows with the offered load: the signal DC2 reacts to.
3. **Propagation delay** from the link's `DelayModel` (constant, low or high variation, or a
   replayed trace): ``release = departure + delay``. Links are FIFO: unless built with
   ``reorder=True``, a packet never leaves before the one admitted ahead of it (``release`` is
   raised to the previous release), as on a real wire.

Everything random comes from numpy generators seeded from one ``seed`` (one independent stream
per purpose, so changing the loss rate does not change the delays a packet gets), and draws are
taken one per packet in admission order: the same seed and the same packets give the same
release times, whether admitted one at a time (`admit`) or in arrays (`admit_batch`).

Profiles (`make_link`): ``none`` (no delay), ``constant``, ``low`` (small Gaussian jitter),
``high`` (lognormal tail plus on/off congestion episodes) and ``trace:PATH``. A profile name may
carry its delay model's parameters: ``high:episode_on_s=5:episode_off_s=5``.
"""

from __future__ import annotations

import abc
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

    def take1(self) -> float:
        """The next draw (the per-packet path: no array allocation)."""
        if self._pos == len(self._buf):
            self._buf, self._pos = self._fill(_BLOCK), 0
        self._pos += 1
        return float(self._buf[self._pos - 1])


class DelayModel(abc.ABC):
    """Propagation delay of each packet, in seconds, given the packets' admission times."""

    @abc.abstractmethod
    def delays(self, times: np.ndarray) -> np.ndarray:
        """One delay per packet; ``times`` are nondecreasing admission times in seconds."""

    def delay1(self, now: float) -> float:
        """The delay of one packet admitted at ``now``; same stream as `delays`."""
        return float(self.delays(np.array([now]))[0])


class ConstantDelay(DelayModel):
    """Every packet waits ``delay_s``."""

    def __init__(self, delay_s: float = 0.0) -> None:
        if not delay_s >= 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        self.delay_s = delay_s

    def delays(self, times: np.ndarray) -> np.ndarray:
        return np.full(len(times), self.delay_s)

    def delay1(self, now: float) -> float:
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

    def delay1(self, now: float) -> float:
        return max(self.base_s + self.jitter_s * self._normal.take1(), 0.0)


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

    def delay1(self, now: float) -> float:
        tail = self.median_s * math.exp(self.sigma * self._normal.take1())
        self._schedule(now, now)
        on = any(start <= now < end for start, end in self._episodes)
        return self.base_s + tail + self.episode_delay_s * on

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
        lines = (line.partition("#")[0].strip() for line in Path(path).read_text().splitlines())
        values = np.array([float(line) for line in lines if line])
        if len(values) == 0 or not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError(f"{path}: a delay trace needs one finite delay >= 0 (ms) per line")
        self.delays_s = values / 1000
        self._list = self.delays_s.tolist()  # the per-packet path indexes a list: cheaper
        self._pos = 0

    def delays(self, times: np.ndarray) -> np.ndarray:
        idx = (self._pos + np.arange(len(times))) % len(self.delays_s)
        self._pos = (self._pos + len(times)) % len(self.delays_s)
        return self.delays_s[idx]

    def delay1(self, now: float) -> float:
        value = self._list[self._pos]
        self._pos = (self._pos + 1) % len(self._list)
        return value


class LinkEmulator:
    """One direction of one link: loss, serialization at ``rate_bps``, delay; FIFO by default.

    Args:
        delay: the propagation delay model (default: none).
        rate_bps: link rate in bit/s; None: infinitely fast (no serialization queue).
        loss: probability that a packet is dropped, in [0, 1).
        reorder: allow a packet to overtake an earlier one when its delay is shorter.
        seed: seed of the loss stream (delay models carry their own streams).
    """

    def __init__(
        self,
        delay: DelayModel | None = None,
        rate_bps: float | None = None,
        loss: float = 0.0,
        reorder: bool = False,
        seed: int | np.random.SeedSequence = 0,
    ) -> None:
        if rate_bps is not None and not rate_bps > 0:
            raise ValueError(f"rate_bps must be > 0 or None, got {rate_bps}")
        if not 0 <= loss < 1:
            raise ValueError(f"loss must be in [0, 1), got {loss}")
        # Hyperparameters.
        self.delay = delay if delay is not None else ConstantDelay(0.0)
        self.rate_bps = rate_bps
        self.loss = loss
        self.reorder = reorder
        # Internal state.
        self._uniform = _Draws(np.random.default_rng(seed), "uniform")
        self._free_at = -math.inf  # when the serializer finishes the last admitted packet
        self._last_release = -math.inf
        # Stats.
        self.packets = 0
        self.dropped = 0
        self.bytes = 0  # bytes of the packets not dropped

    def admit(self, now: float, nbytes: int) -> float | None:
        """Release time of one packet admitted at ``now``, or None if it is dropped.

        The per-packet path: scalar Python, the same arithmetic and draws as `admit_batch`.
        """
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        self.packets += 1
        dropped = self.loss > 0 and self._uniform.take1() < self.loss
        delay = self.delay.delay1(now)  # drawn even when dropped: see admit_batch
        if dropped:
            self.dropped += 1
            return None
        self.bytes += nbytes
        departure = now
        if self.rate_bps is not None:
            departure = max(now, self._free_at) + nbytes * 8 / self.rate_bps
            self._free_at = departure
        release = departure + delay
        if not self.reorder:
            release = max(release, self._last_release)
            self._last_release = release
        return release

    def admit_batch(self, times: np.ndarray, nbytes: np.ndarray | int) -> np.ndarray:
        """Release times of packets admitted at nondecreasing ``times``; NaN where dropped."""
        times = np.asarray(times, dtype=np.float64)
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
        self.packets += len(times)
        self.dropped += len(times) - len(t)
        self.bytes += int(size.sum())
        if len(t) == 0:
            return release
        departure = self._serialize(t, size)
        out = departure + delay
        if not self.reorder:
            out = np.maximum.accumulate(np.maximum(out, self._last_release))
            self._last_release = float(out[-1])
        release[kept] = out
        return release

    def _serialize(self, t: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Departure times through the serialization queue, vectorized.

        ``d_k = max(t_k, d_{k-1}) + s_k`` unrolls to
        ``d_k = S_k + max(free_at, max_{j<=k} (t_j - S_{j-1}))`` with ``S`` the running sum of
        service times ``s = 8 * size / rate``: a running maximum instead of a Python loop.
        """
        if self.rate_bps is None:
            return t
        service = size * 8 / self.rate_bps
        done = np.cumsum(service)
        start = np.maximum(np.maximum.accumulate(t - (done - service)), self._free_at)
        departure = done + start
        self._free_at = float(departure[-1])
        return departure


def _trace_profile(seed: np.random.SeedSequence, path: str = "") -> DelayModel:
    if not path:
        raise ValueError("the trace profile needs a file: 'trace:PATH'")
    return TraceDelay(path)


# Profile name -> factory(seed, **params) of the delay model. ``trace:PATH`` passes PATH.
PROFILES: dict[str, Callable[..., DelayModel]] = {
    "none": lambda seed: ConstantDelay(0.0),
    "constant": lambda seed, **p: ConstantDelay(**{"delay_s": 1e-3, **p}),
    "low": LowVariationDelay,
    "high": HighVariationDelay,
    "trace": _trace_profile,
}


def parse_profile(profile: str) -> tuple[str, dict]:
    """``NAME[:PARAM=VALUE...]`` -> (name, parameters); ``trace:PATH`` -> ("trace", {path}).

    Parameters are the keyword arguments of the profile's delay model, as floats:
    ``high:episode_on_s=5:episode_off_s=5`` gives five-second episodes. They are checked by
    `make_link` (an unknown name is a ValueError there).
    """
    name, _, rest = profile.partition(":")
    if name not in PROFILES:
        raise ValueError(f"unknown link profile {profile!r}; known: {sorted(PROFILES)}")
    if name == "trace":
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
    return LinkEmulator(delay, rate_bps, loss, reorder, loss_seed)
