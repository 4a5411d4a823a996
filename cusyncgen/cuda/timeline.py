"""Per-block timelines of a synchronized MLP chain (CUSYNC_TIMELINE builds): on which SM every
block of both kernels ran, when it started, when its last wait returned and when it ended. For
finding where a chain loses time: consumer blocks placed unevenly on the SMs while they wait,
waits that return late, a producer slowed by the blocks waiting beside it.

    python -m cusyncgen.cuda.timeline --model llama --M 1 --configs StreamSync,RowSync+PDL+R -o DIR

Times are the globaltimer of the GPU (ns), relative to the first block of the chain's launch; the
timeline build takes a ticket in every kernel (the plain ones too), so it runs slightly slower
than the benchmark build.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path


def block_records(stage) -> list[dict]:
    """The latest launch's records of `stage` (a Stage with a timeline buffer)."""
    raw = stage.timeline.get().reshape(-1, 4)
    out = []
    for start, wait, end, packed in raw.tolist():
        if start == 0:
            continue
        out.append({"start": int(start), "wait": int(wait), "end": int(end), "sm": int(packed) & 0xFFFF,
                    "x": (int(packed) >> 16) & 0xFFFFFF, "y": int(packed) >> 40})
    return out


def max_concurrent_per_sm(blocks: list[dict], lo_key: str = "start") -> int:
    """The most blocks of the list that were resident on one SM at one time."""
    best = 0
    by_sm: dict[int, list[tuple[int, int]]] = {}
    for b in blocks:
        by_sm.setdefault(b["sm"], []).append((b[lo_key] or b["start"], b["end"]))
    for spans in by_sm.values():
        events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
        live = 0
        for _, d in events:
            live += d
            best = max(best, live)
    return best


def summarize(stages: dict[str, list[dict]]) -> dict:
    """Per-stage statistics, times in microseconds from the chain's first block start."""
    t0 = min(b["start"] for bs in stages.values() for b in bs)
    out = {"span_us": (max(b["end"] for bs in stages.values() for b in bs) - t0) / 1e3}
    for name, bs in stages.items():
        waited = [b for b in bs if b["wait"]]
        out[name] = {
            "blocks": len(bs),
            "sms_used": len({b["sm"] for b in bs}),
            "max_blocks_per_sm": max(Counter(b["sm"] for b in bs).values()),
            "max_concurrent_per_sm": max_concurrent_per_sm(bs),
            "max_concurrent_after_wait": max_concurrent_per_sm(waited, "wait") if waited else None,
            "first_start_us": (min(b["start"] for b in bs) - t0) / 1e3,
            "last_start_us": (max(b["start"] for b in bs) - t0) / 1e3,
            "last_end_us": (max(b["end"] for b in bs) - t0) / 1e3,
            "median_block_us": statistics.median(b["end"] - b["start"] for b in bs) / 1e3,
            "median_after_wait_us": statistics.median(b["end"] - b["wait"] for b in waited) / 1e3 if waited else None,
            "last_wait_us": (max(b["wait"] for b in waited) - t0) / 1e3 if waited else None,
        }
    return out


def trace_mlp(model: str, M: int, configs: list[str], runs: int = 5, tiles=None, spread: bool = False,
              sync_warp: bool = True) -> dict:
    """Run each configuration `runs` times (the last one is recorded) and return the timelines.
    spread: also run each synchronized configuration with the consumer's shared memory padded
    (spread_smem) so that no two consumer blocks are placed on one SM ("<config>/spread")."""
    import dataclasses

    import cupy

    from cusyncgen.cuda.configs import Config
    from cusyncgen.workloads.base import rel_err
    from cusyncgen.workloads.mlp import MLP

    mlp = MLP(model, M, tiles=tiles, timeline=True, sync_warp=sync_warp)
    stream = cupy.cuda.Stream(non_blocking=False)
    out = {"model": model, "M": M, "tiles": mlp.tiles.label, "sync_warp": sync_warp, "configs": {}}
    from cusyncgen.cuda import driver
    pad = driver.spread_smem(mlp.kernels[None][1], driver.block_smem(mlp.kernels[None][0])) if spread else 0
    configs = [n for n in configs if Config.parse(n).policy in (None, *mlp.policy_names)]
    runs_of = [(name, False) for name in configs]
    if pad:
        runs_of += [(name, True) for name in configs if name != "StreamSync"]
    with stream:
        bufs = mlp.buffers(seed=0)
        outs = mlp.outputs()
        stream.synchronize()
        ref = mlp.reference(*bufs)
        for name, padded in runs_of:
            cfg = Config.parse(name)
            saved = mlp.kernels[cfg.policy]
            if padded:
                k1, k2, k2r = saved
                for k in (k2, k2r):
                    if k is not None:
                        k.function.max_dynamic_shared_size_bytes = pad
                mlp.kernels[cfg.policy] = (k1, dataclasses.replace(k2, smem=pad),
                                           k2r and dataclasses.replace(k2r, smem=pad))
            try:
                for _ in range(runs):
                    mlp.run(stream, cfg, *bufs, *outs)
                stream.synchronize()
            finally:
                mlp.kernels[cfg.policy] = saved
            err = rel_err(outs[1], ref)
            p, c = mlp.stages_of(cfg)
            stages = {"gemm1": block_records(p), "gemm2": block_records(c)}
            key = name + ("/spread" if padded else "")
            out["configs"][key] = {"summary": summarize(stages), "rel_err": err, "blocks": stages}
    return out


