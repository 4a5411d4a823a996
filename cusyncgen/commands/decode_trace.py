"""Where the decode MLP's time goes (sm_90 or any GPU the decode kernel runs on; CuPy and torch needed).

The decode kernel (runtime_cuda/kernels/decode_mlp.cuh) streams both weights of the MLP at
M <= 64; its time is their bytes over the bandwidth plus what each GeMM adds: the launch and the
first bytes, the slowest block's share, the reduction of the split rows. This runs its trace
build (CUSYNC_DECODE_TRACE: every block stamps its entry, its first step's mmas, its last step's
reds and its end, and names its SM) and, per model and configuration, prints:

- the time of a CUDA graph of 10 MLPs, replayed back to back (as the bench times it), of the
  same launches with the weights only read (no X, no mma: what the stream alone takes), with
  the partial sums added but never counted or finalized (what the split rows' reduction adds),
  and with them added and counted but never finalized (the fence and count apart from the
  finalizing warps' loads, activation and stores);
- per GeMM, from the launch's first block entry (us): when the last block entered, when the first
  data reached the median block, when the blocks' last steps were issued (first, median, last),
  and the launch's end; the SMs' stream rates (each SM's bytes over its blocks' first-to-last-step
  time, GB/s: lowest, median, highest);
- in two launches, the first GeMM's blocks prefetching the second's first steps into L2 at the end of
  their share (decode_mlp.cuh's kNextSteps), the default and NEXT_STEPS of them;
- how alike the SMs are from run to run: the rank correlation of the SMs' rates between two runs
  and between the two GeMMs (near 1: the same SMs are slow every time, and a static share
  weighted by SM could even them; near 0: it is noise, and only a dynamic share can).

Each point runs with the kernel's default split (`auto`: warp-K where the rows split evenly over
the grid, decode.warp_k_plan) and with stream-K over the grid (`--split`).

    python -m cusyncgen.commands.decode_trace [--models gpt3,llama-ep] [--M 1,16] [--runs 5] [--split auto,stream-k]
"""
from __future__ import annotations

import argparse
import statistics
import sys

CONFIGS = ("StreamSync", "PDL", "TileSync+Chain")
MODES = ("GeMM", "read only", "no count/finalize", "count, no finalize")   # cusync_decode_mode 0-3
NEXT_STEPS = (0, 2, 8)   # cusync_decode_next_steps swept beside the default (decode_mlp.cuh's kNextSteps)
SPLITS = ("auto", "stream-k")   # decode.SPLITS compared (auto: warp-K where it splits the rows evenly)


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    for pos, i in enumerate(order):
        r[i] = float(pos)
    return r


def rank_correlation(a: dict, b: dict) -> float | None:
    """Spearman's rho over the keys both have (None under 3 keys or no spread)."""
    keys = sorted(set(a) & set(b))
    if len(keys) < 3:
        return None
    ra, rb = _ranks([a[k] for k in keys]), _ranks([b[k] for k in keys])
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return num / den if den else None


