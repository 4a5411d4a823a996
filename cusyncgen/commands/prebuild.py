"""Compile every module the GPU tests and benchmarks load, in parallel, into the cache.

    python -m cusyncgen.commands.prebuild [--arch sm_90a] [--jobs N] [--workloads mlp,conv2d] [--tune]

Needs nvcc and the CUTLASS headers, not a GPU: run it where compiling is cheap and carry the
cache folder (CUSYNCGEN_CACHE) to the GPU machine, or run it there with all its cores.
"""
from __future__ import annotations

import argparse
import sys
import time

from cusyncgen.cuda import build


def sources(sizes=None, workloads=None, tune: bool = False) -> list[build.Source]:
    """The module sources of every registered workload (or those named in `workloads`); sizes:
    the sizes of the sweep, as `cusyncgen bench --M` takes them (default: each workload's own);
    tune: also every candidate `cusyncgen tune` measures."""
    from cusyncgen.workloads import REGISTRY
    out = []
    for name, cls in REGISTRY.items():
        if workloads is None or name in workloads:
            out += cls.sources(sizes, tune=tune)
    return out


def main(argv=None) -> int:
    from cusyncgen.workloads import REGISTRY
    ap = argparse.ArgumentParser(prog="python -m cusyncgen.commands.prebuild")
    ap.add_argument("--arch", default=build.DEFAULT_ARCH)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--M", default=None, help="comma-separated sizes of the sweep, as bench --M (default: each workload's)")
    ap.add_argument("--tune", action="store_true", help="also every tile shape `cusyncgen tune` tries")
    ap.add_argument("--workloads", default=None,
                    help=f"comma-separated workloads (default: all registered: {', '.join(REGISTRY)})")
    args = ap.parse_args(argv)
    wanted = None if args.workloads is None else [w for w in args.workloads.split(",") if w]
    if wanted and set(wanted) - set(REGISTRY):
        ap.error(f"--workloads: no workload {', '.join(sorted(set(wanted) - set(REGISTRY)))} "
                 f"(known: {', '.join(REGISTRY)})")
    t0 = time.time()
    srcs = sources([int(m) for m in args.M.split(",")] if args.M else None, workloads=wanted, tune=args.tune)
    paths = build.build_many(srcs, args.arch, args.jobs)
    print(f"{len(paths)} modules ready in {build.cache_dir()} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
