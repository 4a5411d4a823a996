"""ProgramIR (cusyncgen/ir.py, see docs/design.md) -> the planner's ChainSpec.

Uses only the documented reference model: ``program.grids`` (GridIR: name, extent, num_tiles),
``program.orders`` (OrderIR: grid, tile(linear)), ``program.policies`` (PolicyIR: dep, consumer,
producer, name, sem(tile), value(tile)) and ``program.producer_tiles(dep, consumer_tile)``.
Tiles are linearized row-major (x fastest), the block index order of the hardware.

A ``ProgramIR`` is read through its array forms (``OrderIR.tile`` over arrays,
``PolicyIR.sem_np/value_np``, ``ProducerIR.enumerate_np``), in blocks, after the size guard
(limits.py); any other object with the methods above, tile by tile.
"""

from __future__ import annotations

import numpy as np

from .model import ChainSpec, DepSpec, GridSpec, PolicySpec, Ragged


class AdapterError(ValueError):
    pass


def _values(obj):
    if obj is None:
        return []
    if isinstance(obj, dict):
        return list(obj.values())
    return list(obj)


def _extent(g) -> tuple[int, int, int]:
    ext = tuple(int(v) for v in g.extent)
    return ext + (1,) * (3 - len(ext))


def _topo(grids: list, edges: set[tuple[str, str]]) -> list:
    """Grids in launch order: producers before consumers, else declaration order."""
    names = [g.name for g in grids]
    indeg = {n: 0 for n in names}
    for p, c in edges:
        indeg[c] += 1
    out, ready = [], [n for n in names if indeg[n] == 0]
    while ready:
        n = ready.pop(0)
        out.append(n)
        for p, c in sorted(edges, key=lambda e: names.index(e[1])):
            if p == n:
                indeg[c] -= 1
                if indeg[c] == 0:
                    ready.append(c)
                    ready.sort(key=names.index)
    if len(out) != len(names):
        raise AdapterError("the dependencies between grids form a cycle")
    by = {g.name: g for g in grids}
    return [by[n] for n in out]


def spec_from_program(program, occupancy: dict | None = None, tile_time: dict | None = None,
                      source: str = "", max_edges: int | None = None) -> ChainSpec:
    """``max_edges``: the size guard's limit (limits.py; None: its default)."""
    if hasattr(program, "edge_blocks"):
        from cusyncgen import limits
        limits.check_all(program, max_edges)
    occupancy = occupancy or {}
    tile_time = tile_time or {}
    grids_ir = _values(program.grids)
    names = {g.name for g in grids_ir}
    for opt, d in (("--occupancy", occupancy), ("--tile-time", tile_time)):
        for k in d:
            if k not in names:
                raise AdapterError(f"{opt}: no grid named '{k}' (grids: {', '.join(sorted(names))})")
    orders = {o.grid if isinstance(o.grid, str) else o.grid.name: o for o in _values(getattr(program, "orders", None))}
    specs: dict[str, GridSpec] = {}
    for g in grids_ir:
        ext = _extent(g)
        occ = occupancy.get(g.name, getattr(g, "occupancy", None) or 1)
        gs = GridSpec(g.name, ext, int(occ), float(tile_time.get(g.name, 1.0)))
        o = orders.get(g.name)
        if o is not None:
            gs.order = _order(gs, o)
            if not gs.has_custom_order:
                gs.order = None
        specs[g.name] = gs
    # one DepSpec per (dep, producer)
    groups: dict[tuple[str, str], list] = {}
    for pol in _values(program.policies):
        prod = pol.producer if isinstance(pol.producer, str) else pol.producer.name
        groups.setdefault((pol.dep, prod), []).append(pol)
    producers_of_dep: dict[str, list[str]] = {}
    for dep, prod in groups:
        producers_of_dep.setdefault(dep, []).append(prod)
    deps: list[DepSpec] = []
    for (dep, prod), pols in groups.items():
        cons = pols[0].consumer if isinstance(pols[0].consumer, str) else pols[0].consumer.name
        cg, pg = specs[cons], specs[prod]
        arrays = _arrays(program, dep, prod)
        if arrays is not None:
            deps.append(DepSpec(dep if len(producers_of_dep[dep]) == 1 else f"{dep}[{prod}]", cons, prod,
                                _waits(arrays, cg, pg), [_policy(p, pg) for p in pols]))
            continue
        waits = []
        for c in range(cg.num_tiles):
            tiles = []
            for item in program.producer_tiles(dep, cg.tile(c)):
                if len(item) == 2 and isinstance(item[0], str):   # (grid name, tile)
                    if item[0] != prod:
                        continue
                    item = item[1]
                elif len(producers_of_dep[dep]) > 1:
                    raise AdapterError(f"dep {dep}: producer_tiles does not say which of "
                                       f"{producers_of_dep[dep]} a tile belongs to")
                tiles.append(pg.linear(tuple(item)))
            waits.append(tiles)
        policies = [PolicySpec(p.name, [int(p.sem(pg.tile(t))) for t in range(pg.num_tiles)],
                               [int(p.value(pg.tile(t))) for t in range(pg.num_tiles)]) for p in pols]
        deps.append(DepSpec(dep if len(producers_of_dep[dep]) == 1 else f"{dep}[{prod}]", cons, prod, waits, policies))
    order = _topo(list(specs.values()), {(d.producer, d.consumer) for d in deps})
    return ChainSpec(order, deps, source=source)


