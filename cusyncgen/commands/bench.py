"""`cusyncgen bench WORKLOAD`: time a synchronized workload against StreamSync, PDL and the vendor library.

For every model and size of the workload (cusyncgen.workloads.REGISTRY): StreamSync (the same
kernels, stream order), PDL alone, every generated policy under each ordering/optimization, the
vendor library through PyTorch (plain and in a CUDA graph) and, where measured, the roofline floor
max(FLOPs/peak, bytes/bandwidth) with peak and bandwidth measured in this run. Every CuSync number
is the median of >= 20 CUDA-graph replays rotating over three input sets, and every
configuration's output is checked against a float32 reference on fresh random inputs.
Writes JSON, markdown and a PNG to -o (default: the current directory).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
from pathlib import Path

from cusyncgen.cuda import timing
from cusyncgen.workloads.base import DECODE, SPLIT_K, SWAP, is_policy


def result_stem(workload: str, device: str, options: dict, kernel: str = "sm80") -> str:
    """The file name (without suffix) of a bench result: workload, device slug, the kernel family
    where it is not the default (sm80), and each option that is not the workload's default (sync
    warp on/off, spread on/off, tiles)."""
    sw, spread, tiles = options.get("sync_warp"), options.get("spread"), options.get("tiles")
    return (f"{workload}-{slug(device)}" + ("" if kernel == "sm80" else f"-{kernel}")
            + ("" if sw is None else f"-syncwarp-{'on' if sw else 'off'}")
            + ("" if spread is None else f"-spread-{'on' if spread else 'off'}")
            + (f"-tiles-{slug(tiles)}" if tiles else ""))


def slug(device: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


def command_line(prog: str, argv) -> str:
    """The command that wrote a result, as a user would type it again: ``prog`` and the
    arguments it was given (``argv``; None: this process's own)."""
    return shlex.join(prog.split() + list(sys.argv[1:] if argv is None else argv))


def check_kernel(ap, args) -> None:
    """A usage error unless --kernel (when given) is a kernel family of the workload."""
    from cusyncgen.workloads import FAMILIES
    if args.kernel is not None and args.kernel not in FAMILIES[args.workload]:
        ap.error(f"--kernel {args.kernel}: {args.workload} has {', '.join(FAMILIES[args.workload])} kernels")


def command_note(result: dict) -> list[str]:
    """The markdown line that names the command which wrote a result (none if it is not known)."""
    return [f"Written by `{result['command']}`.", ""] if result.get("command") else []


def markdown(result: dict) -> str:
    rows = result["rows"]
    vendor = result.get("vendor", "cuBLAS")  # the vendor library's row names: vendor, vendor+graph
    ceil = result.get("ceilings")
    kernel = f" ({result['kernel']} kernels)" if result.get("kernel", "sm80") != "sm80" else ""
    lines = [f"# {result['workload']}{kernel}: CuSync vs StreamSync vs the vendor library on {result['device']}", ""] \
        + command_note(result) + [
             (f"Measured ceilings in this run: fp16 matmul {ceil['peak_flops'] / 1e12:.0f} TFLOP/s, "
              f"copy {ceil['bandwidth'] / 1e12:.2f} TB/s. " if ceil else "")
             + "Times: median of CUDA-graph replays, microseconds. "
             + (f"A point's configurations (ours): timed in the same {timing.timing_words(timing.INTERLEAVED)}; "
                "the vendor's columns: each in a block of its own replays. "
                if any(r.get("timing") == timing.INTERLEAVED for r in rows) else "")
             + "Speed-up is StreamSync time / config time (same kernels, same run). Where recorded, StreamSync "
             "was timed first and last; 'spread' is the difference of the two (the run's noise floor), and the "
             "faster one is the baseline. The vendor's columns: the fastest correct of the forms a user would "
             "write (fused epilogues, weight layouts...), named in parentheses where the run compared them."
             + (" Where a point ran on several tile configs, each configuration's row is its fastest correct one, "
                "and StreamSync is the fastest over them." if kernel else ""), ""] + ([result["note"], ""] if result.get("note") else [])
    for model in sorted({r["model"] for r in rows}):
        lines += [f"## {model}", "",
                  f"| M | StreamSync | spread | PDL | best CuSync config | time | speed-up | {vendor} | {vendor}+graph | floor | all correct |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for M in sorted({r["M"] for r in rows if r["model"] == model}):
            rs = fastest_per_config(r for r in rows if r["model"] == model and r["M"] == M)
            cus = [r for c, r in rs.items() if is_policy(c, vendor) and r["correct"]]
            best = max(cus, key=lambda r: r["speedup_vs_streamsync"])
            ok = all(r["correct"] for r in rs.values())
            spread = rs["StreamSync"].get("baseline_spread")
            lines.append(f"| {M} | {rs['StreamSync']['time_us']:.1f} | {'-' if spread is None else f'{100 * spread:.1f}%'} | {rs['PDL']['time_us']:.1f} ({rs['PDL']['speedup_vs_streamsync']:.2f}x) | "
                         f"{best['config']} | {best['time_us']:.1f} | {best['speedup_vs_streamsync']:.3f}x | "
                         f"{vendor_cell(rs[vendor])} | {vendor_cell(rs[vendor + '+graph'])} | "
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
            ours = fastest_ours(rs, vendor)
            stream = min(ss["time_us"], r["time_us"])
            lines.append(f"| {r['model']} | {r['M']} | {r.get('splits', '-')} | {ss['time_us']:.1f} | {r['time_us']:.1f} | "
                         f"{ss['time_us'] / r['time_us']:.2f}x | {sk['config'].removesuffix(SPLIT_K)} | {sk['time_us']:.1f} | "
                         f"{r['time_us'] / sk['time_us']:.3f}x | {ours['config']} | {stream / ours['time_us']:.3f}x |")
        lines.append("")
    dec = [r for r in rows if r["config"] == "StreamSync" + DECODE]
    if dec:
        lines += ["## The decode kernel", "",
                  "At M <= 64 the MLP also ran on the decode kernel (runtime_cuda/kernels/decode_mlp.cuh: packed "
                  "weights streamed into registers, split evenly over every SM; docs/sm90.md, 'Token generation'), "
                  "every configuration, same run, and on the swapped GeMM (runtime_cuda/sm90/swap.cu: the weight as "
                  "CUTLASS's A operand, tiles of 64 weight rows x 16-64 tokens; stream orders only). 'fastest overall': "
                  "over every kernel and configuration of the point, stream orders included; 'floor': the weights and "
                  "activations over the run's copy bandwidth.", "",
                  "| model | M | StreamSync | PDL | fastest policy config | time | PDL/swap (fastest tile) | "
                  f"fastest overall | time | {vendor}+graph | vendor / fastest | fastest / floor |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(dec, key=lambda r: (r["model"], r["M"])):
            rs = fastest_per_config(x for x in rows if x["model"] == r["model"] and x["M"] == r["M"])
            mine = {c: x for c, x in rs.items() if c.endswith(DECODE) and x["correct"]}
            pol = [x for c, x in mine.items() if is_policy(c, vendor)]
            best = min(pol, key=lambda x: x["time_us"]) if pol else None
            ours = fastest_ours((x for x in rs.values() if x["correct"]), vendor)
            vg, fl = rs.get(vendor + "+graph"), rs.get("floor")
            sw = min((x for x in rows if x["model"] == r["model"] and x["M"] == r["M"] and x["correct"]
                      and x["config"] == "PDL" + SWAP), key=lambda x: x["time_us"], default=None)
            sw_cell = "-" if sw is None else f"{_us(sw)} ({sw['tiles'].removeprefix('swap ')})"
            lines.append(f"| {r['model']} | {r['M']} | {_us(r)} | {_us(mine.get('PDL' + DECODE))} | "
                         f"{'-' if best is None else best['config']} | {_us(best)} | {sw_cell} | {ours['config']} | "
                         f"{_us(ours)} | "
                         f"{'-' if vg is None else vendor_cell(vg)} | {_over(vg, ours)} | {_over(ours, fl)} |")
        lines.append("")
    if result.get("gemm"):
        per_gemm = any("gemm" in g and isinstance(g["gemm"], int) for g in result["gemm"])
        lines += [("## GeMM throughput (each GeMM alone, the fastest correct tile config vs cuBLAS)" if per_gemm else
                   "## GeMM throughput (first GeMM alone, plain kernel vs cuBLAS)"), "",
                  "| model | M | " + ("GeMM | config | " if per_gemm else "") + "ours (us) | cuBLAS (us) | ours TFLOP/s | "
                  "cuBLAS TFLOP/s | cuBLAS/ours |", "|---|---|" + ("---|---|" if per_gemm else "") + "---|---|---|---|---|"]
        for g in result["gemm"]:
            head = f"| {g['model']} | {g['M']} | " + (f"{g['gemm']} | {g.get('config') or '-'} | " if per_gemm else "")
            if g.get("ours_us") is None:
                lines.append(head + f"none correct | {g['cublas_us']} | - | {g['cublas_tflops']} | - |")
                continue
            lines.append(head + f"{g['ours_us']} | {g['cublas_us']} | {g['ours_tflops']} | {g['cublas_tflops']} | "
                         f"{g['cublas_us'] / g['ours_us']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def fastest_ours(rows, vendor: str) -> dict:
    """The fastest of `rows` that is a configuration of ours (not the vendor's, not the floor)."""
    return min((x for x in rows if x["config"] not in (vendor, vendor + "+graph", "floor")), key=lambda x: x["time_us"])


def _us(row) -> str:
    return "-" if row is None else f"{row['time_us']:.1f}"


def _over(a, b) -> str:
    """a's time over b's, or "-" where either is missing."""
    return "-" if a is None or b is None else f"{a['time_us'] / b['time_us']:.3f}x"


def vendor_cell(row: dict) -> str:
    """A vendor row's time, and the form it was measured in where the row names it."""
    return f"{row['time_us']:.1f}" + (f" ({row['vendor_form']})" if row.get("vendor_form") else "")


def fastest_per_config(rows) -> dict:
    """{config: row} of one point: where a configuration ran on several tile configs (the sm90
    MLP), its fastest correct row (its fastest where none is correct)."""
    out: dict = {}
    for r in rows:
        o = out.get(r["config"])
        if o is None or (r["correct"], -r["time_us"]) > (o["correct"], -o["time_us"]):
            out[r["config"]] = r
    return out


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
    fig.savefig(path, dpi=110, format="png")


def plot_png(plot_fn, result: dict) -> bytes | None:
    """``plot_fn(result, file)`` drawn into memory (so that it is written with the other files, all
    or none); None without matplotlib."""
    import io

    buf = io.BytesIO()
    try:
        plot_fn(result, buf)
    except ImportError:
        return None
    return buf.getvalue()


def write(result: dict, out_dir: Path, stem: str, table: bool = True, page=None) -> list[Path]:
    """The JSON, and where the workload compares with a vendor library (``table``), its markdown
    table and plot (the overhead microbenchmark has none); all written or none (files.write_files).
    ``page``: the workload's own markdown writer (one whose rows are not the MLP's shape), no plot."""
    from cusyncgen import files

    js = out_dir / f"{stem}.json"
    out = {js: json.dumps(result, indent=1) + "\n"}
    if table and page is not None:
        out[out_dir / f"{stem}.md"] = page(result) + "\n"
    elif table:
        png = plot_png(plot, result)
        if png is not None:
            out[out_dir / f"{stem}.png"] = png
        else:
            print("matplotlib is missing: no plot", file=sys.stderr)
        out[out_dir / f"{stem}.md"] = markdown(result) + "\n"
    files.make_directory(out_dir)
    files.write_files(out)
    return list(out)


def main(argv=None) -> int:
    from cusyncgen.workloads import DEFAULT_KERNEL, FAMILIES, REGISTRY, default_kernel, get, kernels
    ap = argparse.ArgumentParser(prog="cusyncgen bench", description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=list(REGISTRY))
    ap.add_argument("--kernel", choices=kernels(), default=None,
                    help="the kernel family (default: the device's: sm90 on an sm_90 GPU where the workload has sm90 "
                         f"kernels, else {DEFAULT_KERNEL}); results of another than {DEFAULT_KERNEL} go to files named "
                         "-<kernel>")
    ap.add_argument("--models", default=None, help="comma-separated models of the workload (default: all)")
    ap.add_argument("--M", default=None, help="comma-separated sizes of the sweep (default: the paper's)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--sync-warp", choices=["auto", "on", "off"], default="auto",
                    help="the waiting kernels' sync warp (default: where it pays); results of on/off go to "
                         "files named -syncwarp-on/-off (workloads with the option: %s)"
                         % ", ".join(n for n, w in REGISTRY.items() if "sync_warp" in w.bench_options))
    ap.add_argument("--spread", choices=["auto", "on", "off"], default="auto",
                    help="early-launched kernels of at most two waves padded to ceil(blocks/SMs) blocks per SM "
                         "(default: each workload's default); on/off go to files named -spread-on/-off")
    ap.add_argument("--tiles", default=None,
                    help="conv2d: a tile label for every chain (e.g. 128x64x32/s4/w2x2); attention: 'wide' (prompts "
                         "on 8-warp tiles); results go to files named -tiles-<label>")
    ap.add_argument("-o", "--out-dir", type=Path, default=Path("."),
                    help="where the JSON, markdown and PNG go (default: the current directory)")
    args = ap.parse_args(argv)
    command = command_line("cusyncgen bench", argv)
    check_kernel(ap, args)
    onoff = {"auto": None, "on": True, "off": False}
    options = {"sync_warp": onoff[args.sync_warp], "spread": onoff[args.spread], "tiles": args.tiles}
    asked = {k: v for k, v in options.items() if v is not None}
    for k in asked:
        fams = [FAMILIES[args.workload][args.kernel]] if args.kernel else list(FAMILIES[args.workload].values())
        if not any(k in c.bench_options for c in fams):
            cls = fams[0]
            ap.error(f"--{k.replace('_', '-')} is not an option of {cls.name} (its options: "
                     f"{', '.join('--' + o.replace('_', '-') for o in cls.bench_options) or 'none'})")
    from cusyncgen import files
    from cusyncgen.errors import CusyncError
    try:
        files.check_directory(args.out_dir)
    except CusyncError as exc:
        print(f"cusyncgen bench: error: {exc.message}", file=sys.stderr)
        return 1
    from cusyncgen.cuda import available
    ok, why = available()
    if not ok:
        print(f"cusyncgen bench: error: {why}", file=sys.stderr)
        return 1
    from cusyncgen.cuda import driver
    cls = get(args.workload, args.kernel or default_kernel(args.workload, driver.arch()))
    for k in asked:
        if k not in cls.bench_options:
            print(f"cusyncgen bench: error: --{k.replace('_', '-')} is not an option of {cls.name} on its {cls.kernel} "
                  f"kernels (the default on this device; --kernel picks another)", file=sys.stderr)
            return 1
    try:
        sizes = [int(m) for m in args.M.split(",")] if args.M else None
    except ValueError:
        ap.error(f"--M: comma-separated integers, not {args.M!r}")
    try:
        res = cls.bench(models=args.models, sizes=sizes, iters=args.iters, **asked)
    except CusyncError as exc:   # e.g. a model the kernel family lacks, the sm90 library missing
        other = "" if cls.kernel == DEFAULT_KERNEL else f" (--kernel {DEFAULT_KERNEL} runs the {DEFAULT_KERNEL} kernels)"
        print(f"cusyncgen bench: error: {exc.message}{other}", file=sys.stderr)
        return 1
    for r in res["rows"]:
        r.setdefault("kernel", cls.kernel)
    res = {"command": command, **res}
    try:
        paths = write(res, args.out_dir, result_stem(cls.name, res["device"], asked, cls.kernel), table=bool(cls.vendor),
                      page=getattr(cls, "markdown", None))
    except CusyncError as exc:
        print(f"cusyncgen bench: error: {exc.message}", file=sys.stderr)
        return 1
    for p in paths:
        print(p)
    if cls.vendor:
        print(getattr(cls, "markdown", markdown)(res))
    else:
        for r in res["rows"]:
            print(f"{r['config']:>24s} {r['time_us']:8.1f} us  overhead {100 * r['overhead_vs_streamsync']:+.2f}%  "
                  f"correct={r['correct']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
