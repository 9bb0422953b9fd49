"""The switch's aggregation counters over P4Runtime, and the rates derived from them.

Two indexed counter arrays, packets and bytes each (identical on BMv2 and the model):

- ``ina_stats[i]`` for ``i`` in `ina.protocol.Counter` (packets in, aggregated, duplicates,
  results, drops by reason, ...). Snapshots name them ``Counter.X.name.lower()``.
- ``worker_contributions[job_index * MAX_WORKERS + worker_id]``: contributions each worker
  made to each job.

Byte counts are whole frames (Ethernet 14 + IPv4 20 + UDP 8 = `FRAME_OVERHEAD` 42, INA header
`HEADER_BYTES` 20, then 4 bytes per lane). So the gradient payload of the counted packets is
``bytes - packets * (42 + 20)``, whatever their lane count: `Rates` derives Gbit/s from that
unless told the lane count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import grpc

from ina.control.p4rt import MODIFY, P4RuntimeError, SwitchConnection
from ina.protocol import FRAME_OVERHEAD, HEADER_BYTES, LANE_BYTES, MAX_WORKERS, Counter

STATS = "ina_stats"
WORKERS = "worker_contributions"
PACKET_OVERHEAD = FRAME_OVERHEAD + HEADER_BYTES  # bytes of a counted frame that are not lanes


@dataclass(frozen=True)
class CounterSnapshot:
    """Counter values at one moment (``time`` from `time.monotonic`)."""

    time: float
    stats: dict[str, tuple[int, int]]  # Counter name lowercased -> (packets, bytes)
    workers: dict[tuple[int, int], tuple[int, int]]  # (job_index, worker) -> (packets, bytes)

    def packets(self, c: Counter) -> int:
        return self.stats[c.name.lower()][0]

    def bytes(self, c: Counter) -> int:
        return self.stats[c.name.lower()][1]

    def as_dict(self) -> dict[str, tuple[int, int]]:
        """Flat {name: (packets, bytes)}; workers as ``worker_contributions[job][worker]``."""
        out = dict(self.stats)
        for (j, w), v in sorted(self.workers.items()):
            out[f"{WORKERS}[{j}][{w}]"] = v
        return out


def read_counters(conn: SwitchConnection, workers: bool = True) -> CounterSnapshot:
    """Read ``ina_stats`` (and, with ``workers``, the non-zero ``worker_contributions``)
    in one Read batch."""
    queries = [conn.counter_entry(STATS)]
    if workers:
        queries.append(conn.counter_entry(WORKERS))
    got = conn.read(queries)
    now = time.monotonic()
    stats_id = conn.p4.counters[STATS].preamble.id
    stats = {c.name.lower(): (0, 0) for c in Counter}
    per_worker: dict[tuple[int, int], tuple[int, int]] = {}
    for e in got:
        ce = e.counter_entry
        value = (ce.data.packet_count, ce.data.byte_count)
        if ce.counter_id == stats_id:
            if ce.index.index < len(Counter):
                stats[Counter(ce.index.index).name.lower()] = value
        elif value != (0, 0):
            per_worker[divmod(ce.index.index, MAX_WORKERS)] = value
    return CounterSnapshot(now, stats, per_worker)


def reset_counters(conn: SwitchConnection) -> None:
    """Zero both counter arrays.

    One wildcard MODIFY per array where the target supports it (the switch model); BMv2's
    P4Runtime server answers UNIMPLEMENTED for wildcard writes of indirect counters, so there
    every cell is written, in batches.
    """
    try:
        conn.write(
            [
                conn.update(MODIFY, conn.counter_entry(STATS, packets=0, bytes_=0)),
                conn.update(MODIFY, conn.counter_entry(WORKERS, packets=0, bytes_=0)),
            ]
        )
        return
    except P4RuntimeError as e:
        if grpc.StatusCode.UNIMPLEMENTED not in e.codes:
            raise
    for name in (STATS, WORKERS):
        size = conn.p4.counters[name].size
        for lo in range(0, size, 256):
            conn.write(
                [
                    conn.update(MODIFY, conn.counter_entry(name, i, packets=0, bytes_=0))
                    for i in range(lo, min(lo + 256, size))
                ]
            )


@dataclass(frozen=True)
class Rates:
    """Per-second rates between two snapshots."""

    seconds: float
    packets: dict[str, float]  # counter name -> packets/s
    payload_gbps: float  # gradient payload aggregated (AGGREGATED lanes), Gbit/s
    result_gbps: float  # gradient payload of the results sent (RESULT_PACKETS lanes), Gbit/s


def payload_bytes(snap: CounterSnapshot, c: Counter, lanes: int | None = None) -> int:
    """Lane bytes in the frames counted by ``c``: from the lane count if given, else from
    the byte counter minus the per-frame overhead (exact for any mix of packet sizes)."""
    pkts, nbytes = snap.stats[c.name.lower()]
    if lanes is not None:
        return pkts * lanes * LANE_BYTES
    return max(0, nbytes - pkts * PACKET_OVERHEAD)


def rates(prev: CounterSnapshot, cur: CounterSnapshot, lanes: int | None = None) -> Rates:
    """Rates from ``prev`` to ``cur`` (counters reset in between read as zero rates)."""
    dt = max(cur.time - prev.time, 1e-9)
    pkts = {k: max(0, cur.stats[k][0] - prev.stats[k][0]) / dt for k in cur.stats}

    def gbps(c: Counter) -> float:
        d = payload_bytes(cur, c, lanes) - payload_bytes(prev, c, lanes)
        return max(0, d) * 8 / dt / 1e9

    return Rates(dt, pkts, gbps(Counter.AGGREGATED), gbps(Counter.RESULT_PACKETS))


__all__ = [
    "PACKET_OVERHEAD",
    "CounterSnapshot",
    "Rates",
    "payload_bytes",
    "rates",
    "read_counters",
    "reset_counters",
]
