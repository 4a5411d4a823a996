"""Calibrating the simulator's timing terms on measured chains (``cusyncgen tune``'s data).

The lockstep wave model (equal block times, no launch cost) predicts no gain wherever no whole
wave is saved, yet the GPU measures 1-8 % there.  Three terms, each read off the measurement that
isolates it (the GPU's constants live in :data:`cusyncgen.plan.gpus.TIMINGS`):

- the *tile rate* (TFLOP/s per SM): converts a block's work (2 BM BN K flops, times its occupancy:
  an SM shared by ``o`` blocks gives each ``1/o``) into microseconds, so that the two terms below,
  which are microseconds, weigh right against the blocks.  From the StreamSync times: the median of
  simulated work over measured time.
- the *launch gap* (µs): StreamSync pays it at the kernel boundary, PDL alone and every policy do
  not.  From the chains whose kernels each fit one wave, where PDL alone saves exactly that: the
  median of StreamSync minus PDL alone.
- the *tail skew* (fraction of a block's time) and the *wait cost* (µs per wait on a new
  semaphore): the spread of block times within a wave, which lets an early-resident consumer use
  the SMs a producer's last wave frees one by one, and the round trip each semaphore wait adds
  (the runtime notes ~0.5 µs).  They trade against each other (skew favours fine-grained waits,
  the wait cost penalizes them), so both come from one grid search: the pair with the least mean
  absolute error of the predicted speed-up over StreamSync.

Everything is deterministic: medians, a fixed grid, ties broken by the grid's order.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from .gpus import Timing
from .model import ChainSpec, build_chain
from .planner import PDL_ALONE, pick
from .simulate import simulate, stream_sync_time
from .waves import fits_in_two_waves, wave_stats

SKEWS = (0.0, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15)   # the grid of tail skews searched
WAIT_COSTS_US = (0.0, 0.2, 0.4, 0.6, 0.8)             # ... and of wait costs


@dataclass
class Point:
    """One measured chain.  ``spec``: its grids with ``tile_time`` = a block's work in TFLOP x
    occupancy (its time in µs at 1 TFLOP/s per SM); ``measured``: µs per configuration family
    ("StreamSync", "PDL", and the fastest correct configuration of each policy)."""
    name: str
    size: int
    spec: ChainSpec
    measured: dict

    @property
    def measured_best(self) -> tuple[str, float]:
        """(family, speed-up over StreamSync) of the fastest measured configuration."""
        fam = min(self.measured, key=self.measured.get)
        return fam, self.measured["StreamSync"] / self.measured[fam]

    def fits_one_wave(self, num_sms: int) -> bool:
        return all(wave_stats(g.num_tiles, num_sms, g.occupancy).waves <= 1 for g in self.spec.grids)


def fit_tile_rate(points: Sequence[Point], num_sms: int) -> float:
    """TFLOP/s per SM: median over the points of the simulated StreamSync time at 1 TFLOP/s (the
    lockstep model: no gap, no skew) over the measured one."""
    ratios = []
    for p in points:
        bare = build_chain(p.spec, [0] * len(p.spec.deps), False)
        ratios.append(stream_sync_time(bare, num_sms).time / p.measured["StreamSync"])
    return round(statistics.median(ratios), 2)


def fit_launch_gap(points: Sequence[Point], num_sms: int) -> float:
    """µs: median of StreamSync minus PDL alone over the points whose kernels each fit one wave
    (there PDL alone only moves the consumer's launch; past one wave its early-resident blocks
    also change how the SMs are packed)."""
    gaps = [p.measured["StreamSync"] - p.measured[PDL_ALONE] for p in points
            if PDL_ALONE in p.measured and p.fits_one_wave(num_sms)]
    return round(statistics.median(gaps), 2) if gaps else 0.0


class _Sim:
    """One point's chains, built once for a grid search (wait cost set per run); the same choice
    of policy, order and tie-break as :func:`cusyncgen.plan.planner.make_plan`."""

    def __init__(self, point: Point, num_sms: int, tile_tflops: float):
        self.point, self.sms = point, num_sms
        spec = ChainSpec([_scaled(g, tile_tflops) for g in point.spec.grids], point.spec.deps, point.spec.source)
        has_order = any(g.has_custom_order for g in spec.grids)
        stats = [wave_stats(g.num_tiles, num_sms, g.occupancy) for g in spec.grids]
        self.order_pref = "row-major" if fits_in_two_waves(*stats) or not has_order else "generated"
        self.bare = build_chain(spec, [0] * len(spec.deps), False)
        self.chains = [(spec.choice_name(c), "generated" if custom else "row-major", spec.total_waits(c),
                        build_chain(spec, c, custom))
                       for c in spec.choices() for custom in ([False, True] if has_order else [False])]
        self._stream: dict = {}   # (gap, skew) -> StreamSync time: the wait cost does not change it

    def _stream_time(self, gap: float, skew: float) -> float:
        if (gap, skew) not in self._stream:
            self._stream[gap, skew] = stream_sync_time(self.bare, self.sms, gap, skew).time
        return self._stream[gap, skew]

    def predict(self, t: Timing) -> tuple[str, float]:
        """(recommended policy, predicted speed-up over StreamSync)."""
        base = self._stream_time(t.launch_gap_us, t.tail_skew)
        pdl = self._stream_time(0.0, t.tail_skew) if t.launch_gap_us > 0 else None
        variants = []
        for name, order, waits, chain in self.chains:
            for st in chain.stages:
                st.wait_cost = t.wait_cost_us
            r = simulate(chain, self.sms, "ordered", skew=t.tail_skew)
            variants.append({"policy": name, "order": order, "time": r.time, "total_waits": waits,
                             "deadlock": r.deadlock})
        r = pick(variants, base, pdl, self.order_pref)
        return r["policy"], base / r["time"]


def _scaled(g, tile_tflops: float):
    from dataclasses import replace
    return replace(g, tile_time=g.tile_time / tile_tflops)


def evaluate(points: Sequence[Point], timing: Timing, num_sms: int, sims: dict | None = None) -> list[dict]:
    """Per point: the recommended policy and its predicted speed-up against the measured best
    (family and speed-up on the same tiles), and the absolute error of the speed-up."""
    out = []
    for p in points:
        sim = sims.get(id(p)) if sims is not None else None
        if sim is None:
            sim = _Sim(p, num_sms, timing.tile_tflops or 1.0)
            if sims is not None:
                sims[id(p)] = sim
        policy, sp = sim.predict(timing)
        fam, msp = p.measured_best
        out.append({"name": p.name, "size": p.size, "policy": policy, "speedup": sp,
                    "measured": fam, "measured_speedup": msp, "error": abs(sp - msp)})
    return out


def mean_abs_error(rows: Sequence[dict]) -> float:
    return sum(r["error"] for r in rows) / len(rows) if rows else float("nan")


def fit_skew_and_wait(points: Sequence[Point], tile_tflops: float, launch_gap_us: float, num_sms: int,
                      skews=SKEWS, wait_costs=WAIT_COSTS_US) -> tuple[float, float, float]:
    """(tail skew, wait cost, its MAE): the grid pair with the least mean absolute error of the
    predicted speed-up; ties to the earlier pair (smaller skew, then smaller wait cost)."""
    sims: dict = {}
    best = None
    for s in skews:
        for w in wait_costs:
            t = Timing(tile_tflops, launch_gap_us, s, w)
            mae = mean_abs_error(evaluate(points, t, num_sms, sims))
            if best is None or mae < best[2] - 1e-12:
                best = (s, w, mae)
    return best


def calibrate(points: Sequence[Point], num_sms: int, skews=SKEWS, wait_costs=WAIT_COSTS_US) -> Timing:
    """The timing terms of one GPU from its calibration points (see the module docstring)."""
    rate = fit_tile_rate(points, num_sms)
    gap = fit_launch_gap(points, num_sms)
    skew, wait, _ = fit_skew_and_wait(points, rate, gap, num_sms, skews, wait_costs)
    return Timing(rate, gap, skew, wait)
