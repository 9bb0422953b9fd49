"""The flow-level mode (`ina sim allreduce --flow`): an allreduce as a fluid on the links.

Where single packets do not matter (bulk transfers on lossless links with deterministic
delays), an INA allreduce is one *coflow*. A slot completes only when every contributor's
packet is in, so the job moves at one rate on every hop of its tree: each worker's link
both ways, each switch's uplink both ways, each switch's pipeline (which takes one packet
per contributor for each packet the job moves). That rate is the least any hop leaves it:

- a link's rate, times the share a ``capacity`` episode leaves, less the rate of a ``cross``
  episode (open-loop packets in the same FIFO take their rate first; what is left is ours);
- a switch pipeline's rate over its contributors (``--switch-rate``; none: line rate);
- the window: a pool of frames per round trip.

A round of P packets whose last worker is ready at ``t0`` ends at ``t0 + R + D``: ``R`` is
one packet's round trip on the longest path (each hop's serialization and delay, each
switch's latency on the way up and down, a slot's contributors through a finite
pipeline) and ``D`` drains the other P - 1 frames at the job's rate, stepping from one
change of some hop's capacity to the next. A call is the dense allreduce's rounds (MAX of
the scales, then SUM), after the run's join on the first call (two round trips: the join's
multicast answer names one worker, the others ask again). Stragglers start each call at the
slowest worker's end of compute, as in the packet engine, where every slot waits for it.

It runs no transport and no pipeline: times only, for any number of workers, in
milliseconds of wall time. `ina bench flow` compares it with the packet engine on bulk
transfers; docs/simulation.md says where and why they differ. What it cannot model is
refused in one line (`check`): loss, random delay profiles, finite buffers, cross traffic
from a trace, compression, several jobs, a failing worker.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ina import units
from ina.netem import (
    CapacityEpisodes,
    CapacityModel,
    CapacityTrace,
    CrossEpisodes,
    parse_profile,
)
from ina.protocol import FRAME_OVERHEAD, HEADER_DTYPE, packet_bytes
from ina.sim.network import (
    DETERMINISTIC,
    LinkSpec,
    NetworkSpec,
    capacity_model,
    cross_model,
    tree_links,
    typical_delay,
)
from ina.sim.options import describe
from ina.sim.stragglers import Stragglers


def _next_change(model: CapacityModel, t: float) -> float:
    """The first time after ``t`` at which ``model``'s share may change."""
    if isinstance(model, CapacityEpisodes):
        starts, ends = model.episodes_until(t)  # (the schedule now reaches past t)
        later = [e[k] for e in (starts, ends) if (k := np.searchsorted(e, t, "right")) < e.size]
        return float(min(later)) if later else math.inf
    if isinstance(model, CapacityTrace):
        base = math.floor(t / model.period) * model.period
        k = int(np.searchsorted(model.times, t - base, "right"))
        # (t - base rounds: a line's time may come out at t itself; the next one then)
        while True:
            if k == model.times.size:
                base, k = base + model.period, 0
            nxt = base + float(model.times[k])
            if nxt > t:
                return nxt
            k += 1
    return math.inf  # (a model of no known shape holds its share: no such model ships)


def _on(episodes: CapacityEpisodes, t: float) -> bool:
    """Whether an episode of the schedule is on at ``t`` (cross traffic's: its share is 1)."""
    starts, ends = episodes.episodes_until(t)
    i = int(np.searchsorted(starts, t, side="right")) - 1
    return i >= 0 and t < float(ends[i])


@dataclass
class Hop:
    """One direction of one link, or one switch's pipeline, as the job's fluid sees it."""

    name: str
    rate_bps: float | None  # None: unlimited
    delay_s: float  # propagation and the profile's delay, or the switch's latency
    packets_per_packet: int = 1  # a pipeline takes each contributor's packet
    capacity: CapacityModel | None = None
    cross: CrossEpisodes | None = None

    def rate(self, t: float) -> float:
        """Bit/s left to the job at time ``t`` (inf: unlimited)."""
        if self.rate_bps is None:
            return math.inf
        r = self.rate_bps
        if self.capacity is not None:
            r *= float(self.capacity.share(np.array([t]))[0])
        if self.cross is not None and _on(self.cross.episodes, t):
            r -= self.cross.rate_bps
        return max(r, 0.0) / self.packets_per_packet

    def next_change(self, t: float) -> float:
        nxt = math.inf
        for model in (self.capacity, self.cross.episodes if self.cross else None):
            if model is not None:
                nxt = min(nxt, _next_change(model, t))
        return nxt

    def first_packet(self, frame_bits: float) -> float:
        """One frame's time through the hop when idle: its delay and serialization."""
        if self.rate_bps is None:
            return self.delay_s
        return self.delay_s + frame_bits * self.packets_per_packet / self.rate_bps


