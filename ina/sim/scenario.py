"""Named network scenarios for the simulator: small JSON files shipped with the package.

A scenario is everything about a simulated run that is not the training job: the workers'
links (rate, propagation delay, delay profile, loss, buffer, cross traffic), the switch, the
transport's timers, the workers' compute time per model (a stated profile, not this host's
time) and the codec's throughput. ``ina train --sim --scenario NAME|PATH`` trains on one;
``ina experiment dc2 --sim`` runs the DC2 matrix over a list of them. The shipped files are
in ``ina/sim/scenarios/`` (`names`); any other file is given by its path.

A file (every key but ``description`` and ``source`` optional; units as on the command
line, `ina.units`)::

    {
      "description": "what it stands for, in one line",
      "source": "where its numbers come from",
      "workers": 4,
      "link": {"rate": "10G", "prop_delay": "5us", "profile": "none", "loss": 0,
               "buffer": "none", "capacity": "episodes:share=0.02:on_s=0.2:off_s=0.2:fixed=1"},
      "up": {...}, "down": {...},          # per direction, over "link"
      "switch": {"rate": "none", "latency": "1us"},
      "transport": {"rto": "50ms", "min_rto": "20ms"},
      "compute": {"cnn1d": "fixed:1ms", "char_lstm": "fixed:3ms", "default": "fixed:1ms"},
      "codec": "30GB/s",
      "generator": {...}                   # a generated file's record (`ina.sim.generate`)
    }

``profile`` is an `ina.netem` delay profile (``none``, ``constant:delay_s=..``, ``low``,
``high:..``, ``trace:FILE``, ``timeline:FILE``); ``capacity`` is ``episodes:..`` or
``trace:FILE`` as for ``--capacity``, or ``constant:share=S`` (cross traffic taking ``1 - S``
of the rate throughout). A relative FILE is next to the scenario file. Anything that does not
parse, a key that is not known, a model without a compute profile: a `ValueError` whose one
line names the file and the problem.

**States, for the oracle bound** (`Scenario.states`): a scenario whose path changes over time
(capacity episodes, a capacity/delay timeline, the ``high`` profile's delay episodes) is a
mix of steady states; each `State` is the scenario held in one of them, with the fraction of
time the scenario spends there. A steady scenario has one state.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ina import units
from ina.sim.network import LinkSpec, NetworkSpec, SwitchSpec, capacity_model, parse_link
from ina.workload.compute import parse_codec, parse_compute

SCENARIO_DIR = Path(__file__).with_name("scenarios")

_TOP = {"description", "source", "workers", "link", "up", "down", "switch", "transport",
        "compute", "codec", "generator"}  # fmt: skip
_LINK = {"rate", "prop_delay", "profile", "loss", "buffer", "capacity"}
_SWITCH = {"rate", "latency"}
_TRANSPORT = {"rto", "min_rto"}
_LINK_DEFAULTS = {"rate": "100G", "prop_delay": "1us", "profile": "none", "loss": 0.0,
                  "buffer": "none", "capacity": None}  # fmt: skip
# A share held "for ever": the first quiet period lasts a nanosecond, the episode 30 years.
_FOREVER = ":on_s=1e9:off_s=1e-9:fixed=1"


def names() -> list[str]:
    """The shipped scenarios, by name."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.json"))


def constant_capacity(share: float) -> str:
    """The capacity model of cross traffic that leaves ``share`` of the rate throughout."""
    return f"episodes:share={share!r}{_FOREVER}"


@dataclass(frozen=True)
class State:
    """One steady state of a scenario: the scenario held in it, and its share of the time."""

    name: str
    scenario: Scenario
    fraction: float


