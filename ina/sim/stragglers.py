"""Stragglers: how much longer each worker's compute takes, per step.

INA's slots (like a ring's steps) complete only when every worker has contributed, so one
slow worker sets the pace of all. A straggler model gives, for worker ``w`` at step ``s``, a
factor on its compute time (forward, backward and optimizer alike):

- ``none``: every factor is 1;
- ``slow:W=F[,W=F...]``: worker ``W`` always takes ``F`` times as long (``slow:3=1.5``);
- ``jitter:SIGMA``: every worker, every step, an independent lognormal factor
  ``exp(SIGMA * z - SIGMA^2 / 2)`` (mean 1), drawn from the run's seed;
- ``factors:F0,F1,...``: one fixed factor per worker, e.g. from per-worker traces (workers
  past the list run at 1);
- ``A+B``: the product of two models (``slow:0=2+jitter:0.05``).

In timing-only runs the workers of each distinct column of factors are a class, simulated
once (`ina.sim.step.straggler_classes`, `ina.sim.classes`). Where more differ than one
switch's job holds, one representative runs with the largest factor of the N at each step:
each slot completes at the slowest worker's packet, so that gives the step to within what the
others' earlier packets change at the switch. A test compares the classes with every worker
simulated; `tests/test_experiment_stragglers.py` bounds that difference at 8 workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Stragglers:
    """Per-worker compute factors (see the module docstring)."""

    slow: tuple[tuple[int, float], ...] = ()
    sigma: float = 0.0
    factors: tuple[float, ...] = ()
    text: str = "none"

    def factor_matrix(self, workers: int, steps: int, seed: int) -> np.ndarray:
        """``(steps, workers)`` factors; the same seed gives the same matrix."""
        f = np.ones((steps, workers))
        for w, x in self.slow:
            if w >= workers:
                raise ValueError(
                    f"--stragglers {self.text!r}: worker {w} of {workers} (0..{workers - 1})"
                )
            f[:, w] *= x
        if self.factors:
            k = min(len(self.factors), workers)
            f[:, :k] *= np.asarray(self.factors[:k])
        if self.sigma:
            rng = np.random.default_rng([seed, 0x57A6])
            z = rng.standard_normal((steps, workers))
            f *= np.exp(self.sigma * z - self.sigma**2 / 2)
        return f


def _number(text: str, what: str, spec: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise ValueError(f"--stragglers {spec!r}: {what} {text!r} is not a number") from None
    if not np.isfinite(x) or x <= 0:
        raise ValueError(f"--stragglers {spec!r}: {what} must be > 0, got {text}")
    return x


def parse_stragglers(text: str) -> Stragglers:
    """``none``, ``slow:W=F,...``, ``jitter:SIGMA``, ``factors:F,...`` or ``A+B``."""
    slow: list[tuple[int, float]] = []
    sigma, factors = 0.0, ()
    for part in (p.strip() for p in text.split("+")):
        name, _, rest = part.partition(":")
        if name == "none" and not rest:
            continue
        if name == "slow" and rest:
            for item in rest.split(","):
                w, eq, x = item.partition("=")
                if not eq or not w.strip().isdigit():
                    raise ValueError(f"--stragglers {text!r}: use slow:WORKER=FACTOR, got {item!r}")
                slow.append((int(w), _number(x, "a factor", text)))
        elif name == "jitter" and rest:
            sigma = _number(rest, "sigma", text)
        elif name == "factors" and rest:
            factors = tuple(_number(x, "a factor", text) for x in rest.split(","))
        else:
            raise ValueError(
                f"--stragglers {text!r}: use none, slow:W=F[,W=F], jitter:SIGMA, "
                "factors:F0,F1,... or A+B"
            )
    return Stragglers(tuple(slow), sigma, factors, text)
