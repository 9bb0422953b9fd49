"""The simulator's discrete-event kernel, behind one small interface.

An `Engine` has a virtual clock (``now``, seconds), runs callbacks at the times they were
scheduled for (``at``), in time order, ties in the order they were scheduled, and nothing
else: the network, switch and worker models (`ina.sim.nodes`) are plain objects that
schedule their own events. Everything the models do is deterministic given their seeds, and
so is the order of events, so a run is reproducible bit for bit.

Two kernels implement it:

- `HeapEngine`: a binary heap of ``(time, sequence number, callback)``, our own, ~40 lines.
- `SimPyEngine`: SimPy (the standard Python discrete-event library), its environment and
  timeout events with callbacks.

Both run the same events in the same order, so results are identical (a test holds it).
The models batch a window of packets per event (see `ina.sim.nodes`), so a simulated second
costs few events and both run equally fast (docs/simulation.md, `ina bench sim`): SimPy, the
field's established kernel, is the default; the heap stays as the measured alternative.
"""

from __future__ import annotations

import abc
import heapq
import itertools
import math
from collections.abc import Callable


class Engine(abc.ABC):
    """A virtual clock and an ordered list of things to do."""

    @property
    @abc.abstractmethod
    def now(self) -> float:
        """The current simulated time, seconds."""

    @abc.abstractmethod
    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Call ``fn()`` at simulated time ``t`` (>= now)."""

    @abc.abstractmethod
    def run(self, until: float = math.inf) -> None:
        """Run events until none is left, `stop` is called, or the next is after ``until``."""

    @abc.abstractmethod
    def stop(self) -> None:
        """End `run` after the event in progress."""

    events = 0  # events run so far (a statistic)


class HeapEngine(Engine):
    """Our own kernel: a heap of (time, sequence number, callback)."""

    def __init__(self) -> None:
        self._now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._stopped = False
        self.events = 0

    @property
    def now(self) -> float:
        return self._now

    def at(self, t: float, fn: Callable[[], None]) -> None:
        if t < self._now:
            raise ValueError(f"cannot schedule at {t} before now ({self._now})")
        heapq.heappush(self._heap, (t, next(self._seq), fn))

    def run(self, until: float = math.inf) -> None:
        self._stopped = False
        heap = self._heap
        pop = heapq.heappop
        while heap and not self._stopped:
            if heap[0][0] > until:
                self._now = until
                return
            t, _, fn = pop(heap)
            self._now = t
            self.events += 1
            fn()

    def stop(self) -> None:
        self._stopped = True


class SimPyEngine(Engine):
    """SimPy's environment: each `at` is a timeout event with the callback attached."""

    def __init__(self) -> None:
        import simpy
        from simpy.core import StopSimulation

        self._env = simpy.Environment()
        self._stop_exc = StopSimulation
        self._stopped = False
        self._now = 0.0
        self.events = 0

    @property
    def now(self) -> float:
        # the time the event was scheduled for, exactly: SimPy's own clock is now + delay,
        # which rounding can move off the requested time by an ulp
        return self._now

    def at(self, t: float, fn: Callable[[], None]) -> None:
        delay = t - self._now
        if delay < 0:
            raise ValueError(f"cannot schedule at {t} before now ({self._now})")

        def fire(_event) -> None:
            self._now = t
            self.events += 1
            fn()
            if self._stopped:
                raise self._stop_exc(None)  # SimPy's own way out of Environment.run

        self._env.timeout(delay).callbacks.append(fire)

    def run(self, until: float = math.inf) -> None:
        self._stopped = False
        if until == math.inf:
            self._env.run()
        elif until > self._now:
            self._env.run(until=until)
            self._now = max(self._now, until)

    def stop(self) -> None:
        self._stopped = True


ENGINES: dict[str, Callable[[], Engine]] = {"heap": HeapEngine, "simpy": SimPyEngine}


def make_engine(name: str = "simpy") -> Engine:
    if name not in ENGINES:
        raise ValueError(f"unknown simulation engine {name!r}; known: {sorted(ENGINES)}")
    return ENGINES[name]()