@dataclass(frozen=True)
class Scenario:
    """A loaded scenario (see the module docstring); `network` makes its `NetworkSpec`."""

    name: str
    description: str
    source: str
    up: LinkSpec
    down: LinkSpec
    switch: SwitchSpec = field(default_factory=SwitchSpec)
    workers: int = 4
    rto_s: float = 0.05
    min_rto_s: float = 0.02
    compute: tuple[tuple[str, str], ...] = (("default", "measured"),)
    codec: str = "measured"
    path: str = ""

    def network(
        self,
        workers: int | None = None,
        lanes: int = 256,
        pool: int = 128,
        seed: int = 0,
        engine: str = "simpy",
    ) -> NetworkSpec:
        """The simulated network of this scenario for a job of ``workers`` (default: the
        scenario's), ``lanes`` per packet and a pool of ``pool`` slots."""
        return NetworkSpec(
            workers=workers or self.workers, up=self.up, down=self.down, switch=self.switch,
            lanes=lanes, pool_size=pool, seed=seed, engine=engine, rto_s=self.rto_s,
            min_rto_s=self.min_rto_s,
        )  # fmt: skip

    def compute_for(self, model: str) -> str:
        """The compute profile (``--compute`` text) of a worker training ``model``."""
        table = dict(self.compute)
        if model in table:
            return table[model]
        if "default" in table:
            return table["default"]
        raise ValueError(
            f"scenario {self.name}: no compute profile for model {model!r} (and no 'default')"
        )

    def models(
        self,
        model: str,
        workers: int | None = None,
        lanes: int = 256,
        pool: int = 128,
        seed: int = 0,
        compute: str | None = None,
        codec: str | None = None,
    ) -> tuple[NetworkSpec, str, str]:
        """(network, compute profile, codec profile) of a job training ``model`` here;
        ``compute``/``codec`` replace the scenario's profiles when given."""
        spec = self.network(workers, lanes, pool, seed)
        return spec, compute or self.compute_for(model), codec or self.codec

    def with_links(self, **changes) -> Scenario:
        """The same scenario with both directions' links changed alike."""
        return replace(self, up=replace(self.up, **changes), down=replace(self.down, **changes))

    # -- the oracle's states ---------------------------------------------------------------

    def states(self) -> list[State]:
        """The steady states this scenario mixes, each held throughout, with their fractions
        of time (one state, fraction 1, for a steady scenario)."""
        up = self.up
        if self.down.capacity != up.capacity or self.down.profile != up.profile:
            raise ValueError(f"scenario {self.name}: states need the same path up and down")
        cap = up.capacity or ""
        profile = up.profile
        if cap.startswith("episodes:"):
            model = capacity_model(cap, seed=0)
            if model.off_s <= 1e-6:  # constant cross traffic: one state
                return [State("steady", self, 1.0)]
            f = model.on_s / (model.on_s + model.off_s)
            return [
                State("quiet", self.with_links(capacity=None), 1 - f),
                State("congested", self.with_links(capacity=constant_capacity(model.share_on)), f),
            ]
        if cap.startswith("trace:") or profile.startswith("timeline:"):
            return self._timeline_states()
        if profile.startswith("high") and not _high_is_steady(profile):
            from ina.netem import congested_fraction

            f, _shared = congested_fraction(profile, self.workers)
            return [
                State("quiet", self.with_links(profile=profile + ":episode_delay_s=0"), 1 - f),
                State("congested", self.with_links(profile=profile + _HIGH_ALWAYS_ON), f),
            ]
        return [State("steady", self, 1.0)]

    def _timeline_states(self) -> list[State]:
        """The distinct (share, delay) pairs of a capacity trace and/or a delay timeline."""
        from ina.netem import CapacityTrace, TimelineDelay

        cap, profile = self.up.capacity or "", self.up.profile
        shares = CapacityTrace(cap.partition(":")[2]) if cap.startswith("trace:") else None
        delays = (
            TimelineDelay(profile.partition(":")[2]) if profile.startswith("timeline:") else None
        )
        period = (shares or delays).period
        if shares is not None and delays is not None and shares.period != delays.period:
            raise ValueError(f"scenario {self.name}: capacity and delay traces differ in period")
        edges = np.unique(
            np.concatenate(
                [m.times for m in (shares, delays) if m is not None] + [np.array([period])]
            )
        )
        starts, spans = edges[:-1], np.diff(edges)
        share = shares.share(starts) if shares is not None else np.ones(starts.size)
        delay = delays.delays(starts) if delays is not None else np.zeros(starts.size)
        out = []
        for s, d in sorted({(float(a), float(b)) for a, b in zip(share, delay, strict=True)},
                           key=lambda sd: (-sd[0], sd[1])):  # fmt: skip
            time = float(spans[(share == s) & (delay == d)].sum())
            held = {"capacity": None if s >= 1 else constant_capacity(s)}
            if delays is not None:
                held["profile"] = f"constant:delay_s={d!r}"
            name = f"share {s:g}" + (f", +{1e3 * d:g} ms" if delays is not None else "")
            out.append(State(name, self.with_links(**held), time / period))
        return out


