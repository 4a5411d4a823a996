"""Enumeration at scale: the IR's array forms equal its scalar reference model, check.problems
gives what the tile-by-tile check gave, the JSON views stream the same bytes, the size guard
refuses with the count, and the planner's compact chains simulate like lists of steps.
(The production sizes are measured by benchmarks/compiler_scale.py, not here.)"""

from __future__ import annotations

import dataclasses
import heapq
import io
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cusyncgen
from cusyncgen import check, cli, emit, ir, limits
from cusyncgen.plan import GPUS, build_chain, make_plan, simulate
from cusyncgen.plan.adapter import spec_from_program
from cusyncgen.plan.model import Ragged
from cusyncgen.plan.simulate import Chain, Steps, skew_factor

from test_check import ROOT, _compiled

COMPILED = _compiled()   # every example (mlp_gpt3 at B=8, S=256) and test_check's EXTRA program


# ---- the scalar references ----------------------------------------------------------------------

def reference_problems(program: ir.ProgramIR, limit: int = 20) -> list:
    """check.problems as it was, tile by tile over the scalar model."""
    from collections import Counter
    out: list = []

    def bad(msg: str) -> bool:
        out.append(msg)
        return len(out) >= limit

    for o in program.orders:
        g = program.grid(o.grid)
        seen = set()
        for lin in range(g.num_tiles):
            t = o.tile(lin)
            if not g.contains(t) or o.linear(t) != lin or t in seen:
                if bad(f"order of {g.name}: linear {lin} -> tile {t} is not a bijection"):
                    return out
                break
            seen.add(t)
    for pol in program.policies:
        g = program.grid(pol.producer)
        posts: Counter = Counter()
        for t in g.tiles():
            s = pol.sem(t)
            if not 0 <= s < pol.num_sems:
                if bad(f"{pol.struct_name}: sem{t} = {s} outside [0, {pol.num_sems})"):
                    return out
            posts[s] += 1
        for t in g.tiles():
            if pol.value(t) != posts[pol.sem(t)]:
                if bad(f"{pol.struct_name}: value{t} = {pol.value(t)} but {posts[pol.sem(t)]} "
                       f"producer tiles post to semaphore {pol.sem(t)}"):
                    return out
                break
    for d in program.deps:
        cg = program.grid(d.consumer)
        for p in d.producers:
            pg = program.grid(p.grid)
            pols = program.policies_of(d.name, p.grid)
            for c in cg.tiles():
                reads = p.tiles(c)
                n = program.wait_count_at(d.name, p.grid, c)
                waited = [program.wait_tile(d.name, p.grid, c, i) for i in range(n)]
                if waited != reads:
                    if bad(f"dep {d.name}: waits of {d.consumer}{c} on {p.grid} decode to "
                           f"{waited[:4]}... but it reads {reads[:4]}..."):
                        return out
                    break
                for t in reads:
                    if not pg.contains(t):
                        if bad(f"dep {d.name}: {d.consumer}{c} reads {p.grid}{t}, outside the "
                               f"grid {pg.extent}"):
                            return out
                        break
                for pol in pols:
                    covered = {(pol.sem(t), pol.value(t)) for t in waited}
                    for t in reads:
                        if (pol.sem(t), pol.value(t)) not in covered:
                            if bad(f"{pol.struct_name}: {d.consumer}{c} reads {p.grid}{t} but "
                                   f"does not wait on its semaphore"):
                                return out
    return out


def reference_deps(program: ir.ProgramIR) -> str:
    grids = {g.name: list(g.extent) for g in program.grids}
    edges = [[c, list(ct), p, list(pt)] for c, ct, p, pt in program.edges()]
    return json.dumps({"grids": grids, "edges": edges}) + "\n"


