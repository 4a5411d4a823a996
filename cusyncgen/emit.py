"""Emission: ProgramIR -> the CUDA header (templates/header.h.j2) and the JSON views.

Every number and C++ expression is computed here in Python; the template only loops and branches.
This is the only module that imports jinja2.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Iterator

import jinja2
import numpy as np

from cusyncgen import ir, limits

AXES = ir.AXES


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    from cusyncgen.paths import data_path

    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(data_path("templates"))),
                              undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True,
                              autoescape=False)


# ---- C++ expressions --------------------------------------------------------------------------

def cxx(e: ir.Expr) -> str:
    """C++ text of an index expression over ``c.x``, ``c.y``, ``c.z`` and loop variables."""
    if isinstance(e, ir.Const):
        return str(e.value)
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.Add):
        out = ""
        for i, t in enumerate(e.terms):
            neg, body = _signed(t)
            if i == 0:
                out = ("-" if neg else "") + body
            else:
                out += (" - " if neg else " + ") + body
        return out
    if isinstance(e, ir.Mul):
        neg, body = _signed(e)
        return ("-" if neg else "") + body
    if isinstance(e, ir.FloorDiv):
        if e.nonneg:
            return f"{_atom(e.arg)} / {e.k}"
        return f"cusyncgen_floordiv({cxx(e.arg)}, {e.k})"
    if isinstance(e, ir.Mod):
        if e.nonneg:
            return f"{_atom(e.arg)} % {e.k}"
        return f"cusyncgen_floormod({cxx(e.arg)}, {e.k})"
    raise TypeError(e)


def _atom(e: ir.Expr) -> str:
    text = cxx(e)
    simple = isinstance(e, ir.Var) or (isinstance(e, ir.Const) and e.value >= 0)
    return text if simple else f"({text})"


def _signed(t: ir.Expr) -> tuple:
    """(is negative, text of the absolute value) of one term of a sum."""
    if isinstance(t, ir.Const):
        return t.value < 0, str(abs(t.value))
    if isinstance(t, ir.Mul):
        c = abs(t.coef)
        body = _atom(t.arg) if c == 1 else f"{c} * {_atom(t.arg)}"
        return t.coef < 0, body
    return False, cxx(t)


def _needs_floor(e: ir.Expr) -> bool:
    if isinstance(e, (ir.FloorDiv, ir.Mod)):
        return not e.nonneg or _needs_floor(e.arg)
    if isinstance(e, ir.Add):
        return any(_needs_floor(t) for t in e.terms)
    if isinstance(e, ir.Mul):
        return _needs_floor(e.arg)
    return False


def _arg(name: str, *texts) -> str:
    """A parameter's name, or ``/*name*/`` when the body does not use it (-Wunused-parameter)."""
    used = re.compile(rf"\b{name}\b")
    return name if any(used.search(t) for t in texts) else f"/*{name}*/"


def _sum(terms: list) -> str:
    terms = [t for t in terms if t]
    return " + ".join(terms) if terms else "0"


# ---- orders -------------------------------------------------------------------------------------

def _order_view(g: ir.GridIR, o: ir.OrderIR) -> dict:
    X, Y, Z = g.extent
    if o.groups_outer:
        c, st = o.group_count, o.group_stride
        lines = [f"const int i = linear % {c}, y = linear / {c} % {Y}, g = linear / {c * Y} % {st};",
                 f"return cusync::Tile{{g + i * {st}, y, {'0' if Z == 1 else f'linear / {c * Y * st}'}}};"]
        z_term = "" if Z == 1 else f" + {st} * t.z"
        return {"name": g.name, "X": X, "Y": Y, "Z": Z, "num_tiles": g.num_tiles, "tile_lines": lines,
                "linear_arg": "linear", "t_arg": "t",
                "linear_expr": f"t.x / {st} + {c} * (t.y + {Y} * (t.x % {st}{z_term}))",
                "order_comment": (f"the {c} tiles t, t+{st}, ... along x that one consumer tile reads are "
                                  f"consecutive, and each such group runs through all {Y} rows before the next "
                                  f"(a consumer reads a group over every row)")}
    r = {"x": "0" if X == 1 else ("linear" if Y * Z == 1 else f"linear % {X}"),
         "y": "0", "z": "0" if Z == 1 else ("linear" if X * Y == 1 else f"linear / {X * Y}")}
    if Y > 1:
        base = "linear" if X == 1 else f"linear / {X}"
        r["y"] = f"{base} % {Y}" if Z > 1 else base
    lines, coords, lin = [], [], []
    for a, ax in enumerate(AXES):
        if o.group_dim == ax:
            lines.append(f"const int r{ax} = {r[ax]};")
            coords.append(f"r{ax} / {o.group_count} + r{ax} % {o.group_count} * {o.group_stride}")
            s = o.group_stride
            lin.append(f"(t.{ax} % {s} * {o.group_count} + t.{ax} / {s})")
        else:
            coords.append(r[ax])
            lin.append(f"t.{ax}" if g.extent[a] > 1 else "")
    lines.append(f"return cusync::Tile{{{', '.join(coords)}}};")
    terms = [lin[0], f"{X} * {lin[1]}" if lin[1] else "", f"{X * Y} * {lin[2]}" if lin[2] else ""]
    if X == 1 and lin[1]:
        terms[1] = lin[1]
    if X * Y == 1 and lin[2]:
        terms[2] = lin[2]
    if o.group_dim:
        comment = (f"the {o.group_count} tiles t, t+{o.group_stride}, ... along {o.group_dim} "
                   f"that one consumer tile reads are consecutive")
    else:
        comment = "row-major (x fastest, then y, then z)"
    linear = _sum(terms)
    return {"name": g.name, "X": X, "Y": Y, "Z": Z, "num_tiles": g.num_tiles,
            "tile_lines": lines, "linear_expr": linear, "order_comment": comment,
            "linear_arg": _arg("linear", *lines), "t_arg": _arg("t", linear)}