def _order(gs: GridSpec, o) -> list:
    """order[ticket] = the linear index of the tile the ticket-th block computes."""
    if not hasattr(o, "extent"):
        return [gs.linear(o.tile(i)) for i in range(gs.num_tiles)]
    X, Y, _ = gs.extent
    x, y, z = o.tile(np.arange(gs.num_tiles, dtype=np.int64))
    return np.broadcast_to(x + X * (y + Y * z), (gs.num_tiles,)).tolist()


def _arrays(program, dep: str, prod: str):
    """The ProducerIR of (dep, prod) when ``program`` has the array forms, else None."""
    find = getattr(program, "dep", None)
    if find is None or not hasattr(program, "edge_blocks"):
        return None
    return find(dep).producer(prod)


def _waits(p, cg: GridSpec, pg: GridSpec) -> Ragged:
    """Per consumer tile (linear), the producer tiles (linear) it waits on: counted first (no
    tiles enumerated), then enumerated in blocks of about CHUNK into one array (int32 where the
    producer's tiles fit), so that no more than a block is ever held twice."""
    from cusyncgen.ir import CHUNK
    X, Y, _ = cg.extent
    PX, PY, _ = pg.extent
    step = max(1, CHUNK // max(1, p.count))
    blocks = [np.arange(start, min(start + step, cg.num_tiles), dtype=np.int64)
              for start in range(0, cg.num_tiles, step)]
    lengths = np.zeros(cg.num_tiles, dtype=np.int64)
    for lin in blocks:
        env = {"c.x": lin % X, "c.y": (lin // X) % Y, "c.z": lin // (X * Y)}
        for ts in p.tilesets:
            lengths[lin] += np.broadcast_to(np.asarray(ts.count_np(env), dtype=np.int64), lin.shape)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = np.empty(int(offsets[-1]), dtype=np.int32 if pg.num_tiles < 2**31 else np.int64)
    for lin in blocks:
        env = {"c.x": lin % X, "c.y": (lin // X) % Y, "c.z": lin // (X * Y)}
        rows, masks = [], []   # per tile set: (consumer tiles, its tiles) linear indices, mask
        for ts in p.tilesets:   # ProducerIR.enumerate_np, linearized before anything is stacked
            (x, y, z), mask = ts.enumerate_np(env, len(lin))
            rows.append(x + PX * (y + PY * z))
            masks.append(mask)
        a, b = offsets[lin[0]], offsets[lin[-1] + 1]
        if len(rows) == 1 and masks[0] is None:
            flat[a:b] = rows[0].ravel()
        else:
            t = np.concatenate(rows, axis=1)
            mask = np.concatenate([np.ones(r.shape, dtype=bool) if m is None else m
                                   for r, m in zip(rows, masks)], axis=1)
            if not np.array_equal(mask.sum(axis=1), lengths[lin]):   # enumerate_np against count_np
                raise AdapterError(f"producer {p.grid}: enumerated tiles differ from their count")
            flat[a:b] = t[mask]
    return Ragged(offsets, flat)


def _policy(p, pg: GridSpec) -> PolicySpec:
    X, Y, _ = pg.extent
    lin = np.arange(pg.num_tiles, dtype=np.int64)
    x, y, z = lin % X, (lin // X) % Y, lin // (X * Y)
    return PolicySpec(p.name, p.sem_np(x, y, z).tolist(), p.value_np(x, y, z).tolist())
