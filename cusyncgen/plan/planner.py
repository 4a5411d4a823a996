"""Plan: wave table, simulated policies, launch-ordering safety, the W/T decisions, a recommendation.

Everything here is a pure function of a :class:`~cusyncgen.plan.model.ChainSpec` and a GPU; the
result is a JSON-able dict that ``report.py`` renders.

Which combinations of one policy per dependency are simulated: every one while there are at most
``max_candidates`` (``--max-candidates``; the paper's examples have at most 36), else a coordinate
descent (:func:`descend`): from every dependency's first policy (the finest the compiler derives),
one dependency at a time, each of its other policies with the others held, keeping a change that
the ordered simulation ranks better as :func:`pick` would; passes until a whole pass changes
nothing (a local optimum: no single dependency's other policy is better) or ``max_candidates``
combinations have been simulated. A pass simulates ``sum(policies - 1)`` combinations: linear in
the number of dependencies where the product is exponential.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Sequence

from .gpus import GPU
from .model import ChainSpec, build_chain, with_orders
from .simulate import Chain, Stage, critical_path, simulate, stream_sync_time
from .waves import fits_in_two_waves, wave_stats

ORDERINGS = {
    # launch ordering -> the simulator's dispatch queue in the worst case that ordering allows
    "none": "reversed",        # no mechanism: the consumer may be scheduled before its producer
    "wait-kernel": "ordered",  # the wait-kernel holds the consumer until every producer block is dispatched
    "pdl": "ordered",          # PDL: the consumer grid starts once every producer block has triggered
    "chain": "persistent",     # one persistent launch (sm90 "<Policy>+Chain"): producer items first in every slot
}


PDL_ALONE = "PDL"   # the recommendation without tile semaphores that PDL-launches the consumer

#: the policy combinations plan simulates at most (``--max-candidates``): all of them up to this
#: many, else a coordinate descent that stops after this many
DEFAULT_MAX_CANDIDATES = 256

SEARCHES = ("auto", "exhaustive", "descent")


def pick(variants: list[dict], base_time: float, pdl_time: float | None, order_pref: str) -> dict:
    """The fastest way to run the chain: a simulated policy variant (dicts with ``policy``,
    ``order``, ``time``, ``total_waits``, ``deadlock``), PDL alone (``pdl_time``; None where it is
    not modelled) or StreamSync (``base_time``).  Ties go to fewer semaphore waits (less
    synchronization traffic; PDL alone waits on none), then the order T prefers: where no wave is
    saved the simpler launch wins.  Returns ``{"policy", "order", "time", "near"}`` with
    ``policy`` one of the variants' names, ``PDL`` or ``StreamSync``; ``near``: how many tied."""
    eps = 1e-9 * max(1.0, base_time)
    ok = [v for v in variants if not v["deadlock"]]
    if pdl_time is not None:
        ok.append({"policy": PDL_ALONE, "order": "row-major", "time": pdl_time, "total_waits": 0})
    if not ok:
        return {"policy": "StreamSync", "order": "row-major", "time": base_time, "near": 1, "slower": None}
    best = min(v["time"] for v in ok)
    near = [v for v in ok if v["time"] <= best + eps]
    near.sort(key=lambda v: (v["total_waits"], v["order"] != order_pref, v["policy"]))
    r = near[0]
    if r["time"] > base_time + eps:
        return {"policy": "StreamSync", "order": "row-major", "time": base_time, "near": 1, "slower": r}
    return {"policy": r["policy"], "order": r["order"], "time": r["time"], "near": len(near), "pick": r}


def _better(a: dict, b: dict, eps: float) -> bool:
    """Does :func:`pick` prefer ranked candidate ``a`` to ``b`` (``deadlock``, ``time``, then
    ``total_waits``, tile order, name)?"""
    if a["deadlock"] or b["deadlock"]:
        return not a["deadlock"] and b["deadlock"]
    if a["time"] < b["time"] - eps:
        return True
    return a["time"] <= b["time"] + eps and a["tie"] < b["tie"]


def descend(num_policies: Sequence[int], rank: Callable[[tuple], dict], max_candidates: int,
            eps: float) -> tuple:
    """Coordinate descent over one policy per dependency (module docstring). ``rank(choice)``: a
    dict with ``deadlock``, ``time`` and ``tie`` (a sortable tie-break, :func:`pick`'s order).
    Returns (the start, the result, {"simulated", "passes", "converged"}); ``rank`` is called at
    most ``max_candidates`` times, once per combination."""
    ranked: dict = {}

    def get(choice):
        if choice not in ranked:
            ranked[choice] = rank(choice)
        return ranked[choice]

    start = cur = tuple(0 for _ in num_policies)
    get(cur)
    passes, converged = 0, False
    while not converged and len(ranked) < max_candidates:
        passes += 1
        changed = False
        for i, n in enumerate(num_policies):
            for p in range(n):
                cand = cur[:i] + (p,) + cur[i + 1:]
                if p == cur[i] or (cand not in ranked and len(ranked) >= max_candidates):
                    continue
                if _better(get(cand), ranked[cur], eps):
                    cur, changed = cand, True
        converged = not changed
    return start, cur, {"simulated": len(ranked), "passes": passes, "converged": converged}


