"""The INA program's P4Info by ID, as the switch model's P4Runtime service validates requests.

`Schema` indexes a P4Info (`ina.p4info.build_p4info`) once: tables with their match fields,
actions and default action (`TableInfo`), actions with their parameters (`ActionInfo`),
counters and registers. A request that names an ID the P4Info does not have is
INVALID_ARGUMENT, as BMv2's P4Runtime server (PI) answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from p4.config.v1 import p4info_pb2

from ina.switch_model.p4rt_values import SC, fail


@dataclass(frozen=True)
class TableInfo:
    """One table of the P4Info."""

    id: int
    name: str
    fields: tuple[tuple[int, str, int, int], ...]  # (id, name, bitwidth, match type)
    actions: frozenset[int]
    default_action: int
    size: int


@dataclass(frozen=True)
class ActionInfo:
    """One action of the P4Info."""

    id: int
    name: str
    params: tuple[tuple[int, str, int], ...]  # (id, name, bitwidth)


class Schema:
    """Entities of the P4Info by ID, for validating requests."""

    def __init__(self, info: p4info_pb2.P4Info) -> None:
        self.tables = {
            t.preamble.id: TableInfo(
                t.preamble.id,
                t.preamble.name,
                tuple((m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields),
                frozenset(r.id for r in t.action_refs),
                t.const_default_action_id or t.initial_default_action.action_id,
                t.size,
            )
            for t in info.tables
        }
        self.actions = {
            a.preamble.id: ActionInfo(
                a.preamble.id,
                a.preamble.name,
                tuple((p.id, p.name, p.bitwidth) for p in a.params),
            )
            for a in info.actions
        }
        self.counters = {c.preamble.id: c for c in info.counters}
        self.registers = {r.preamble.id: r for r in info.registers}
        self.table_id = {t.name: i for i, t in self.tables.items()}
        self.action_id = {a.name: i for i, a in self.actions.items()}

    def table(self, table_id: int) -> TableInfo:
        """The table with ``table_id``; INVALID_ARGUMENT if there is none."""
        t = self.tables.get(table_id)
        if t is None:
            raise fail(SC.INVALID_ARGUMENT, f"unknown table id {table_id:#x}")
        return t