_HIGH_ALWAYS_ON = ":episode_off_s=1e-9:episode_on_s=1e9"


def _high_is_steady(profile: str) -> bool:
    """A ``high`` profile held in one state: no episode delay, or an episode held for ever."""
    from ina.netem import parse_profile

    _, params = parse_profile(profile)
    return params.get("episode_delay_s", 1.0) == 0 or params.get("episode_off_s", 1.0) <= 1e-6


# The synthetic capacity/delay trace shipped as traces/wan.txt (`synthetic_timeline`): the
# congested states (share of the rate left, extra delay in ms) and the lognormal durations.
WAN_STATES = ((0.1, 1.0), (0.02, 4.0))
WAN_MEDIAN_QUIET_S, WAN_MEDIAN_CONGESTED_S, WAN_SIGMA = 0.4, 0.25, 0.5


def synthetic_timeline(seed: int = 15, period_s: float = 8.0) -> str:
    """A capacity/delay timeline (``TIME_S SHARE DELAY_MS`` lines, `ina.netem.read_timeline`):
    quiet periods (share 1, no extra delay) alternate with congestion drawn from
    `WAN_STATES`, each period lognormal around its median, cut at ``period_s`` (the loop).
    Deterministic from ``seed``; traces/wan.txt is ``synthetic_timeline(15)``."""
    rng = np.random.default_rng(seed)
    lines = [f"# synthetic_timeline(seed={seed}, period_s={period_s:g}): TIME_S SHARE DELAY_MS"]
    t, quiet = 0.0, True
    while t < period_s:
        if quiet:
            share, delay_ms, median = 1.0, 0.0, WAN_MEDIAN_QUIET_S
        else:
            share, delay_ms = WAN_STATES[int(rng.integers(len(WAN_STATES)))]
            median = WAN_MEDIAN_CONGESTED_S
        lines.append(f"{t:.3f} {share:g} {delay_ms:g}")
        t = round(t + float(median * rng.lognormal(0.0, WAN_SIGMA)), 3)
        quiet = not quiet
    lines.append(f"{period_s:.3f} 1 0")
    return "\n".join(lines) + "\n"


# -- loading ---------------------------------------------------------------------------------


def _fail(where: str, why: str) -> ValueError:
    return ValueError(f"scenario {where}: {why}")


