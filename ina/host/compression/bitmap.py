"""Index bitmaps packed into int32 lanes, for the OR round of the homomorphic compressor.

Round 1 of a compressed allreduce sends, for every position of the bucket, one bit: "this
worker has a non-zero value here". The switch ORs the workers' bitmaps lane by lane, so each
worker gets the union of the supports back (Li et al., ICML'24, sec. 3: the index is
aggregated separately from the values, with a bitwise OR).

Layout (fixed, host independent): position ``p`` is bit ``p % 32`` (least significant bit
first) of word ``p // 32``. Words are int32 because lanes are int32; bit 31 is the sign bit,
which OR does not care about. The last word is padded with zero bits.

Every function takes numpy arrays or torch tensors (any device) and answers in the same
library on the same device (`ina.host.arrays`). Packing and unpacking go through bytes: the
hosts and GPUs this runs on are little-endian, so byte ``j`` of word ``w`` holds positions
``32 w + 8 j .. 32 w + 8 j + 7``, bit ``i`` of the byte being position ``+ i``.
"""

from __future__ import annotations

import functools
import sys

import numpy as np

from ina.host.arrays import Array, NumpyOps, TorchOps, ops

BITS_PER_WORD = 32

if sys.byteorder != "little":  # the byte views below assume it (so does the wire format)
    raise ImportError("ina.host.compression.bitmap needs a little-endian host")


# bit b of a word as an int32 (bit 31 is the sign bit); looked up, as numpy's ``1 << array``
# takes a slow path (~10x a gather from this table)
_BIT = np.array([1 << b for b in range(31)] + [-(1 << 31)], np.int32)


@functools.lru_cache(maxsize=16)
def _bit_table(xp: NumpyOps | TorchOps) -> Array:
    return xp.asarray(_BIT)


def num_words(n: int) -> int:
    """Number of int32 words that hold a bitmap of ``n`` positions."""
    if n < 0:
        raise ValueError(f"bitmap length must be >= 0, got {n}")
    return -(-n // BITS_PER_WORD)


def pack(mask: Array) -> Array:
    """Pack a 1-D bool mask into int32 words (``num_words(len(mask))`` of them)."""
    xp = ops(mask)
    if mask.ndim != 1:
        raise ValueError(f"bitmap mask must be 1-D, got shape {tuple(mask.shape)}")
    if mask.dtype != xp.bool_:
        mask = mask != 0
    n = xp.size(mask)
    if not n:
        return xp.zeros(0, xp.int32)
    padded_n = BITS_PER_WORD * num_words(n)
    if padded_n != n:  # pad the last word with zero bits
        padded = xp.zeros(padded_n, xp.bool_)
        padded[:n] = mask
        mask = padded
    return xp.view(xp.packbits(mask), xp.int32)


def pack_indices(indices: Array, n: int) -> Array:
    """The words of a bitmap of ``n`` positions with bits set at ``indices`` (distinct, in
    ``[0, n)``): the same as ``pack`` of the mask, in time proportional to the indices."""
    xp = ops(indices)
    words = xp.zeros(num_words(n), xp.int32)
    idx = xp.astype(indices, xp.int64)
    if xp.size(idx):
        # distinct bits of a word add without carries, so the sum is the OR
        xp.scatter_add(words, idx >> 5, xp.gather(_bit_table(xp), idx & 31))
    return words


def _check_words(words: Array, n: int) -> None:
    if words.ndim != 1 or words.shape[0] != num_words(n):
        raise ValueError(
            f"a bitmap of {n} positions needs {num_words(n)} words, got {tuple(words.shape)}"
        )


def unpack(words: Array, n: int) -> Array:
    """Unpack int32 words into a bool mask of ``n`` positions (the inverse of ``pack``)."""
    xp = ops(words)
    _check_words(words, n)
    return xp.unpackbits(xp.view(xp.astype(words, xp.int32), xp.uint8), n)


def positions(words: Array, n: int) -> Array:
    """Sorted indices (int64) of the set bits among the first ``n`` positions."""
    xp = ops(words)
    return xp.nonzero(unpack(words, n))


def popcount(words: Array) -> int:
    """Number of set bits in the words (the padding bits are zero by construction)."""
    xp = ops(words)
    return xp.count_nonzero(xp.unpackbits(xp.view(xp.astype(words, xp.int32), xp.uint8), None))