# ---- policies -----------------------------------------------------------------------------------

def _coord(d: ir.DimMap, ax: str) -> str:
    return d.row.cxx(ax, d.param)


def _group(d: ir.DimMap, ax: str, E: int):
    """Group size of one dim: an int or a C++ expression."""
    return d.row.cxx_group(ax, E, d.param)


def _policy_view(p: ir.PolicyIR) -> dict:
    terms, radix = [], 1
    for d, ax, E in zip(p.dims, AXES, p.producer_extent):
        c = _coord(d, ax)
        if c and E > 1:
            if radix == 1:
                terms.append(c)
            else:
                terms.append(f"{radix} * {'(' + c + ')' if d.kind != 'tile' else c}")
        radix *= d.extent(E)
    const, exprs = 1, []
    for d, ax, E in zip(p.dims, AXES, p.producer_extent):
        g = _group(d, ax, E)
        if isinstance(g, int):
            const *= g
        else:
            exprs.append(g)
    value = " * ".join(([str(const)] if const != 1 or not exprs else []) + exprs)
    desc = ", ".join(f"{ax}: {_describe(d)}" for d, ax, E in zip(p.dims, AXES, p.producer_extent)
                     if E > 1) or "a single tile"
    sem = _sum(terms)
    kinds, params, extent, num = p.desc()
    return {"struct": p.struct_name, "num_sems": p.num_sems, "sem": sem, "value": value,
            "desc": f"{{{_ints(kinds)}}}, {{{_ints(params)}}}, {{{_ints(extent)}}}, {num}",
            "comment": f"{p.name}: {desc}", "sem_arg": _arg("t", sem), "value_arg": _arg("t", value)}


def _ints(values) -> str:
    return ", ".join(str(v) for v in values)


def _describe(d: ir.DimMap) -> str:
    return d.row.describe(d.param)


# ---- waits --------------------------------------------------------------------------------------

def _count_text(ts: ir.TileSetIR) -> str:
    """C++ count of a tile set for consumer tile c: a constant, or (bound(c) - lo) * inner counts
    when its outermost loop's bound depends on c."""
    if not ts.variable:
        return str(ts.count)
    outer, inner = ts.loops[0], ts.count // ts.loops[0].count
    n = cxx(outer.hi_expr) if outer.lo == 0 else f"{cxx(outer.hi_expr)} - {outer.lo}"
    return n if inner == 1 else f"({n}) * {inner}"


