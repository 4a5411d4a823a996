"""`cusyncgen bench mlp|overhead`: time the synchronized MLPs against StreamSync, PDL and cuBLAS.

For every model and M: StreamSync (the same kernels, stream order), PDL alone, every generated
policy under each ordering/optimization, cuBLAS through PyTorch (plain and in a CUDA graph) and
the roofline floor max(FLOPs/peak, bytes/bandwidth) with peak and bandwidth measured in this run.
Every CuSync number is the median of >= 20 CUDA-graph replays rotating over three input sets, and
every configuration's output is checked against a float32 reference on fresh random inputs.
Writes JSON, markdown and a PNG under benchmarks/results/.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

from cusyncgen.cuda.modules_conv import SPLIT_K

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
SWEEP = [1, 16, 64, 128, 256, 512, 1024, 2048, 4096]

# Other workloads: "module:function" returning the same result dict as bench_mlp, called as
# function(models="a,b" or None, sweep=[sizes] or None, iters=N).
WORKLOADS = {
    "attention": "cusyncgen.cuda.attention:bench",
    "conv2d": "cusyncgen.cuda.conv:bench",
}


def configs_for(mlp) -> list:
    from cusyncgen.cuda.chain import PDL_ALONE, STREAM_SYNC, Config
    out = [STREAM_SYNC, PDL_ALONE]
    w_ok = mlp.occupancy_ok_without_ordering()
    for p in mlp.policy_names:
        for reorder in (False, True):
            out.append(Config(p, "waitkernel", True, reorder))
            out.append(Config(p, "waitkernel", False, reorder))
            out.append(Config(p, "pdl", True, reorder))
            out.append(Config(p, "pdl", False, reorder))
            if w_ok:
                out.append(Config(p, "none", False, reorder))
    return out


def rel_err(z, ref) -> float:
    import cupy
    z32 = z.astype(cupy.float32)
    if not bool(cupy.isfinite(z32).all()):
        return math.inf
    return float(cupy.linalg.norm(z32 - ref) / cupy.linalg.norm(ref))


def measure_mlp_point(model: str, M: int, iters: int, stream, seed: int = 0, tiles=None, configs=None):
    """Every configuration of one (model, M, tiles): rows of the result table, and the MLP."""
    from cusyncgen.cuda.mlp import MLP

    mlp = MLP(model, M, tiles=tiles)
    with stream:  # every CuPy operation on the timed stream: fills and inputs are ordered before the runs
        return _measure(mlp, iters, stream, seed, configs)


def _measure(mlp, iters, stream, seed, configs):
    import cupy

    from cusyncgen.cuda import timing

    model, M = mlp.model_name, mlp.M
    sets = [mlp.buffers(seed=seed + s) for s in range(3)]
    outs = [mlp.outputs() for _ in sets]
    x, w1, w2 = sets[0]
    ref = mlp.reference(x, w1, w2)
    cfgs = list(configs or configs_for(mlp))
    # Warm up before the first timed configuration: right after a module load the first replays of
    # a point ran up to 35% slower (seen on the H200), which would flatter everything after them.
    warm = timing.capture(lambda s: mlp.run(s, cfgs[0], *sets[0], *outs[0]), stream)
    timing.keep_busy(warm, stream, seconds=0.2)
    del warm
    times, rows = {}, []
    # StreamSync is timed first and again last: the baseline is the faster of the two, and their
    # spread is recorded, so a noisy first measurement cannot pass for a speed-up.
    for i, cfg in enumerate(cfgs + cfgs[:1]):
        y, z = outs[0]
        y.fill(cupy.nan)
        z.fill(cupy.nan)
        mlp.run(stream, cfg, x, w1, w2, y, z)
        stream.synchronize()
        err = rel_err(z, ref)
        graphs = [timing.capture(lambda s, a=a, o=o: mlp.run(s, cfg, *a, *o), stream) for a, o in zip(sets, outs)]
        t = timing.median(timing.time_graphs(graphs, stream, iters=iters))
        del graphs
        if i == len(cfgs):
            first = times[cfg.name]
            times[cfg.name] = min(first, t)
            rows[0]["time_us"] = round(times[cfg.name], 2)
            spread = abs(first - t) / min(first, t)
            break
        times[cfg.name] = t
        rows.append({"model": model, "M": M, "config": cfg.name, "time_us": round(t, 2), "correct": err < 2e-2,
                     "rel_err": err, "tiles": mlp.tiles.label})
    base = times[cfgs[0].name]
    for r in rows:
        r["speedup_vs_streamsync"] = round(base / times[r["config"]], 4)
        r["baseline_spread"] = round(spread, 4)
    return rows, mlp, sets, outs, ref


def bench_mlp(models, sweep, iters: int, out_dir: Path, progress=True) -> dict:
    import cupy
    import torch

    from cusyncgen.cuda import baselines, driver

    from cusyncgen.cuda.mlp import split_interleaved

    dev = driver.device_name()
    ceil = baselines.ceilings()
    rows, gemm_rows = [], []
    stream = cupy.cuda.Stream()
    work = [(m, M) for m in models for M in sweep]
    for i, (model, M) in enumerate(work):
        t0 = time.time()
        point, mlp, sets, outs, ref = measure_mlp_point(model, M, iters, stream, seed=1000 * i)
        rows += point
        base = point[0]["time_us"]
        x, w1, w2 = sets[0]
        # cuBLAS through PyTorch, same shapes and data
        tx, tw1, tw2 = (torch.from_dlpack(a) for a in (x, w1, w2))
        F = mlp.model.K2

        def torch_mlp():
            yy = tx @ tw1.T
            if mlp.model.swiglu_epilogue:
                g, u = split_interleaved(yy, F)
                h = torch.nn.functional.silu(g) * u
            elif mlp.model.swiglu:
                h = torch.nn.functional.silu(yy[:, :F]) * yy[:, F:]
            else:
                h = torch.nn.functional.gelu(yy, approximate="tanh")
            return h @ tw2.T

        terr = rel_err(cupy.from_dlpack(torch_mlp()), ref)
        for name, t in (("cuBLAS", baselines.time_eager(torch_mlp, iters)), ("cuBLAS+graph", baselines.graph_time(torch_mlp, iters))):
            rows.append({"model": model, "M": M, "config": name, "time_us": round(t, 2),
                         "speedup_vs_streamsync": round(base / t, 4), "correct": terr < 2e-2, "rel_err": terr})
        m = mlp.model
        flops = 2 * M * m.K1 * m.N1 + 2 * M * m.K2 * m.N2
        byts = 2 * (m.K1 * m.N1 + m.K2 * m.N2 + M * m.K1 + 2 * M * m.Y_cols + M * m.N2)
        floor = max(flops / ceil["peak_flops"], byts / ceil["bandwidth"]) * 1e6
        rows.append({"model": model, "M": M, "config": "floor", "time_us": round(floor, 2),
                     "speedup_vs_streamsync": round(base / floor, 4), "correct": True, "rel_err": 0.0})
        if M == max(sweep):
            gemm_rows.append(gemm_throughput(mlp, sets[0], outs[0], stream, iters))
        if progress:
            best = max((r for r in point if r["correct"]), key=lambda r: r["speedup_vs_streamsync"])
            print(f"[{i + 1}/{len(work)}] {model} M={M}: StreamSync {base:.1f} us, best {best['config']} "
                  f"{best['time_us']:.1f} us ({best['speedup_vs_streamsync']:.3f}x) [{time.time() - t0:.0f} s]",
                  file=sys.stderr, flush=True)
        del mlp, sets, outs
        cupy.get_default_memory_pool().free_all_blocks()
    return {"device": dev, "workload": "mlp", "ceilings": ceil, "rows": rows, "gemm": gemm_rows}


def gemm_throughput(mlp, bufs, outs, stream, iters) -> dict:
    """The first GeMM alone (plain kernel) against cuBLAS on the same operands."""
    import torch

    from cusyncgen.cuda import baselines, timing
    from cusyncgen.cuda.mlp import _gemm_args

    x, w1, _ = bufs
    y, _ = outs
    k1 = mlp.kernels[None][0]
    a1 = _gemm_args(x, w1, y, mlp.M, mlp.model.N1, mlp.model.K1, 0)
    args = mlp.plain[0].args()
    g = timing.capture(lambda s: k1.launch(mlp.grid1, [a1, args], s), stream)
    ours = timing.median(timing.time_graphs([g], stream, iters=iters))
    tx, tw1 = torch.from_dlpack(x), torch.from_dlpack(w1)
    cub = baselines.graph_time(lambda: tx @ tw1.T, iters)
    flops = 2 * mlp.M * mlp.model.K1 * mlp.model.N1
    return {"model": mlp.model_name, "M": mlp.M, "gemm": "first (plain, no epilogue difference)",
            "ours_us": round(ours, 2), "cublas_us": round(cub, 2),
            "ours_tflops": round(flops / ours / 1e6, 1), "cublas_tflops": round(flops / cub / 1e6, 1),
            "tile": repr(mlp.tiles)}


def slug(device: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


def is_policy(config: str, vendor: str) -> bool:
    """A generated policy's row on the chain's own kernels: not StreamSync, PDL alone, the floor,
    the vendor library, nor a configuration re-timed on the split-K chain."""
    return config not in ("StreamSync", "PDL", "floor", vendor, vendor + "+graph") and not config.endswith(SPLIT_K)


def markdown(result: dict) -> str:
    rows = result["rows"]
    vendor = result.get("vendor", "cuBLAS")  # the vendor library's row names: vendor, vendor+graph
    ceil = result.get("ceilings")
    lines = [f"# {result['workload']}: CuSync vs StreamSync vs the vendor library on {result['device']}", "",
             (f"Measured ceilings in this run: fp16 matmul {ceil['peak_flops'] / 1e12:.0f} TFLOP/s, "
              f"copy {ceil['bandwidth'] / 1e12:.2f} TB/s. " if ceil else "")
             + "Times: median of CUDA-graph replays, microseconds. "
             "Speed-up is StreamSync time / config time (same kernels, same run). Where recorded, StreamSync "
             "was timed first and last; 'spread' is the difference of the two (the run's noise floor), and the "
             "faster one is the baseline.", ""] + ([result["note"], ""] if result.get("note") else [])
    for model in sorted({r["model"] for r in rows}):
        lines += [f"## {model}", "",
                  f"| M | StreamSync | spread | PDL | best CuSync config | time | speed-up | {vendor} | {vendor}+graph | floor | all correct |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for M in sorted({r["M"] for r in rows if r["model"] == model}):
            rs = {r["config"]: r for r in rows if r["model"] == model and r["M"] == M}
            cus = [r for c, r in rs.items() if is_policy(c, vendor) and r["correct"]]
            best = max(cus, key=lambda r: r["speedup_vs_streamsync"])
            ok = all(r["correct"] for r in rs.values())
            spread = rs["StreamSync"].get("baseline_spread")
            lines.append(f"| {M} | {rs['StreamSync']['time_us']:.1f} | {'-' if spread is None else f'{100 * spread:.1f}%'} | {rs['PDL']['time_us']:.1f} ({rs['PDL']['speedup_vs_streamsync']:.2f}x) | "
                         f"{best['config']} | {best['time_us']:.1f} | {best['speedup_vs_streamsync']:.3f}x | "
                         f"{rs[vendor]['time_us']:.1f} | {rs[vendor + '+graph']['time_us']:.1f} | "
                         f"{rs['floor']['time_us'] if 'floor' in rs else math.nan:.1f} | {'yes' if ok else 'NO'} |")
        lines.append("")
    split = [r for r in rows if r["config"] == "StreamSync" + SPLIT_K]
    if split:
        lines += ["## Split-K", "",
                  "Where a layer's tiles leave SMs idle, the chain also ran with each tile's reduction shared by "
                  "several blocks (kernels/splitk.cuh), every configuration again, same run. 'x' columns: over "
                  "StreamSync without split-K (the table above) and over StreamSync with split-K.", "",
                  "| model | M | splits | StreamSync | StreamSync split-K | x | fastest split-K config | time | x (split-K) | "
                  "fastest overall | x over fastest stream order |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(split, key=lambda r: (r["model"], r["M"])):
            rs = [x for x in rows if x["model"] == r["model"] and x["M"] == r["M"] and x["correct"]]
            ss = next(x for x in rs if x["config"] == "StreamSync")
            sk = min((x for x in rs if x["config"].endswith(SPLIT_K)), key=lambda x: x["time_us"])
            ours = min((x for x in rs if x["config"] not in (vendor, vendor + "+graph", "floor")), key=lambda x: x["time_us"])
            stream = min(ss["time_us"], r["time_us"])
            lines.append(f"| {r['model']} | {r['M']} | {r.get('splits', '-')} | {ss['time_us']:.1f} | {r['time_us']:.1f} | "
                         f"{ss['time_us'] / r['time_us']:.2f}x | {sk['config'].removesuffix(SPLIT_K)} | {sk['time_us']:.1f} | "
                         f"{r['time_us'] / sk['time_us']:.3f}x | {ours['config']} | {stream / ours['time_us']:.3f}x |")
        lines.append("")
    if result.get("gemm"):
        lines += ["## GeMM throughput (first GeMM alone, plain kernel vs cuBLAS)", "",
                  "| model | M | ours (us) | cuBLAS (us) | ours TFLOP/s | cuBLAS TFLOP/s | ours/cuBLAS |", "|---|---|---|---|---|---|---|"]
        for g in result["gemm"]:
            lines.append(f"| {g['model']} | {g['M']} | {g['ours_us']} | {g['cublas_us']} | {g['ours_tflops']} | {g['cublas_tflops']} | "
                         f"{g['cublas_us'] / g['ours_us']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    models = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models):
        Ms = sorted({r["M"] for r in rows if r["model"] == model})
        families = {}
        for r in rows:
            if r["model"] != model or r["config"] in ("StreamSync", "floor"):
                continue
            c = r["config"].removesuffix(SPLIT_K)
            fam = (c.split("+")[0] if not c.startswith(result.get("vendor", "cuBLAS")) else c) + r["config"][len(c):]
            families.setdefault(fam, {}).setdefault(r["M"], []).append(r["speedup_vs_streamsync"] if r["correct"] else 0)
        for fam, by_m in sorted(families.items()):
            ax.plot(range(len(Ms)), [max(by_m.get(M, [math.nan])) for M in Ms], marker="o", label=fam)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xticks(range(len(Ms)), [str(M) for M in Ms])
        ax.set_xlabel("M = B x S")
        ax.set_ylabel("speed-up over StreamSync (best variant)")
        ax.set_title(f"{model} {result['workload']}, {result['device']}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write(result: dict, out_dir: Path, stem: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    js = out_dir / f"{stem}.json"
    js.write_text(json.dumps(result, indent=1) + "\n")
    paths = [js]
    if result["workload"] != "overhead":
        md = out_dir / f"{stem}.md"
        md.write_text(markdown(result) + "\n")
        png = out_dir / f"{stem}.png"
        try:
            plot(result, png)
            paths.append(png)
        except ImportError:
            print("matplotlib is missing: no plot", file=sys.stderr)
        paths.append(md)
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="cusyncgen bench", description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=["mlp", "overhead", *WORKLOADS])
    ap.add_argument("--models", default=None, help="comma-separated models of the workload (default: all)")
    ap.add_argument("--M", default=None, help="comma-separated sizes of the sweep (default: the paper's)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--sync-warp", choices=["auto", "on", "off"], default="auto",
                    help="conv2d/attention: the waiting kernels' sync warp (default: where it pays); "
                         "results of on/off go to files named -syncwarp-on/-off")
    ap.add_argument("--spread", choices=["auto", "on", "off"], default="auto",
                    help="conv2d/attention: early-launched kernels of at most two waves padded to ceil(blocks/SMs) "
                         "blocks per SM "
                         "(default: each workload's default); on/off go to files named -spread-on/-off")
    ap.add_argument("--tiles", default=None,
                    help="conv2d: a tile label for every chain (e.g. 128x64x32/s4/w2x2); attention: 'wide' (prompts "
                         "on 8-warp tiles); results go to files named -tiles-<label>")
    ap.add_argument("-o", "--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.tiles and args.workload not in WORKLOADS:
        ap.error("--tiles is for conv2d and attention (cusyncgen tune mlp tries the MLP's tile shapes)")
    from cusyncgen.cuda import available
    ok, why = available()
    if not ok:
        print(f"cusyncgen bench: error: {why}", file=sys.stderr)
        return 1
    from cusyncgen.cuda import driver
    dev = slug(driver.device_name())
    if args.workload == "overhead":
        from cusyncgen.cuda.overhead import measure
        res = measure(iters=max(args.iters, 50))
        for r in res["rows"]:
            print(f"{r['config']:>24s} {r['time_us']:8.1f} us  overhead {100 * r['overhead_vs_streamsync']:+.2f}%  correct={r['correct']}")
        write(res, args.out_dir, f"overhead-{dev}")
        return 0
    sweep = [int(m) for m in args.M.split(",")] if args.M else None
    if args.workload == "mlp":
        res = bench_mlp((args.models or "gpt3,llama,llama-ep").split(","), sweep or SWEEP, args.iters, args.out_dir)
    else:
        import importlib
        mod, fn = WORKLOADS[args.workload].split(":")
        opt = {"auto": None, "on": True, "off": False}
        res = getattr(importlib.import_module(mod), fn)(models=args.models, sweep=sweep, iters=args.iters,
                                                        sync_warp=opt[args.sync_warp], spread=opt[args.spread],
                                                        tiles=args.tiles)
    suffix = "" if args.workload in ("mlp", "overhead") else (
        ("" if args.sync_warp == "auto" else f"-syncwarp-{args.sync_warp}")
        + ("" if args.spread == "auto" else f"-spread-{args.spread}")
        + (f"-tiles-{slug(args.tiles)}" if args.tiles else ""))
    for p in write(res, args.out_dir, f"{args.workload}-{dev}{suffix}"):
        print(p)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
