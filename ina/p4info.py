"""The P4Info of the INA P4 program, built from `ina.p4.entities`.

P4Info is the contract between a P4 program and its control plane: the ID, name and shape of
every table, action, counter and register. p4c emits it when it compiles ``ina/p4/``; the
switch model has no compiler run, so it serves the P4Info built here instead. Both must be the
same document (modulo annotations and source locations), because one control plane and one
interactive ``p4runtime-shell`` session drive either target. The P4 program pins every name
and ID with ``@name(".x")`` / ``@id(...)`` from `ina.p4.entities`, and this module follows
p4c's conventions for what it emits from such a program:

- ``pkg_info.arch`` is ``"v1model"``; ``type_info`` is present and empty;
- a global ``@name(".x")`` gives preamble name and alias ``x``;
- match field IDs and action parameter IDs count from 1 in declaration order;
- a table lists its actions as ``action_refs`` (scope TABLE_AND_DEFAULT, p4c's default), its
  ``const default_action`` as ``const_default_action_id`` (p4c 1.2.4, the one we build with,
  does not emit the newer ``initial_default_action``), and its ``size``;
- the table actions appear; ``NoAction`` does not, as no table lists it. (p4c also lists
  actions that the controls call directly, e.g. the lane updates: no controller can run
  them, so `p4info_differences` ignores actions that no table references.)
- ``counter(n, CounterType.packets_and_bytes)`` is a counter with unit BOTH and size n;
- ``register<bit<W>>(n)`` is a register with a ``bit<W>`` bitstring type spec and size n.

`p4info_differences` compares two P4Infos by what a control plane depends on (names, IDs,
widths, match kinds, action sets, sizes) and ignores the rest (annotations, documentation,
source locations, the default-action fields): the switch model uses it to accept p4c's own
P4Info for our program and to reject any other program.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from ina.p4 import entities

_MATCH_TYPES = {
    "exact": p4info_pb2.MatchField.EXACT,
    "lpm": p4info_pb2.MatchField.LPM,
    "ternary": p4info_pb2.MatchField.TERNARY,
    "range": p4info_pb2.MatchField.RANGE,
    "optional": p4info_pb2.MatchField.OPTIONAL,
}

_COUNTER_UNITS = {
    "BOTH": p4info_pb2.CounterSpec.BOTH,
    "PACKETS": p4info_pb2.CounterSpec.PACKETS,
    "BYTES": p4info_pb2.CounterSpec.BYTES,
}


def _preamble(msg, name: str, id_: int) -> None:
    msg.preamble.id = id_
    msg.preamble.name = name
    msg.preamble.alias = name


def build_p4info() -> p4info_pb2.P4Info:
    """The P4Info that p4c emits for the INA program (see the module docstring)."""
    info = p4info_pb2.P4Info()
    info.pkg_info.arch = "v1model"
    actions = entities.by_name(entities.ACTIONS)

    used: list[str] = []
    for t in entities.TABLES:
        tm = info.tables.add()
        _preamble(tm, t.name, t.id)
        for i, k in enumerate(t.keys, start=1):
            mf = tm.match_fields.add()
            mf.id = i
            mf.name = k.name
            mf.bitwidth = k.bits
            mf.match_type = _MATCH_TYPES[k.match]
        for a in t.actions:
            tm.action_refs.add().id = actions[a].id
            if a not in used:
                used.append(a)
        # The program declares `const default_action = <default>()`: a miss has a fixed
        # meaning (e.g. job_table miss = UNKNOWN_JOB drop) that no controller may change.
        tm.const_default_action_id = actions[t.default_action].id
        tm.size = t.size

    # Actions in declaration order of `entities.ACTIONS`, as p4c lists them in program order.
    for a in entities.ACTIONS:
        if a.name not in used:
            continue
        am = info.actions.add()
        _preamble(am, a.name, a.id)
        for i, p in enumerate(a.params, start=1):
            pm = am.params.add()
            pm.id = i
            pm.name = p.name
            pm.bitwidth = p.bits

    for c in entities.COUNTERS:
        cm = info.counters.add()
        _preamble(cm, c.name, c.id)
        cm.spec.unit = _COUNTER_UNITS[c.unit]
        cm.size = c.size

    for r in entities.REGISTERS:
        rm = info.registers.add()
        _preamble(rm, r.name, r.id)
        rm.type_spec.bitstring.bit.bitwidth = r.bits
        rm.size = r.size

    info.type_info.SetInParent()  # p4c always emits `type_info {}`
    return info


def p4info_text(info: p4info_pb2.P4Info | None = None) -> str:
    """Text format of a P4Info, with the header comments p4c writes."""
    info = build_p4info() if info is None else info
    return (
        "# proto-file: p4/config/v1/p4info.proto\n"
        "# proto-message: p4.config.v1.P4Info\n\n" + text_format.MessageToString(info)
    )


def write_p4info(path: str | Path) -> Path:
    """Write our P4Info in text format (what ``p4runtime-shell --config`` reads)."""
    path = Path(path)
    path.write_text(p4info_text())
    return path


def read_p4info(path: str | Path) -> p4info_pb2.P4Info:
    """Parse a P4Info text file (p4c's ``--p4runtime-files x.p4info.txtpb`` output)."""
    info = p4info_pb2.P4Info()
    text_format.Merge(Path(path).read_text(), info, allow_unknown_field=True)
    return info


def _shape(info: p4info_pb2.P4Info) -> dict[str, dict[int, tuple]]:
    """What a control plane depends on, per entity kind: id -> comparable description."""
    action_names = {a.preamble.id: a for a in info.actions}
    tables = {}
    referenced: set[int] = set()
    for t in info.tables:
        refs = frozenset(r.id for r in t.action_refs)
        referenced |= refs
        keys = tuple((m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields)
        tables[t.preamble.id] = (
            t.preamble.name,
            keys,
            refs,
            t.size,
            t.implementation_id,
            tuple(t.direct_resource_ids),
        )
    # Only actions some table can run matter: an unused action is dead code to a controller.
    actions = {
        i: (a.preamble.name, tuple((p.id, p.name, p.bitwidth) for p in a.params))
        for i, a in action_names.items()
        if i in referenced
    }
    missing = referenced - set(action_names)
    for i in missing:
        actions[i] = ("<missing action>", ())
    counters = {c.preamble.id: (c.preamble.name, c.spec.unit, c.size) for c in info.counters}
    registers = {
        r.preamble.id: (r.preamble.name, r.type_spec.SerializeToString(deterministic=True), r.size)
        for r in info.registers
    }
    others = {}
    for kind in (
        "action_profiles",
        "direct_counters",
        "meters",
        "direct_meters",
        "controller_packet_metadata",
        "value_sets",
        "digests",
    ):
        for x in getattr(info, kind):
            others[x.preamble.id] = (x.preamble.name, kind)
    for ext in info.externs:
        for x in ext.instances:
            others[x.preamble.id] = (x.preamble.name, ext.extern_type_name)
    return {
        "table": tables,
        "action": actions,
        "counter": counters,
        "register": registers,
        "other entity": others,
    }


def p4info_differences(
    got: p4info_pb2.P4Info, want: p4info_pb2.P4Info | None = None, limit: int = 10
) -> list[str]:
    """Human-readable differences between two P4Infos; empty if a controller can't tell."""
    want = build_p4info() if want is None else want
    a, b = _shape(got), _shape(want)
    out: list[str] = []
    for kind in b:
        for i in sorted(set(a[kind]) | set(b[kind])):
            if i not in a[kind]:
                out.append(f"{kind} {b[kind][i][0]!r} (id {i:#010x}) is missing")
            elif i not in b[kind]:
                out.append(f"unexpected {kind} {a[kind][i][0]!r} (id {i:#010x})")
            elif a[kind][i] != b[kind][i]:
                out.append(
                    f"{kind} {b[kind][i][0]!r} (id {i:#010x}) differs: "
                    f"got {a[kind][i]!r}, want {b[kind][i]!r}"
                )
    return out[:limit] if limit else out


__all__ = ["build_p4info", "p4info_differences", "p4info_text", "read_p4info", "write_p4info"]
