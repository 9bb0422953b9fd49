"""GRACE's gradient compressors, aggregated in the switch where they can be.

- ``base``: the contract (``Compressor``: ``compress``/``decompress`` with a frozen-dataclass
  context, and ``reduce_steps``: the method's rounds through the switch), the registry
  (``COMPRESSORS``, ``make_compressor``) and the round building blocks;
- ``memory``: error feedback (``none``, ``residual``, ``dgc``, ``momentum``; ``MEMORIES``);
- ``communicator``: the order of steps (compensate, aggregate, update) and
  ``make_communicator(name, num_workers, worker, seed, args)``;
- ``packing``: several low-bit integers per int32 lane, with headroom for N workers' sums;
- ``summed`` / ``sparse``: templates for switch-summed quantizers and union-path sparsifiers;
- one file per method: ``none``, ``fp16``, ``u8bit``, ``qsgd``, ``terngrad``, ``signsgd``,
  ``signum``, ``efsignsgd``, ``onebit``, ``natural``, ``topk``, ``randomk``, ``threshold``,
  ``dgc``, ``powersgd``.

See docs/compression.md ("GRACE's compressors in the switch").
"""

from ina.compressors import (  # noqa: F401  (each module registers its method)
    dgc,
    efsignsgd,
    fp16,
    natural,
    none,
    onebit,
    powersgd,
    qsgd,
    randomk,
    signsgd,
    signum,
    terngrad,
    threshold,
    topk,
    u8bit,
)
from ina.compressors.base import (
    COMPRESSORS,
    Aggregation,
    Compressor,
    Context,
    Reduction,
    make_compressor,
    register,
)
from ina.compressors.communicator import Communicator, make_communicator, parse_args
from ina.compressors.memory import MEMORIES, Memory, register_memory
from ina.compressors.packing import Packing

__all__ = [
    "COMPRESSORS",
    "MEMORIES",
    "Aggregation",
    "Communicator",
    "Compressor",
    "Context",
    "Memory",
    "Packing",
    "Reduction",
    "make_communicator",
    "make_compressor",
    "parse_args",
    "register",
    "register_memory",
]
