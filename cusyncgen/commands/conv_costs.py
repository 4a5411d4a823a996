"""Where a synchronized Conv2D chain spends its time beyond stream order (a GPU diagnostic).

The policy's own kernels run six ways on one stream, each a CUDA graph, beside StreamSync and
PDL alone (the plain kernels):

- posts: stream order, no waits (T): each Conv2D posts its tiles, nobody waits -- what posting costs;
- posts+waits: stream order with the waits (T): every wait finds its tiles posted at its first
  poll -- what a wait costs by itself, with no overlap to pay for it;
- posts+waits, custom order: the same with the generated tile order (a ticket per block);
- +PDL+RT / +PDL+R: overlapped, as the benchmark runs them;
- overlap, no waits: overlapped with the waits dropped -- a race, timed only (its output is not
  checked): what the overlap alone would give.

    python -m cusyncgen.commands.conv_costs [--points resnet38-L1-32,vgg19-L3-32] [-o FILE]
"""
from __future__ import annotations

import argparse
import sys

from cusyncgen.cuda.lazy import cupy

from cusyncgen.cuda import timing
from cusyncgen.commands.bench import command_line
from cusyncgen.cuda.lazy import driver
from cusyncgen.cuda.configs import PDL_ALONE, STREAM_SYNC, Config, Ordering
from cusyncgen.workloads.conv2d import REORDER, TOL, WAIT_INPUT, ConvChain, rel_err

POINTS = (("resnet38", "L1", 32), ("resnet38", "L1", 8), ("resnet38", "L3", 28), ("vgg19", "L3", 32), ("vgg19", "L4", 4))


def variants(chain: ConvChain, policy: str, x, ws, bs, ys):
    """(name, run(stream), checked) for every way of running the chain."""
    def policy_kernels(flags: int, custom_order: bool, pdl: bool):
        """The policy's kernels on one stream, PDL-launched or in stream order, with these
        ConvArgs flags on every Conv2D after the first."""
        cfg = Config(policy, Ordering.PDL if pdl else Ordering.STREAM, custom_order)
        return lambda s: chain.run(s, cfg, x, ws, bs, ys, conv_flags=flags)

    return [
        ("StreamSync", lambda s: chain.run(s, STREAM_SYNC, x, ws, bs, ys), True),
        ("PDL alone", lambda s: chain.run(s, PDL_ALONE, x, ws, bs, ys), True),
        ("posts (stream order, T)", policy_kernels(0, False, False), True),
        ("posts+waits (stream order, T)", policy_kernels(WAIT_INPUT | REORDER, False, False), True),
        ("posts+waits (stream order, custom order)", policy_kernels(WAIT_INPUT | REORDER, True, False), True),
        (f"{policy}+PDL+RT", policy_kernels(WAIT_INPUT | REORDER, False, True), True),
        (f"{policy}+PDL+R", policy_kernels(WAIT_INPUT | REORDER, True, True), True),
        ("overlap, no waits (a race, not checked)", policy_kernels(0, False, True), False),
    ]


def measure(model: str, layer: str, batch: int, stream, iters: int = 30) -> dict:
    chain = ConvChain(model, layer, batch, splits=1)
    policy = "Conv2DTileSync" if "Conv2DTileSync" in chain.kernels else chain.policy_names[0]
    x, ws, bs = chain.buffers(seed=1)
    ys = chain.outputs()
    refs = chain.reference(x, ws, bs)
    rows = []
    for name, run, checked in variants(chain, policy, x, ws, bs, ys):
        chain.poison(ys)
        run(stream)
        stream.synchronize()
        err = rel_err(ys, refs)
        graph = timing.capture(run, stream)
        t = timing.median(timing.time_graphs([graph], stream, iters=iters))
        rows.append({"variant": name, "time_us": round(t, 2), "correct": (err < TOL) if checked else None})
    chain.check_stages()
    return {"model": chain.label, "batch": batch, "policy": policy, "grid": list(chain.grid), "rows": rows}


def markdown(results: list[dict], device: str, command: str = "") -> str:
    out = [f"# What synchronization costs a Conv2D chain on {device}", ""]
    if command:
        out += [f"Written by `{command}`.", ""]
    out += ["Medians of CUDA-graph replays, µs; 'vs StreamSync': the "
            "difference to StreamSync's time. 'correct': checked against the float32 reference.", ""]
    for r in results:
        base = r["rows"][0]["time_us"]
        out += [f"## {r['model']} batch {r['batch']} ({r['policy']}, grid {r['grid'][0]} x {r['grid'][1]})", "",
                "| variant | time | vs StreamSync | correct |", "|---|---|---|---|"]
        for row in r["rows"]:
            ok = "-" if row["correct"] is None else ("yes" if row["correct"] else "NO")
            out.append(f"| {row['variant']} | {row['time_us']:.1f} | {row['time_us'] - base:+.1f} | {ok} |")
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cusyncgen.commands.conv_costs")
    ap.add_argument("--points", default=None, help="model-layer-batch,... (default: five points)")
    ap.add_argument("-o", "--output", default=None, help="markdown file (default: stdout)")
    args = ap.parse_args(argv)
    points = POINTS if not args.points else [tuple(p.split("-")[:2]) + (int(p.split("-")[2]),) for p in args.points.split(",")]
    stream = cupy.cuda.Stream(non_blocking=True)
    results = [measure(m, layer, b, stream) for m, layer, b in points]
    text = markdown(results, driver.device_name(), command_line("python -m cusyncgen.commands.conv_costs", argv))
    if args.output:
        from cusyncgen import files
        files.write_file(args.output, text + "\n")
    else:
        print(text)
    return 0 if all(row["correct"] is not False for r in results for row in r["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
