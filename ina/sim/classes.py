"""Equivalence classes of workers: one simulation for every group of workers that would
send and receive at the same times.

Two contributors of a switch (worker hosts, or child switches with their subtrees) are
*alike* when nothing that decides their timing differs: the link above each (its rate,
delay, buffer, cross traffic and capacity, both ways), what the worker runs (its compute
factor), and, for a switch, its own contributors' classes in order. A *class* is a run of
alike contributors adjacent in the switch's worker-id order (see `find` for why adjacent). A link whose behaviour draws on its own random stream (loss, a
random delay profile) is alike to no other, since each link has a stream of its own.

Alike contributors of one switch send the same packets at the same times, each on its own
link, so one of them (the *representative*) runs the real transport core and program and
the switch's processing queue counts each of its packets as many times as it has alike
contributors (`ina.sim.nodes.SwitchNode`'s weights). Every switch keeps one contributor per
class, recursively, and the simulation runs on that reduced tree: a tree whose workers are
all alike keeps one path (the representative worker of timing-only runs), one straggler or
one congested rack adds a class, and a tree whose workers all differ keeps every worker,
as the per-worker engine does. The classes are found from the topology, the options and
the links' random streams (`find`), never declared; a test compares their times with the
per-worker engine's to the nanosecond.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace

from ina.topology import Fabric


@dataclass(frozen=True)
class Classes:
    """The reduced tree and what each of its nodes stands for."""

    fabric: Fabric  # one contributor per class at every switch
    # switch -> its kept contributor -> how many alike contributors that one stands for
    weights: dict[str, dict[str, int]]
    # each kept worker host -> the worker hosts (of the full tree) it stands for
    members: dict[str, list[str]]

    @property
    def count(self) -> int:
        """Worker classes: workers simulated."""
        return len(self.fabric.workers)

    def switch_weights(self, switch: str) -> list[int]:
        """Weights of ``switch``'s contributors in their worker-id order (their position)."""
        return [self.weights[switch][c] for c in self.fabric.contributors(switch)]


def _runs(fabric: Fabric, switch: str, sig: dict[str, int]) -> list[list[str]]:
    """``switch``'s contributors in worker-id order, cut into runs of adjacent alike ones."""
    runs: list[list[str]] = []
    for c in fabric.contributors(switch):
        if runs and sig[runs[-1][0]] == sig[c]:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


def find(
    fabric: Fabric,
    link_key: Callable[[str], Hashable],
    worker_key: Callable[[str], Hashable] = lambda host: None,
) -> Classes:
    """The classes of ``fabric``'s contributors.

    ``link_key(node)`` describes the link above ``node`` (a worker host or a non-top switch)
    with everything that decides its timing; return something unique to the link for one
    that draws random numbers. ``worker_key(host)`` describes what differs in the program
    worker ``host`` runs (None: the same as every other).

    A class is a run of alike contributors that are adjacent in the switch's worker-id
    order. Packets that arrive at the same time are taken in that order, so a class whose
    members were split by another contributor would see two states of a slot at once (the
    members before a packet that completes it and those after); adjacent members see one,
    as their representative does."""
    interned: dict[Hashable, int] = {}
    sig: dict[str, int] = {}

    def signature(node: str) -> int:
        if node in fabric.hosts:
            key: Hashable = ("worker", link_key(node), worker_key(node))
        else:
            for c in fabric.contributors(node):
                signature(c)
            runs = tuple((sig[r[0]], len(r)) for r in _runs(fabric, node, sig))
            up = None if fabric.switches[node].parent is None else link_key(node)
            key = ("switch", up, runs)
        sig[node] = interned.setdefault(key, len(interned))
        return sig[node]

    signature(fabric.root)
    weights: dict[str, dict[str, int]] = {}
    stands_for: dict[str, list[str]] = {fabric.root: [fabric.root]}
    todo = [fabric.root]
    while todo:
        s = todo.pop()
        # every switch this one stands for has the same runs (it is alike)
        alike = [_runs(fabric, s2, sig) for s2 in stands_for[s]]
        weights[s] = {}
        for i, run in enumerate(alike[0]):
            rep = run[0]
            weights[s][rep] = len(run)
            stands_for[rep] = [c for runs in alike for c in runs[i]]
            if rep in fabric.switches:
                todo.append(rep)
    keep = set(stands_for)
    workers = [h for h in fabric.workers if h in keep]
    reduced = replace(
        fabric,
        hosts={h: v for h, v in fabric.hosts.items() if h in keep},
        switches={s: v for s, v in fabric.switches.items() if s in keep},
        links=[link for link in fabric.links if link.a in keep and link.b in keep],
        workers=workers,
        host_switch={h: fabric.host_switch[h] for h in workers},
    )
    return Classes(reduced, weights, {h: stands_for[h] for h in workers})
