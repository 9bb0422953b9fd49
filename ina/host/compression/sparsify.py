"""Lossy front end of the compressor: sparsifiers with error feedback, GRACE-style.

The split follows GRACE (Xu et al., ICDCS'21): a ``Sparsifier`` decides which entries of a
bucket to send, ``SparsifyCompressor.compress(tensor, key) -> (Sparse, SparseContext)`` and
``decompress(sparse, ctx) -> dense`` wrap it with a typed, frozen context, and a ``Memory``
keeps what was not sent (the residual) per bucket and adds it back next time (error feedback,
as in DGC / EF-SGD), so nothing is lost, only delayed. Sparsifiers live in a registry by name
(``SPARSIFIERS``, ``register``, ``make_sparsifier``), so a new one is one small class.

How the pieces are chained for one bucket (``key``) on one worker::

    x = memory.compensate(grad, key)              # grad + residual
    sparse, ctx = compressor.compress(x, key)     # keep k = ceil(density * n) entries
    sent = compressor.decompress(sparse, ctx)     # dense, zero off the kept entries
    memory.update(key, x, sent)                   # residual = x - sent
    # sent != 0 is the round-1 mask of HomomorphicAllreduce; quantize sent to int32 ...

``memory.update`` takes whatever was really contributed: pass the dequantized values to fold
the quantization error into the residual too. Density 1.0 keeps everything (dense mode).

Random-k with ``shared=True`` draws the same positions on every worker (seeded by the shared
seed, the bucket key and the step), so the union of supports is no larger than one worker's;
with ``shared=False`` each worker draws its own (seeded with its worker id as well).
"""

from __future__ import annotations

import abc
import math
import zlib
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ina.registry import registrar


def num_kept(numel: int, density: float) -> int:
    """How many of ``numel`` entries a sparsifier keeps at ``density`` (at least one)."""
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density}")
    return min(numel, max(1, math.ceil(density * numel))) if numel else 0


def _key_hash(key: str) -> int:
    """A stable (not per-process salted like ``hash``) 32-bit hash of a bucket key."""
    return zlib.crc32(key.encode())


@dataclass(frozen=True)
class SelectContext:
    """What a sparsifier may use to pick entries besides the values."""

    key: str  # bucket key
    step: int  # how many times this bucket was compressed before (same on every worker)
    worker: int  # this worker's id


class Sparsifier(abc.ABC):
    """Picks ``k`` entries of a 1-D float array to send."""

    name: ClassVar[str]

    @abc.abstractmethod
    def select(self, x: np.ndarray, k: int, ctx: SelectContext) -> np.ndarray:
        """Indices (int64, sorted, distinct) of the ``k`` entries to keep."""


SPARSIFIERS: dict[str, type[Sparsifier]] = {}


register = registrar(SPARSIFIERS, "sparsifier")
"""Class decorator: ``@register("name")`` makes a sparsifier available under ``name``."""


def make_sparsifier(name: str, **kwargs) -> Sparsifier:
    """An instance of the sparsifier registered as ``name``."""
    try:
        cls = SPARSIFIERS[name]
    except KeyError:
        raise ValueError(f"unknown sparsifier {name!r}; known: {sorted(SPARSIFIERS)}") from None
    return cls(**kwargs)


@register("topk")
class TopK(Sparsifier):
    """The ``k`` entries of largest magnitude (ties broken arbitrarily)."""

    def select(self, x: np.ndarray, k: int, ctx: SelectContext) -> np.ndarray:
        n = x.size
        if k >= n:
            return np.arange(n, dtype=np.int64)
        idx = np.argpartition(np.abs(x), n - k)[n - k :]
        idx.sort()
        return idx.astype(np.int64, copy=False)


