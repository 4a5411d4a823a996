"""Property tests of the wave-level simulator (hypothesis).

Assumptions under which the monotonicity properties are true (and asserted):
- the launch order is safe (``ordered``: every producer block is dispatched before any consumer
  block, which the wait-kernel and PDL guarantee), and
- every stage has the same occupancy, so a slot freed by any block fits any other block (with mixed
  occupancies the SM-level packing decides which block fits where, so the argument below does not cover them; a random search over 20000 two-stage mixed-occupancy
  chains found no counterexample, but without a proof only the critical-path and work bounds are
  asserted there).
Then each block's dispatch time is a non-decreasing function of the finish times of the blocks
before it in the queue, and its finish time of its dispatch and ready times; posting earlier
(finer semaphores, or no StreamSync barrier) can only move every time earlier.
"""

import random

from hypothesis import given, settings, strategies as st

from cusyncgen.plan import critical_path, simulate, stream_sync_time
from cusyncgen.plan.simulate import Chain, Stage


@st.composite
def chains(draw, equal_occupancy=True):
    seed = draw(st.integers(0, 2**32 - 1))
    rnd = random.Random(seed)
    nstages = draw(st.integers(1, 3))
    occ = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 24)) for _ in range(nstages)]
    times = [draw(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])) for _ in range(nstages)]
    occs = [occ if equal_occupancy else draw(st.integers(1, 3)) for _ in range(nstages)]
    orders = [None if draw(st.booleans()) else rnd.sample(range(n), n) for n in sizes]
    # per dependency: waited producer tiles (in order) per consumer tile, and a grouping of producer tiles
    waits = [None]
    groups = [None]
    for i in range(1, nstages):
        p = sizes[i - 1]
        waits.append([rnd.sample(range(p), rnd.randint(1, min(p, 4))) for _ in range(sizes[i])])
        k = rnd.randint(1, p)
        groups.append([rnd.randrange(k) for _ in range(p)])
    model = draw(st.sampled_from(["kstep", "block"]))
    return dict(sizes=sizes, times=times, occs=occs, orders=orders, waits=waits, groups=groups, model=model)


def make_chain(d, grouped: bool) -> Chain:
    """TileSync (a semaphore per producer tile) or the grouped policy (one per group, value = group size)."""
    n = len(d["sizes"])
    posts = [[[] for _ in range(s)] for s in d["sizes"]]
    sem_values = {}
    for i in range(1, n):
        g = d["groups"][i]
        for t in range(d["sizes"][i - 1]):
            key = (i, g[t]) if grouped else (i, "t", t)
            posts[i - 1][t].append(key)
            sem_values[key] = sem_values.get(key, 0) + 1
    stages = []
    for i in range(n):
        w = None
        if i > 0:
            g = d["groups"][i]
            keyf = (lambda t: (i, g[t])) if grouped else (lambda t: (i, "t", t))
            w = [[[keyf(t)] for t in tiles] for tiles in d["waits"][i]]
            if d["model"] == "block":
                w = [[sorted({s[0] for s in steps}, key=repr)] for steps in w]
        stages.append(Stage(f"s{i}", d["sizes"][i], d["occs"][i], d["times"][i], d["orders"][i], posts[i], w))
    c = Chain(stages, sem_values)
    c.validate()
    return c


EPS = 1e-9
sms = st.integers(1, 6)


@settings(max_examples=150, deadline=None)
@given(chains(equal_occupancy=False), sms, st.booleans())
def test_never_faster_than_critical_path_and_safe_order_never_deadlocks(d, n, grouped):
    c = make_chain(d, grouped)
    r = simulate(c, n, "ordered")
    assert not r.deadlock
    assert r.finished_blocks == r.total_blocks
    assert r.time >= critical_path(c) - EPS
    # and never faster than the work bound: block-time / slots
    work = sum(s.num_tiles * s.tile_time / s.occupancy for s in c.stages) / n
    assert r.time >= work - EPS


@settings(max_examples=150, deadline=None)
@given(chains(equal_occupancy=True), sms, st.booleans())
def test_safe_order_never_slower_than_streamsync(d, n, grouped):
    c = make_chain(d, grouped)
    assert simulate(c, n, "ordered").time <= stream_sync_time(c, n).time + EPS


@settings(max_examples=150, deadline=None)
@given(chains(equal_occupancy=True), sms)
def test_grouping_tiles_per_semaphore_never_finishes_earlier_than_tilesync(d, n):
    tile = simulate(make_chain(d, False), n, "ordered").time
    grouped = simulate(make_chain(d, True), n, "ordered").time
    assert grouped >= tile - EPS


@settings(max_examples=100, deadline=None)
@given(chains(equal_occupancy=True), sms, st.booleans())
def test_reversed_either_finishes_or_reports_deadlock(d, n, grouped):
    c = make_chain(d, grouped)
    r = simulate(c, n, "reversed")
    if r.deadlock:
        assert r.finished_blocks < r.total_blocks and r.waiting_blocks > 0
        # a deadlock needs the waiting consumers to hold every slot
        assert r.waiting_blocks >= n * d["occs"][0]
    else:
        assert r.finished_blocks == r.total_blocks and r.time >= critical_path(c) - EPS


# ---- spread: the shared-memory padding that keeps an early-launched kernel's blocks apart
from cusyncgen.plan.gpus import spread_pad  # noqa: E402

H200_SMEM = dict(per_sm=233472, optin=232448, reserved=1024)  # bytes, as the H200 reports them


def test_spread_pad_on_the_h200_softmax_beside_a_gemm_block():
    """The LLaMA prompt softmax (no shared memory of its own) beside a 64 KB P-GeMM block: one per
    SM, then two per SM for a grid of up to two waves."""
    gemm = 65536 + 128 + 1024
    one = spread_pad(**H200_SMEM, static=0, own=0, beside=gemm)
    assert one == 165760 and gemm + one + 1024 <= 233472 < 2 * (one + 1024)
    two = spread_pad(**H200_SMEM, static=0, own=0, beside=gemm, per_sm_blocks=2)
    assert two % 128 == 0 and gemm + 2 * (two + 1024) <= 233472 < 3 * (two + 1024)


@settings(max_examples=300, deadline=None)
@given(per_sm=st.integers(64 << 10, 256 << 10), static=st.integers(0, 48 << 10), own=st.integers(0, 96 << 10),
       beside=st.integers(0, 160 << 10), k=st.integers(1, 3))
def test_spread_pad_keeps_k_blocks_beside_the_producer_and_never_k_plus_one(per_sm, static, own, beside, k):
    optin, reserved = per_sm - 1024, 1024
    pad = spread_pad(per_sm, optin, reserved, static, own, beside, k)
    if pad == 0:
        return  # no such size: the kernel is launched unpadded
    block = pad + static + reserved
    assert pad % 128 == 0 and pad >= own and pad + static <= optin
    assert beside + k * block <= per_sm      # k of its blocks fit beside one producer block
    assert (k + 1) * block > per_sm          # k + 1 never fit, even on an empty SM
