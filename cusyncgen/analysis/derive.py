"""Pass 6, derivation (the paper's section V): the tile order of every grid and the candidate
synchronization policies of every (Dep, producer) pair. Output: Analysis (the ProgramIR and the
warnings of every pass)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Optional

from cusyncgen import ir
from cusyncgen.errors import ValueRangeError

from .affine import coef_of
from .bounds import Proved
from .evaluate import INT_MAX

AXES = ir.AXES
#: per-consumer producer tiles beyond which policy grouping is not derived from samples
SAMPLE_LIMIT = 100_000


@dataclass(frozen=True)
class Analysis:
    """The analysis' result: the program and the warnings (CusyncWarning, in source order)."""

    program: ir.ProgramIR
    warnings: tuple = ()


def derive(proved: Proved) -> Analysis:
    values = proved.values
    scope = values.scope
    grids, deps = values.grids, proved.deps
    orders = derive_orders(deps, grids)
    policies = tuple(p for d in deps for prod in d.producers
                     for p in derive_policies(grids, d, prod))
    for p in policies:
        if p.num_sems > INT_MAX:
            raise ValueRangeError(f"policy {p.struct_name} needs {p.num_sems} semaphores",
                                  proved.decls[p.dep].span)
    overrides = tuple((n, v) for n, v in values.param_values if n in scope.params)
    source = PurePath(scope.program.file).name or scope.program.file  # no directories in headers
    program = ir.ProgramIR(scope.namespace, source, tuple(values.param_values), overrides,
                           tuple(grids.values()), deps, orders, policies)
    warnings = tuple(dict.fromkeys(proved.warnings))  # a named ForAll used twice warns once
    return Analysis(program, warnings)


def strided(prod: ir.ProducerIR, pgrid: ir.GridIR) -> Optional[tuple]:
    """(axis, stride) when a ForAll variable moves the producer tile along one axis by a
    constant stride s >= 2 (LLaMA's x and x+F/TileN, Attention's Q and K): the tiles
    t, t+s, ... one consumer tile reads share the semaphore t % s (StridedSync)."""
    for ts in prod.tilesets:
        for lp in ts.loops:
            uses = [(a, coef_of(ts.index[a], lp.var)) for a in range(3)]
            hits = [(a, c) for a, c in uses if c != 0]
            if len(hits) != 1 or hits[0][1] is None:
                continue
            a, c = hits[0]
            if 2 <= c < pgrid.extent[a]:
                return a, c
    return None