def reference_json(program: ir.ProgramIR) -> dict:
    """The three JSON views as json.dumps of the whole document."""
    pols = [{"dep": p.dep, "consumer": p.consumer, "producer": p.producer, "name": p.name,
             "num_sems": p.num_sems,
             "tiles": [[list(t), p.sem(t), p.value(t)] for t in ir.product_tiles(p.producer_extent)]}
            for p in program.policies]
    orders = {o.grid: [list(o.tile(i)) for i in range(o.num_tiles)] for o in program.orders}
    return {"deps": reference_deps(program),
            "policies": json.dumps({"policies": pols}) + "\n",
            "order": json.dumps({"orders": orders}) + "\n"}


def assert_arrays_match_scalars(program: ir.ProgramIR, chunk: int = 7) -> None:
    """enumerate_np == tiles, decode_np == wait_tile, sem_np/value_np == sem/value,
    OrderIR over arrays == tile by tile, edge_blocks == edges (blocks of ``chunk`` edges)."""
    for d in program.deps:
        g = program.grid(d.consumer)
        cx, cy, cz = g.coords(0, g.num_tiles)
        tiles = list(g.tiles())
        for p in d.producers:
            counts, got = p.enumerate_np(cx, cy, cz)
            reads = [p.tiles(c) for c in tiles]
            assert counts.tolist() == [len(r) for r in reads]
            assert [tuple(t) for t in got.tolist()] == [t for r in reads for t in r]
            counts, got = p.decode_np(cx, cy, cz)
            waited = [[program.wait_tile(d.name, p.grid, c, i)
                       for i in range(program.wait_count_at(d.name, p.grid, c))] for c in tiles]
            assert counts.tolist() == [len(w) for w in waited]
            assert [tuple(t) for t in got.tolist()] == [t for w in waited for t in w]
    for pol in program.policies:
        box = list(ir.product_tiles(pol.producer_extent))
        x, y, z = (np.array(v, dtype=np.int64) for v in zip(*box))
        assert pol.sem_np(x, y, z).tolist() == [pol.sem(t) for t in box]
        assert pol.value_np(x, y, z).tolist() == [pol.value(t) for t in box]
    for o in program.orders:
        t = np.broadcast_arrays(*o.tile(np.arange(o.num_tiles)))
        assert list(zip(*(a.tolist() for a in t))) == [o.tile(i) for i in range(o.num_tiles)]
        assert o.linear(tuple(t)).tolist() == [o.linear(o.tile(i)) for i in range(o.num_tiles)]
    got = [(c, tuple(r[:3]), names[r[3]], tuple(r[4:]))
           for c, names, cols in program.edge_blocks(chunk) for r in zip(*(a.tolist() for a in cols))]
    assert got == program.edges()


# ---- the examples -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(COMPILED))
def test_array_forms_equal_the_scalar_model(name):
    assert_arrays_match_scalars(COMPILED[name].program)


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_json_views_stream_the_bytes_of_json_dumps(name):
    prog = COMPILED[name].program
    ref = reference_json(prog)
    for view in ("deps", "policies", "order"):
        chunks = list(emit.JSON_VIEWS[view](prog))
        assert "".join(chunks) == ref[view], view
        buf = io.StringIO()
        emit.write_json(view, prog, buf)
        assert buf.getvalue() == ref[view]
    assert emit.deps_json(prog) == ref["deps"] and emit.order_json(prog) == ref["order"]
    assert emit.policies_json(prog) == ref["policies"]


def test_deps_view_is_written_in_several_chunks(monkeypatch):
    prog = COMPILED["mlp_llama.dep"].program
    monkeypatch.setattr(ir, "CHUNK", 1000)
    chunks = list(emit.deps_json_chunks(prog))
    assert len(chunks) > 10 and max(len(c) for c in chunks) < 200_000
    assert "".join(chunks) == reference_deps(prog)


def test_check_gives_the_tile_by_tile_messages_on_the_examples():
    for name, c in COMPILED.items():
        assert check.problems(c.program) == reference_problems(c.program) == [], name


