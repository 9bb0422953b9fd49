"""`ina bench compressors`: GRACE's methods in the switch, per method: wire cost, speed, path.

For each method (row), N workers run one compressed step of a float32 tensor of
``--elements`` values (standard normal, a different one per worker) through `LocalGroup`, the
switch's int32 arithmetic in one process. Reported per row:

* **path**: how the switch aggregates it (sum / union / all-gather) and the rounds it takes;
* **bits/value**: int32 lane bits worker 0 sent per tensor value, all rounds, and the same with
  the INA header of every packet (``--lanes`` lanes per packet) counted;
* **vs dense int32**: ``(32 + header share)`` over the latter: how much less than a dense int32
  allreduce (one lane per value, no exponent round) goes on the wire;
* **encode+decode MB/s**: worker 0's whole step (error feedback, agreement, encoding, packing,
  unpacking, decoding) in MB/s of float32 input, with the switch's answers replayed from the
  recorded run (the switch's own work is not timed); median of ``--repeats``, by the process's
  CPU time (on a shared machine wall-clock time also measures the other jobs) and by the wall
  clock;
* **exact**: the switch's sums equal the host-side sums of what every worker encoded.

Rows are ``NAME`` or ``NAME:key=value:key=value`` (``--method``, repeatable); unknown names
and malformed arguments are one-line errors (exit status 2). Run: ``ina bench compressors``.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from ina.compressors import Aggregation, make_communicator
from ina.compressors.timing import parse_row, record, replay_seconds
from ina.protocol import HEADER_BYTES, LANE_BYTES

# The table's rows: every method with its defaults, plus settings worth a row of their own.
DEFAULT_ROWS = [
    "none",
    "fp16",
    "u8bit",
    "qsgd",
    "qsgd:levels=7",
    "terngrad",
    "signsgd",
    "signum",
    "efsignsgd",
    "onebit",
    "natural",
    "randomk:ratio=0.01",
    "topk:ratio=0.01",
    "topk:ratio=0.01:coding=support",
    "threshold:threshold=2.576",  # about 1 % of a standard normal
    "dgc:ratio=0.01",
    "powersgd:rank=4",
]

HEAD = (
    "| method | path | rounds | bits/value (lanes) | bits/value (+ headers) | vs dense int32 "
    "| encode+decode MB/s (CPU time) | (wall clock) | exact |\n|---|---|---|---|---|---|---|---|---|"
)


def measure_stats(name: str, args: dict[str, str], xs: list[np.ndarray], lanes: int, repeats: int):
    """One row's numbers: run all workers once, then time worker 0 alone against recorded
    answers."""
    n = xs[0].size
    reds, comms, recorded = record(name, args, xs)
    exact = True
    for s in range(len(reds[0].encoded)):
        if comms[0].compressor.aggregation is Aggregation.ALLGATHER:
            host = np.concatenate([r.encoded[s] for r in reds])
        else:
            host = np.sum([r.encoded[s] for r in reds], axis=0)
        exact &= all(np.array_equal(r.summed[s], host) for r in reds)

    cpu, wall = replay_seconds(name, args, xs[0], len(xs), recorded, repeats)
    red = reds[0]
    packets = sum(-(-k // lanes) for _, k in red.rounds)
    bits = red.bits_per_value()
    bits_hdr = bits + 8 * HEADER_BYTES * packets / n
    dense = 8 * LANE_BYTES + 8 * HEADER_BYTES / lanes
    return {
        "label": name + "".join(f" {k}={v}" for k, v in args.items()),
        "path": comms[0].compressor.aggregation.value,
        "rounds": " ".join(op.name for op, _ in red.rounds) or "none",
        "bits": bits,
        "bits_hdr": bits_hdr,
        "ratio": dense / bits_hdr,
        "cpu_mb_s": LANE_BYTES * n / statistics.median(cpu) / 1e6,
        "best_cpu_mb_s": LANE_BYTES * n / min(cpu) / 1e6,  # least interference
        "wall_mb_s": LANE_BYTES * n / statistics.median(wall) / 1e6,
        "exact": exact,
    }


def measure(name: str, args: dict[str, str], xs: list[np.ndarray], lanes: int, repeats: int):
    """One row of the table (`measure_stats`, formatted)."""
    r = measure_stats(name, args, xs, lanes, repeats)
    return (
        f"| {r['label']} | {r['path']} | {r['rounds']} | {r['bits']:.2f} "
        f"| {r['bits_hdr']:.2f} | **{r['ratio']:.2f}x** "
        f"| {r['cpu_mb_s']:.0f} | {r['wall_mb_s']:.0f} | {'yes' if r['exact'] else 'NO'} |"
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--method",
        action="append",
        metavar="NAME[:key=value...]",
        help="a row (repeatable); default: every method, some twice",
    )
    p.add_argument("--workers", type=int, default=8, help="workers N (default 8)")
    p.add_argument("--elements", type=int, default=1 << 20, help="values per tensor (1M)")
    p.add_argument("--lanes", type=int, default=256, help="lanes per packet (header share)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per row (median)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="64K values, one timed run")


def main(args: argparse.Namespace) -> int:
    """Print the table as markdown; 2 with a one-line message for a bad row."""
    try:
        rows = [parse_row(r) for r in (args.method or DEFAULT_ROWS)]
        for name, a in rows:  # validate every row's arguments before running any
            make_communicator(name, args.workers, 0, 1, a)
    except ValueError as e:
        print(f"ina bench compressors: error: {e}", file=sys.stderr)
        return 2
    n = min(args.elements, 1 << 16) if args.quick else args.elements
    repeats = 1 if args.quick else args.repeats
    rng = np.random.default_rng(args.seed)
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(args.workers)]
    print(
        f"{args.workers} workers, {n} float32 values per worker, {args.lanes} lanes per packet "
        f"({HEADER_BYTES}-byte INA header)\n"
    )
    print(HEAD, flush=True)
    for name, a in rows:
        print(measure(name, a, xs, args.lanes, repeats), flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="ina bench compressors", description=__doc__.split("\n")[0]
    )
    add_arguments(parser)
    raise SystemExit(main(parser.parse_args(sys.argv[1:])))