def make_plan(spec: ChainSpec, gpu: GPU, model: str = "kstep", time_unit: str = "tile",
              wait_cost: float = 0.0, launch_gap: float = 0.0, skew: float = 0.0,
              max_candidates: int = DEFAULT_MAX_CANDIDATES, search: str = "auto") -> dict:
    """``launch_gap`` and ``skew``: the simulator's timing terms (0: the lockstep wave model of the
    paper's tables); with a launch gap on a GPU with PDL (sm_90+), PDL alone is a candidate too:
    it saves the gap and nothing else. ``max_candidates`` and ``search`` (``auto``: exhaustive up
    to ``max_candidates`` combinations, else ``descent``): which combinations of one policy per
    dependency are simulated (module docstring); ``plan["search"]`` says what was done."""
    if search not in SEARCHES:
        raise ValueError(f"unknown search {search!r}")
    if max_candidates < 1:
        raise ValueError("max_candidates must be at least 1")
    sms = gpu.num_sms
    grids = []
    stats = []
    for g in spec.grids:
        ws = wave_stats(g.num_tiles, sms, g.occupancy)
        stats.append(ws)
        grids.append({"name": g.name, "extent": list(g.extent), "occupancy": g.occupancy,
                      "tile_time": g.tile_time, "custom_order": g.has_custom_order, **ws.as_dict()})
    if model not in ("kstep", "block"):
        raise ValueError(f"unknown model {model!r}")
    # StreamSync runs the stages one after the other: no semaphores, so none are built
    bare = Chain([Stage(g.name, g.num_tiles, g.occupancy, g.tile_time) for g in spec.grids])
    shared: dict = {}   # the simulations' common start (simulate's prefix): the first grid alone
    base = stream_sync_time(bare, sms, launch_gap, skew, prefix=shared)
    pdl = stream_sync_time(bare, sms, 0.0, skew, prefix=shared) if launch_gap > 0 and gpu.cc >= 90 else None
    unit = max(g.tile_time for g in spec.grids)
    has_order = any(g.has_custom_order for g in spec.grids)
    two_waves = fits_in_two_waves(*stats)
    orders = [False, True] if has_order else [False]
    dep_waits: dict = {}

    def total_waits(choice) -> int:
        for key in enumerate(choice):
            if key not in dep_waits:
                dep_waits[key] = spec.total_waits_of(*key)
        return sum(dep_waits[key] for key in enumerate(choice))

    num_policies = [len(d.policies) for d in spec.deps]
    combinations = math.prod(num_policies) if spec.deps else 0
    exhaustive = search == "exhaustive" or (search == "auto" and combinations <= max_candidates)
    info = {"method": "exhaustive" if exhaustive else "descent", "combinations": combinations,
            "max_candidates": max_candidates}
    if exhaustive or not spec.deps:
        listed = itertools.product(*[range(n) for n in num_policies]) if spec.deps else []
        info.update(simulated=combinations, passes=None, converged=None)
    else:
        pref = "row-major" if (two_waves or not has_order) else "generated"
        eps = 1e-9 * max(1.0, base.time)

        def rank(choice):
            best = None
            built = build_chain(spec, choice, False, model, wait_cost)
            for custom in orders:
                order = "generated" if custom else "row-major"
                r = simulate(with_orders(spec, built, custom), sms, "ordered", skew=skew, prefix=shared)
                cand = {"deadlock": r.deadlock, "time": r.time,
                        "tie": (total_waits(choice), order != pref, spec.choice_name(choice))}
                if best is None or _better(cand, best, eps):
                    best = cand
            return best

        start, result, found = descend(num_policies, rank, max_candidates, eps)
        listed = [start] if start == result else [start, result]
        info.update(found)
    variants = []
    for choice in listed:
        built = build_chain(spec, choice, False, model, wait_cost)
        for custom in orders:
            chain = with_orders(spec, built, custom)
            res = simulate(chain, sms, "ordered", skew=skew, prefix=shared)
            cp = critical_path(chain, skew)
            safety = {}
            for ordering, mode in ORDERINGS.items():
                r = res if mode == "ordered" else simulate(chain, sms, mode, skew=skew, prefix=shared)
                safety[ordering] = {"deadlock": r.deadlock, "note": r.note}
                if mode == "persistent":
                    safety[ordering]["time"] = r.time
            variants.append({
                "policy": spec.choice_name(choice), "choice": list(choice),
                "order": "generated" if custom else "row-major",
                "time": res.time, "waves": res.time / unit, "critical_path": cp,
                "speedup": (base.time / res.time) if res.time > 0 and not res.deadlock else None,
                "deadlock": res.deadlock, "wait_time": res.wait_time,
                "num_sems": [spec.deps[i].policies[c].num_sems for i, c in enumerate(choice)],
                "total_waits": total_waits(choice), "launch_orderings": safety,
                # the one-launch chain (no launch gap, no second grid): where a kernel family has it
                "chain_time": safety["chain"]["time"],
                "chain_speedup": (base.time / safety["chain"]["time"]) if not safety["chain"]["deadlock"] else None,
                "stage_end": res.stage_end,
            })
    none_deadlocks = any(v["launch_orderings"]["none"]["deadlock"] for v in variants)
    decisions = {
        "W": {
            "apply": two_waves,
            "rule": "paper Sec. V-C: drop the wait-kernel when every kernel executes in at most two waves",
            "waves": [round(s.waves, 3) for s in stats],
            "simulated_none_deadlock": none_deadlocks,
        },
        "T": {
            "apply": two_waves or not has_order,
            "rule": "paper Sec. V-C: drop the custom tile order when every kernel executes in at most two waves",
            "has_generated_order": has_order,
        },
    }
    if two_waves and none_deadlocks:
        decisions["W"]["caveat"] = (
            "without an ordering mechanism a consumer scheduled before its producer can fill every slot "
            "and deadlock; the paper relies on the hardware dispatching the earlier-launched producer first. "
            + ("On this GPU (" + gpu.sm + ") PDL orders the launch at no cost: prefer it."
               if gpu.cc >= 90 else "Keep the wait-kernel where that reliance is not acceptable.")
        )
    if has_order and variants:
        best_rm = min((v["time"] for v in variants if v["order"] == "row-major"), default=None)
        best_go = min((v["time"] for v in variants if v["order"] == "generated"), default=None)
        decisions["T"]["simulated_best_row_major"] = best_rm
        decisions["T"]["simulated_best_generated"] = best_go
    rec = None
    if variants:
        r = pick(variants, base.time, pdl.time if pdl else None, "row-major" if decisions["T"]["apply"] else "generated")
        if r["policy"] == "StreamSync":
            slower = r["slower"]
            rec = {"policy": "StreamSync", "order": "row-major", "launch": "stream", "time": base.time,
                   "speedup": 1.0, "streamsync_is_better": True,
                   "why": (f"every policy is predicted slower (best: {slower['policy']}, {slower['time']:.4g})"
                           if slower else "every policy deadlocks")}
        elif r["policy"] == PDL_ALONE:
            rec = {"policy": PDL_ALONE, "order": "row-major", "launch": "pdl", "time": pdl.time,
                   "speedup": base.time / pdl.time, "streamsync_is_better": False,
                   "why": "PDL alone saves the launch gap; no policy is predicted faster"
                          + (" (ties broken by fewer semaphore waits)" if r["near"] > 1 else "")}
        else:
            v = r["pick"]
            launch = "none" if decisions["W"]["apply"] and not v["launch_orderings"]["none"]["deadlock"] else (
                "pdl" if gpu.cc >= 90 else "wait-kernel")
            rec = {"policy": v["policy"], "order": v["order"], "launch": launch, "time": v["time"],
                   "speedup": v["speedup"], "streamsync_is_better": False,
                   "why": ("least simulated time"
                           + (f"; ties broken by fewer semaphore waits ({v['total_waits']})" if r["near"] > 1 else ""))}
    return {
        "source": spec.source, "gpu": {"name": gpu.name, "sm": gpu.sm, "num_sms": sms},
        "model": model, "wait_cost": wait_cost, "launch_gap": launch_gap, "skew": skew,
        "time_unit": time_unit, "grids": grids,
        "streamsync": {"time": base.time, "waves": base.time / unit, "stage_end": base.stage_end,
                       "whole_waves": sum(s.full_waves for s in stats),
                       "fractional_waves": sum(s.waves for s in stats)},
        "pdl_alone": {"time": pdl.time, "speedup": base.time / pdl.time} if pdl else None,
        "search": info, "variants": variants, "decisions": decisions, "recommended": rec,
    }
