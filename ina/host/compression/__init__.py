"""Gradient compression on the worker: lossy sparsification + lossless homomorphic coding.

- ``sparsify``: which entries to send (top-k, random-k; a registry by name) and error feedback
  (``Memory``: residuals per bucket), GRACE's Compressor / Memory split.
- ``bitmap``: index bitmaps packed into int32 lanes, for the switch's OR round.
- ``sketch``: count sketch with partitioned hashing, cell counts and the exact peeling decoder.
- ``homomorphic``: the two-round protocol (OR the bitmaps, SUM the sketches, peel, repair)
  driven by a ``reduce`` callable, after Li et al., ICML'24 (arXiv 2402.07529).
- ``sparse_allreduce``: all of it for one float bucket (residual, sparsify, quantize, both
  rounds, decode) on the bucket's device: numpy, torch CPU or CUDA tensors.

See docs/compression.md.
"""

from ina.host.compression.homomorphic import (
    CODINGS,
    AllreduceResult,
    HomomorphicAllreduce,
    HomomorphicConfig,
    HomomorphicStats,
    LocalGroup,
    Reduce,
    Support,
    combine,
    repair,
)
from ina.host.compression.sketch import PeelResult, SketchSpec, Table
from ina.host.compression.sparse_allreduce import SparseAllreduce, SparseAllreduceResult
from ina.host.compression.sparsify import (
    SPARSIFIERS,
    Memory,
    RandomK,
    Sparse,
    SparseContext,
    Sparsifier,
    SparsifyCompressor,
    TopK,
    make_sparsifier,
    num_kept,
    register,
)

__all__ = [
    "CODINGS",
    "SPARSIFIERS",
    "AllreduceResult",
    "HomomorphicAllreduce",
    "HomomorphicConfig",
    "HomomorphicStats",
    "LocalGroup",
    "Memory",
    "PeelResult",
    "RandomK",
    "Reduce",
    "SketchSpec",
    "Sparse",
    "SparseAllreduce",
    "SparseAllreduceResult",
    "SparseContext",
    "Sparsifier",
    "SparsifyCompressor",
    "Support",
    "Table",
    "TopK",
    "combine",
    "make_sparsifier",
    "num_kept",
    "register",
    "repair",
]
