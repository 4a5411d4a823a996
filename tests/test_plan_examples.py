"""cusyncgen plan on the compiler's ProgramIR: the adapter against the IR reference model, and the
CLI on the repository's examples."""

import json
from pathlib import Path

import pytest

cusyncgen = pytest.importorskip("cusyncgen")
if not hasattr(cusyncgen, "compile"):
    pytest.skip("the compiler (cusyncgen.compile) is not there", allow_module_level=True)

from cusyncgen.plan import GPUS, build_chain, make_plan, simulate  # noqa: E402
from cusyncgen.plan.adapter import spec_from_program  # noqa: E402
from cusyncgen.plan.cli import main as plan_main  # noqa: E402
from cusyncgen.plan.paper import mlp_spec  # noqa: E402

EX = Path(__file__).resolve().parent.parent / "examples"


def _program(name, **params):
    return cusyncgen.compile(EX / name, params=params).program


def test_adapter_matches_the_ir_reference_model():
    prog = _program("mlp_gpt3.dep", B=2, S=256)
    spec = spec_from_program(prog, {"g1": 2}, {"g2": 0.5})
    assert [g.name for g in spec.grids] == ["g1", "g2"]
    g1, g2 = spec.grids
    assert g1.extent == prog.grid("g1").extent and g1.occupancy == 2 and g2.tile_time == 0.5
    (dep,) = spec.deps
    assert (dep.name, dep.consumer, dep.producer) == ("dep", "g2", "g1")
    for c in range(g2.num_tiles):
        ct = g2.tile(c)
        assert [g1.tile(p) for p in dep.waits[c]] == [tuple(t) for t in prog.waits("dep", "g1", ct)]
    for pol, ir in zip(dep.policies, prog.policies_of("dep", "g1")):
        assert pol.name == ir.name and pol.num_sems == ir.num_sems
        for t in range(g1.num_tiles):
            assert pol.sem[t] == ir.sem(g1.tile(t)) and pol.value[t] == ir.value(g1.tile(t))


def test_adapter_mlp_equals_hand_built_chain():
    # one row of tiles (B*S = TileM): mlp_gpt3.dep's g1 is (48 N tiles, 1 M tile); the paper model's
    # hand-built chain is (1 M tile, 48 N tiles, split-k 1); both linearize to the column index
    prog = _program("mlp_gpt3.dep", B=1, S=128)
    spec = spec_from_program(prog, {"g1": 2, "g2": 2}, {"g1": 2.0})
    assert spec.grid("g1").extent == (48, 1, 1) and spec.grid("g2").extent == (96, 1, 1)
    hand = mlp_spec((1, 48, 1), (1, 96, 1), 2, 2, tile_time1=2.0)
    names = [p.name for p in spec.deps[0].policies]
    for model in ("kstep", "block"):
        for j, name in enumerate(["TileSync", "RowSync"]):
            i = names.index(name)
            for sms in (8, 40, 80):
                a = simulate(build_chain(spec, [i], False, model), sms)
                b = simulate(build_chain(hand, [j], False, model), sms)
                assert (a.time, a.wait_time) == (b.time, b.wait_time)


def test_adapter_multi_producer_dep_and_orders():
    prog = _program("attention_gpt3.dep")
    spec = spec_from_program(prog)
    names = [d.name for d in spec.deps]
    assert any(n.startswith("depTR1[") for n in names)           # one DepSpec per (dep, producer)
    order = [g.name for g in spec.grids]
    for d in spec.deps:
        assert order.index(d.producer) < order.index(d.consumer)  # launch order is topological
    assert any(g.has_custom_order for g in spec.grids)              # StridedSync's generated order


def test_plan_mlp_small_v100():
    prog = _program("mlp_gpt3.dep", B=1, S=256)
    plan = make_plan(spec_from_program(prog, {"g1": 2, "g2": 2}), GPUS["v100"])
    assert [v["policy"] for v in plan["variants"]] == ["TileSync", "RowSync"]
    assert plan["decisions"]["W"]["apply"] and plan["decisions"]["T"]["apply"]
    for v in plan["variants"]:
        assert v["launch_orderings"]["wait-kernel"]["deadlock"] is False
        assert v["critical_path"] <= v["time"] <= plan["streamsync"]["time"]


def test_cli_on_example(capsys):
    rc = plan_main(["examples/mlp_gpt3.dep" if Path("examples/mlp_gpt3.dep").exists() else str(EX / "mlp_gpt3.dep"),
                    "-D", "B=1", "-D", "S=256", "--gpu", "v100", "--occupancy", "g1=2", "--occupancy", "g2=2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Grids (paper Table I)" in out and "Recommended:" in out and "W (drop the wait-kernel): yes" in out


def test_cli_json(capsys):
    assert plan_main([str(EX / "conv_resnet38.dep"), "--gpu", "a100", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu"]["num_sms"] == 108 and {v["policy"] for v in data["variants"]} == {"Conv2DTileSync", "RowSync"}


@pytest.mark.parametrize("argv,msg", [
    (["mlp_gpt3.dep"], "error: Param 'B' has no value"),
    (["mlp_gpt3.dep", "-D", "B=1", "-D", "S=256", "--occupancy", "g9=2"], "no grid named 'g9'"),
])
def test_cli_compile_errors(argv, msg, capsys):
    argv = [str(EX / argv[0])] + argv[1:]
    assert plan_main(argv) == 1
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err