def test_far_flung_coordinates_take_the_sorting_paths():
    """A producer grid of 5000 x 4000 tiles: too wide for the dense tables of the JSON writer."""
    text = ("Dim x, y; Grid p(x, y, 5000, 4000); Grid c(x, y, 2, 2);\n"
            "Dep d({c, Tile(x, y)}, {p, Tile(4999 * x, 3999 * y), Tile(x, y)});")
    prog = cusyncgen.compile(text, name="wide.dep").program
    assert emit.deps_json(prog) == reference_deps(prog)
    cols = [np.array([5, 2**40, 5, -3], dtype=np.int64), np.array([1, 0, 1, 2**41], dtype=np.int64)]
    assert [c.tolist() for c in ir._sorted_unique(cols)] == [[-3, 5, 2**40], [2**41, 1, 0]]


def test_evaluate_np_stays_exact_beyond_int64():
    e = ir.Add((ir.Mul(2**40, ir.Var("c.x")), ir.Mul(-(2**40), ir.Var("c.x")), ir.Var("c.y")))
    got = ir.evaluate_np(e, {"c.x": np.array([2**30, 3]), "c.y": np.array([1, 2])})
    assert got.tolist() == [1, 2]
    assert ir.evaluate_np(ir.Const(4), {}).tolist() == 4


# ---- random (also unsound) programs built as IR -------------------------------------------------

def _exprs(names: list):
    leaf = st.one_of(st.integers(-3, 6).map(ir.Const), st.sampled_from(names).map(ir.Var))

    def grow(children):
        return st.one_of(
            st.lists(children, min_size=2, max_size=3).map(lambda t: ir.Add(tuple(t))),
            st.builds(ir.Mul, st.integers(-2, 3), children),
            st.builds(ir.FloorDiv, children, st.integers(1, 4), st.booleans()),
            st.builds(ir.Mod, children, st.integers(1, 4), st.booleans()))
    return st.recursive(leaf, grow, max_leaves=5)


CVARS = ["c.x", "c.y", "c.z"]


@st.composite
def _tilesets(draw):
    loops = []
    for k in range(draw(st.integers(0, 2))):
        lo = draw(st.integers(0, 2))
        hi = lo + draw(st.integers(1, 3))
        hi_expr = draw(st.one_of(st.none(), _exprs(CVARS)))  # may exceed hi, on any loop: unsound
        loops.append(ir.LoopIR(f"i{k}", lo, hi, "", hi_expr))
    names = CVARS + [lp.var for lp in loops]
    index = tuple(draw(_exprs(names)) for _ in range(3))
    return ir.TileSetIR(index, tuple(loops), "t")


@st.composite
def _dim_maps(draw):
    kind = draw(st.sampled_from(sorted(ir.DIM_KINDS)))
    return ir.DimMap(kind, draw(st.integers(1, 4)) if kind in ("mod", "div") else 0)


@st.composite
def ir_programs(draw):
    n = draw(st.integers(2, 3))
    grids = tuple(ir.GridIR(f"g{i}", (draw(st.integers(1, 5)), draw(st.integers(1, 4)),
                                      draw(st.integers(1, 2))), ("x", "y", "z")) for i in range(n))
    deps, policies = [], []
    for k in range(draw(st.integers(1, 2))):
        cons = draw(st.sampled_from(grids))
        prods = draw(st.lists(st.sampled_from(grids), min_size=1, max_size=2, unique_by=lambda g: g.name))
        producers = tuple(ir.ProducerIR(g.name, tuple(draw(st.lists(_tilesets(), min_size=1, max_size=2))))
                          for g in prods)
        deps.append(ir.DepIR(f"d{k}", cons.name, producers))
        for g in prods:
            for j in range(draw(st.integers(0, 2))):
                dims = tuple(draw(_dim_maps()) for _ in range(3))
                X, Y, Z = g.extent   # a policy may believe its grid narrower: wrong values
                ext = draw(st.sampled_from([g.extent, g.extent, (max(1, X - 1), Y, Z)]))
                num = math.prod(dm.extent(e) for dm, e in zip(dims, ext))
                policies.append(ir.PolicyIR(f"d{k}", cons.name, g.name, f"P{j}", ext, dims,
                                            num + draw(st.sampled_from([0, 0, -1, 1]))))
    orders = []
    for g in grids:
        axis = draw(st.sampled_from([None, "x", "y", "z"]))
        if axis is None:
            orders.append(ir.OrderIR(g.name, extent=g.extent))
        else:
            orders.append(ir.OrderIR(g.name, axis, draw(st.integers(1, 3)), draw(st.integers(1, 3)),
                                     g.extent, axis == "x" and draw(st.booleans())))
    return ir.ProgramIR("r", "r.dep", (), (), grids, tuple(deps), tuple(orders), tuple(policies))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ir_programs(), st.integers(1, 30))
