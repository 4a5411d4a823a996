"""``cusyncgen plan``: wave table, simulated policies and the W/T decisions for a .dep program.

    cusyncgen plan FILE.dep [-D N=V ...] [--gpu v100|a100|h100|h200|auto]
                   [--occupancy GRID=BLOCKS_PER_SM ... | --block GRID=THREADS,REGS,SMEM ...]
                   [--tile-time GRID=US ...] [--wait-cost US] [--launch-gap US] [--skew F]
                   [--calibrated] [--model kstep|block] [--max-candidates N] [--json]
    cusyncgen plan --paper [--gpu v100] [--model kstep|block]   # Table I / IV reproduction

Bad input prints ``cusyncgen plan: error: ...`` (or the compiler's ``file:line:col: error:``)
without a traceback: exit 1 for an error, 2 for a usage error (cusyncgen/cliutil.py).
"""

from __future__ import annotations

import argparse
import json
import sys

from cusyncgen import cliutil
from cusyncgen.cliutil import UsageError as _UsageError
from cusyncgen.errors import CusyncError

from .gpus import GPUS, GPUError, get_gpu, occupancy

PROG = "cusyncgen plan"


def _kv(items: list[str], what: str, conv):
    out = {}
    for item in items or []:
        if "=" not in item:
            raise _UsageError(f"{what}: expected NAME=VALUE, got '{item}'")
        k, v = item.split("=", 1)
        k = k.strip()
        if not k:
            raise _UsageError(f"{what}: empty name in '{item}'")
        try:
            val = conv(v)
        except ValueError:
            raise _UsageError(f"{what}: '{v}' is not a valid value for {k}") from None
        out[k] = val
    return out


def _pos_int(v: str) -> int:
    n = int(v)
    if n <= 0:
        raise ValueError(v)
    return n


def _pos_float(v: str) -> float:
    f = float(v)
    if not (f > 0) or f == float("inf"):
        raise ValueError(v)
    return f


def _block_res(v: str) -> tuple[int, int, int]:
    parts = [p.strip() for p in v.split(",")]
    if not 1 <= len(parts) <= 3:
        raise ValueError(v)
    nums = [int(p) for p in parts] + [0] * (3 - len(parts))
    if nums[0] <= 0 or nums[0] > 1024 or nums[1] < 0 or nums[1] > 255 or nums[2] < 0:
        raise ValueError(v)
    return tuple(nums)


