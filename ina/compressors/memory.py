"""Error feedback (GRACE's ``Memory``): what each method adds to a gradient before compressing.

``compensate(grad, key)`` returns the tensor to compress (the gradient plus whatever this
bucket carried over); ``update(key, compensated, sent)`` is told what the worker really
contributed (decoded from the integers it sent, with the agreed parameters), and keeps what it
needs for next time. State is per bucket key; a bucket whose shape changes is an error.

* ``none``: nothing carried over (unbiased quantizers: QSGD, TernGrad, natural, ...).
* ``residual``: error feedback (Seide et al. 2014, Stich et al. 2018, Karimireddy et al.
  2019): ``e = compensated - sent``, next ``beta * e + gamma * grad``. What was not sent is
  delayed, not lost.
* ``dgc``: DGC's momentum correction with momentum factor masking (Lin et al., ICLR'18): the
  momentum ``u = m u + g`` is accumulated locally, ``v = v + u`` is what gets sparsified, and
  both ``u`` and ``v`` are cleared where a value was sent.
* ``momentum``: signum's local momentum (Bernstein et al., ICML'18): ``m = beta m + (1 -
  beta) g`` is what gets compressed; nothing is fed back.
"""

from __future__ import annotations

import abc
from collections.abc import Hashable
from typing import ClassVar

import numpy as np

from ina.registry import registrar


class Memory(abc.ABC):
    """Per-bucket state between a gradient and what gets compressed."""

    name: ClassVar[str]

    def __init__(self) -> None:
        # internal state, per bucket key
        self._state: dict[Hashable, dict[str, np.ndarray]] = {}

    @abc.abstractmethod
    def compensate(self, grad: np.ndarray, key: Hashable = "") -> np.ndarray:
        """The tensor to compress for this bucket (a new array)."""

    def update(self, key: Hashable, compensated: np.ndarray, sent: np.ndarray) -> None:
        """Told what was compressed and what this worker contributed (default: nothing
        to keep)."""
        return None

    def reset(self, key: Hashable | None = None) -> None:
        """Forget one bucket's state, or all."""
        if key is None:
            self._state.clear()
        else:
            self._state.pop(key, None)

    def state(self, key: Hashable, name: str) -> np.ndarray | None:
        """A stored array of a bucket (None before the first step)."""
        return self._state.get(key, {}).get(name)

    def _get(self, key: Hashable, name: str, like: np.ndarray) -> np.ndarray | None:
        arr = self.state(key, name)
        if arr is not None and arr.shape != like.shape:
            raise ValueError(
                f"bucket {key!r} changed shape: {name} {arr.shape}, tensor {like.shape}"
            )
        return arr

    def _set(self, key: Hashable, name: str, arr: np.ndarray) -> None:
        self._state.setdefault(key, {})[name] = arr


MEMORIES: dict[str, type[Memory]] = {}

register_memory = registrar(MEMORIES, "memory")
"""Class decorator: ``@register_memory("name")`` makes a memory available under ``name``."""


@register_memory("none")
class NoMemory(Memory):
    """Compress the gradient as it is."""

    def compensate(self, grad: np.ndarray, key: Hashable = "") -> np.ndarray:
        return np.array(grad, copy=True)


@register_memory("residual")
class ResidualMemory(Memory):
    """Error feedback: ``beta * residual + gamma * grad``; residual = compensated - sent."""

    def __init__(self, *, beta: float = 1.0, gamma: float = 1.0) -> None:
        super().__init__()
        # hyperparameters
        self.beta = beta
        self.gamma = gamma

    def compensate(self, grad: np.ndarray, key: Hashable = "") -> np.ndarray:
        grad = np.asarray(grad)
        e = self._get(key, "residual", grad)
        x = grad * self.gamma if self.gamma != 1.0 else grad.copy()
        if e is not None:
            x += self.beta * e if self.beta != 1.0 else e
        return x

    def update(self, key: Hashable, compensated: np.ndarray, sent: np.ndarray) -> None:
        compensated, sent = np.asarray(compensated), np.asarray(sent)
        if compensated.shape != sent.shape:
            raise ValueError(f"shapes differ: compensated {compensated.shape}, sent {sent.shape}")
        self._set(key, "residual", compensated - sent)

    def residual(self, key: Hashable) -> np.ndarray | None:
        return self.state(key, "residual")


@register_memory("dgc")
class DgcMemory(Memory):
    """Momentum correction and momentum factor masking (DGC)."""

    def __init__(self, *, momentum: float = 0.9) -> None:
        super().__init__()
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"dgc: momentum must be in [0, 1), got {momentum}")
        # hyperparameters
        self.momentum = momentum

    def compensate(self, grad: np.ndarray, key: Hashable = "") -> np.ndarray:
        grad = np.asarray(grad)
        u = self._get(key, "momentum", grad)
        v = self._get(key, "velocity", grad)
        u = grad.copy() if u is None else self.momentum * u + grad
        v = u.copy() if v is None else v + u
        self._set(key, "momentum", u)
        self._set(key, "velocity", v)
        return v.copy()

    def update(self, key: Hashable, compensated: np.ndarray, sent: np.ndarray) -> None:
        sent_at = np.asarray(sent) != 0
        for name in ("momentum", "velocity"):
            arr = self.state(key, name)
            if arr is not None:
                arr[sent_at] = 0


@register_memory("momentum")
class MomentumMemory(Memory):
    """signum: compress the momentum ``beta * m + (1 - beta) * g``; no error feedback."""

    def __init__(self, *, momentum: float = 0.9) -> None:
        super().__init__()
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum: momentum must be in [0, 1), got {momentum}")
        # hyperparameters
        self.momentum = momentum

    def compensate(self, grad: np.ndarray, key: Hashable = "") -> np.ndarray:
        grad = np.asarray(grad)
        m = self._get(key, "momentum", grad)
        m = grad.copy() if m is None else self.momentum * m + (1.0 - self.momentum) * grad
        self._set(key, "momentum", m)
        return m.copy()
