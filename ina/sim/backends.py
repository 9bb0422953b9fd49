"""Which engine runs a simulated network: the fast engine (`ina.sim.network`) or ns-3
(`ina.sim.ns3net`, packet-level links, queues and TCP cross traffic).

Both wire the same `WorkerNode`s and `SwitchNode`s from one `NetworkSpec`; this module, above
both, picks one by ``spec.backend``, so neither engine imports the other.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from ina.sim.network import NetworkSpec, SimNetwork
from ina.sim.network import build as build_fast


def check(spec: NetworkSpec) -> None:
    """What the chosen backend cannot model, as a `ValueError` with one line (the fast engine
    models every spec that constructs)."""
    if spec.backend == "ns3":
        from ina.sim.ns3net import check as check_ns3  # imports no ns-3

        check_ns3(spec)


def build(
    spec: NetworkSpec,
    codec_time: Callable[[float], float] = lambda wall: 0.0,
    worker_key: Callable[[int], Hashable] = lambda w: None,
) -> SimNetwork:
    """The network of ``spec`` on its backend (`ina.sim.network.build` for the fast engine;
    ``worker_key``, what differs in a worker's program, matters to timing only, which ns-3
    does not run)."""
    if spec.backend == "ns3":
        from ina.sim import ns3net  # imports ns-3 only when asked for

        check(spec)
        return ns3net.build(spec, codec_time)
    return build_fast(spec, codec_time, worker_key)