def _parser() -> argparse.ArgumentParser:
    p = cliutil.ArgumentParser(prog=PROG, description="Wave model and policy simulation for a .dep program")
    p.add_argument("file", nargs="?", help=".dep file ('-' = stdin)")
    p.add_argument("-D", dest="defines", action="append", default=[], type=cliutil.param, metavar="N=V",
                   help="set a Param")
    p.add_argument("--gpu", default=None,
                   help="v100, a100, h100, h200 or auto (CuPy); default h100, and v100 (the paper's) with --paper")
    p.add_argument("--occupancy", action="append", default=[], metavar="GRID=BLOCKS_PER_SM")
    p.add_argument("--tile-time", action="append", default=[], metavar="GRID=US",
                   help="time of one block of GRID (default 1: times are in tile times)")
    p.add_argument("--block", action="append", default=[], metavar="GRID=THREADS[,REGS[,SMEM]]",
                   help="compute GRID's occupancy on --gpu from threads per block, registers per thread "
                        "and shared memory bytes per block (instead of --occupancy)")
    p.add_argument("--wait-cost", type=float, default=0.0, metavar="US",
                   help="time a wait on a new semaphore adds to a block (default 0)")
    p.add_argument("--launch-gap", type=float, default=0.0, metavar="US",
                   help="StreamSync's time between the producer's last block and the consumer's first (default 0)")
    p.add_argument("--skew", type=float, default=0.0, metavar="F",
                   help="block times spread over (1 +- F) x --tile-time, deterministically (default 0)")
    p.add_argument("--calibrated", action="store_true",
                   help="launch gap, skew and wait cost measured on --gpu (cusyncgen/plan/gpus.py TIMINGS: "
                        f"measured on {_calibrated_gpus()}; microseconds: give --tile-time for every grid)")
    p.add_argument("--model", choices=["kstep", "block"], default="kstep",
                   help="kstep: a consumer waits before each producer tile it loads (default); "
                        "block: a consumer tile starts once all its producer tiles are posted")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--max-edges", type=_pos_int, default=None, metavar="N",
                   help="refuse programs with more than N (consumer tile, producer tile) edges or a grid "
                        "of more than N tiles (default: cusyncgen.limits.DEFAULT_MAX_EDGES)")
    p.add_argument("--max-candidates", type=_pos_int, default=None, metavar="N",
                   help="simulate at most N combinations of one policy per dep: every combination when there "
                        "are at most N, else a coordinate descent one dep at a time that stops after N "
                        "(default: cusyncgen.plan.planner.DEFAULT_MAX_CANDIDATES)")
    p.add_argument("--paper", action="store_true", help="reproduce the paper's Tables I and IV (V100)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return cliutil.run(PROG, _parser(), _main, argv)


def _gpu(name: str):
    if name.lower() != "auto" and name.lower() not in GPUS:
        raise _UsageError(f"--gpu: unknown GPU '{name}' (known: {', '.join(sorted(GPUS))}, auto)")
    try:
        return get_gpu(name)
    except GPUError as e:
        raise CusyncError(str(e)) from None


def _main(args) -> int:
    gpu = _gpu(args.gpu or ("v100" if args.paper else "h100"))
    if args.paper:
        from .paper import render_paper, reproduce_table1, reproduce_table4
        if args.json:
            out = json.dumps({"gpu": gpu.name, "num_sms": gpu.num_sms,
                              "table1": reproduce_table1(gpu.num_sms),
                              "table4": reproduce_table4(gpu.num_sms, args.model)}, indent=2, default=list)
        else:
            out = render_paper(gpu.num_sms, args.model, gpu.name.upper() if gpu.name in GPUS else gpu.name)
        cliutil.write_output(out + "\n", None, PROG)
        return 0
    if not args.file:
        raise _UsageError("missing FILE.dep (or --paper)")
    params = dict(args.defines)
    occ = _kv(args.occupancy, "--occupancy", _pos_int)
    tt = _kv(args.tile_time, "--tile-time", _pos_float)
    for name, res in _kv(args.block, "--block", _block_res).items():
        if name in occ:
            raise _UsageError(f"both --occupancy and --block for grid '{name}'")
        n = occupancy(gpu, *res)
        if n == 0:
            raise CusyncError(f"--block {name}: a block of {res[0]} threads, {res[1]} registers per thread and "
                              f"{res[2]} bytes of shared memory does not fit on one SM of {gpu.name}")
        occ[name] = n
    terms = _timing_terms(args, gpu)
    return _plan_file(args.file, params, gpu, occ, tt, args.model, args.json, *terms, max_edges=args.max_edges,
                      max_candidates=args.max_candidates)


def _timing_terms(args, gpu) -> tuple[float, float, float]:
    """(wait cost, launch gap, skew): the options, or with --calibrated the GPU's measured ones."""
    for opt, v in (("--wait-cost", args.wait_cost), ("--launch-gap", args.launch_gap)):
        if not (v >= 0) or v == float("inf"):
            raise _UsageError(f"{opt} must be a finite number >= 0")
    if not 0 <= args.skew < 1:
        raise _UsageError("--skew must be in [0, 1)")
    if not args.calibrated:
        return args.wait_cost, args.launch_gap, args.skew
    from .gpus import timing
    t = timing(gpu)
    if t == type(t)():
        raise CusyncError(f"--calibrated: timing terms were measured on {_calibrated_gpus()} only "
                          f"(cusyncgen/plan/gpus.py TIMINGS), not on {gpu.name}: choose one with --gpu, or give "
                          "--launch-gap, --wait-cost and --skew")
    return t.wait_cost_us, t.launch_gap_us, t.tail_skew


def _calibrated_gpus() -> str:
    """The GPUs with measured timing terms (gpus.TIMINGS), for --calibrated's messages."""
    from .gpus import TIMINGS, Timing
    return ", ".join(sorted(k for k, t in TIMINGS.items() if t != Timing())) or "no GPU"


def _plan_file(path, params, gpu, occ, tt, model, as_json, wait_cost=0.0, launch_gap=0.0, skew=0.0,
               max_edges=None, max_candidates=None) -> int:
    import os

    from .adapter import AdapterError, spec_from_program
    from .planner import DEFAULT_MAX_CANDIDATES, make_plan
    from .report import render

    compiled = cliutil.compile_file(path, params)
    program = compiled.program
    if not program.deps:
        raise CusyncError(f"{path} declares no Dep: there is no dependent kernel to plan")
    cliutil.warn(compiled, PROG)
    try:
        spec = spec_from_program(program, occ, tt, source=os.path.basename(path)
                                 + "".join(f" -D {k}={v}" for k, v in params.items()),
                                 max_edges=max_edges)
        plan = make_plan(spec, gpu, model=model, time_unit="us" if tt and len(tt) == len(spec.grids) else "tile",
                         wait_cost=wait_cost, launch_gap=launch_gap, skew=skew,
                         max_candidates=DEFAULT_MAX_CANDIDATES if max_candidates is None else max_candidates)
    except (AdapterError, ValueError) as e:
        raise CusyncError(str(e)) from None
    if tt and len(tt) != len(spec.grids):
        missing = [g.name for g in spec.grids if g.name not in tt]
        print(f"{PROG}: note: no --tile-time for {', '.join(missing)}: 1.0 used, times are not in us",
              file=sys.stderr)
    if (launch_gap or wait_cost) and not (tt and len(tt) == len(spec.grids)):
        print(f"{PROG}: note: --launch-gap/--wait-cost/--calibrated are in the unit of --tile-time; "
              "without it for every grid they are in tile times", file=sys.stderr)
    if not any(g.name in occ for g in spec.grids):
        print(f"{PROG}: note: no --occupancy given: 1 block per SM assumed for every grid", file=sys.stderr)
    cliutil.write_output((json.dumps(plan, indent=2, default=list) if as_json else render(plan)) + "\n",
                         None, PROG)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
