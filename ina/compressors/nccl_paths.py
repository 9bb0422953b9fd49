"""How each method's payload travels without ina's switch: the collectives GRACE's NCCL/Horovod
communicators run for it, and their sizes per worker.

A method whose codes add up as they are (FP16, PowerSGD's factors) is all-reduced; every other
one is all-gathered, each worker then decoding N payloads (GRACE's ``Allgather``
communicator). The sizes are the method's own, at its arguments:

| method | collective | bits per value |
|---|---|---|
| none | all-reduce | 32 |
| fp16 | all-reduce | 16 |
| powersgd (rank r) | two all-reduces, P then Q | 32 r (rows + cols) / (rows x cols), the bucket as a square |
| qsgd (levels L) | all-gather | log2(2L + 1), rounded up, and a 32-bit norm |
| terngrad | all-gather | 2, and a 32-bit scale |
| onebit, signsgd, efsignsgd, signum | all-gather | 1 (and one or two 32-bit scales) |
| natural, u8bit (bits b) | all-gather | 8, b |
| topk, dgc (ratio k) | all-gather | 64 k: a 32-bit value and a 32-bit index per kept value |
| randomk (ratio k) | all-gather | 32 k: the values only (the indices follow from a shared seed) |

``threshold`` keeps however many values pass its threshold, which only the values say: it has
no size here (run it on ina's switch, where the simulation sends its real payload).
"""

from __future__ import annotations

import math

ALLREDUCE, ALLGATHER = "all_reduce", "all_gather"


def _arg(args: dict, key: str, default: float) -> float:
    try:
        return float(args.get(key, default))
    except (TypeError, ValueError):
        raise ValueError(f"--compressor-arg {key}={args.get(key)!r}: not a number") from None


def stages(name: str, args: dict, n: int) -> list[tuple[str, int]]:
    """The collectives (name, bytes each worker contributes) that carry ``n`` values
    compressed by ``name`` with ``args`` over NCCL."""
    if n <= 0:
        return []
    if name == "none":
        return [(ALLREDUCE, 4 * n)]
    if name == "fp16":
        return [(ALLREDUCE, 2 * n)]
    if name == "powersgd":
        r = int(_arg(args, "rank", 1))
        side = math.isqrt(n - 1) + 1
        return [(ALLREDUCE, 4 * r * side), (ALLREDUCE, 4 * r * side)]
    bits = {
        "terngrad": 2,
        "onebit": 1,
        "signsgd": 1,
        "efsignsgd": 1,
        "signum": 1,
        "natural": 8,
    }.get(name)
    scales = 4 if name in ("terngrad", "onebit", "signsgd", "efsignsgd", "signum") else 0
    if name == "qsgd":
        bits, scales = math.ceil(math.log2(2 * _arg(args, "levels", 127) + 1)), 4
    elif name == "u8bit":
        bits = _arg(args, "bits", 8)
    elif name in ("topk", "dgc"):
        bits = 64 * _arg(args, "ratio", 0.01 if name == "topk" else 0.001)
    elif name == "randomk":
        bits = 32 * _arg(args, "ratio", 0.01)
    if bits is None:
        raise ValueError(
            f"{name} has no fixed payload size without ina's switch (its payload depends on "
            "the values): run it with --algorithm ina"
        )
    return [(ALLGATHER, math.ceil(n * bits / 8) + scales)]
