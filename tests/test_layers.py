"""The package's layers (STYLE.md, "Layers"): commands -> workloads -> mechanism (cusyncgen.cuda)
-> runtime_cuda. Read from the source (every import statement, those inside functions too: a lazy
import is still an arrow), with each subpackage one node and each top-level module its own:

- no two nodes import each other, directly or around a cycle;
- nothing below the commands imports one (cusyncgen.commands, the cli), and the mechanism imports
  no workload."""
import ast
from pathlib import Path

import cusyncgen

ROOT = Path(cusyncgen.__file__).resolve().parent
COMMANDS = ("cusyncgen.commands", "cusyncgen.cli")
BELOW_COMMANDS = ("cusyncgen.workloads", "cusyncgen.cuda")


def _modules() -> dict:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ("cusyncgen",) + path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set:
    """The cusyncgen modules `name` imports (a from-import of a name resolves to the module that
    holds it, or to the module itself)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for t in targets:
            while t not in MODULES and "." in t:
                t = t.rsplit(".", 1)[0]
            if t in MODULES and t != name:
                out.add(t)
    return out


EDGES = {name: _imports(name, path) for name, path in MODULES.items()}


def _node(module: str) -> str:
    """The module's node: its subpackage (cusyncgen.cuda, cusyncgen.workloads, ...) or itself."""
    parts = module.split(".")
    if len(parts) > 1 and (ROOT / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def _node_graph() -> dict:
    graph: dict = {}
    for a, targets in EDGES.items():
        for b in targets:
            if _node(a) != _node(b):
                graph.setdefault(_node(a), {}).setdefault(_node(b), (a, b))
    return graph


def _cycle(graph: dict):
    """One cycle of `graph` as a list of nodes, or None."""
    state: dict = {}
    stack: list = []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in graph.get(v, {}):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_the_graph_is_read_from_the_source():
    # known arrows, one per layer, so that an empty graph cannot pass
    assert "cusyncgen.workloads.mlp" in EDGES["cusyncgen.commands.tune"]
    assert "cusyncgen.cuda.chain" in EDGES["cusyncgen.workloads.mlp"]
    assert "cusyncgen.cuda.configs" in EDGES["cusyncgen.cuda.chain"]
    assert "cusyncgen.commands.bench" in EDGES["cusyncgen.commands.tune"]


def test_no_package_is_in_an_import_cycle_with_another():
    graph = _node_graph()
    cycle = _cycle(graph)
    if cycle:
        why = "; ".join(f"{a} imports {b}" for a, b in (graph[u][v] for u, v in zip(cycle, cycle[1:])))
        raise AssertionError(f"import cycle {' -> '.join(cycle)}: {why}")


def test_nothing_below_the_commands_imports_one_and_the_mechanism_no_workload():
    bad = []
    for a, targets in EDGES.items():
        for b in targets:
            if a.startswith(BELOW_COMMANDS) and b.startswith(COMMANDS):
                bad.append(f"{a} imports the command {b}")
            if a.startswith("cusyncgen.cuda") and b.startswith("cusyncgen.workloads"):
                bad.append(f"the mechanism's {a} imports the workload {b}")
    assert not bad, "\n".join(bad)