def _waits_view(dep: ir.DepIR, prod: ir.ProducerIR) -> dict:
    terms, const = [], 0  # the tile sets' counts so far: C++ terms of the variable ones, the constant rest

    def offset() -> str:
        return " + ".join(terms + ([str(const)] if const or not terms else []))

    branches = []
    for ts in prod.tilesets:
        lines = []
        start = offset()
        j = "i" if start == "0" else f"(i - ({start}))" if terms else f"(i - {start})"
        inner = 1
        for n, lp in enumerate(reversed(ts.loops)):
            outermost = n == len(ts.loops) - 1
            val = j if inner == 1 else f"{j} / {inner}"
            if not outermost:
                val = f"{val} % {lp.count}" if inner == 1 else f"({val}) % {lp.count}"
            lines.append(f"const int {lp.var} = {str(lp.lo) + ' + ' if lp.lo else ''}{val};")
            inner *= lp.count
        lines.reverse()
        if ts.variable:
            terms.append(_count_text(ts))
        else:
            const += ts.count
        branches.append({"end": offset(), "lines": lines, "comment": ts.text,
                         "tile": ", ".join(cxx(e) for e in ts.index)})
    text = f"up to {prod.count} tiles" if terms else ("1 tile" if prod.count == 1 else f"{prod.count} tiles")
    count = offset()
    body = [count] + [x for b in branches for x in b["lines"] + [b["end"], b["tile"]]]
    return {"struct": f"{dep.name}_{prod.grid}_waits", "producer": prod.grid,
            "count": count, "branches": branches, "count_text": text,
            "count_arg": _arg("c", count), "tile_arg": _arg("c", *body)}


def header(program: ir.ProgramIR, namespace: str | None = None) -> str:
    """The CUDA header text of ``program`` (docs/design.md, "The generated header")."""
    ns = namespace or program.name
    with_text = ""
    if program.overrides:
        with_text = " with " + ", ".join(f"{n}={v}" for n, v in program.overrides)
    needs_floor = any(_needs_floor(e) for d in program.deps for p in d.producers
                      for ts in p.tilesets for e in ts.index)
    grids = []
    for g in program.grids:
        o = program.order(g.name)
        gd, stride, count, outer, extent = o.desc()
        grids.append(dict(_order_view(g, o), desc=f"{gd}, {stride}, {count}, {outer}, {{{_ints(extent)}}}"))
    deps = []
    for d in program.deps:
        deps.append({
            "name": d.name, "consumer": d.consumer,
            "producers": " and ".join(p.grid for p in d.producers),
            "policies": [_policy_view(p) for prod in d.producers
                         for p in program.policies_of(d.name, prod.grid)],
            "waits": [_waits_view(d, p) for p in d.producers],
        })
    return _env().get_template("header.h.j2").render(
        source=program.source, with_text=with_text, namespace=ns, needs_floor=needs_floor,
        grids=grids, deps=deps)


# ---- JSON views ---------------------------------------------------------------------------------
# Streamed: each view is a sequence of text chunks (about ir.CHUNK edges or tiles each), byte for
# byte what json.dumps gives for the whole document. The size guard (limits.py) runs when the view
# is asked for, before any chunk.

def deps_json_chunks(program: ir.ProgramIR, max_edges: int | None = None) -> Iterator[str]:
    """``{"grids": {name: [X, Y, Z]}, "edges": [[consumer, [x, y, z], producer, [x, y, z]], ...]}``
    with the edges of ``program.edges()`` (sorted, deduplicated)."""
    limits.check_edges(program, max_edges)
    return _deps_chunks(program)


def _deps_chunks(program: ir.ProgramIR) -> Iterator[str]:
    grids = {g.name: list(g.extent) for g in program.grids}
    yield '{"grids": ' + json.dumps(grids) + ', "edges": ['
    first = True
    for consumer, producers, cols in program.edge_blocks():
        if not len(cols[0]):
            continue
        text = _edge_text(json.dumps(consumer), [json.dumps(p) for p in producers], cols)
        yield text[2:] if first else text
        first = False
    yield "]}\n"


def policies_json_chunks(program: ir.ProgramIR, max_edges: int | None = None) -> Iterator[str]:
    """``{"policies": [{"dep", "consumer", "producer", "name", "num_sems", "tiles": [[[x, y, z],
    sem, value], ...]}, ...]}``, the tiles of each producer grid in lexicographic order."""
    limits.check_tiles(program, max_edges, [program.grid(p.producer) for p in program.policies])
    return _policies_chunks(program)


def _policies_chunks(program: ir.ProgramIR) -> Iterator[str]:
    yield '{"policies": ['
    for n, p in enumerate(program.policies):
        head = json.dumps({"dep": p.dep, "consumer": p.consumer, "producer": p.producer,
                           "name": p.name, "num_sems": int(p.num_sems)})
        yield (", " if n else "") + head[:-1] + ', "tiles": ['
        X, Y, Z = p.producer_extent
        for start in range(0, X * Y * Z, ir.CHUNK):
            x, y, z = ir.lexicographic(np.arange(start, min(start + ir.CHUNK, X * Y * Z),
                                                 dtype=np.int64), p.producer_extent)
            cols = np.stack([x, y, z, p.sem_np(x, y, z), p.value_np(x, y, z)], axis=1)
            text = ", [[%d, %d, %d], %d, %d]" * len(cols) % tuple(cols.ravel().tolist())
            yield text[2:] if start == 0 else text
        yield "]}"
    yield "]}\n"


