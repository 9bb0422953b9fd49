"""Index bitmaps packed into int32 lanes, for the OR round of the homomorphic compressor.

Round 1 of a compressed allreduce sends, for every position of the bucket, one bit: "this
worker has a non-zero value here". The switch ORs the workers' bitmaps lane by lane, so each
worker gets the union of the supports back (Li et al., ICML'24, sec. 3: the index is
aggregated separately from the values, with a bitwise OR).

Layout (fixed, host independent): position ``p`` is bit ``p % 32`` (least significant bit
first) of word ``p // 32``. Words are int32 because lanes are int32; bit 31 is the sign bit,
which OR does not care about. The last word is padded with zero bits.
"""

from __future__ import annotations

import numpy as np

BITS_PER_WORD = 32
_WORD = np.dtype("<u4")  # little-endian view: byte 0 holds positions 0..7 of the word


def num_words(n: int) -> int:
    """Number of int32 words that hold a bitmap of ``n`` positions."""
    if n < 0:
        raise ValueError(f"bitmap length must be >= 0, got {n}")
    return -(-n // BITS_PER_WORD)


def pack(mask: np.ndarray) -> np.ndarray:
    """Pack a 1-D bool mask into int32 words (``num_words(len(mask))`` of them)."""
    mask = np.asarray(mask)
    if mask.ndim != 1:
        raise ValueError(f"bitmap mask must be 1-D, got shape {mask.shape}")
    if mask.dtype != np.bool_:
        mask = mask != 0
    nbytes = num_words(mask.size) * 4
    packed = np.packbits(mask, bitorder="little")
    if packed.size != nbytes:  # pad the last word with zero bits
        packed = np.concatenate([packed, np.zeros(nbytes - packed.size, np.uint8)])
    return packed.view(_WORD).astype(np.int32)


def unpack(words: np.ndarray, n: int) -> np.ndarray:
    """Unpack int32 words into a bool mask of ``n`` positions (the inverse of ``pack``)."""
    words = np.asarray(words)
    if words.ndim != 1 or words.size != num_words(n):
        raise ValueError(f"a bitmap of {n} positions needs {num_words(n)} words, got {words.shape}")
    raw = np.ascontiguousarray(words, dtype=np.int32).astype(_WORD, copy=False).view(np.uint8)
    return np.unpackbits(raw, count=n, bitorder="little").view(np.bool_)


def positions(words: np.ndarray, n: int) -> np.ndarray:
    """Sorted indices (int64) of the set bits among the first ``n`` positions."""
    return np.flatnonzero(unpack(words, n))


def popcount(words: np.ndarray) -> int:
    """Number of set bits in the words (the padding bits are zero by construction)."""
    raw = np.ascontiguousarray(words, dtype=np.int32).view(np.uint8)
    return (
        int(np.bitwise_count(raw).sum())
        if hasattr(np, "bitwise_count")
        else int(np.unpackbits(raw).sum())
    )
