"""Text rendering of a plan (the dict of :func:`cusyncgen.plan.planner.make_plan`)."""

from __future__ import annotations


def _g(v: float) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def render(plan: dict) -> str:
    gpu = plan["gpu"]
    unit = "us" if plan["time_unit"] == "us" else "tile times"
    out = [f"cusyncgen plan: {plan['source']} on {gpu['name']} ({gpu['sm']}, {gpu['num_sms']} SMs)", "",
           "Grids (paper Table I):",
           f"  {'grid':<10} {'extent':>12} {'blocks':>7} {'occ':>4} {'per wave':>9} {'waves':>7} {'ceil':>5} {'util':>6} {'last wave':>9}"]
    for g in plan["grids"]:
        ext = "x".join(str(v) for v in g["extent"])
        out.append(f"  {g['name']:<10} {ext:>12} {g['blocks']:>7} {g['occupancy']:>4} {g['blocks_per_wave']:>9} "
                   f"{g['waves']:>7.2f} {g['full_waves']:>5} {g['utilization']*100:>5.0f}% {g['last_wave_utilization']*100:>8.0f}%")
    ss = plan["streamsync"]
    wc = f", {plan['wait_cost']:g} per semaphore wait" if plan.get("wait_cost") else ""
    wc += f", launch gap {plan['launch_gap']:g}" if plan.get("launch_gap") else ""
    wc += f", tail skew {plan['skew']:g}" if plan.get("skew") else ""
    out += ["", f"Simulation ({plan['model']} model{wc}; times in {unit}, dispatch in launch order, a waiting block holds its slot):",
            f"  StreamSync: {_g(ss['time'])}  (whole waves {ss['whole_waves']}, fractional sum {ss['fractional_waves']:.2f})"]
    search = plan.get("search") or {}
    if search.get("method") == "descent":
        how = ("a local optimum: no other policy of any one dep is faster" if search["converged"] else
               "stopped at --max-candidates before a pass changed nothing")
        out.append(f"  Search: {search['combinations']:,} combinations of one policy per dep, more than "
                   f"--max-candidates {search['max_candidates']:,}: coordinate descent from each dep's first "
                   f"policy, one dep at a time; {search['simulated']:,} simulated in {search['passes']} "
                   f"pass{'' if search['passes'] == 1 else 'es'}, {how}. Listed: the start and the result.")
    if plan.get("pdl_alone"):
        pa = plan["pdl_alone"]
        out.append(f"  PDL alone:  {_g(pa['time'])}  ({pa['speedup']:.3f}x: the launch gap saved, nothing overlapped)")
    if not plan["variants"]:
        out.append("  no Dep between the grids: nothing to synchronize")
    if plan["variants"]:
        pw = max(28, max(len(v["policy"]) for v in plan["variants"]))
        out.append(f"  {'policy':<{pw}} {'order':<10} {'time':>8} {'speedup':>8} {'crit.path':>9} {'sems':>6} {'waits':>7} "
                   f"{'chain':>8}   deadlock: none / wait-kernel / pdl / chain")
        for v in plan["variants"]:
            sp = "-" if v["speedup"] is None else f"{v['speedup']:.3f}x"
            lo = v["launch_orderings"]
            dl = " / ".join("yes" if lo[k]["deadlock"] else "no" for k in ("none", "wait-kernel", "pdl", "chain"))
            t = "DEADLOCK" if v["deadlock"] else _g(v["time"])
            ct = "DEADLOCK" if lo["chain"]["deadlock"] else _g(v["chain_time"])
            out.append(f"  {v['policy']:<{pw}} {v['order']:<10} {t:>8} {sp:>8} {_g(v['critical_path']):>9} "
                       f"{'/'.join(map(str, v['num_sems'])):>6} {v['total_waits']:>7} {ct:>8}   {dl}")
        out.append("  chain: one persistent launch holding every grid (the sm90 kernels' <Policy>+Chain; "
                   "producer tiles first in every slot, no launch gap)")
        notes = sorted({v["launch_orderings"]["none"]["note"] for v in plan["variants"] if v["launch_orderings"]["none"]["deadlock"]})
        if notes:
            out.append("  launch ordering 'none', worst case (consumer blocks dispatched first): " + notes[0])
    d = plan["decisions"]
    out += ["", "Optimizations:",
            f"  W (drop the wait-kernel): {'yes' if d['W']['apply'] else 'no'} -- {d['W']['rule']}; waves {d['W']['waves']}"]
    if "caveat" in d["W"]:
        out.append(f"    caveat: {d['W']['caveat']}")
    t = d["T"]
    line = f"  T (drop the custom tile order): {'yes' if t['apply'] else 'no'}"
    line += f" -- {t['rule']}" if t["has_generated_order"] else " -- no grid has a generated order other than row-major"
    out.append(line)
    if "simulated_best_row_major" in t:
        out.append(f"    simulated best: row-major {_g(t['simulated_best_row_major'])}, generated order {_g(t['simulated_best_generated'])}")
    out.append("  R (reorder tile loads): a kernel rewrite, see `cusyncgen reorder`; not modelled here")
    r = plan["recommended"]
    if r:
        sp = "-" if r["speedup"] is None else f"{r['speedup']:.3f}x"
        out += ["", f"Recommended: {r['policy']}, {r['order']} order, launch ordering {r['launch']} "
                    f"(predicted {_g(r['time'])} {unit}, {sp} over StreamSync; {r['why']})"]
    if plan.get("launch_gap") or plan.get("skew"):
        out.append("Model: in-order dispatch, block times spread by the tail skew, StreamSync pays the launch gap;"
                   " no memory effects; a ranking aid, to be checked against measurements (cusyncgen tune).")
    else:
        out.append("Model: equal-time blocks per grid, in-order dispatch, no memory or launch effects; a ranking"
                   " aid, to be checked against measurements (cusyncgen tune).")
    return "\n".join(out)