def gemm_stats(raw, gi: int, blocks: int, block_bytes: list[int]) -> dict:
    """Per-GeMM summary of one traced launch: raw [2, 1024, 5] globaltimer words; block_bytes: the
    weight bytes each block streams."""
    rec = [raw[gi][b] for b in range(blocks) if raw[gi][b][0]]
    t0 = min(r[0] for r in rec)
    us = lambda t: (t - t0) / 1e3  # noqa: E731
    per_sm: dict[int, list] = {}
    for b in range(blocks):
        r = raw[gi][b]
        if r[0] and r[2] > r[1] > 0:
            per_sm.setdefault(int(r[4]), []).append((r[1], r[2], block_bytes[b]))
    rates = {sm: sum(s for _, _, s in v) / max(1, max(e for _, e, _ in v) - min(f for f, _, _ in v))
             for sm, v in per_sm.items()}   # bytes / ns = GB/s
    ends = sorted(us(r[2]) for r in rec if r[2])
    return {"t0": t0, "last_entry": max(us(r[0]) for r in rec),
            "first_data_median": statistics.median(us(r[1]) for r in rec if r[1]),
            "last_step": (ends[0], statistics.median(ends), ends[-1]),
            "rates": rates}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cusyncgen.commands.decode_trace",
                                 description="Per-block stamps of the decode MLP (its trace build): where each GeMM's "
                                             "time goes beside the weights' stream.")
    ap.add_argument("--models", default="gpt3,llama-ep")
    ap.add_argument("--M", default="1,16", help="rows, comma-separated (default 1,16)")
    ap.add_argument("--runs", type=int, default=5, help="traced launches per configuration (default 5)")
    ap.add_argument("--split", default=",".join(SPLITS),
                    help=f"the decode kernel's splits, comma-separated (default {','.join(SPLITS)})")
    args = ap.parse_args(argv)
    from cusyncgen.workloads import mlp_decode

    splits = [v for v in args.split.split(",") if v]
    if not splits or any(v not in SPLITS for v in splits):
        ap.error(f"--split: of {', '.join(SPLITS)}, not {args.split!r}")
    if args.runs < 2:
        ap.error("--runs must be at least 2 (the rank correlation compares two)")
    models = [m for m in args.models.split(",") if m]
    bad = [m for m in models if m not in mlp_decode.MODELS]
    if bad or not models:
        ap.error(f"--models: of {', '.join(mlp_decode.MODELS)}, not {args.models!r}")
    try:
        Ms = [int(v) for v in args.M.split(",") if v]
    except ValueError:
        ap.error(f"--M: comma-separated integers, not {args.M!r}")
    if not Ms or not all(1 <= M <= mlp_decode.MAX_M for M in Ms):
        ap.error(f"--M: rows from 1 to {mlp_decode.MAX_M}, not {args.M!r}")
    try:
        from cusyncgen.cuda.lazy import cupy, torch
        cupy.cuda.runtime.getDeviceCount()
        torch.cuda.init()
    except Exception as exc:  # no CuPy or torch, no driver, no GPU
        print(f"decode_trace: needs a GPU, CuPy and torch ({exc})", file=sys.stderr)
        return 1
    from cusyncgen.cuda import baselines, decode, driver, timing

    print(f"# python -m cusyncgen.commands.decode_trace --models {','.join(models)} --M {','.join(map(str, Ms))} "
          f"--runs {args.runs} on {driver.device_name()}")
    stream = cupy.cuda.Stream(non_blocking=True)
    bandwidth = baselines.ceilings()["bandwidth"]   # the floor's, as the bench's (bytes/s)
    for model, M in ((a, b) for a in models for b in Ms):
        for split in splits:
            mlp = mlp_decode.MLPDecode(model, M)
            m = mlp.model
            runner = mlp._mlp = decode.DecodeMlp(M, mlp_decode.shapes(m), mlp_decode.compiled_policies(m), trace=True,
                                                 split=split)
            trace = runner.module.global_array("cusync_decode_trace", (2, 1024, 5), cupy.uint64)
            mode = runner.module.global_array("cusync_decode_mode", (1,), cupy.int32)
            next_steps = runner.module.global_array("cusync_decode_next_steps", (1,), cupy.int32)
            x, w1, w2 = mlp.buffers(seed=M)
            y, z = mlp.outputs()
            ref = mlp.reference(x, w1, w2)
            wbytes = 2 * (w1.size + w2.size)
            sh = runner.shape
            block_bytes = []   # the weight bytes each block streams, per GeMM
            for g, wk in zip(mlp_decode.shapes(m), runner.warp_k):
                ksteps = -(-g.k // sh.step_k)
                if wk:
                    block_bytes.append([wk * 16 * ksteps * sh.step_k * 2] * runner.grid)
                else:
                    total = (g.n // sh.rows) * ksteps
                    block_bytes.append([(total * (b + 1) // runner.grid - total * b // runner.grid) * sh.rows * sh.step_k * 2
                                        for b in range(runner.grid)])
            form = ", ".join(f"{wk} groups of 16 rows a block (warp-K)" if wk else "stream-K" for wk in runner.warp_k)
            print(f"\n## {model} M = {M}, split {split}: {sh.name}, grid {runner.grid}, {form}, weights "
                  f"{wbytes / 1e6:.1f} MB, KB a block {min(block_bytes[0]) // 1024}-{max(block_bytes[0]) // 1024} / "
                  f"{min(block_bytes[1]) // 1024}-{max(block_bytes[1]) // 1024}\n")
            print("| next GeMM's steps into L2 | config | kernel | graph of 10 (us an MLP) | rel err | GeMM | last entry | "
                  "first data (median) | last step first / median / last | end | SM rate GB/s low / median / high | rho run-run | "
                  "rho GeMM-GeMM |")
            print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for pf, cfg, ro in ([(-1, c, r) for c in CONFIGS for r in range(len(MODES))]
                                + [(n, c, 0) for c in CONFIGS[:2] for n in NEXT_STEPS]):
                if ro and cfg == "TileSync+Chain":
                    continue
                with stream:   # the globals set and z poisoned in the kernels' stream
                    mode[...] = ro
                    next_steps[...] = pf
                    z[...] = cupy.nan
                    mlp.run(stream, cfg, x, w1, w2, y, z)
                stream.synchronize()
                mlp.check_stages()
                err = float(cupy.linalg.norm(z.astype(cupy.float32) - ref) / cupy.linalg.norm(ref))
                with stream:
                    graph = timing.capture(lambda s: [mlp.run(s, cfg, x, w1, w2, y, z) for _ in range(10)], stream)
                    timing.keep_busy(graph, stream, 0.3)
                    t = timing.median(timing.time_graphs([graph], stream, iters=20)) / 10
                runs = []
                for _ in range(args.runs):
                    with stream:
                        trace[...] = 0
                        mlp.run(stream, cfg, x, w1, w2, y, z)
                    stream.synchronize()
                    runs.append(trace.get().tolist())
                mlp.check_stages()
                if ro:   # the read alone and the unreduced sums leave the workspace dirty
                    with stream:
                        for a in runner.ws + runner.counts:
                            a[...] = 0
                t_launch = None
                for gi in (0, 1):
                    st = [gemm_stats(r, gi, runner.grid, block_bytes[gi]) for r in runs]
                    if t_launch is None:
                        t_launch = [s["t0"] for s in st]
                    rel = [(s["t0"] - t0) / 1e3 for s, t0 in zip(st, t_launch)]
                    ends = [max(r[gi][b][3] for b in range(runner.grid)) for r in runs]
                    ends = [(e - t0) / 1e3 for e, t0 in zip(ends, t_launch)] if min(ends) else None
                    med = lambda key, i=None: statistics.median(  # noqa: E731
                        s[key] if i is None else s[key][i] for s in st)
                    rates = st[-1]["rates"]
                    lo, mid, hi = min(rates.values()), statistics.median(rates.values()), max(rates.values())
                    rr = rank_correlation(st[-1]["rates"], st[-2]["rates"])
                    if gi == 0:
                        first_rates = [s["rates"] for s in st]
                        rg = None
                    else:
                        rg = rank_correlation(first_rates[-1], st[-1]["rates"])
                    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
                    start = f" (+{statistics.median(rel):.1f} after GeMM 1's entry)" if gi else ""
                    pf_form = "-" if cfg == "TileSync+Chain" else f"{pf} steps" if pf >= 0 else "default"
                    print(f"| {pf_form} | {cfg} | {MODES[ro]} | {t:.1f} | {err:.1e} | {gi + 1}{start} | "
                          f"{med('last_entry'):.1f} | {med('first_data_median'):.1f} | "
                          f"{med('last_step', 0):.1f} / {med('last_step', 1):.1f} / {med('last_step', 2):.1f} | "
                          f"{'-' if ends is None else f'{statistics.median(ends):.1f}'} | "
                          f"{lo:.0f} / {mid:.0f} / {hi:.0f} | {fmt(rr)} | {fmt(rg)} |")
            with stream:
                mode[...] = 0
                next_steps[...] = -1
            stream.synchronize()
            print(f"\nfloor: {wbytes / 1e6:.1f} MB over the copy bandwidth of this run "
                  f"({bandwidth / 1e9:.0f} GB/s) = {wbytes / bandwidth * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
