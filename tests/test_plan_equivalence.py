"""The planner's fast paths give the simulator's results to the bit: the compact chains of
build_chain (integer semaphores, sync points in shared arrays, long runs checked in numpy, built
in blocks), the start shared between the policies of one plan, and the critical path's sorted
merge, against the same chains as lists of steps simulated from scratch and against the previous
simulator (test_scale.reference_simulate)."""

import dataclasses
import importlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cusyncgen.plan import GPUS, build_chain, critical_path, make_plan, model, simulate
from cusyncgen.plan.model import ChainSpec, DepSpec, GridSpec, PolicySpec
from cusyncgen.plan.simulate import Chain, Stage, Steps, stream_sync_time

from test_scale import reference_simulate

SIM = importlib.import_module("cusyncgen.plan.simulate")   # (the package exports the function)


@st.composite
def specs(draw):
    """2 to 4 grids in launch order; grid i > 0 reads one or two earlier grids, each consumer tile
    up to 40 producer tiles (long runs: numpy checks them), under one to three policies that
    group producer tiles onto semaphores (value: the group's size)."""
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(2, 4))
    occ = draw(st.sampled_from([None, 1, 2]))
    grids = []
    for i in range(n):
        tiles = draw(st.integers(1, 30))
        order = rnd.sample(range(tiles), tiles) if rnd.random() < 0.4 else None
        grids.append(GridSpec(f"g{i}", (tiles, 1, 1), occ or rnd.randint(1, 3),
                              rnd.choice([0.5, 1.0, 1.5]), order))
    deps = []
    for i in range(1, n):
        for p in sorted(set(rnd.sample(range(i), min(i, rnd.randint(1, 2))))):
            P = grids[p].num_tiles
            long = rnd.random() < 0.5
            waits = [[rnd.randrange(P) for _ in range(rnd.randint(0, 40 if long else 4))]
                     for _ in range(grids[i].num_tiles)]
            if long:   # runs in producer order, as a row is read
                waits = [sorted(w) for w in waits]
            policies = [PolicySpec("TileSync", list(range(P)), [1] * P)]
            for k in range(rnd.randint(0, 2)):
                groups = rnd.randint(1, P)
                sem = [rnd.randrange(groups) for _ in range(P)]
                policies.append(PolicySpec(f"Group{k}", sem, [sem.count(s) for s in sem]))
            deps.append(DepSpec(f"d{i}_{p}", f"g{i}", f"g{p}", waits, policies))
    return ChainSpec(grids, deps)


def as_lists(chain: Chain) -> Chain:
    """The same chain with every tile's steps a list and keys not declared integers: the
    simulator's generic path."""
    return Chain([Stage(s.name, s.num_tiles, s.occupancy, s.tile_time, s.order, s.posts,
                        None if s.waits is None else [list(Steps.of(s.steps(t))) for t in range(s.num_tiles)],
                        s.wait_cost) for s in chain.stages], dict(chain.sem_values))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs(), st.integers(1, 8), st.sampled_from([0.0, 0.15]), st.sampled_from(["kstep", "block"]),
       st.sampled_from([0.0, 0.05]), st.sampled_from([model.CHUNK, 5]))
def test_compact_chains_and_the_shared_start_simulate_like_lists(spec, sms, skew, model_, wait_cost, chunk):
    with pytest.MonkeyPatch.context() as mp:   # 5: the arrays built and read in blocks of a few
        mp.setattr(model, "CHUNK", chunk)
        if chunk == 5:
            mp.setattr(SIM, "_CP_BLOCKS", 3)
            mp.setattr(SIM, "_CP_SYNCS", 7)
            mp.setattr(SIM, "_CP_WINDOW", 2)
        _compact_like_lists(spec, sms, skew, model_, wait_cost)