def check(spec: NetworkSpec, density: float = 1.0, fail=None) -> None:
    """What the flow-level mode cannot model, as a one-line ValueError."""
    if spec.jobs != 1:
        raise ValueError("--flow runs one job: drop --jobs, or drop --flow")
    if spec.backend != "fast":
        raise ValueError(f"--flow runs no packets, on no backend: drop --backend {spec.backend}")
    if density != 1.0:
        raise ValueError("--flow models the dense allreduce: drop --density, or drop --flow")
    if fail is not None:
        raise ValueError("--flow has no worker to fail: drop --fail, or drop --flow")
    links = [(spec.up, spec.down)]
    if spec.topology is not None:
        links = [(up, down) for _, _, up, down in tree_links(spec, spec.topology)]
    for link in (x for pair in links for x in pair):
        if link.loss:
            raise ValueError("--flow has no packets to lose: drop the loss, or drop --flow")
        if parse_profile(link.profile)[0] not in DETERMINISTIC:
            raise ValueError(
                f"--flow needs deterministic delays (profile none or constant), not "
                f"{link.profile!r}: drop --flow to simulate packets"
            )
        if link.buffer_bytes is not None:
            raise ValueError("--flow has no queues to fill: drop --buffer, or drop --flow")
        if link.cross is not None and not link.cross.startswith("episodes"):
            raise ValueError(
                "--flow takes cross traffic as episodes (a rate while on), not a trace: "
                "drop --flow to replay packets"
            )


def _hop(name: str, link: LinkSpec, seed: int) -> Hop:
    return Hop(
        name,
        link.rate_bps,
        link.prop_delay_s + typical_delay(link.profile),
        capacity=capacity_model(link.capacity, seed) if link.capacity else None,
        cross=cross_model(link.cross, seed) if link.cross else None,  # type: ignore[arg-type]
    )


def _paths(spec: NetworkSpec) -> tuple[list[Hop], list[list[Hop]]]:
    """Every hop the job's fluid crosses, and each worker's round trip as a list of hops
    (up to the top switch and back down)."""
    sw = spec.switch
    if spec.topology is None:
        up, down = _hop("uplinks", spec.up, spec.seed), _hop("downlinks", spec.down, spec.seed)
        pipe = Hop("switch", sw.rate_bps, sw.latency_s, spec.workers)
        return [up, pipe, down], [[up, pipe, down]]
    fabric = spec.topology
    ups, downs = {}, {}
    for lower, upper, up, down in tree_links(spec, fabric):
        ups[lower] = _hop(f"{lower}-{upper} up", up, spec.seed)
        downs[lower] = _hop(f"{upper}-{lower} down", down, spec.seed)
    # a pipeline takes each contributor's packet on the way up (the rate it leaves the job)
    # and its parent's result on the way down (one packet: latency only)
    pipes = {
        s: Hop(f"switch {s}", sw.rate_bps, sw.latency_s, len(fabric.contributors(s)))
        for s in fabric.switches
    }
    results = {s: Hop(f"switch {s} results", sw.rate_bps, sw.latency_s) for s in fabric.switches}
    paths = []
    for host in fabric.workers:
        node, above, way_up, way_down = host, fabric.host_switch[host][0], [], []
        while above is not None:
            way_up += [ups[node], pipes[above]]
            way_down = [results[above], downs[node], *way_down]
            node, above = above, fabric.switches[above].parent
        paths.append(way_up + way_down[1:])  # the top switch once
    hops = list(ups.values()) + list(downs.values()) + list(pipes.values())
    return hops, paths


def _round_bits(values: int, lanes: int) -> tuple[float, float]:
    """A round of ``values`` int32 lanes: its first frame's bits and all its frames' bits
    (full packets, then the rest)."""
    full, rest = divmod(values, lanes)
    frame = (packet_bytes(lanes) + FRAME_OVERHEAD) * 8
    last = (packet_bytes(rest) + FRAME_OVERHEAD) * 8 if rest else 0
    return (frame if full else last), float(full * frame + last)