def test_random_ir_problems_and_views_equal_the_references(prog, limit):
    assert check.problems(prog, limit=limit) == reference_problems(prog, limit=limit)
    assert_arrays_match_scalars(prog, chunk=5)
    ref = reference_json(prog)
    assert {v: emit.JSON_VIEWS[v](prog) and "".join(emit.JSON_VIEWS[v](prog)) for v in ref} == ref


def test_random_ir_programs_find_each_kind_of_violation():
    """The generator above reaches every message of check (else its equality proves little)."""
    kinds = {"bijection": 0, "outside [0,": 0, "producer tiles post": 0, "decode to": 0,
             "outside the grid": 0}

    @settings(max_examples=80, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(ir_programs())
    def collect(prog):
        for msg in check.problems(prog, limit=10):
            for k in kinds:
                kinds[k] += k in msg

    collect()
    assert all(kinds.values()), kinds


# ---- the DimMap table ---------------------------------------------------------------------------

def test_one_row_per_dim_map_kind_serves_ints_arrays_and_cxx():
    assert sorted(ir.DIM_KINDS) == ["all", "div", "mod", "tile"]
    t = np.arange(7)
    for kind in ir.DIM_KINDS:
        d = ir.DimMap(kind, 3 if kind in ("mod", "div") else 0)
        assert np.broadcast_to(d.coord(t), t.shape).tolist() == [int(d.coord(v)) for v in range(7)]
        assert np.broadcast_to(d.group(t, 7), t.shape).tolist() == [int(d.group(v, 7)) for v in range(7)]
        assert emit._coord(d, "x") == d.row.cxx("x", d.param) and emit._describe(d) == d.row.describe(d.param)
    assert ir.DimMap("div", 3).extent(7) == 3 and [ir.DimMap("div", 3).group(v, 7) for v in (0, 6)] == [3, 1]
    assert emit._group(ir.DimMap("mod", 3), "x", 7) == "(2 + (t.x % 3 < 1 ? 1 : 0))"
    with pytest.raises(ValueError, match="unknown DimMap kind"):
        ir.DimMap("row")


def test_the_ir_holds_no_closures():
    def walk(obj):
        if dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                yield from walk(getattr(obj, f.name))
        elif isinstance(obj, (tuple, list)):
            for v in obj:
                yield from walk(v)
        else:
            yield obj

    for c in COMPILED.values():
        leaves = list(walk(c.program))
        assert all(isinstance(v, (int, str, bool, type(None))) for v in leaves)


# ---- the size guard -----------------------------------------------------------------------------

BIG = ("Dim x, y;\nGrid p(x, y, 40000, 40000);\nGrid c(x, y, 40000, 40000);\n"
       "Dep d({c, Tile(x, y)}, {p, Tile(x, y)});\n")


def test_guard_refuses_with_the_count_and_the_flag():
    prog = COMPILED["mlp_gpt3.dep"].program   # 1536 consumer tiles x 48 = 73,728 edges
    assert limits.edge_count(prog) == 73_728 == len(prog.edges())
    with pytest.raises(limits.TooLargeError) as e:
        check.problems(prog, max_edges=70_000)
    assert "has 73,728 edges" in str(e.value) and "limit of 70,000" in str(e.value)
    assert "each waiting on 48 tiles of 'g1'" in str(e.value) and "--max-edges N" in str(e.value)
    assert check.problems(prog, max_edges=73_728) == []
    with pytest.raises(limits.TooLargeError, match="grid 'g1' has 768 tiles"):
        emit.order_json(prog, max_edges=700)
    with pytest.raises(limits.TooLargeError):
        spec_from_program(prog, max_edges=70_000)
    causal = cusyncgen.compile("Dim x, y; Grid p(x, y, 4, 4); Grid c(x, y, 4, 4);\n"
                               "Dep d({c, Tile(x, y)}, {p, ForAll(Tile(x, y), y, Range(y + 1))});",
                               name="causal.dep").program
    assert limits.edge_count(causal) == 40 == len(causal.edges())   # Range(y + 1): 1 + 2 + 3 + 4 per column
    with pytest.raises(limits.TooLargeError, match="has 40 edges .*each waiting on up to 4 tiles of 'p'"):
        limits.check_edges(causal, 39)
    limits.check_edges(causal, 40)


CAUSAL_64 = ("Dim x, y; Grid p(x, y, 64, 64); Grid c(x, y, 64, 64);\n"
             "Dep d({c, Tile(x, y)}, {p, ForAll(Tile(x, y), y, Range(y + 1))});\n")


@pytest.mark.parametrize("argv", [["check", "{f}"], ["{f}", "--emit", "deps", "-o", "{o}"], ["plan", "{f}"]])
def test_a_causal_range_counts_its_edges_exactly_at_the_limit(argv, tmp_path, capsys):
    """64 x 64 tiles, tile (x, y) reading rows 0..y: 64 * (1 + ... + 64) = 133,120 edges, not the
    262,144 of the largest Range: allowed at exactly that limit, refused one below."""
    prog = cusyncgen.compile(CAUSAL_64, name="causal.dep").program
    assert limits.edge_count(prog) == 133_120 == len(prog.edges())
    f, out = tmp_path / "causal.dep", tmp_path / "out.json"
    f.write_text(CAUSAL_64)
    args = [a.replace("{f}", str(f)).replace("{o}", str(out)) for a in argv]
    assert cli.main(args + ["--max-edges", "133120"]) == 0
    capsys.readouterr()
    out.unlink(missing_ok=True)
    assert cli.main(args + ["--max-edges", "133119"]) == 1
    err = capsys.readouterr().err
    assert "has 133,120 edges" in err and "limit of 133,119" in err and not out.exists()


def test_a_variable_range_over_too_many_coordinates_counts_at_its_largest(monkeypatch):
    src = CAUSAL_64.replace("Range(y + 1)", "Range(x + y + 1)").replace("p(x, y, 64, 64)", "p(x, y, 64, 127)")
    prog = cusyncgen.compile(src, name="c.dep").program
    exact = sum(x + y + 1 for x in range(64) for y in range(64))
    assert limits.edge_count(prog) == exact == len(prog.edges())
    monkeypatch.setattr(limits, "EXACT_SUM_TILES", 64 * 64 - 1)   # x and y read: 4096 coordinates
    assert limits.edge_count(prog) == 64 * 64 * 127
    with pytest.raises(limits.TooLargeError, match="has up to 520,192 edges"):
        limits.check_edges(prog, exact)


def test_a_40000_by_40000_program_is_refused_before_enumerating():
    prog = cusyncgen.compile(BIG, name="big.dep").program
    assert limits.DEFAULT_MAX_EDGES < 1_600_000_000
    with pytest.raises(limits.TooLargeError, match="1,600,000,000 tiles"):
        check.problems(prog)
    with pytest.raises(limits.TooLargeError, match="has 1,600,000,000 edges"):
        emit.deps_json_chunks(prog)   # refused when asked for, before any output
    with pytest.raises(limits.TooLargeError):
        spec_from_program(prog)
    assert "struct c_order" in cusyncgen.compile(BIG, name="big.dep").header  # the header: no limit


@pytest.mark.parametrize("argv", [["check", "{f}"], ["{f}", "--emit", "deps", "-o", "{o}"],
                                  ["{f}", "--emit", "policies", "-o", "{o}"],
                                  ["{f}", "--emit", "order", "-o", "{o}"], ["plan", "{f}"]])
def test_max_edges_flag_on_every_enumerating_command(argv, tmp_path, capsys):
    f = tmp_path / "mlp.dep"
    f.write_text((ROOT / "examples" / "mlp_gpt3.dep").read_text())
    out = tmp_path / "out.json"
    args = [a.replace("{f}", str(f)).replace("{o}", str(out)) for a in argv] + ["-D", "B=8", "-D", "S=256"]
    assert cli.main(args + ["--max-edges", "500"]) == 1
    _, err = capsys.readouterr()
    assert "more than the limit of 500" in err and "--max-edges N raises the limit" in err
    assert "Traceback" not in err
    assert ("73,728 edges" in err) or ("768 tiles" in err), err
    assert not out.exists()   # refused before the output file is opened
    assert cli.main(args + ["--max-edges", "100_000"]) == 0
    capsys.readouterr()
    if "-o" in argv:
        assert out.read_text() == reference_json(cusyncgen.compile(
            f, params={"B": 8, "S": 256}).program)[argv[2]]
    assert cli.main(args[:1] + ["--max-edges", "0"] + args[1:]) in (1, 2)
    assert "--max-edges" in capsys.readouterr().err


# ---- the planner --------------------------------------------------------------------------------

def test_steps_and_ragged_stand_for_their_lists():
    steps = [[("a", 1)], [], [("a", 2), ("b", 0)], []]
    s = Steps.of(steps)
    assert len(s) == 4 and s.pos == [0, 2] and list(s) == [tuple(x) for x in steps]
    shared = Steps(3, [9, 0, 2, 1], [7, 5, 6, 8], 1, 3, single=True)
    assert list(shared) == [(5,), (), (6,)]
    r = Ragged.of([[3, 1], [], [2]])
    assert len(r) == 3 and [r[i] for i in range(3)] == [[3, 1], [], [2]] and r[-1] == [2]
    assert r.new_runs([0, 1, 1, 1]).tolist() == [True, False, True]   # sem[3] == sem[1]: one run


def reference_simulate(chain: Chain, num_sms: int, launch: str = "ordered", unlimited=False,
                       launch_gap=0.0, skew=0.0) -> tuple:
    """The simulator as it was (lists of steps, a linear scan for the SM): (time, stage_end,
    wait_time, finished)."""
    stages = chain.stages
    total = sum(s.num_tiles for s in stages)
    num_sms = total if unlimited else num_sms
    cap = math.lcm(*(s.occupancy for s in stages))
    free = [cap] * num_sms
    seqs = list(range(len(stages)))[::-1 if launch == "reversed" else 1]
    queue = [(si, k) for si in seqs for k in range(stages[si].num_tiles)]
    counts = {k: 0 for k in chain.sem_values}
    values, waiters, events = chain.sem_values, {}, []
    st_ = {"seq": 0, "now": 0.0, "wait": 0.0, "done": [0] * len(stages), "end": {}, "woken": set()}

    def push(t, b):
        heapq.heappush(events, (t, st_["seq"], b))
        st_["seq"] += 1

    def advance(b):
        n = synced = 0
        for step in b["steps"][b["step"]:]:
            if any(counts[k] < values[k] for k in step):
                break
            n += 1
            synced += bool(step)
        if n == 0:
            k = next(k for k in b["steps"][b["step"]] if counts[k] < values[k])
            waiters.setdefault(k, []).append(b)
            b["since"] = st_["now"]
            return
        b["step"] += n
        push(st_["now"] + b["dur"] * n / len(b["steps"]) + stages[b["si"]].wait_cost * synced, b)

    def ready(si):
        if launch != "stream" or si == 0:
            return True
        prev = stages[si - 1]
        if st_["done"][si - 1] < prev.num_tiles:
            return False
        start = st_["end"][prev.name] + launch_gap
        if st_["now"] >= start:
            return True
        if si not in st_["woken"]:
            st_["woken"].add(si)
            push(start, None)
        return False

    qpos = finished = 0
    while True:
        while qpos < len(queue) and ready(queue[qpos][0]):
            si, ticket = queue[qpos]
            s = stages[si]
            units, best = cap // s.occupancy, qpos
            if not unlimited:
                best = max(range(num_sms), key=lambda i: (free[i], -i))
                if free[best] < units:
                    break
                free[best] -= units
            qpos += 1
            tile = ticket if s.order is None else s.order[ticket]
            steps = [] if s.waits is None else list(s.waits[tile])
            b = {"si": si, "tile": tile, "steps": steps, "step": 0, "units": units, "sm": best,
                 "dur": s.tile_time * skew_factor(si, tile, skew)}
            if steps:
                advance(b)
            else:
                push(st_["now"] + b["dur"], b)
        if not events:
            break
        st_["now"], _, b = heapq.heappop(events)
        if b is None:
            continue
        if b["step"] < len(b["steps"]):
            advance(b)
            continue
        finished += 1
        if not unlimited:
            free[b["sm"]] += b["units"]
        st_["done"][b["si"]] += 1
        s = stages[b["si"]]
        if st_["done"][b["si"]] == s.num_tiles:
            st_["end"][s.name] = st_["now"]
        for k in (s.posts[b["tile"]] if s.posts is not None else ()):
            counts[k] += 1
            if counts[k] == values.get(k, -1) and k in waiters:
                for w in waiters.pop(k):
                    st_["wait"] += st_["now"] - w["since"]
                    advance(w)
    return st_["now"], st_["end"], st_["wait"], finished


@pytest.mark.parametrize("name", ["mlp_gpt3.dep", "attention_gpt3.dep", "mlp_llama_ep.dep", "copy_chain.dep"])
def test_compact_chains_simulate_like_the_previous_simulator(name):
    prog = COMPILED[name].program
    spec = spec_from_program(prog, {g.name: 1 + i % 2 for i, g in enumerate(prog.grids)})
    as_lists = dataclasses.replace(spec, deps=[dataclasses.replace(d, waits=[list(w) for w in d.waits])
                                               for d in spec.deps])
    for choice in spec.choices()[:4]:
        for model, custom, launch, skew in (("kstep", False, "ordered", 0.0), ("block", True, "ordered", 0.1),
                                            ("kstep", True, "reversed", 0.0), ("kstep", False, "stream", 0.2)):
            chain = build_chain(spec, choice, custom, model, 0.05)
            got = simulate(chain, 20, launch, skew=skew)
            ref = reference_simulate(chain, 20, launch, skew=skew)
            assert (got.time, got.stage_end, got.wait_time, got.finished_blocks) == ref   # to the bit
            assert simulate(build_chain(as_lists, choice, custom, model, 0.05), 20, launch, skew=skew) == got
        assert simulate(chain, 1, unlimited=True).time == reference_simulate(chain, 1, unlimited=True)[0]
        assert spec.total_waits(choice) == sum(
            sum(1 for i, p in enumerate(w) if i == 0 or d.policies[c].sem[p] != d.policies[c].sem[w[i - 1]])
            for d, c in zip(spec.deps, choice) for w in as_lists.deps[spec.deps.index(d)].waits)


def test_plan_of_the_examples_is_unchanged_by_the_array_adapter():
    """spec_from_program through the array forms == tile by tile (the adapter's generic path)."""

    class Scalar:   # the program seen only through the documented scalar methods
        def __init__(self, p):
            self.grids, self.orders, self.policies = p.grids, [_ScalarOrder(o) for o in p.orders], p.policies
            self.producer_tiles = p.producer_tiles

    for name in ("mlp_llama.dep", "attention_gpt3.dep"):
        prog = COMPILED[name].program
        a, b = spec_from_program(prog), spec_from_program(Scalar(prog))
        assert [list(map(list, d.waits)) for d in a.deps] == [list(map(list, d.waits)) for d in b.deps]
        assert [(p.sem, p.value) for d in a.deps for p in d.policies] == \
            [(p.sem, p.value) for d in b.deps for p in d.policies]
        assert [g.order for g in a.grids] == [g.order for g in b.grids]
        assert make_plan(a, GPUS["h100"]) == make_plan(b, GPUS["h100"])


class _ScalarOrder:
    def __init__(self, o):
        self.grid, self.tile = o.grid, o.tile
