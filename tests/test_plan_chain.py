"""The simulator's one-launch (persistent) chain: G = SMs x occupancy slots, slot s taking the
ordered queue's items s, s+G, ... one after the other. It beats stream order where the producer's
last wave leaves slots idle, never deadlocks on the examples (every policy, both tile orders, few
and many SMs), and the planner lists it in its ordering table."""
from pathlib import Path

import pytest

from cusyncgen.plan import GPUS, build_chain, make_plan, simulate
from cusyncgen.plan.paper import mlp_spec
from cusyncgen.plan.report import render
from cusyncgen.plan.simulate import Chain, Stage, stream_sync_time

EX = Path(__file__).resolve().parent.parent / "examples"


def _tilesync(n: int) -> Chain:
    """Producer and consumer of n tiles each, consumer tile t waiting for producer tile t."""
    prod = Stage("p", n, posts=[[("s", t)] for t in range(n)])
    cons = Stage("c", n, waits=[[[("s", t)]] for t in range(n)])
    return Chain([prod, cons], {("s", t): 1 for t in range(n)})


def test_the_chain_beats_stream_order_where_a_wave_is_half_empty():
    # 4 SMs, 6 tiles each: stream order 2 + 2 waves; the chain's slots 0-3 run P0-3, then P4, P5, C0,
    # C1 (their producers are done), then C2-C5: 3 tile times
    chain = _tilesync(6)
    assert stream_sync_time(chain, 4).time == 4
    r = simulate(chain, 4, "persistent")
    assert not r.deadlock and r.time == 3 and r.finished_blocks == 12
    assert r.stage_end == {"p": 2, "c": 3}


def test_a_slot_runs_its_items_in_order_and_waits_holding_its_slot():
    # one SM, occupancy 1: one slot runs P0, P1, C0, C1 back to back
    assert simulate(_tilesync(2), 1, "persistent").time == 4
    # consumer tile 0 waits on the LAST producer tile: the slot that takes it waits (holding the slot)
    prod = Stage("p", 3, tile_time=1.0, posts=[[], [], ["s"]])
    cons = Stage("c", 3, tile_time=1.0, waits=[[["s"]], [[]], [[]]])
    r = simulate(Chain([prod, cons], {"s": 1}), 3, "persistent")
    # slots 0-2 run P0-P2 (until 1); then C0, C1, C2 run at once (s posted at 1): 2
    assert r.time == 2 and r.wait_time == 0
    slow = Stage("p", 3, tile_time=1.0, posts=[[], [], ["s"]])
    r = simulate(Chain([slow, cons], {"s": 1}), 2, "persistent")
    # 2 slots: slot 0 runs P0, P2, C1; slot 1 runs P1, then C0, which waits from 1 to 2 for P2, then C2
    assert not r.deadlock and r.time == 4 and r.wait_time == 1


def test_the_chain_does_not_deadlock_where_reversed_dispatch_does():
    chain = build_chain(mlp_spec((1, 48, 4), (1, 96, 2), 2, 2), [0], False)
    assert simulate(chain, 80, "reversed").deadlock
    r = simulate(chain, 80, "persistent")
    assert not r.deadlock and r.finished_blocks == r.total_blocks
    # slots: 80 SMs x occupancy 2; never slower than stream order in the lockstep model here
    assert r.time <= stream_sync_time(chain, 80).time


def _example_specs():
    import cusyncgen
    from cusyncgen.plan.adapter import spec_from_program
    for name, params in (("mlp_gpt3.dep", {"B": 2, "S": 256}), ("mlp_llama.dep", {}), ("mlp_llama_ep.dep", {}),
                         ("attention_gpt3.dep", {}), ("conv_resnet38.dep", {"B": 1}), ("copy_chain.dep", {"Tiles": 64})):
        yield name, spec_from_program(cusyncgen.compile(EX / name, params=params).program)


@pytest.mark.parametrize("sms", [3, 16, 132])
def test_the_chain_never_deadlocks_on_the_examples(sms):
    for name, spec in _example_specs():
        for choice in spec.choices():
            for custom in (False, True):
                chain = build_chain(spec, choice, custom)
                r = simulate(chain, sms, "persistent")
                assert not r.deadlock and r.finished_blocks == r.total_blocks, (name, choice, custom, r.note)


def test_the_planner_lists_and_times_the_chain():
    plan = make_plan(mlp_spec((1, 48, 4), (1, 96, 2), 2, 2), GPUS["h100"])
    for v in plan["variants"]:
        ch = v["launch_orderings"]["chain"]
        assert ch["deadlock"] is False and v["chain_time"] == ch["time"] > 0
        assert v["chain_speedup"] == pytest.approx(plan["streamsync"]["time"] / v["chain_time"])
    text = render(plan)
    assert "none / wait-kernel / pdl / chain" in text and "one persistent launch" in text


def test_unknown_launch_mode_is_refused():
    with pytest.raises(ValueError, match="unknown launch mode"):
        simulate(_tilesync(2), 4, "chain")


def test_a_wait_on_a_later_stage_deadlocks_and_is_reported():
    # stage a's tile waits on stage b's, which comes later in every slot: with one slot, a never ends
    a = Stage("a", 1, waits=[[["s"]]])
    b = Stage("b", 1, posts=[["s"]])
    r = simulate(Chain([a, b], {"s": 1}), 1, "persistent")
    assert r.deadlock and r.waiting_blocks == 1 and r.undispatched_blocks == 1 and "persistent launch" in r.note
    assert not simulate(Chain([a, b], {"s": 1}), 2, "persistent").deadlock   # two slots: b runs beside it


def test_compact_steps_simulate_like_lists_of_steps():
    """The planner's chains hold their waits compactly (Steps): the persistent mode reads them as
    the lists they stand for, timings and waits included."""
    import cusyncgen
    from cusyncgen.plan.adapter import spec_from_program
    from cusyncgen.plan.simulate import Steps
    spec = spec_from_program(cusyncgen.compile(EX / "mlp_llama.dep", params={"B": 2, "S": 256}).program)
    for choice in spec.choices():
        chain = build_chain(spec, choice, False, "kstep", 0.1)
        lists = Chain([Stage(s.name, s.num_tiles, s.occupancy, s.tile_time, s.order, s.posts,
                             None if s.waits is None else [list(Steps.of(s.steps(t))) for t in range(s.num_tiles)],
                             s.wait_cost) for s in chain.stages], chain.sem_values)
        a, b = simulate(chain, 40, "persistent", skew=0.1), simulate(lists, 40, "persistent", skew=0.1)
        assert (a.time, a.wait_time, a.stage_end) == (b.time, b.wait_time, b.stage_end) and not a.deadlock
