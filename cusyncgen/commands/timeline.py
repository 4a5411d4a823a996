"""Per-block timelines of a synchronized MLP chain (CUSYNC_TIMELINE builds): on which SM every
block of both kernels ran, when it started, when its last wait returned and when it ended. For
finding where a chain loses time: consumer blocks placed unevenly on the SMs while they wait,
waits that return late, a producer slowed by the blocks waiting beside it.

    python -m cusyncgen.commands.timeline --model llama --M 1 --configs StreamSync,RowSync+PDL+R -o DIR
    python -m cusyncgen.commands.timeline --workload attention --model gpt3 --M "1,1024,0;4,1,512"

Each workload with a `timelines` classmethod (cusyncgen.workloads: MLP, Attention) traces itself.

Times are the globaltimer of the GPU (ns), relative to the first block of the chain's launch; the
timeline build takes a ticket in every kernel (the plain ones too), so it runs slightly slower
than the benchmark build.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cusyncgen import files
from cusyncgen.commands.bench import plot_png
from cusyncgen.cuda.timeline import block_records, max_concurrent_per_sm, summarize  # noqa: F401  (the API)


def describe(trace: dict) -> str:
    sw = trace["sync_warp"]
    lines = [f"{trace['model']} M={trace['M']} tiles {trace['tiles']}"
             + ("" if sw is True else " (no sync warp)" if not sw else f" (sync warp: {', '.join(sw)})")]
    for name, r in trace["configs"].items():
        lines.append(f"  {name}: span {r['summary']['span_us']:.1f} us, rel err {r['rel_err']:.1e}")
        for st, s in r["summary"].items():
            if st == "span_us":
                continue
            extra = ""
            if s["median_after_wait_us"] is not None:
                extra = (f", last wait returned {s['last_wait_us']:.1f}, median after wait "
                         f"{s['median_after_wait_us']:.1f}, max/SM after wait {s['max_concurrent_after_wait']}")
            lines.append(f"    {st}: {s['blocks']} blocks on {s['sms_used']} SMs (max {s['max_concurrent_per_sm']}"
                         f" at once per SM), start {s['first_start_us']:.1f}..{s['last_start_us']:.1f}, "
                         f"end {s['last_end_us']:.1f} us, median block {s['median_block_us']:.1f}{extra}")
    return "\n".join(lines)


def plot(trace: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    cfgs = list(trace["configs"].items())
    fig, axes = plt.subplots(len(cfgs), 1, figsize=(11, 3.2 * len(cfgs)), squeeze=False)
    for ax, (name, r) in zip(axes[:, 0], cfgs):
        t0 = min(b["start"] for bs in r["blocks"].values() for b in bs)
        colors = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")
        for st, color in zip(r["blocks"], colors):
            for b in r["blocks"][st]:
                ax.plot([(b["start"] - t0) / 1e3, (b["end"] - t0) / 1e3], [b["sm"], b["sm"]], color=color, lw=1.2)
                if b["wait"]:
                    ax.plot([(b["start"] - t0) / 1e3, (b["wait"] - t0) / 1e3], [b["sm"], b["sm"]], color="0.8", lw=1.2)
        names = ", ".join(f"{c.split(':')[1]}: {st}" for st, c in zip(r["blocks"], colors))
        ax.set_title(f"{trace['model']} M={trace['M']} {name} ({names}, grey: waiting)")
        ax.set_ylabel("SM")
    axes[-1, 0].set_xlabel("us")
    fig.tight_layout()
    fig.savefig(path, dpi=90, format="png")
    plt.close(fig)


def main(argv=None) -> int:
    from cusyncgen.workloads import REGISTRY
    traceable = {n: w for n, w in REGISTRY.items() if hasattr(w, "timelines")}
    ap = argparse.ArgumentParser(prog="python -m cusyncgen.commands.timeline")
    ap.add_argument("--workload", choices=list(traceable), default="mlp")
    ap.add_argument("--model", default=None, help="the workload's model (default: its first)")
    ap.add_argument("--M", default=None,
                    help="mlp: comma-separated sizes M (default 1); attention: B,S,Sp shapes separated by ';' "
                         "(e.g. '1,1024,0;4,1,512': a prompt and token generation; default 1,1024,0)")
    ap.add_argument("--attention", default=None, metavar="B,S,Sp",
                    help="the same as --workload attention --M B,S,Sp")
    ap.add_argument("--configs", default="StreamSync,PDL,RowSync+PDL+R,TileSync+PDL")
    ap.add_argument("--spread", action="store_true", help="mlp: also with the consumer spread one block per SM")
    ap.add_argument("--no-sync-warp", action="store_true", help="consumers wait in thread 0 (the older path)")
    ap.add_argument("--no-spread", action="store_true", help="attention: early-launched kernels not padded (spread)")
    ap.add_argument("-o", "--out", type=Path, default=Path("."))
    args = ap.parse_args(argv)
    if args.attention:
        args.workload, args.M = "attention", args.attention
    cls = traceable[args.workload]
    files.make_directory(args.out)
    model = args.model or cls.models[0]
    for stem, trace in cls.timelines(model, args.M, args.configs.split(","), sync_warp=not args.no_sync_warp,
                                     spread=args.spread, no_spread=args.no_spread):
        print(describe(trace), flush=True)
        path = args.out / stem
        out = {path.with_suffix(".json"): json.dumps(trace)}
        png = plot_png(plot, trace)
        if png:  # b"" or None without matplotlib
            out[path.with_suffix(".png")] = png
        files.write_files(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