def _compact_like_lists(spec, sms, skew, model_, wait_cost):
    shared: dict = {}
    for choice in spec.choices()[:6]:
        for custom in (False, True):
            chain = build_chain(spec, choice, custom, model_, wait_cost)
            assert chain.int_keys
            chain.validate()
            lists = as_lists(chain)
            for mode in ("ordered", "stream", "reversed", "persistent"):
                got = simulate(chain, sms, mode, skew=skew, prefix=shared, launch_gap=0.25 if mode == "stream" else 0)
                assert got == simulate(lists, sms, mode, skew=skew, launch_gap=0.25 if mode == "stream" else 0)
                if mode != "persistent":
                    ref = reference_simulate(chain, sms, mode, skew=skew,
                                             launch_gap=0.25 if mode == "stream" else 0)
                    assert (got.time, got.stage_end, got.wait_time, got.finished_blocks) == ref
            got = simulate(chain, 1, unlimited=True, skew=skew)
            assert got == simulate(lists, 1, unlimited=True, skew=skew)
            assert critical_path(chain, skew) == got.time   # in numpy where it applies
            assert (got.time, got.stage_end, got.wait_time, got.finished_blocks) == \
                reference_simulate(chain, 1, unlimited=True, skew=skew)
    assert stream_sync_time(build_chain(spec, [0] * len(spec.deps), False), sms, 0.25, skew, prefix=shared) == \
        stream_sync_time(build_chain(spec, [0] * len(spec.deps), False), sms, 0.25, skew)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs(), st.sampled_from(["h100", "v100"]), st.sampled_from([0.0, 0.1]))
def test_a_plan_is_the_same_without_its_shared_start(spec, gpu, skew):
    from cusyncgen.plan import planner
    real = planner.simulate
    plan = make_plan(spec, GPUS[gpu], skew=skew, launch_gap=0.3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(planner, "simulate", lambda *a, prefix=None, **k: real(*a, **k))
        mp.setattr(planner, "stream_sync_time", lambda *a, prefix=None, **k: stream_sync_time(*a, **k))
        assert make_plan(spec, GPUS[gpu], skew=skew, launch_gap=0.3) == plan


def test_the_shared_start_is_kept_once_per_first_grid_order_and_mode():
    spec = ChainSpec([GridSpec("p", (300, 1, 1), 1, 1.0, list(range(300))[::-1]), GridSpec("c", (10, 1, 1))],
                     [DepSpec("d", "c", "p", [[t, t + 1] for t in range(10)],
                              [PolicySpec("TileSync", list(range(300)), [1] * 300),
                               PolicySpec("All", [0] * 300, [300] * 300)])])
    shared: dict = {}
    results = [simulate(build_chain(spec, [i], custom), 8, mode, prefix=shared)
               for i in (0, 1) for custom in (False, True) for mode in ("ordered", "stream", "persistent")]
    assert sorted(len(v) for v in shared.values()) == [2, 2]   # (dispatch, persistent) x two orders
    fresh = [simulate(build_chain(spec, [i], custom), 8, mode)
             for i in (0, 1) for custom in (False, True) for mode in ("ordered", "stream", "persistent")]
    assert results == fresh


def test_a_dense_run_then_a_sparse_one_keeps_every_position(monkeypatch):
    """Blocks of sync points where every step waits store no positions, until one that does not."""
    monkeypatch.setattr(model, "CHUNK", 4)
    waits = [[0, 1, 2, 3], [4, 5, 6, 7], [0, 0, 1, 1]]   # the last: two runs of one semaphore
    spec = ChainSpec([GridSpec("p", (8, 1, 1)), GridSpec("c", (3, 1, 1))],
                     [DepSpec("d", "c", "p", waits, [PolicySpec("TileSync", list(range(8)), [1] * 8)])])
    table = build_chain(spec, [0], False).stages[1].waits
    assert table.pos is not None and list(table.pos) == [0, 1, 2, 3, 0, 1, 2, 3, 0, 2]
    assert [list(table[c]) for c in range(3)][2] == [(0,), (), (1,), ()]
    dense = build_chain(dataclasses.replace(spec, deps=[dataclasses.replace(spec.deps[0], waits=waits[:2])]),
                        [0], False)
    assert dense.stages[1].waits.pos is None and list(dense.stages[1].waits[1]) == [(4,), (5,), (6,), (7,)]


@pytest.mark.parametrize("skew", [0.0, 0.2])
def test_long_runs_checked_in_numpy_park_where_one_at_a_time_does(skew):
    """A consumer tile reading 500 producer tiles, one semaphore each, posted out of order."""
    P = 500
    order = random.Random(1).sample(range(P), P)
    spec = ChainSpec([GridSpec("p", (P, 1, 1), 1, 1.0, order), GridSpec("c", (4, 1, 1), 1, 3.0)],
                     [DepSpec("d", "c", "p", [list(range(P))] * 4,
                              [PolicySpec("TileSync", list(range(P)), [1] * P)])])
    for sms in (1, 7, 600):
        chain = build_chain(spec, [0], True)
        for mode in ("ordered", "reversed", "persistent"):
            assert simulate(chain, sms, mode, skew=skew) == simulate(as_lists(chain), sms, mode, skew=skew)