def grouping(prod: ir.ProducerIR, cgrid: ir.GridIR, pgrid: ir.GridIR) -> list:
    """Per axis, the DimMap that puts the tiles one consumer tile reads on one semaphore,
    judged from the consumer tiles at the corners and the center of the consumer grid."""
    out: list = [None, None, None]
    if prod.count > SAMPLE_LIMIT:
        return out
    picks = [sorted({0, (e - 1) // 2, e - 1}) for e in cgrid.extent]
    proj: list = [[], [], []]
    for cx in picks[0]:
        for cy in picks[1]:
            for cz in picks[2]:
                tiles = prod.tiles((cx, cy, cz))
                for a in range(3):
                    proj[a].append(sorted({t[a] for t in tiles}))
    for a in range(3):
        E = pgrid.extent[a]
        if E < 2:
            continue
        if all(p == list(range(E)) for p in proj[a]):
            out[a] = ir.DimMap("all")
            continue
        k = len(proj[a][0])
        if 1 < k < E and all(len(p) == k and p[0] % k == 0 and p == list(range(p[0], p[0] + k))
                             for p in proj[a]):
            out[a] = ir.DimMap("div", k)
    return out

def derive_policies(grids: dict, dep: ir.DepIR, prod: ir.ProducerIR) -> list:
    pgrid, cgrid = grids[prod.grid], grids[dep.consumer]
    E = pgrid.extent
    options = [[ir.DimMap("tile")] for _ in range(3)]
    st = strided(prod, pgrid)
    if st:
        options[st[0]].append(ir.DimMap("mod", st[1]))
    for a, g in enumerate(grouping(prod, cgrid, pgrid)):
        if g:
            options[a].append(g)
    combos = [(x, y, z) for z in options[2] for y in options[1] for x in options[0]]
    if E[0] > 1:
        combos.append((ir.DimMap("all"), ir.DimMap("tile"), ir.DimMap("tile")))
    seen, out, names = set(), [], set()
    for dims in combos:
        dims = tuple(_normalize(d, e) for d, e in zip(dims, E))
        if dims in seen:
            continue
        seen.add(dims)
        name = _policy_name(dims, prod.has_floor_div)
        if name in names:
            name += "_" + "_".join(f"{AXES[a]}{d.kind}{d.param or ''}"
                                   for a, d in enumerate(dims))
        names.add(name)
        num = 1
        for d, e in zip(dims, E):
            num *= d.extent(e)
        out.append(ir.PolicyIR(dep.name, dep.consumer, prod.grid, name, E, dims, num))
    return out

def reads_group_over_rows(deps: tuple, grid: str) -> bool:
    """Does some consumer tile read tiles of `grid` along y at a fixed x (a ForAll whose
    variable moves only the y coordinate, over more than one row: Attention's R.V reading
    every V row of its head)? Then a strided order runs each group through all rows first."""
    for d in deps:
        for p in d.producers:
            if p.grid != grid:
                continue
            for ts in p.tilesets:
                for lp in ts.loops:
                    uses = [coef_of(ts.index[a], lp.var) for a in range(3)]
                    if uses[0] == 0 and uses[2] == 0 and uses[1] not in (0, None) and lp.hi - lp.lo > 1 \
                            and lp.hi_expr is None:  # a triangle (causal) favors the row-major order
                        return True
    return False

def derive_orders(deps: tuple, grids: dict) -> tuple:
    depth: dict = {}

    def level(g: str, seen=()) -> int:
        if g not in depth:
            ps = [p.grid for d in deps if d.consumer == g for p in d.producers]
            depth[g] = 1 + max((level(p) for p in ps), default=0)
        return depth[g]

    chosen: dict = {}
    # from the last consumer back to the first producer: a grid's order serves its consumers
    for d in sorted(deps, key=lambda d: -level(d.consumer)):
        for p in d.producers:
            if p.grid in chosen:
                continue
            g = grids[p.grid]
            st = strided(p, g)
            if st and g.extent[st[0]] % st[1] == 0:
                a, s = st
                outer = a == 0 and g.extent[1] > 1 and reads_group_over_rows(deps, p.grid)
                chosen[p.grid] = ir.OrderIR(g.name, AXES[a], s, g.extent[a] // s, g.extent, outer)
    return tuple(chosen.get(g.name, ir.OrderIR(g.name, extent=g.extent)) for g in grids.values())




def _normalize(d: ir.DimMap, E: int) -> ir.DimMap:
    if E == 1 or (d.kind == "mod" and d.param >= E) or (d.kind == "div" and d.param == 1):
        return ir.DimMap("tile")
    if (d.kind == "div" and d.param >= E) or (d.kind == "mod" and d.param == 1):
        return ir.DimMap("all")
    return d


def _policy_name(dims: tuple, floor_div: bool) -> str:
    kinds = [d.kind for d in dims]
    if all(k == "tile" for k in kinds):
        return "Conv2DTileSync" if floor_div else "TileSync"
    if "mod" in kinds and all(k in ("mod", "tile") for k in kinds):
        return "StridedSync"
    if kinds == ["all", "tile", "tile"]:
        return "RowSync"
    if kinds == ["tile", "all", "tile"]:
        return "ColSync"
    return "GroupSync_" + "_".join(f"{AXES[a]}{d.kind}{d.param or ''}"
                                   for a, d in enumerate(dims))