class Fluid:
    """The job's coflow on its hops: round trips and rates."""

    def __init__(self, spec: NetworkSpec) -> None:
        self.spec = spec
        hops, paths = _paths(spec)
        # a thousand worker links are mostly alike: the least rate of the hops that never
        # change once, and only the hops with episodes at each step of a drain
        self.varying = [h for h in hops if h.capacity is not None or h.cross is not None]
        steady = [(h.rate(0.0), h.name) for h in hops if h.capacity is None and h.cross is None]
        self.steady = min(steady, default=(math.inf, ""), key=lambda rn: rn[0])
        # (paths alike in what an idle packet's time depends on, once)
        alike = {tuple((h.rate_bps, h.delay_s, h.packets_per_packet) for h in p): p for p in paths}
        self.paths = list(alike.values())
        self.frame_bits = (packet_bytes(spec.lanes) + FRAME_OVERHEAD) * 8
        self._round_trips: dict[float, float] = {}

    def round_trip(self, frame_bits: float) -> float:
        """One packet's round trip on the longest path, idle."""
        if frame_bits not in self._round_trips:
            self._round_trips[frame_bits] = max(
                sum(h.first_packet(frame_bits) for h in path) for path in self.paths
            )
        return self._round_trips[frame_bits]

    def rate(self, t: float, window_bps: float) -> tuple[float, str]:
        """The job's rate at ``t`` and the hop that sets it."""
        best, name = (window_bps, "the window") if window_bps <= self.steady[0] else self.steady
        for h in self.varying:
            r = h.rate(t)
            if r < best:
                best, name = r, h.name
        return best, name

    def drain(self, t: float, bits: float, window_bps: float) -> tuple[float, dict]:
        """When ``bits`` have crossed every hop, starting at ``t``; and the seconds each
        bottleneck set the pace."""
        paced: dict[str, float] = {}
        while bits > 0:
            nxt = min((h.next_change(t) for h in self.varying), default=math.inf)
            # the rates hold from t to nxt: read them inside, where no rounding of a
            # change's time (a trace's, looped) can put t on the wrong side of it
            r, name = self.rate(t if math.isinf(nxt) else t + (nxt - t) / 2, window_bps)
            if r <= 0:  # cross traffic takes the whole hop until its episode ends
                if not math.isfinite(nxt):
                    raise RuntimeError(f"{name} carries nothing, forever")  # (episodes end)
                paced[name] = paced.get(name, 0.0) + nxt - t
                t = nxt
                continue
            done = t + bits / r
            end = min(done, nxt)
            paced[name] = paced.get(name, 0.0) + end - t
            bits -= (end - t) * r
            t = end
            if end == done:
                break
        return t, paced

    def round(self, t0: float, values: int) -> tuple[float, dict]:
        """The end of a round of ``values`` lanes whose last worker is ready at ``t0``."""
        first, total = _round_bits(values, self.spec.lanes)
        window = self.spec.pool_size * self.frame_bits / self.round_trip(self.frame_bits)
        end, paced = self.drain(t0, total - first, window)
        return end + self.round_trip(first), paced


def run(
    spec: NetworkSpec,
    size: int,
    iters: int,
    compute_s: float = 0.0,
    stragglers: Stragglers | None = None,
    seed: int = 0,
) -> dict:
    """``iters`` dense allreduce calls of ``size`` float32 values per worker, as a fluid."""
    check(spec)
    wall0 = time.perf_counter()
    fluid = Fluid(spec)
    factors = (stragglers or Stragglers()).factor_matrix(spec.workers, iters, seed)
    lanes = spec.lanes
    join_bits = (HEADER_DTYPE.itemsize + FRAME_OVERHEAD) * 8
    calls, steps, paced_all = [], [], {}
    end = 0.0
    for i in range(iters):
        ready = end + compute_s * factors[i]
        t = float(ready.max())
        if i == 0:
            t += 2 * fluid.round_trip(join_bits)
        for values in (2 + -(-size // lanes), size):  # MAX of the scales, then SUM
            t, paced = fluid.round(t, values)
            for k, v in paced.items():
                paced_all[k] = paced_all.get(k, 0.0) + v
        calls.append(t - float(ready.min()))
        steps.append(t - end)
        end = t
    wall = time.perf_counter() - wall0
    return {
        "model": describe(spec) + "; flow level",
        "size": size,
        "iters": iters,
        "flow": True,
        "timing_only": False,
        "density": 1.0,
        "call_seconds": calls,
        "step_seconds": steps,
        "compute_s": compute_s,
        "stragglers": (stragglers or Stragglers()).text,
        "round_trip_s": fluid.round_trip(fluid.frame_bits),
        # which hop set the job's pace, for how long (simulated seconds of draining)
        "paced_by": dict(sorted(paced_all.items(), key=lambda kv: -kv[1])),
        "sim_seconds": end,
        "wall_seconds": wall,
    }


def print_result(r: dict) -> None:
    print(f"model: {r['model']}")
    print(
        f"{r['size']:,} float32 values per worker, {units.plural(r['iters'], 'call')}, "
        "dense, as a fluid (no packets, no sums)"
    )
    for i, s in enumerate(r["call_seconds"]):
        with_compute = (
            f" (step with compute: {units.format_seconds(r['step_seconds'][i])})"
            if r["compute_s"]
            else ""
        )
        print(f"  call {i}: {units.format_seconds(s):>12} simulated{with_compute}")
    total = sum(r["paced_by"].values()) or 1.0
    print(
        "paced by: "
        + ", ".join(f"{k} {v / total:.0%}" for k, v in list(r["paced_by"].items())[:4])
        + f"; round trip {units.format_seconds(r['round_trip_s'])}"
    )
    print(
        f"simulator: {r['sim_seconds'] * 1e3:.3f} ms simulated in {r['wall_seconds']:.3f} s "
        "of wall time"
    )
