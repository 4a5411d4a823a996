"""Compile every module the GPU tests and benchmarks load, in parallel, into the cache.

    python -m cusyncgen.cuda.prebuild [--arch sm_90a] [--jobs N]

Needs nvcc and the CUTLASS headers, not a GPU: run it where compiling is cheap and carry the
cache folder (CUSYNCGEN_CACHE) to the GPU machine, or run it there with all its cores.
"""
from __future__ import annotations

import argparse
import sys
import time

from cusyncgen.cuda import build

TEST_SIZES = (1, 128, 300)  # tests/test_gpu_mlp.py (128: the spread consumer)


def sources(bench_sweep, test_sizes=TEST_SIZES, workloads=None, tune=False):
    from cusyncgen.cuda import modules
    from cusyncgen.cuda.tune import tile_candidates
    out = []
    for model in modules.MODELS:
        for M in bench_sweep:
            for tiles in tile_candidates(model, M) if tune else [modules.default_tiles(model, M)]:
                out.append(modules.module_source(modules.MODELS[model], M, tiles)[0])
        for M in test_sizes:
            out.append(modules.module_source(modules.MODELS[model], M, modules.default_tiles(model, M), debug=True)[0])
    out.append(modules.copy_module_source(132 * 8, debug=False))
    import importlib
    import importlib.util
    from cusyncgen.cuda.bench import WORKLOADS
    for wname, target in WORKLOADS.items():
        if workloads is not None and wname not in workloads:
            continue
        name = target.split(":")[0].replace("cusyncgen.cuda.", "cusyncgen.cuda.modules_")
        if importlib.util.find_spec(name) is None:
            continue  # that workload has no module sources yet
        out.extend(importlib.import_module(name).prebuild_sources(tune=tune))
    out.append(modules.copy_module_source(3 * 132 + 17, debug=True))
    out.append(modules.copy_module_source(40, debug=True))
    return out


def main(argv=None) -> int:
    from cusyncgen.cuda.bench import SWEEP
    ap = argparse.ArgumentParser(prog="python -m cusyncgen.cuda.prebuild")
    ap.add_argument("--arch", default=build.DEFAULT_ARCH)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--M", default=",".join(map(str, SWEEP)))
    ap.add_argument("--tune", action="store_true", help="also every tile shape `cusyncgen tune` tries")
    ap.add_argument("--workloads", default=None, help="comma-separated extra workloads (default: all registered)")
    args = ap.parse_args(argv)
    t0 = time.time()
    srcs = sources([int(m) for m in args.M.split(",")],
                   workloads=None if args.workloads is None else [w for w in args.workloads.split(",") if w],
                   tune=args.tune)
    paths = build.build_many(srcs, args.arch, args.jobs)
    print(f"{len(paths)} modules ready in {build.cache_dir()} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
