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

Tensors may be numpy arrays or torch tensors on any device (`ina.host.arrays`): selection,
residuals and payloads stay in the input's library and device. Random-k draws its indices on
the host (numpy's generator, the same on every worker whatever its device) and moves them.
"""

from __future__ import annotations

import abc
import math
import zlib
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ina.host.arrays import Array, as_array, ops
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
    def select(self, x: Array, k: int, ctx: SelectContext) -> Array:
        """Indices (int64, sorted, distinct; ``x``'s library and device) of the ``k``
        entries of 1-D ``x`` to keep."""


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

    def select(self, x: Array, k: int, ctx: SelectContext) -> Array:
        xp = ops(x)
        n = xp.size(x)
        if k >= n:
            return xp.arange(n, xp.int64)
        # O(n) selection (numpy's argpartition, torch's topk), then sorted for the bitmap
        return xp.astype(xp.sort(xp.topk_indices(xp.abs(x), k)), xp.int64)


@register("randk")
class RandomK(Sparsifier):
    """``k`` entries drawn uniformly without replacement.

    ``shared=True``: every worker draws the same entries (seeded by ``seed``, key and step).
    """

    def __init__(self, seed: int = 0, shared: bool = True) -> None:
        self.seed = seed
        self.shared = shared

    def select(self, x: Array, k: int, ctx: SelectContext) -> Array:
        xp = ops(x)
        n = xp.size(x)
        if k >= n:
            return xp.arange(n, xp.int64)
        entropy = [self.seed, _key_hash(ctx.key), ctx.step]
        if not self.shared:
            entropy.append(ctx.worker)
        rng = np.random.default_rng(entropy)
        idx = rng.choice(n, size=k, replace=False, shuffle=False)
        idx.sort()
        return xp.asarray(idx.astype(np.int64, copy=False))


@dataclass(frozen=True)
class SparseContext:
    """What ``decompress`` needs besides the payload."""

    key: str
    shape: tuple[int, ...]
    dtype: str  # of the input (as str(dtype)); the payload's values keep it
    k: int  # entries kept
    step: int


@dataclass(frozen=True)
class Sparse:
    """The payload: the kept entries of the flattened tensor."""

    indices: Array  # int64, sorted
    values: Array  # same dtype, library and device as the input


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
        self, tensor: Array, key: str, step: int | None = None
    ) -> tuple[Sparse, SparseContext]:
        """Keep ``num_kept(tensor.size, density)`` entries of ``tensor`` (any shape)."""
        x = as_array(tensor)
        xp = ops(x)
        flat = x.reshape(-1)
        if step is None:
            step = self._steps.get(key, 0)
        self._steps[key] = step + 1
        k = num_kept(xp.size(flat), self.density)
        idx = self.sparsifier.select(flat, k, SelectContext(key, step, self.worker))
        ctx = SparseContext(key, tuple(x.shape), str(x.dtype), xp.size(idx), step)
        return Sparse(idx, xp.gather(flat, idx)), ctx

    def decompress(self, sparse: Sparse, ctx: SparseContext) -> Array:
        """The dense tensor: kept entries in place, zeros elsewhere."""
        xp = ops(sparse.values)
        out = xp.zeros(math.prod(ctx.shape), sparse.values.dtype)
        xp.scatter(out, sparse.indices, sparse.values)
        return out.reshape(ctx.shape)


class Memory:
    """Error-feedback residuals, one per bucket key (GRACE's ``Memory``)."""

    def __init__(self) -> None:
        # internal state: residuals in the library and on the device of their tensors
        self._residuals: dict[str, Array] = {}

    def compensate(self, tensor: Array, key: str) -> Array:
        """``tensor`` plus the residual left from the last round of this bucket (new array)."""
        tensor = as_array(tensor)
        residual = self._residuals.get(key)
        if residual is None:
            return ops(tensor).copy(tensor)
        if tuple(residual.shape) != tuple(tensor.shape):
            raise ValueError(
                f"bucket {key!r} changed shape: residual {tuple(residual.shape)}, "
                f"tensor {tuple(tensor.shape)}"
            )
        return tensor + residual

    def update(self, key: str, compensated: Array, sent: Array) -> None:
        """Keep what was not sent: ``residual = compensated - sent``.

        Exact where ``sent`` is 0 or equal to ``compensated``, so for a pure sparsifier
        ``residual + sent == compensated`` bit for bit.
        """
        compensated, sent = as_array(compensated), as_array(sent)
        if tuple(compensated.shape) != tuple(sent.shape):
            raise ValueError(
                f"shapes differ: compensated {tuple(compensated.shape)}, sent {tuple(sent.shape)}"
            )
        self._residuals[key] = compensated - sent

    def residual(self, key: str) -> Array | None:
        """The stored residual of a bucket (None before its first update)."""
        return self._residuals.get(key)

    def reset(self, key: str | None = None) -> None:
        """Forget the residual of one bucket, or of all."""
        if key is None:
            self._residuals.clear()
        else:
            self._residuals.pop(key, None)
