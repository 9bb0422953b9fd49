"""The array operations of the worker's codec, for numpy arrays and torch tensors alike.

The codec (``ina.host.quantize``, ``ina.host.compression``) is written once and runs where
its input lives: on numpy arrays, on torch CPU tensors, or on CUDA tensors, which then never
leave the GPU except as the int32 lanes the transport sends. Elementwise arithmetic is plain
Python operators (``+ - * & | ^ >> << == ~``), which mean the same on both libraries for the
dtypes used here (int64 wraps modulo 2**64, ``>>`` is arithmetic, int64 -> int32 casts keep
the low 32 bits); this module gives the rest one spelling: allocation on the input's device,
gather / scatter / scatter-add, compaction, casts, a few float functions, and the host
transfer of lanes.

Why two libraries, not torch alone: on a CPU, numpy's kernels for this workload (fancy
indexing, ``add.at``, ``flatnonzero``, int64 arithmetic, and ~1 us less per call) beat
torch's eager CPU kernels: the codec runs 2.5-4x faster at a 1 % union, 1.5-2.5x at 5 %
(docs/compression.md, "Measured"). So `host_or_device` hands CPU tensors to numpy (a
zero-copy view) and keeps CUDA tensors in torch; the algorithm stays one text.

Every function takes the arrays of one library and returns arrays of the same library, on
the same device; `ops(a)` picks the implementation from the array's type.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

Array = Any  # np.ndarray or torch.Tensor; one codec call never mixes them


def is_torch(a: object) -> bool:
    """Whether ``a`` is a torch tensor (without importing torch for numpy callers)."""
    return type(a).__module__.startswith("torch")


class NumpyOps:
    """The codec's array operations on numpy arrays (host memory)."""

    name = "numpy"
    device = "cpu"
    # elements per piece for long chains of elementwise work: pieces that stay in a CPU's
    # cache (L2, ~0.5-1 MiB) instead of streaming every intermediate through memory
    chunk = 1 << 15
    int32 = np.dtype(np.int32)
    int64 = np.dtype(np.int64)
    uint8 = np.dtype(np.uint8)
    bool_ = np.dtype(np.bool_)
    float64 = np.dtype(np.float64)

    # --- allocation and transfer ---------------------------------------------------------

    def asarray(self, a, dtype=None) -> np.ndarray:
        """Host data (numpy array, list, scalar) as an array of this library."""
        return np.asarray(a, dtype=dtype)

    def to_host(self, a) -> np.ndarray:
        """The array as numpy (what the transport sends); no copy for host arrays."""
        return np.asarray(a)

    def zeros(self, shape, dtype) -> np.ndarray:
        return np.zeros(shape, dtype)

    def empty(self, shape, dtype) -> np.ndarray:
        """Uninitialized: for scratch that is always written before it is read."""
        return np.empty(shape, dtype)

    def full(self, shape, value, dtype) -> np.ndarray:
        return np.full(shape, value, dtype)

    def arange(self, n: int, dtype=np.int64) -> np.ndarray:
        return np.arange(n, dtype=dtype)

    # --- shape and dtype -----------------------------------------------------------------

    def size(self, a) -> int:
        return int(a.size)

    def astype(self, a, dtype) -> np.ndarray:
        return a.astype(dtype, copy=False)

    def view(self, a, dtype) -> np.ndarray:
        """Reinterpret the bytes of a contiguous array as ``dtype``."""
        return np.ascontiguousarray(a).view(dtype)

    def copy(self, a) -> np.ndarray:
        """A C-contiguous copy."""
        return a.copy(order="C")

    # --- indexing ------------------------------------------------------------------------

    def gather(self, a, idx) -> np.ndarray:
        """``a[idx]`` for a 1-D ``a``."""
        return a[idx]

    def take_rows(self, a, idx) -> np.ndarray:
        """Rows ``idx`` of a 2-D ``a``."""
        return np.take(a, idx, axis=0)

    def select(self, a, mask) -> np.ndarray:
        """The entries of 1-D ``a`` where ``mask`` is True, in order."""
        return a[mask]

    def scatter(self, a, idx, values) -> None:
        """``a[idx] = values`` in place (with repeated indices, one of the writes wins)."""
        a[idx] = values

    def scatter_add(self, a, idx, values) -> None:
        """``a[idx] += values`` in place, repeated indices adding up (integers wrap)."""
        np.add.at(a, idx, values)

    def nonzero(self, a) -> np.ndarray:
        """Sorted int64 indices of the non-zero entries of 1-D ``a``."""
        return np.flatnonzero(a)

    def repeat(self, a, repeats) -> np.ndarray:
        """Each entry of 1-D ``a`` repeated ``repeats`` times (an int or one count each)."""
        return np.repeat(a, repeats)

    def cumsum(self, a) -> np.ndarray:
        return np.cumsum(a)

    def packbits(self, mask) -> np.ndarray:
        """Bool 1-D ``mask`` (length a multiple of 8) -> uint8, bit ``i`` of byte ``j`` is
        ``mask[8 j + i]`` (LSB first)."""
        return np.packbits(mask, bitorder="little")

    def unpackbits(self, octets, count: int) -> np.ndarray:
        """The inverse of `packbits`: the first ``count`` bits as a bool array."""
        return np.unpackbits(octets, count=count, bitorder="little").view(np.bool_)

    # --- reductions (Python scalars out) -------------------------------------------------

    def any(self, a) -> bool:
        return bool(a.any())

    def all(self, a) -> bool:
        return bool(a.all())

    def sum(self, a) -> int:
        return int(a.sum())

    def count_nonzero(self, a) -> int:
        return int(np.count_nonzero(a))

    def amax(self, a, axis: int) -> np.ndarray:
        return a.max(axis=axis)

    # --- float functions -----------------------------------------------------------------

    def abs(self, a) -> np.ndarray:
        return np.abs(a)

    def isfinite(self, a) -> np.ndarray:
        return np.isfinite(a)

    def frexp_exponent(self, a) -> np.ndarray:
        """``e`` of ``a = m * 2**e`` with ``0.5 <= |m| < 1`` (0 for 0), as int64."""
        return np.frexp(a)[1].astype(np.int64)

    def rint(self, a) -> np.ndarray:
        """Round to the nearest integer, halves to even."""
        return np.rint(a)

    def where(self, cond, a, b) -> np.ndarray:
        return np.where(cond, a, b)

    def clip(self, a, lo, hi) -> np.ndarray:
        return np.clip(a, lo, hi)

    def topk_indices(self, a, k: int) -> np.ndarray:
        """Indices (unordered) of the ``k`` largest entries of 1-D ``a``."""
        n = a.size
        return np.argpartition(a, n - k)[n - k :]

    def sort(self, a) -> np.ndarray:
        return np.sort(a)


