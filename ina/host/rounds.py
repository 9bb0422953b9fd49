"""Multi-round reductions written once, driven by any clock.

An allreduce through the switch is a short conversation: a MAX round to agree on scales, a
SUM round of integers; or, compressed, an OR round for the union support, a SUM round of a
sketch and maybe a repair round. Each step of such an algorithm needs the switch's answer to
the previous one. To write that logic once for every way `ina` runs it (a blocking UDP
transport on the wall clock, N simulated workers interleaved in one process in virtual
time), algorithms are generators that *yield* the rounds they need and receive each round's
result::

    def mean_steps(x: np.ndarray) -> Steps[np.ndarray]:
        total = yield Round(encode(x), Op.SUM)      # suspended until the switch answered
        return decode(total.values) / N

A driver runs the generator: `run_blocking` with a blocking round function (the UDP
transport; or `plain(reduce)` around a ``reduce`` callable such as `LocalGroup`'s in tests); the simulator (`ina.sim`) starts each yielded round on
that worker's simulated transport and resumes the generator when the round completes in
simulated time. The algorithm never sees which.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

import numpy as np

from ina.protocol import Op

T = TypeVar("T")


class LaneSource(Protocol):
    """A round's int32 values without an array of them (timing only: `ina.host.repeated`):
    ``size`` values, handed to the transport a packet's worth at a time as it sends them."""

    size: int

    def rows(self, chunks: np.ndarray, lanes: int) -> np.ndarray:
        """Chunks ``chunks`` of ``lanes`` values each, int32, shape ``(k, lanes)``, zeros
        beyond ``size``."""
        ...


class Reduced(NamedTuple):
    """What the switch returns for one round: the combined lanes and the MAX-combined
    header fields. A tuple, so ``values, exp, level = yield Round(...)`` works."""

    values: np.ndarray | None  # int32, as many as were sent (None: a round not kept)
    exp: int
    level: int


@dataclass(frozen=True)
class Round:
    """One exact reduction of int32 lanes over all workers of the job.

    ``check``, if given, sees the leading values of the result as soon as they are known
    (the transport calls it when the first chunk's result arrives; a plain ``reduce`` after
    the round): it may raise to abort the call early, e.g. when workers disagree on a length
    (the rest of a round whose lengths differ would never complete).

    ``keep=False``: the transport drops the result's lanes as they arrive and the round's
    `Reduced` has no values (a timing-only round: its times, never its sums).
    """

    values: np.ndarray | LaneSource
    op: Op = Op.SUM
    exp: int = 0
    level: int = 0
    check: Callable[[np.ndarray], None] | None = None
    keep: bool = True


Steps = Generator[Round, Reduced, T]
"""A multi-round algorithm: yields `Round`, is sent `Reduced`, returns its result."""

Reduce = Callable[..., tuple[np.ndarray, int, int]]
"""``reduce(values, op, exp=0, level=0) -> (values, exp, level)``: a blocking exact round."""

RoundFn = Callable[[Round], Reduced]
"""A blocking round: `Round` in, `Reduced` out, ``check`` honoured (the UDP transport)."""


def plain(reduce: Reduce) -> RoundFn:
    """A `RoundFn` from a plain ``reduce`` callable: checks the returned length, and calls
    the round's ``check`` once the whole round is back."""

    def round_fn(rnd: Round) -> Reduced:
        values, exp, level = reduce(rnd.values, rnd.op, rnd.exp, rnd.level)
        values = np.asarray(values)
        if values.shape != np.shape(rnd.values):
            raise RuntimeError(
                f"{Op(rnd.op).name} round sent {np.size(rnd.values)} lanes "
                f"but got {values.shape} back"
            )
        values = values.astype(np.int32, copy=False)
        if rnd.check is not None:
            rnd.check(values)
        return Reduced(values, int(exp), int(level))

    return round_fn


def run_blocking(steps: Steps[T], round_fn: RoundFn) -> T:
    """Run ``steps`` to completion, answering each round with a blocking call."""
    try:
        rnd = next(steps)
        while True:
            rnd = steps.send(round_fn(rnd))
    except StopIteration as stop:
        return stop.value
