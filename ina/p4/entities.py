"""The control-plane entities of the INA P4 program, defined once.

The P4 program names every table, action, counter and register with a global ``@name(".x")``
and fixes its P4Runtime ID with ``@id(...)`` from this list (the generated include
``ina/p4/generated/ids_gen.p4``), so that the P4Info that p4c emits and the P4Info the switch model serves
(built from this module) agree, and one control plane drives both targets.

P4Runtime IDs carry the entity kind in their top byte (P4Runtime spec, "ID allocation"):
0x01 actions, 0x02 tables, 0x12 counters, 0x16 registers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ina.protocol import MAX_WORKERS, NUM_COUNTERS, P4_LANES

ACTION, TABLE, COUNTER, REGISTER = 0x01, 0x02, 0x12, 0x16

# Sizes of the P4 program (configuration.p4 repeats them with their reasons; a test checks).
POOL_SLOTS = 1024  # slots shared by all jobs; registers hold 2 shadow copies each
MAX_JOBS = 64  # job_table size and job_index range
WORKER_TABLE_SIZE = MAX_JOBS * MAX_WORKERS
FORWARD_TABLE_SIZE = 1024
# Multicast group ids BMv2 accepts: 1..32767 (a P4Runtime write of 32768 or more gets
# OUT_OF_RANGE from its packet replication engine; 0 is reserved by the P4Runtime spec). The
# model refuses the same ids, and the control plane never picks one (`JobSpec.entry`).
MAX_MCAST_GROUP = 0x7FFF


def _id(kind: int, n: int) -> int:
    return (kind << 24) | n


@dataclass(frozen=True)
class Param:
    name: str
    bits: int


@dataclass(frozen=True)
class Action:
    name: str
    id: int
    params: tuple[Param, ...] = ()


@dataclass(frozen=True)
class MatchField:
    name: str  # as P4Runtime clients name it (the @name of the key)
    bits: int
    match: str = "exact"


@dataclass(frozen=True)
class Table:
    name: str
    id: int
    keys: tuple[MatchField, ...]
    actions: tuple[str, ...]
    default_action: str
    size: int


@dataclass(frozen=True)
class CounterArray:
    name: str
    id: int
    size: int
    unit: str = "BOTH"  # packets and bytes


@dataclass(frozen=True)
class RegisterArray:
    name: str
    id: int
    size: int
    bits: int


ACTIONS: tuple[Action, ...] = (
    Action("NoAction", _id(ACTION, 1)),
    Action("drop", _id(ACTION, 2)),
    Action(
        "set_job",
        _id(ACTION, 3),
        (
            Param("job_index", 8),
            Param("num_workers", 8),
            Param("pool_base", 16),
            Param("pool_size", 16),
            Param("mcast_grp", 16),
        ),
    ),
    Action(
        "set_worker", _id(ACTION, 4), (Param("mac", 48), Param("ip", 32), Param("udp_port", 16))
    ),
    Action("forward", _id(ACTION, 5), (Param("port", 9),)),
    # hierarchical aggregation: where a leaf's completed slots go (docs/protocol.md)
    Action(
        "set_parent",
        _id(ACTION, 6),
        (
            Param("worker_id", 8),
            Param("port", 9),
            Param("mac", 48),
            Param("ip", 32),
            Param("udp_port", 16),
        ),
    ),
    Action("no_parent", _id(ACTION, 7)),
)

TABLES: tuple[Table, ...] = (
    # ingress: which job an INA packet belongs to
    Table(
        "job_table",
        _id(TABLE, 1),
        (MatchField("job_id", 16),),
        ("set_job", "drop"),
        "drop",
        MAX_JOBS,
    ),
    # egress: rewrite each result copy for the worker it goes to (worker id = replication id)
    Table(
        "worker_table",
        _id(TABLE, 2),
        (MatchField("job_id", 16), MatchField("worker_id", 8)),
        ("set_worker", "drop"),
        "drop",
        WORKER_TABLE_SIZE,
    ),
    # ingress: plain L2 forwarding of everything that is not INA
    Table(
        "forward_table",
        _id(TABLE, 3),
        (MatchField("dst_mac", 48),),
        ("forward", "drop"),
        "drop",
        FORWARD_TABLE_SIZE,
    ),
    # ingress: a job's parent switch (hierarchical aggregation); no entry: a top-level job
    Table(
        "parent_table",
        _id(TABLE, 4),
        (MatchField("job_id", 16),),
        ("set_parent", "no_parent"),
        "no_parent",
        MAX_JOBS,
    ),
)

COUNTERS: tuple[CounterArray, ...] = (
    CounterArray("ina_stats", _id(COUNTER, 1), NUM_COUNTERS),
    CounterArray("worker_contributions", _id(COUNTER, 2), MAX_JOBS * MAX_WORKERS),
)

_REG_SIZE = POOL_SLOTS * 2
JOIN_NONCE_SIZE = MAX_JOBS * MAX_WORKERS  # one nonce per (job_index, worker_id)
REGISTERS: tuple[RegisterArray, ...] = (
    RegisterArray("slot_seq", _id(REGISTER, 1), _REG_SIZE, 32),
    RegisterArray("slot_bitmap", _id(REGISTER, 2), _REG_SIZE, 32),
    RegisterArray("slot_count", _id(REGISTER, 3), _REG_SIZE, 8),
    RegisterArray("slot_exp", _id(REGISTER, 4), _REG_SIZE, 8),
    RegisterArray("slot_level", _id(REGISTER, 5), _REG_SIZE, 8),
    RegisterArray("slot_epoch", _id(REGISTER, 6), _REG_SIZE, 32),
    # JoinRun: per job (job_index), and per job and worker for the nonces
    RegisterArray("job_epoch", _id(REGISTER, 7), MAX_JOBS, 32),
    RegisterArray("join_bitmap", _id(REGISTER, 8), MAX_JOBS, 32),
    RegisterArray("join_count", _id(REGISTER, 9), MAX_JOBS, 8),
    RegisterArray("join_nonce", _id(REGISTER, 10), JOIN_NONCE_SIZE, 32),
    # hierarchical aggregation: a copy holds its parent's result (1) or only the partial
    # sum (0); per job, the nonce of the run join sent up and whether the parent answered
    RegisterArray("slot_down", _id(REGISTER, 11), _REG_SIZE, 8),
    RegisterArray("up_nonce", _id(REGISTER, 12), MAX_JOBS, 32),
    RegisterArray("up_joined", _id(REGISTER, 13), MAX_JOBS, 8),
    *(
        RegisterArray(f"slot_lane_{i}", _id(REGISTER, 16 + i), _REG_SIZE, 32)
        for i in range(P4_LANES)
    ),
)


def by_name(items):
    """{name: item} for one of the lists above."""
    return {x.name: x for x in items}
