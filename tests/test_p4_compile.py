"""The P4 program compiles with p4c-bm2-ss, and its P4Info is the one of `ina.p4.entities`.

Skipped (with the reason) when ``p4c-bm2-ss`` is not on PATH; `ina.p4build` says how to get
it. One compile per session (module fixture): p4c takes several seconds.
"""

from __future__ import annotations

import json
import shutil

import pytest

from ina import p4build, protocol
from ina.p4 import entities
from ina.p4info import p4info_differences, read_p4info

needs_p4c = pytest.mark.skipif(
    shutil.which(p4build.COMPILER) is None,
    reason=f"{p4build.COMPILER} not on PATH (see `python -m ina.p4build`)",
)


def test_missing_compiler_is_explained(capsys):
    assert p4build.main(["--p4c", "/nonexistent/p4c-bm2-ss"]) == 2
    err = capsys.readouterr().err
    assert "p4c-bm2-ss" in err and "PATH" in err


def test_compile_command_flags(tmp_path):
    out = p4build.BuildOutputs.in_dir(tmp_path)
    cmd = p4build.compile_command("p4c-bm2-ss", out)
    assert cmd[:3] == ["p4c-bm2-ss", "--arch", "v1model"]
    assert cmd[cmd.index("--p4runtime-files") + 1] == str(out.p4info)
    assert cmd[cmd.index("-o") + 1] == str(out.json)
    assert cmd[-1] == str(p4build.MAIN_P4)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return p4build.build(tmp_path_factory.mktemp("p4"))


@needs_p4c
@pytest.mark.bmv2
def test_p4info_equals_entities(built):
    info = read_p4info(built.p4info)
    assert p4info_differences(info, limit=0) == []


@needs_p4c
@pytest.mark.bmv2
def test_p4info_entities_ids_and_shapes(built):
    """The same, spelled out entity by entity (clearer failures than the diff above)."""
    info = read_p4info(built.p4info)
    tables = {t.preamble.name: t for t in info.tables}
    actions = {a.preamble.name: a for a in info.actions}
    counters = {c.preamble.name: c for c in info.counters}
    registers = {r.preamble.name: r for r in info.registers}
    action_ids = {a.name: a.id for a in entities.ACTIONS}
    for t in entities.TABLES:
        got = tables[t.name]
        assert got.preamble.id == t.id
        assert [(m.name, m.bitwidth) for m in got.match_fields] == [
            (k.name, k.bits) for k in t.keys
        ]
        assert {r.id for r in got.action_refs} == {action_ids[a] for a in t.actions}
        assert got.const_default_action_id == action_ids[t.default_action]
        assert got.size == t.size
    for a in entities.ACTIONS:
        if not any(a.name in t.actions for t in entities.TABLES):
            assert a.name not in actions  # p4c drops actions no table lists
            continue
        got = actions[a.name]
        assert got.preamble.id == a.id
        assert [(p.name, p.bitwidth) for p in got.params] == [(p.name, p.bits) for p in a.params]
    for c in entities.COUNTERS:
        assert counters[c.name].preamble.id == c.id
        assert counters[c.name].size == c.size
    for r in entities.REGISTERS:
        got = registers[r.name]
        assert got.preamble.id == r.id
        assert got.size == r.size
        assert got.type_spec.bitstring.bit.bitwidth == r.bits
    assert set(tables) == {t.name for t in entities.TABLES}
    assert set(counters) == {c.name for c in entities.COUNTERS}
    assert set(registers) == {r.name for r in entities.REGISTERS}


@needs_p4c
@pytest.mark.bmv2
def test_bmv2_json_layout(built):
    """The BMv2 JSON carries the INA header as protocol.py defines it, and every register."""
    prog = json.loads(built.json.read_text())
    types = {h["name"]: h for h in prog["header_types"]}
    headers = {h["name"]: types[h["header_type"]] for h in prog["headers"]}
    ina_fields = [(f[0], f[1]) for f in headers["ina"]["fields"]]
    assert ina_fields == [(f.name, f.bits) for f in protocol.HEADER_FIELDS]
    assert len(headers["lanes"]["fields"]) == protocol.P4_LANES
    regs = {r["name"]: r for r in prog["register_arrays"]}
    for r in entities.REGISTERS:
        assert regs[r.name]["size"] == r.size and regs[r.name]["bitwidth"] == r.bits
    ctrs = {c["name"]: c for c in prog["counter_arrays"]}
    for c in entities.COUNTERS:
        assert ctrs[c.name]["size"] == c.size
