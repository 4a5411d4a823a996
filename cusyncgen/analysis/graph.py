"""Pass 5, the dependency graph: no grid depends on itself, directly or through a cycle of Deps,
and no two generated structs share a name. Output: the same Proved."""

from __future__ import annotations

from cusyncgen.errors import CyclicDependencyError, DuplicateNameError

from .bounds import Proved


def check(proved: Proved) -> Proved:
    _cycles(proved)
    _cxx_names(proved)
    return proved


def _cycles(proved: Proved) -> None:
    graph: dict = {}
    for d in proved.deps:
        span = proved.decls[d.name].span
        for p in d.producers:
            if p.grid == d.consumer:
                raise CyclicDependencyError(f"Dep '{d.name}': grid '{d.consumer}' depends on "
                                            f"itself", span)
            graph.setdefault(d.consumer, []).append(p.grid)
            path = _path(graph, p.grid, d.consumer)  # does p.grid reach d.consumer already?
            if path:
                chain = " -> ".join([d.consumer] + path)
                raise CyclicDependencyError(f"Dep '{d.name}' closes a cycle: {chain} "
                                            f"(consumer -> producer)", span)


def _path(graph: dict, src: str, dst: str) -> list:
    stack, seen = [(src, [src])], {src}
    while stack:
        node, path = stack.pop()
        if node == dst:
            return path
        for nxt in graph.get(node, []):
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return []


def _cxx_names(proved: Proved) -> None:
    """Generated struct names (g, g_order, dep_prod_Policy, dep_prod_waits) must not clash."""
    scope = proved.values.scope
    owner: dict = {}
    for g in proved.values.grids.values():
        for n in (g.name, g.name + "_order"):
            owner.setdefault(n, []).append(scope.syms[g.name].decl.span)
    for d in proved.deps:
        for p in d.producers:
            owner.setdefault(f"{d.name}_{p.grid}_waits", []).append(proved.decls[d.name].span)
    for n, spans in owner.items():
        if len(spans) > 1:
            raise DuplicateNameError(f"two generated structs would both be named '{n}'; "
                                     f"rename a Grid or Dep", spans[-1])
