"""Plan: wave table, simulated policies, launch-ordering safety, the W/T decisions, a recommendation.

Everything here is a pure function of a :class:`~cusyncgen.plan.model.ChainSpec` and a GPU; the
result is a JSON-able dict that ``report.py`` renders.
"""

from __future__ import annotations

from .gpus import GPU
from .model import ChainSpec, build_chain
from .simulate import critical_path, simulate, stream_sync_time
from .waves import fits_in_two_waves, wave_stats

ORDERINGS = {
    # launch ordering -> the simulator's dispatch queue in the worst case that ordering allows
    "none": "reversed",        # no mechanism: the consumer may be scheduled before its producer
    "wait-kernel": "ordered",  # the wait-kernel holds the consumer until every producer block is dispatched
    "pdl": "ordered",          # PDL: the consumer grid starts once every producer block has triggered
}


def make_plan(spec: ChainSpec, gpu: GPU, model: str = "kstep", time_unit: str = "tile",
              wait_cost: float = 0.0) -> dict:
    sms = gpu.num_sms
    grids = []
    stats = []
    for g in spec.grids:
        ws = wave_stats(g.num_tiles, sms, g.occupancy)
        stats.append(ws)
        grids.append({"name": g.name, "extent": list(g.extent), "occupancy": g.occupancy,
                      "tile_time": g.tile_time, "custom_order": g.has_custom_order, **ws.as_dict()})
    base = stream_sync_time(build_chain(spec, [0] * len(spec.deps), False, model), sms)
    unit = max(g.tile_time for g in spec.grids)
    has_order = any(g.has_custom_order for g in spec.grids)
    variants = []
    for choice in spec.choices() if spec.deps else []:
        for custom in ([False, True] if has_order else [False]):
            chain = build_chain(spec, choice, custom, model, wait_cost)
            res = simulate(chain, sms, "ordered")
            cp = critical_path(chain)
            safety = {}
            for ordering, mode in ORDERINGS.items():
                r = res if mode == "ordered" else simulate(chain, sms, mode)
                safety[ordering] = {"deadlock": r.deadlock, "note": r.note}
            variants.append({
                "policy": spec.choice_name(choice), "choice": list(choice),
                "order": "generated" if custom else "row-major",
                "time": res.time, "waves": res.time / unit, "critical_path": cp,
                "speedup": (base.time / res.time) if res.time > 0 and not res.deadlock else None,
                "deadlock": res.deadlock, "wait_time": res.wait_time,
                "num_sems": [spec.deps[i].policies[c].num_sems for i, c in enumerate(choice)],
                "total_waits": spec.total_waits(choice), "launch_orderings": safety,
                "stage_end": res.stage_end,
            })
    two_waves = fits_in_two_waves(*stats)
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
        ok = [v for v in variants if not v["deadlock"]]
        order_pref = "row-major" if decisions["T"]["apply"] else "generated"
        eps = 1e-9 * max(1.0, base.time)
        best = min(v["time"] for v in ok)
        near = [v for v in ok if v["time"] <= best + eps]
        # ties: fewer semaphore waits (less synchronization traffic), then the order T prefers
        near.sort(key=lambda v: (v["total_waits"], v["order"] != order_pref, v["policy"]))
        r = near[0]
        launch = "none" if decisions["W"]["apply"] and not r["launch_orderings"]["none"]["deadlock"] else (
            "pdl" if gpu.cc >= 90 else "wait-kernel")
        rec = {"policy": r["policy"], "order": r["order"], "launch": launch, "time": r["time"],
               "speedup": r["speedup"], "streamsync_is_better": r["time"] > base.time + eps,
               "why": ("least simulated time"
                       + (f"; ties broken by fewer semaphore waits ({r['total_waits']})" if len(near) > 1 else ""))}
        if rec["streamsync_is_better"]:
            rec = {"policy": "StreamSync", "order": "row-major", "launch": "stream", "time": base.time,
                   "speedup": 1.0, "streamsync_is_better": True,
                   "why": f"every policy is predicted slower (best: {r['policy']}, {r['time']:.4g})"}
    return {
        "source": spec.source, "gpu": {"name": gpu.name, "sm": gpu.sm, "num_sms": sms},
        "model": model, "wait_cost": wait_cost, "time_unit": time_unit, "grids": grids,
        "streamsync": {"time": base.time, "waves": base.time / unit, "stage_end": base.stage_end,
                       "whole_waves": sum(s.full_waves for s in stats),
                       "fractional_waves": sum(s.waves for s in stats)},
        "variants": variants, "decisions": decisions, "recommended": rec,
    }