def _section(data: Mapping, key: str, allowed: set[str], where: str) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise _fail(where, f"'{key}' must be an object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise _fail(where, f"unknown key(s) in '{key}': {', '.join(unknown)}")
    return value


def _resolve_file(text: str, base: Path) -> str:
    """``NAME:FILE`` with FILE made absolute against ``base`` (the scenario's directory)."""
    kind, sep, rest = text.partition(":")
    if kind in ("trace", "timeline") and sep and rest and not Path(rest).is_absolute():
        return f"{kind}:{base / rest}"
    return text


def _link(values: dict, base: Path, where: str) -> LinkSpec:
    v = {**_LINK_DEFAULTS, **values}
    capacity = v["capacity"]
    if isinstance(capacity, str) and capacity.startswith("constant:"):
        key, _, share = capacity.partition(":")[2].partition("=")
        try:
            if key != "share":
                raise ValueError
            capacity = constant_capacity(float(share))
        except ValueError:
            raise _fail(where, f"capacity {capacity!r}: use constant:share=S") from None
    if capacity is not None:
        capacity = _resolve_file(str(capacity), base)
    try:
        loss = float(v["loss"])
    except (TypeError, ValueError):
        raise _fail(where, f"loss {v['loss']!r} is not a number") from None
    return parse_link(
        rate=None if v["rate"] is None else str(v["rate"]),
        delay=str(v["prop_delay"]),
        profile=_resolve_file(str(v["profile"]), base),
        loss=loss,
        buffer=None if v["buffer"] is None else str(v["buffer"]),
        capacity=capacity,
    )


def parse_scenario(data: object, name: str, base: Path, where: str | None = None) -> Scenario:
    """A `Scenario` from a file's decoded JSON (``base``: the directory of its files)."""
    where = where or name
    if not isinstance(data, dict):
        raise _fail(where, "the file must hold one JSON object")
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise _fail(where, f"unknown key(s): {', '.join(unknown)}")
    for key in ("description", "source"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise _fail(where, f"'{key}' is required (a line of text)")
    if not isinstance(data.get("generator", {}), dict):
        raise _fail(where, "'generator' must be an object (what ina sim scenarios generate drew)")
    link = _section(data, "link", _LINK, where)
    up = _section(data, "up", _LINK, where)
    down = _section(data, "down", _LINK, where)
    switch = _section(data, "switch", _SWITCH, where)
    transport = _section(data, "transport", _TRANSPORT, where)
    compute = data.get("compute", {"default": "measured"})
    if not isinstance(compute, dict) or not compute:
        raise _fail(where, "'compute' must map model names (or 'default') to a profile")
    workers = data.get("workers", 4)
    if not isinstance(workers, int) or isinstance(workers, bool):
        raise _fail(where, f"'workers' must be a whole number, got {workers!r}")
    try:
        for text in compute.values():
            parse_compute(str(text))
        codec = str(data.get("codec", "measured"))
        parse_codec(codec)
        switch_rate = switch.get("rate", "none")
        scenario = Scenario(
            name=name,
            description=data["description"].strip(),
            source=data["source"].strip(),
            up=_link({**link, **up}, base, where),
            down=_link({**link, **down}, base, where),
            switch=SwitchSpec(
                None if switch_rate in (None, "none", "inf") else units.rate(switch_rate),
                units.seconds(switch.get("latency", "1us"), "switch latency"),
            ),
            workers=workers,
            rto_s=units.seconds(transport.get("rto", "50ms"), "rto"),
            min_rto_s=units.seconds(transport.get("min_rto", "20ms"), "min rto"),
            compute=tuple((str(k), str(v)) for k, v in compute.items()),
            codec=codec,
            path=str(where),
        )
        scenario.network()  # the transport's and the network's own checks
        scenario.states()  # traces that do not line up
    except (ValueError, OSError) as e:
        raise _fail(where, str(e).replace("\n", " ")) from None
    return scenario


def load_scenario(name_or_path: str) -> Scenario:
    """A shipped scenario by name (`names`) or any scenario file by its path."""
    text = str(name_or_path)
    if text.endswith(".json") or "/" in text or Path(text).is_file():
        path = Path(text)
        if not path.is_file():
            raise ValueError(f"scenario {text}: no such file")
        name = path.stem
    else:
        path = SCENARIO_DIR / f"{text}.json"
        if not path.is_file():
            raise ValueError(f"unknown scenario {text!r}; known: {', '.join(names())}")
        name = text
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise _fail(str(path), f"not valid JSON: {e.msg} at line {e.lineno}") from None
    return parse_scenario(data, name, path.parent, str(path))
