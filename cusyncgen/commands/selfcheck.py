"""Run one MLP under chosen configurations once each and check it against the float32 reference:
a quick correctness probe for a GPU (and a small target for compute-sanitizer).

    python -m cusyncgen.commands.selfcheck --model gpt3 --M 300 [--debug] [--configs StreamSync,TileSync+R]
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cusyncgen.commands.selfcheck")
    ap.add_argument("--model", default="gpt3")
    ap.add_argument("--M", type=int, default=300)
    ap.add_argument("--debug", action="store_true", help="CUSYNC_DEBUG build: timed-out waits raise")
    ap.add_argument("--configs", default="", help="comma-separated config names (default: all)")
    args = ap.parse_args(argv)
    import cupy

    from cusyncgen.workloads.base import rel_err
    from cusyncgen.workloads.mlp import MLP

    mlp = MLP(args.model, args.M, debug=args.debug)
    wanted = [c for c in args.configs.split(",") if c]
    cfgs = [c for c in mlp.configs() if not wanted or c.name in wanted]
    stream = cupy.cuda.Stream()
    bad = 0
    with stream:
        for i, cfg in enumerate(cfgs):
            x, w1, w2 = mlp.buffers(seed=i)
            y, z = mlp.outputs()
            mlp.run(stream, cfg, x, w1, w2, y, z)
            stream.synchronize()
            mlp.check_stages()
            err = rel_err(z, mlp.reference(x, w1, w2))
            bad += not err < 2e-2
            print(f"{args.model} M={args.M} {cfg.name:24s} rel_err {err:.3g} {'ok' if err < 2e-2 else 'WRONG'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
