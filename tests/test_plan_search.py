"""Which policy combinations plan simulates: every one up to --max-candidates, else a coordinate
descent one dep at a time whose simulations grow linearly with the number of deps. Counted, not
timed (the speed targets are in benchmarks/compiler_scale.py); the wall-clock bounds below are
only there to catch a search that no longer ends."""

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cusyncgen
from cusyncgen.plan import GPUS, make_plan, planner
from cusyncgen.plan.adapter import spec_from_program
from cusyncgen.plan.cli import main as plan_main
from cusyncgen.plan.report import render


def chain_source(n: int, tiles: int = 8) -> str:
    """n grids of ``tiles`` tiles, each tile reading the same tile of the previous grid: two
    policies (TileSync, RowSync) per dep, 2^(n-1) combinations."""
    lines = [f"Param Tiles = {tiles};", "Dim x;"] + [f"Grid g{i}(x, Tiles);" for i in range(n)]
    lines += [f"Dep d{i}({{g{i + 1}, Tile(x)}}, {{g{i}, Tile(x)}});" for i in range(n - 1)]
    return "\n".join(lines) + "\n"


def _spec(source: str):
    return spec_from_program(cusyncgen.compile(source, name="chain.dep").program)


class Counting:
    """planner.simulate, counting its calls."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = planner.simulate

        def simulate(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(planner, "simulate", simulate)


def test_a_40_grid_chain_simulates_two_passes_over_its_39_deps(monkeypatch):
    spec = _spec(chain_source(40))
    count = Counting(monkeypatch)
    plan = make_plan(spec, GPUS["h100"])
    s = plan["search"]
    assert s["method"] == "descent" and s["combinations"] == 2 ** 39
    # the start, then each dep's other policy (39); the second pass changes nothing
    assert s["simulated"] <= 1 + 2 * 39 and s["passes"] == 2 and s["converged"]
    # one ordered simulation per ranked combination, then the listed ones (start and result) in
    # every launch ordering, and StreamSync
    assert count.calls <= s["simulated"] + 2 * 4 + 1
    assert [v["policy"] for v in plan["variants"]][-1] == plan["recommended"]["policy"]
    # every combination takes the same time here; the tie goes to the fewest waits, then the name
    assert plan["recommended"]["policy"] == "+".join(f"d{i}:RowSync" for i in range(39))
    assert "Search: 549,755,813,888 combinations" in render(plan)


def test_up_to_max_candidates_every_combination_is_simulated_and_the_descent_agrees():
    spec = _spec(chain_source(6))
    every = make_plan(spec, GPUS["h100"])
    assert every["search"] == {"method": "exhaustive", "combinations": 32, "simulated": 32,
                               "max_candidates": planner.DEFAULT_MAX_CANDIDATES, "passes": None,
                               "converged": None}
    assert len(every["variants"]) == 32
    few = make_plan(spec, GPUS["h100"], max_candidates=31)
    assert few["search"]["method"] == "descent" and len(few["variants"]) == 2
    assert few["recommended"] == every["recommended"]
    assert "Search:" not in render(every)


def test_the_descent_stops_at_max_candidates():
    spec = _spec(chain_source(12))
    plan = make_plan(spec, GPUS["h100"], max_candidates=5)
    s = plan["search"]
    assert s["simulated"] == 5 and not s["converged"] and s["passes"] == 1
    assert "stopped at --max-candidates" in render(plan)


def test_max_candidates_on_the_command_line(tmp_path, capsys):
    f = tmp_path / "chain.dep"
    f.write_text(chain_source(5))
    assert plan_main([str(f), "--max-candidates", "3"]) == 0
    assert "Search: 16 combinations of one policy per dep, more than --max-candidates 3" in capsys.readouterr().out
    assert plan_main([str(f), "--max-candidates", "0"]) == 2
    assert "--max-candidates" in capsys.readouterr().err


# ---- random multi-dep chains --------------------------------------------------------------------

@st.composite
def chain_programs(draw):
    """A .dep program of 2 to 10 grids; grid i > 0 reads one or two earlier grids, each through a
    pattern of its own (the same tile, a row, a column, or a causal triangle of rows), so that
    the compiler derives one to three policies per dep."""
    n = draw(st.integers(2, 10))
    X, Y = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    lines = ["Dim x, y;"] + [f"Grid g{i}(x, y, {X}, {Y});" for i in range(n)]
    patterns = ["Tile(x, y)", "ForAll(Tile(x, y), x, Range({g}.x))", "ForAll(Tile(x, y), y, Range({g}.y))",
                "ForAll(Tile(x, y), y, Range(y + 1))"]
    for i in range(1, n):
        producers = sorted(set(draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=2))))
        reads = ", ".join("{" + f"g{p}, " + draw(st.sampled_from(patterns)).format(g=f"g{p}") + "}"
                          for p in producers)
        lines.append(f"Dep d{i}({{g{i}, Tile(x, y)}}, {reads});")
    return "\n".join(lines) + "\n"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain_programs(), st.integers(1, 40), st.sampled_from(["h100", "v100"]), st.sampled_from([1, 2]))
def test_plan_of_a_random_chain_simulates_a_bounded_number_of_candidates(source, max_candidates, gpu, occ):
    spec = spec_from_program(cusyncgen.compile(source, name="random.dep").program,
                             {f"g{i}": occ for i in range(source.count("Grid "))})
    sizes = [len(d.policies) for d in spec.deps]
    orders = 2 if any(g.has_custom_order for g in spec.grids) else 1
    t = time.perf_counter()
    plan = make_plan(spec, GPUS[gpu], max_candidates=max_candidates)
    assert time.perf_counter() - t < 120, source   # hangs, not speed: this takes well under a second
    s = plan["search"]
    assert s["simulated"] <= max(max_candidates, 1)
    if s["combinations"] <= max_candidates:
        assert s["method"] == "exhaustive" and len(plan["variants"]) == s["combinations"] * orders
    else:
        assert s["method"] == "descent" and len(plan["variants"]) in (orders, 2 * orders)
        # a pass ranks each dep's other policies once: linear in the deps
        assert s["simulated"] <= 1 + s["passes"] * sum(n - 1 for n in sizes)
        assert s["converged"] or s["simulated"] == max_candidates
        start, result = plan["variants"][0], plan["variants"][-1]
        assert result["time"] <= start["time"] + 1e-9 * max(1.0, plan["streamsync"]["time"])
    assert plan["recommended"] is not None
