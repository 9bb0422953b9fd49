"""The P4 sources agree with the Python definitions they are generated from or mirror.

Pure text checks (no compiler): regeneration is a no-op, the P4 INA header layout equals
`protocol.HEADER_FIELDS`, the P4 constants equal the Python enums and sizes, and every entity
of `ina.p4.entities` appears in the P4 sources with its global ``@name`` and its ``@id``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ina import p4gen, protocol
from ina.p4 import entities

P4_DIR = Path(p4gen.__file__).resolve().parent / "p4"
REPO = P4_DIR.parent.parent


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _sources() -> dict[str, str]:
    """Every P4 file of the program (hand-written and generated), comments removed."""
    files = sorted(P4_DIR.glob("*.p4")) + sorted((P4_DIR / "generated").glob("*.p4"))
    return {str(f.relative_to(P4_DIR)): _strip_comments(f.read_text()) for f in files}


def _all_text() -> str:
    return "\n".join(_sources().values())


def _typedef_widths() -> dict[str, int]:
    return {m[2]: int(m[1]) for m in re.finditer(r"typedef\s+bit<(\d+)>\s+(\w+)\s*;", _all_text())}


def _header_fields(name: str) -> list[tuple[str, int]]:
    """(field, width) of ``header name { ... }`` in the P4 sources, typedefs resolved."""
    m = re.search(rf"header\s+{name}\s*\{{(.*?)\}}", _all_text(), re.S)
    assert m, f"header {name} not found in the P4 sources"
    widths = _typedef_widths()
    out = []
    for decl in filter(None, (d.strip() for d in m[1].split(";"))):
        typ, field = decl.split()
        bits = re.fullmatch(r"bit<(\d+)>", typ)
        out.append((field, int(bits[1]) if bits else widths[typ]))
    return out


def _const_exprs() -> dict[str, str]:
    """NAME -> right-hand side of every ``const <type> NAME = <expr>;``."""
    return {
        m[1]: m[2].strip()
        for m in re.finditer(r"\bconst\s+[\w<>]+\s+(\w+)\s*=\s*([^;]+);", _all_text())
    }


def _const_values() -> dict[str, int]:
    """Values of the P4 constants whose right-hand side is integer arithmetic on constants."""
    exprs = _const_exprs()
    values: dict[str, int] = {}

    def value(name: str) -> int:
        if name not in values:
            expr = re.sub(r"\(\s*[a-z_]\w*_t\s*\)", "", exprs[name])  # drop casts to typedefs
            expr = re.sub(r"\b\d+w(\w+)", r"\1", expr)  # 32w5 -> 5
            if not re.fullmatch(r"[\w\s()+*<>-]+", expr):
                raise ValueError(f"{name} = {expr!r} is not simple arithmetic")
            py = re.sub(r"\b([A-Z_][A-Z0-9_]*)\b", lambda m: str(value(m[1])), expr)
            values[name] = int(eval(py, {"__builtins__": {}}))  # digits and + * << only
        return values[name]

    for name in exprs:
        try:
            value(name)
        except (ValueError, KeyError, SyntaxError):
            pass
    return values


def _block(text: str, opener: str) -> str:
    """Body of the brace-delimited block that starts at the regex ``opener``."""
    m = re.search(opener + r"\s*\{", text)
    assert m, opener
    depth, i = 1, m.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[m.end() : i - 1]


def _defines() -> dict[str, int]:
    text = _all_text()
    return {
        m[1]: int(m[2], 0) for m in re.finditer(r"#define\s+(\w+)\s+(0x[0-9a-fA-F]+|\d+)", text)
    }


# -- regeneration ------------------------------------------------------------------------


def test_generated_files_are_up_to_date():
    stale = p4gen.stale_files()
    assert not stale, "stale generated P4 (run `python -m ina.p4gen`):\n" + "\n".join(
        stale.values()
    )


def test_check_command_passes_on_checked_in_files():
    proc = subprocess.run(
        [sys.executable, "-m", "ina.p4gen", "--check"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_check_command_detects_a_stale_file(tmp_path):
    p4gen.write_files(tmp_path)
    assert p4gen.stale_files(tmp_path) == {}
    f = tmp_path / "headers_gen.p4"
    f.write_text(f.read_text().replace("seq_t", "bit<16>", 1))
    proc = subprocess.run(
        [sys.executable, "-m", "ina.p4gen", "--check", "--dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "headers_gen.p4" in proc.stderr


# -- the wire format ---------------------------------------------------------------------


def test_ina_header_layout_equals_protocol():
    assert _header_fields("ina_h") == [(f.name, f.bits) for f in protocol.HEADER_FIELDS]
    assert sum(bits for _, bits in _header_fields("ina_h")) == protocol.HEADER_BYTES * 8


def test_lanes_header_has_p4_lanes_int32_lanes():
    lanes = _header_fields("ina_lanes_h")
    assert lanes == [(f"lane_{i}", protocol.LANE_BYTES * 8) for i in range(protocol.P4_LANES)]


def test_headers_struct_in_wire_order():
    m = re.search(r"struct\s+headers_t\s*\{(.*?)\}", _all_text(), re.S)
    types = [d.split()[0] for d in filter(None, (x.strip() for x in m[1].split(";")))]
    assert types == ["ethernet_h", "ipv4_h", "udp_h", "ina_h", "ina_lanes_h"]
    emits = re.findall(r"pkt\.emit\(hdr\.(\w+)\)", _sources()["parser.p4"])
    assert emits == ["ethernet", "ipv4", "udp", "ina", "lanes"]


# -- constants ---------------------------------------------------------------------------


def test_protocol_constants():
    c = _const_values()
    assert c["INA_VERSION"] == protocol.VERSION
    assert c["INA_UDP_PORT"] == protocol.UDP_PORT
    assert c["INA_HEADER_BYTES"] == protocol.HEADER_BYTES
    assert c["INA_LANE_BYTES"] == protocol.LANE_BYTES
    assert c["INA_MAX_WORKERS"] == protocol.MAX_WORKERS


@pytest.mark.parametrize(
    "enum, prefix",
    [
        (protocol.Op, "OP_"),
        (protocol.Flag, "FLAG_"),
        (protocol.DropReason, "DROP_REASON_"),
        (protocol.Counter, "COUNTER_"),
    ],
)
def test_enum_constants_equal_python(enum, prefix):
    c = _const_values()
    p4 = {
        k.removeprefix(prefix): v
        for k, v in c.items()
        if k.startswith(prefix) and k != "COUNTER_DROP_FIRST"
    }
    assert p4 == {m.name: int(m) for m in enum}


def test_counter_sizes_and_drop_counters():
    c = _const_values()
    assert c["NUM_COUNTERS"] == protocol.NUM_COUNTERS
    for reason, counter in protocol.DROP_COUNTER.items():
        assert c["COUNTER_DROP_FIRST"] + int(reason) == int(counter)


def test_configuration_equals_entities():
    c = _const_values()
    assert c["P4_LANES"] == protocol.P4_LANES
    assert c["POOL_SLOTS"] == entities.POOL_SLOTS
    assert c["SLOT_REGISTER_SIZE"] == entities.POOL_SLOTS * 2
    assert c["MAX_JOBS"] == entities.MAX_JOBS
    assert c["WORKER_TABLE_SIZE"] == entities.WORKER_TABLE_SIZE
    assert c["FORWARD_TABLE_SIZE"] == entities.FORWARD_TABLE_SIZE
    assert c["WORKER_COUNTER_SIZE"] == entities.MAX_JOBS * protocol.MAX_WORKERS
    assert c["INA_UDP_LENGTH"] == 8 + protocol.packet_bytes(protocol.P4_LANES)


# -- control-plane entities --------------------------------------------------------------


def _table_referenced_actions() -> set[str]:
    return {a for t in entities.TABLES for a in t.actions}


def _expected_entities() -> list[tuple[int, str, int]]:
    out = [
        (entities.ACTION, a.name, a.id)
        for a in entities.ACTIONS
        # p4c emits only actions that some table lists; NoAction is core.p4's own and
        # cannot carry our @id, so an unreferenced action need not (cannot) appear.
        if a.name in _table_referenced_actions()
    ]
    out += [(entities.TABLE, t.name, t.id) for t in entities.TABLES]
    out += [(entities.COUNTER, c.name, c.id) for c in entities.COUNTERS]
    out += [(entities.REGISTER, r.name, r.id) for r in entities.REGISTERS]
    return out


def test_ids_gen_defines_every_entity_id():
    defines = _defines()
    for kind, name, id_ in [
        (entities.ACTION, a.name, a.id) for a in entities.ACTIONS
    ] + _expected_entities():
        assert defines[p4gen.id_macro(kind, name)] == id_, name


@pytest.mark.parametrize(
    "kind, name, id_", _expected_entities(), ids=[n for _, n, _ in _expected_entities()]
)
def test_entity_declared_with_global_name_and_id(kind, name, id_):
    text = _all_text()
    macro = p4gen.id_macro(kind, name)
    pattern = rf'@name\("\.{re.escape(name)}"\)\s*@id\({macro}\)'
    hits = re.findall(pattern, text)
    assert len(hits) == 1, f'{name}: expected one `@name(".{name}") @id({macro})`'
    assert _defines()[macro] == id_


def test_every_global_name_is_an_entity():
    names = set(re.findall(r'@name\("\.(\w+)"\)', _all_text()))
    assert names == {n for _, n, _ in _expected_entities()}


def test_table_sizes_and_match_keys():
    c = _const_values()
    text = _all_text()
    for t in entities.TABLES:
        body = _block(text, rf"\btable\s+{t.name}")
        size = re.search(r"size\s*=\s*(\w+)\s*;", body)[1]
        assert (int(size) if size.isdigit() else c[size]) == t.size, t.name
        keys = re.findall(r':\s*(\w+)\s*@name\("(\w+)"\)', body)
        assert keys == [(k.match, k.name) for k in t.keys], t.name
        actions = re.search(r"actions\s*=\s*\{(.*?)\}", body, re.S)[1]
        listed = [a.strip().split("(")[0] for a in actions.split(";") if a.strip()]
        assert sorted(listed) == sorted(t.actions), t.name
        default = re.search(r"const\s+default_action\s*=\s*(\w+)", body)[1]
        assert default == t.default_action, t.name


def test_action_parameters():
    text = _all_text()
    widths = _typedef_widths()
    for a in entities.ACTIONS:
        if a.name not in _table_referenced_actions():
            continue
        m = re.search(rf'@name\("\.{a.name}"\)[^\n]*\n?\s*action\s+{a.name}\s*\(([^)]*)\)', text)
        assert m, a.name
        params = []
        for p in filter(None, (x.strip() for x in m[1].split(","))):
            parts = p.split()
            if parts[0] in ("in", "out", "inout"):
                continue  # directional: bound in the table, not a control-plane parameter
            typ, pname = parts
            bits = re.fullmatch(r"bit<(\d+)>", typ)
            params.append((pname, int(bits[1]) if bits else widths[typ]))
        assert params == [(p.name, p.bits) for p in a.params], a.name


def test_register_and_counter_declarations():
    text = _all_text()
    widths = _typedef_widths()
    c = _const_values()
    for r in entities.REGISTERS:
        m = re.search(
            rf'@name\("\.{r.name}"\)[^\n]*\n\s*register<(\w+)>\((\w+)\)\s+{r.name};', text
        )
        assert m, r.name
        assert widths[m[1]] == r.bits, r.name
        assert c[m[2]] == r.size, r.name
    for k in entities.COUNTERS:
        m = re.search(
            rf'@name\("\.{k.name}"\)[^\n]*\n\s*counter\((\w+),\s*CounterType\.'
            rf"packets_and_bytes\)\s+{k.name};",
            text,
        )
        assert m, k.name
        assert k.unit == "BOTH"
        assert c[m[1]] == k.size, k.name


def test_one_control_per_file():
    """Our P4 style (after p4app-switchML): one control per function, in a snake_case file
    named after it."""
    for name, text in _sources().items():
        if name.startswith("generated/") or name in ("ina.p4", "parser.p4"):
            continue
        controls = re.findall(r"\bcontrol\s+(\w+)\s*\(", text)
        if not controls:
            continue
        assert len(controls) == 1, name
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", controls[0]).lower()
        assert f"{snake}.p4" == name