@register("randk")
class RandomK(Sparsifier):
    """``k`` entries drawn uniformly without replacement.

    ``shared=True``: every worker draws the same entries (seeded by ``seed``, key and step).
    """

    def __init__(self, seed: int = 0, shared: bool = True) -> None:
        self.seed = seed
        self.shared = shared

    def select(self, x: np.ndarray, k: int, ctx: SelectContext) -> np.ndarray:
        n = x.size
        if k >= n:
            return np.arange(n, dtype=np.int64)
        entropy = [self.seed, _key_hash(ctx.key), ctx.step]
        if not self.shared:
            entropy.append(ctx.worker)
        rng = np.random.default_rng(entropy)
        idx = rng.choice(n, size=k, replace=False, shuffle=False)
        idx.sort()
        return idx.astype(np.int64, copy=False)


@dataclass(frozen=True)
class SparseContext:
    """What ``decompress`` needs besides the payload."""

    key: str
    shape: tuple[int, ...]
    dtype: str
    k: int  # entries kept
    step: int


@dataclass(frozen=True)
class Sparse:
    """The payload: the kept entries of the flattened tensor."""

    indices: np.ndarray  # int64, sorted
    values: np.ndarray  # same dtype as the input


class SparsifyCompressor:
    """GRACE-style compressor around a registered sparsifier at a given density."""

    def __init__(
        self, sparsifier: str | Sparsifier = "topk", density: float = 0.01, worker: int = 0
    ) -> None:
        # hyperparameters
        self.sparsifier = make_sparsifier(sparsifier) if isinstance(sparsifier, str) else sparsifier
        num_kept(1, density)  # validates
        self.density = density
        self.worker = worker
        # internal state: per-bucket step counters (workers compress buckets in lockstep)
        self._steps: dict[str, int] = {}

    def compress(
        self, tensor: np.ndarray, key: str, step: int | None = None
    ) -> tuple[Sparse, SparseContext]:
        """Keep ``num_kept(tensor.size, density)`` entries of ``tensor`` (any shape)."""
        x = np.asarray(tensor)
        flat = x.reshape(-1)
        if step is None:
            step = self._steps.get(key, 0)
        self._steps[key] = step + 1
        k = num_kept(flat.size, self.density)
        idx = self.sparsifier.select(flat, k, SelectContext(key, step, self.worker))
        ctx = SparseContext(key, tuple(x.shape), x.dtype.str, int(idx.size), step)
        return Sparse(idx, flat[idx]), ctx

    def decompress(self, sparse: Sparse, ctx: SparseContext) -> np.ndarray:
        """The dense tensor: kept entries in place, zeros elsewhere."""
        out = np.zeros(math.prod(ctx.shape), np.dtype(ctx.dtype))
        out[sparse.indices] = sparse.values
        return out.reshape(ctx.shape)


class Memory:
    """Error-feedback residuals, one per bucket key (GRACE's ``Memory``)."""

    def __init__(self) -> None:
        # internal state
        self._residuals: dict[str, np.ndarray] = {}

    def compensate(self, tensor: np.ndarray, key: str) -> np.ndarray:
        """``tensor`` plus the residual left from the last round of this bucket (new array)."""
        tensor = np.asarray(tensor)
        residual = self._residuals.get(key)
        if residual is None:
            return tensor.copy()
        if residual.shape != tensor.shape:
            raise ValueError(
                f"bucket {key!r} changed shape: residual {residual.shape}, tensor {tensor.shape}"
            )
        return tensor + residual

    def update(self, key: str, compensated: np.ndarray, sent: np.ndarray) -> None:
        """Keep what was not sent: ``residual = compensated - sent``.

        Exact where ``sent`` is 0 or equal to ``compensated``, so for a pure sparsifier
        ``residual + sent == compensated`` bit for bit.
        """
        compensated = np.asarray(compensated)
        sent = np.asarray(sent)
        if compensated.shape != sent.shape:
            raise ValueError(f"shapes differ: compensated {compensated.shape}, sent {sent.shape}")
        self._residuals[key] = compensated - sent

    def residual(self, key: str) -> np.ndarray | None:
        """The stored residual of a bucket (None before its first update)."""
        return self._residuals.get(key)

    def reset(self, key: str | None = None) -> None:
        """Forget the residual of one bucket, or of all."""
        if key is None:
            self._residuals.clear()
        else:
            self._residuals.pop(key, None)
