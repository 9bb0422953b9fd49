"""The layers read top-down (docs/architecture.md, "Layers"): a static import graph of
`ina` and `bmv2_topologies`, every import counted, deferred ones inside functions included.

1. No module imports, directly or through others, a module that imports it back.
2. Each package imports only its own layer or those below it, and the two ways to train (`ina.sim`
   in simulated time, `ina.train` on the wall clock) never import each other: what both use
   lives in `ina.workload` below them.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ina", "bmv2_topologies")

# Top to bottom. A module belongs to the first entry that is its name or a prefix of it.
LAYERS: list[tuple[str, ...]] = [
    ("ina.__main__", "ina.cli", "ina.train_cli", "ina.experiments", "ina.bench", "bmv2_topologies"),
    ("ina.sim", "ina.train"),
    ("ina.workload",),
    ("ina.compressors", "ina.host", "ina.netem", "ina.topology"),
    ("ina.control",),
    ("ina.switch_model",),
    ("ina.p4", "ina.p4gen", "ina.p4build", "ina.p4info", "ina.scapy_layer"),
    ("ina.protocol", "ina.errors", "ina.units", "ina.registry", "ina.procs", "ina.netio",
     "ina.packet_socket", "ina"),
]  # fmt: skip
APART = {("ina.sim", "ina.train"), ("ina.train", "ina.sim")}


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = f
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (``from a import b`` counts ``a.b`` when
    ``b`` is a module, else ``a``)."""
    mods = modules()

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for mod, path in mods.items():
        deps = set()
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps |= {known(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:
                    full = f"{base}.{a.name}"
                    deps.add(full if full in mods else known(base))
        graph[mod] = deps - {None, mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def layer_of(mod: str) -> tuple[int, str]:
    best = None
    for rank, names in enumerate(LAYERS):
        for name in names:
            if (mod == name or mod.startswith(name + ".")) and (
                best is None or len(name) > len(best[1])
            ):
                best = (rank, name)
    assert best is not None, f"{mod} is in no layer: add it to LAYERS"
    return best


def test_the_graph_sees_deferred_imports():
    graph = import_graph()
    # ina.cli imports its commands by name only; ina.sim.backends defers ns3net's import
    assert "ina.sim.ns3net" in graph["ina.sim.backends"]
    assert "ina.sim.network" in graph["ina.sim.ns3net"]


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_layers_read_top_down():
    bad = []
    for mod, deps in import_graph().items():
        rank, home = layer_of(mod)
        for dep in deps:
            dep_rank, dep_home = layer_of(dep)
            if dep_rank < rank or (home, dep_home) in APART:
                bad.append(f"{mod} ({home}) imports {dep} ({dep_home})")
    assert not bad, "imports against the layers:\n" + "\n".join(sorted(bad))