class TorchOps:
    """The codec's array operations on torch tensors on one device (CPU or CUDA)."""

    name = "torch"

    def __init__(self, device) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        # a GPU takes elementwise chains whole (one launch per op); a CPU in cache-sized pieces
        self.chunk = NumpyOps.chunk if self.device.type == "cpu" else None
        self.int32 = torch.int32
        self.int64 = torch.int64
        self.uint8 = torch.uint8
        self.bool_ = torch.bool
        self.float64 = torch.float64

    def _dtype(self, dtype):
        """A torch dtype for a numpy-style ``dtype`` too (``np.int32``, ``"int64"``)."""
        if isinstance(dtype, self.torch.dtype) or dtype is None:
            return dtype
        return getattr(self.torch, np.dtype(dtype).name)

    def asarray(self, a, dtype=None):
        t = self.torch
        if isinstance(a, t.Tensor):
            return a.to(device=self.device, dtype=self._dtype(dtype))
        if isinstance(a, np.ndarray):
            a = np.ascontiguousarray(a, dtype=dtype)
            if not a.flags.writeable:  # torch tensors are always writable: copy, don't alias
                a = a.copy()
            # from_numpy shares memory; .to() copies to the device (a no-op on the CPU)
            return t.from_numpy(a).to(self.device)
        return t.as_tensor(a, dtype=self._dtype(dtype), device=self.device)

    def to_host(self, a) -> np.ndarray:
        return a.detach().cpu().numpy()

    def zeros(self, shape, dtype):
        return self.torch.zeros(shape, dtype=self._dtype(dtype), device=self.device)

    def empty(self, shape, dtype):
        return self.torch.empty(shape, dtype=self._dtype(dtype), device=self.device)

    def full(self, shape, value, dtype):
        shape = (shape,) if isinstance(shape, int) else shape
        return self.torch.full(shape, value, dtype=self._dtype(dtype), device=self.device)

    def arange(self, n: int, dtype=None):
        dtype = self._dtype(dtype) or self.torch.int64
        return self.torch.arange(n, dtype=dtype, device=self.device)

    def size(self, a) -> int:
        return a.numel()

    def astype(self, a, dtype):
        return a.to(self._dtype(dtype))

    def view(self, a, dtype):
        dtype = self._dtype(dtype)
        if not a.numel():  # an empty tensor may have stride 0, which view() refuses
            return self.torch.empty(0, dtype=dtype, device=self.device)
        a = a.contiguous()
        if a.storage_offset() * a.element_size() % dtype.itemsize:  # a view into a buffer
            a = a.clone()  # that wider elements would straddle: realign
        return a.view(dtype)

    def copy(self, a):
        return a.clone(memory_format=self.torch.contiguous_format)

    def gather(self, a, idx):
        return a.index_select(0, idx)

    def take_rows(self, a, idx):
        # 2-D index_select is slow on the CPU; gather the rows' entries from the flat array
        cols = a.shape[1]
        flat_idx = idx.unsqueeze(1) * cols + self.torch.arange(cols, device=self.device)
        return a.reshape(-1).index_select(0, flat_idx.reshape(-1)).reshape(-1, cols)

    def select(self, a, mask):
        return a.index_select(0, mask.nonzero().reshape(-1))

    def scatter(self, a, idx, values) -> None:
        a.scatter_(0, idx.to(self.int64), values)

    def scatter_add(self, a, idx, values) -> None:
        # integer atomics on CUDA: exact and order-independent, so deterministic
        a.scatter_add_(0, idx.to(self.int64), values)

    def nonzero(self, a):
        return a.nonzero().reshape(-1)

    def repeat(self, a, repeats):
        if isinstance(repeats, int):
            return a.repeat_interleave(repeats)
        return a.repeat_interleave(repeats, output_size=int(repeats.sum()))

    def cumsum(self, a):
        return a.cumsum(0)

    def packbits(self, mask):
        # 8 bytes holding 0 or 1, read as one little-endian int64, times this constant:
        # byte i's bit lands on bit 56 + i, and no two partial products share a bit (8 i - 7 j
        # differs for every i, j in 0..7), so nothing carries and the top byte is the 8 bits
        eights = self.view(self.view(mask, self.uint8), self.int64)
        return (((eights * 0x0102040810204080) >> 56) & 0xFF).to(self.uint8)

    def unpackbits(self, octets, count: int):
        shifts = self.torch.arange(8, dtype=self.uint8, device=self.device)
        bits = (octets.reshape(-1, 1) >> shifts) & 1
        return bits.reshape(-1)[:count].to(self.bool_)

    def any(self, a) -> bool:
        return bool(a.any())

    def all(self, a) -> bool:
        return bool(a.all())

    def sum(self, a) -> int:
        return int(a.sum())

    def count_nonzero(self, a) -> int:
        return int(self.torch.count_nonzero(a))

    def amax(self, a, axis: int):
        return self.torch.amax(a, dim=axis)

    def abs(self, a):
        return a.abs()

    def isfinite(self, a):
        return self.torch.isfinite(a)

    def frexp_exponent(self, a):
        return self.torch.frexp(a).exponent.to(self.torch.int64)

    def rint(self, a):
        return self.torch.round(a)  # halves to even, like numpy's rint

    def where(self, cond, a, b):
        t = self.torch
        return t.where(cond, t.as_tensor(a, device=self.device), t.as_tensor(b, device=self.device))

    def clip(self, a, lo, hi):
        return a.clamp(lo, hi)

    def topk_indices(self, a, k: int):
        return self.torch.topk(a, k, sorted=False).indices

    def sort(self, a):
        return self.torch.sort(a).values


NUMPY = NumpyOps()


@functools.lru_cache(maxsize=16)
def _torch_ops(device: str) -> TorchOps:
    return TorchOps(device)


def ops(a: Array) -> NumpyOps | TorchOps:
    """The operations of ``a``'s library (and device)."""
    if is_torch(a):
        return _torch_ops(str(a.device))
    if isinstance(a, np.ndarray | np.generic):
        return NUMPY
    raise TypeError(f"expected a numpy array or a torch tensor, got {type(a).__name__}")


def as_array(a) -> Array:
    """``a`` if it is a numpy array or a torch tensor, else ``np.asarray(a)`` (lists, scalars)."""
    return a if is_torch(a) or isinstance(a, np.ndarray) else np.asarray(a)


def host_or_device(a: Array) -> Array:
    """What the codec should run on for ``a``: a CPU tensor as a numpy view (numpy is faster
    on the CPU; no copy), anything else as it is (CUDA tensors stay on their GPU)."""
    if is_torch(a) and a.device.type == "cpu":
        return a.detach().numpy()
    return a