def trace_attention(model: str, B: int, S: int, Sp: int, configs: list[str], runs: int = 5,
                    sync_warp: bool | None = None, spread: bool = True) -> dict:
    """The five kernels of one Attention shape (cusyncgen.workloads.attention), as trace_mlp."""
    import cupy

    from cusyncgen.cuda.configs import Config
    from cusyncgen.workloads.attention import Attention, Shape

    att = Attention(Shape(model, B, S, Sp), timeline=True, sync_warp=sync_warp, spread=spread)
    stream = cupy.cuda.Stream(non_blocking=True)
    out = {"model": att.shape.label, "M": att.shape.size, "tiles": "default",
           "sync_warp": [r for r, used in att.sync_warp_used.items() if used], "configs": {}}
    bufs = att.buffers(seed=0)
    from cusyncgen.cuda import timing
    for name in configs:
        cfg = Config.parse(name)
        if cfg.policy not in (None, *att.policy_names):
            continue
        for _ in range(runs):
            att.run(stream, cfg, bufs)
        stream.synchronize()
        errs = att.check(bufs)
        # the recorded launch: one CUDA-graph replay (no host launch gaps between the kernels), the
        # records cleared first (a split-K block that does not post its tile writes none)
        graph = timing.capture(lambda s: att.run(s, cfg, bufs), stream)
        for _ in range(runs):
            graph.launch(stream)
        with stream:
            for st in att._stages[cfg.policy]:
                st.timeline.fill(0)
        stream.synchronize()
        graph.launch(stream)
        stream.synchronize()
        stages = {st.name: block_records(st) for st in att._stages[cfg.policy]}
        out["configs"][name] = {"summary": summarize(stages), "rel_err": errs["chain"], "blocks": stages}
    return out


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
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cusyncgen.cuda.timeline")
    ap.add_argument("--model", default="llama")
    ap.add_argument("--M", default="1")
    ap.add_argument("--attention", default=None, metavar="B,S,Sp",
                    help="trace the Attention chain of this shape instead (e.g. 1,1024,0: a prompt; 4,1,512)")
    ap.add_argument("--configs", default="StreamSync,PDL,RowSync+PDL+R,TileSync+PDL")
    ap.add_argument("--spread", action="store_true", help="also with the consumer spread one block per SM")
    ap.add_argument("--no-sync-warp", action="store_true", help="consumers wait in thread 0 (the older path)")
    ap.add_argument("--no-spread", action="store_true", help="attention: early-launched kernels not padded (spread)")
    ap.add_argument("-o", "--out", type=Path, default=Path("."))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.attention:
        B, S, Sp = (int(v) for v in args.attention.split(","))
        trace = trace_attention(args.model, B, S, Sp, args.configs.split(","),
                                sync_warp=False if args.no_sync_warp else None, spread=not args.no_spread)
        print(describe(trace), flush=True)
        stem = args.out / (f"timeline-attn-{args.model}-B{B}-S{S}-Sp{Sp}" + ("-nosyncwarp" if args.no_sync_warp else "")
                           + ("-nospread" if args.no_spread else ""))
        stem.with_suffix(".json").write_text(json.dumps(trace))
        plot(trace, stem.with_suffix(".png"))
        return 0
    for M in (int(m) for m in args.M.split(",")):
        trace = trace_mlp(args.model, M, args.configs.split(","), spread=args.spread,
                          sync_warp=not args.no_sync_warp)
        print(describe(trace), flush=True)
        stem = args.out / f"timeline-{args.model}-M{M}{'' if not args.no_sync_warp else '-nosyncwarp'}"
        stem.with_suffix(".json").write_text(json.dumps(trace))
        plot(trace, stem.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