def order_json_chunks(program: ir.ProgramIR, max_edges: int | None = None) -> Iterator[str]:
    """``{"orders": {grid: [[x, y, z], ...]}}``: each grid's tiles in processing order."""
    limits.check_tiles(program, max_edges, [program.grid(o.grid) for o in program.orders])
    return _order_chunks(program)


def _order_chunks(program: ir.ProgramIR) -> Iterator[str]:
    yield '{"orders": {'
    for n, o in enumerate(program.orders):
        yield (", " if n else "") + json.dumps(o.grid) + ": ["
        for start in range(0, o.num_tiles, ir.CHUNK):
            t = o.tile(np.arange(start, min(start + ir.CHUNK, o.num_tiles), dtype=np.int64))
            cols = np.stack(np.broadcast_arrays(*t), axis=1)
            text = ", [%d, %d, %d]" * len(cols) % tuple(cols.ravel().tolist())
            yield text[2:] if start == 0 else text
        yield "]"
    yield "}}\n"


#: ``cusyncgen --emit VIEW``: the JSON views
JSON_VIEWS = {"deps": deps_json_chunks, "policies": policies_json_chunks,
              "order": order_json_chunks}


def write_json(view: str, program: ir.ProgramIR, out, max_edges: int | None = None) -> None:
    """Write the JSON view ``view`` (deps, policies, order) of ``program`` to the text file
    ``out``, chunk by chunk."""
    for text in JSON_VIEWS[view](program, max_edges):
        out.write(text)


def deps_json(program: ir.ProgramIR, max_edges: int | None = None) -> str:
    """The deps view as one string."""
    return "".join(deps_json_chunks(program, max_edges))


def policies_json(program: ir.ProgramIR, max_edges: int | None = None) -> str:
    """The policies view as one string."""
    return "".join(policies_json_chunks(program, max_edges))


def order_json(program: ir.ProgramIR, max_edges: int | None = None) -> str:
    """The order view as one string."""
    return "".join(order_json_chunks(program, max_edges))


def _edge_text(consumer: str, producers: list, cols: tuple) -> str:
    """``, [consumer, [x, y, z], producer, [x, y, z]]`` for each edge of a block (sorted by
    consumer tile): the text of each distinct consumer tile and producer tile made once."""
    cx, cy, cz, r, px, py, pz = cols
    n = len(cx)
    new = np.ones(n, dtype=bool)
    new[1:] = (cx[1:] != cx[:-1]) | (cy[1:] != cy[:-1]) | (cz[1:] != cz[:-1])
    head = _pct(f", [{consumer}, [") + "%d, %d, %d], "
    heads = [head % t for t in zip(cx[new].tolist(), cy[new].tolist(), cz[new].tolist())]
    uniq, pid = _distinct([r, px, py, pz])
    names = [p + ", [" for p in producers]
    tails = [f"{names[k]}{x}, {y}, {z}]]" for k, x, y, z in zip(*(c.tolist() for c in uniq))]
    tok = np.empty((n, 2), dtype=object)
    tok[:, 0] = np.array(heads, dtype=object)[np.cumsum(new) - 1]
    tok[:, 1] = np.array(tails, dtype=object)[pid]
    return "".join(tok.ravel().tolist())


def _distinct(cols: list) -> tuple:
    """(the distinct rows of int64 columns, as columns; each row's index among them)."""
    lo = [int(c.min()) for c in cols]
    span = [int(c.max()) - l + 1 for c, l in zip(cols, lo)]
    size = 1
    for s_ in span:
        size *= s_
    if size > 1 << 24:
        rows, pid = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        return [rows[:, a] for a in range(len(cols))], pid.ravel()
    key = np.zeros(len(cols[0]), dtype=np.int64)
    for c, l, s_ in zip(cols, lo, span):
        key *= s_
        key += c - l
    seen = np.zeros(size, dtype=bool)
    seen[key] = True
    keys = np.flatnonzero(seen)
    pid = (np.cumsum(seen) - 1)[key]
    out = []
    for l, s_ in zip(reversed(lo), reversed(span)):
        out.append(keys % s_ + l)
        keys = keys // s_
    return out[::-1], pid


def _pct(text: str) -> str:
    """``text`` inside a %-format string."""
    return text.replace("%", "%%")


def render_template(name: str, **context) -> str:
    """Render another template of templates/ (the tuner's dispatch header) with the same strict
    environment: every value it prints was computed by the caller."""
    return _env().get_template(name).render(**context)
