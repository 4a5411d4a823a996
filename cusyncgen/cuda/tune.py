"""`cusyncgen tune mlp`: pick the fastest correct configuration per size on this GPU.

For every model and M it compiles every generated policy x {W, R, T, PDL} x a few tile shapes,
times them as the benchmark does (CUDA-graph replays, rotating inputs), checks each against the
float32 reference, and keeps the fastest *correct* one (StreamSync itself when nothing beats it).
Results are cached per (device, model, M, tiles) in a JSON file, so an interrupted tune resumes.
It writes a report (markdown + PNG: speed-up per size, the chosen configuration, the wave
model's prediction from `cusyncgen plan` beside the measurement) and a dispatch table (JSON for
Python, a C++ header) that selects the configuration by M at run time.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

from cusyncgen.cuda import build
from cusyncgen.cuda.bench import RESULTS, SWEEP, slug
from cusyncgen.cuda.modules import MODELS, MlpTiles, Tiles, default_tiles

def tile_candidates(model: str, M: int) -> list[MlpTiles]:
    """The default tiles for M and alternatives whose waves differ: for GPT-3 past M = 64, 128x128
    tiles with 2x4 warps in both GeMMs; for LLaMA-ep, 4- or 8-warp 128x128 tiles; for LLaMA (producer BN pinned to 64 by its .dep), a 4-warp
    64x128 or 128x128 consumer (which can have a sync warp: more, shorter consumer blocks that fill
    the producer's last wave) and, past M = 128, the other row-tile height."""
    base = default_tiles(model, M)
    out = [base]
    if model == "gpt3":
        wide = MlpTiles(Tiles(128, 128, 64, 3, 2, 4), Tiles(128, 128, 64, 3, 2, 4))
        if M > 64:
            out.append(wide)
    elif model == "llama-ep":
        # first GeMM 128 wide (its weight's interleaving): 8 or 4 warps (1 or 2 blocks per SM)
        if M > 64:
            wide, four = Tiles(128, 128, 64, 3, 2, 4), Tiles(128, 128, 32, 4, 2, 2)
            out += [MlpTiles(four, four), MlpTiles(wide, wide), MlpTiles(wide, four)]
    else:
        small_g1, tall_g1 = Tiles(64, 64, 64, 5, 2, 2), Tiles(128, 64, 64, 4, 2, 2)
        out.append(MlpTiles(base.g1, Tiles(base.BM, 128, 32, 4, 2, 2), 2))
        if M > 128:
            g1 = tall_g1 if base.BM == 64 else small_g1
            out.append(MlpTiles(g1, Tiles(g1.BM, 128, 32, 4, 2, 2), 2))
    return list(dict.fromkeys(out))


def tiles_from_dict(d: dict) -> MlpTiles:
    return MlpTiles(Tiles(**d["g1"]), Tiles(**d["g2"]), d["swiglu_mode"])


def predict(mlp) -> dict:
    """The wave model's recommendation (cusyncgen plan) for this MLP, with the compiled kernels'
    occupancy and per-tile work proportional to each GeMM's K."""
    from cusyncgen.cuda import driver
    from cusyncgen.cuda.modules import compile_dep
    from cusyncgen.plan import adapter, gpus, planner
    compiled, _ = compile_dep(mlp.model, mlp.M, mlp.tiles)
    k1, k2, _ = mlp.kernels[None]
    occ = {"g1": driver.max_active_blocks(k1), "g2": driver.max_active_blocks(k2)}
    tt = {"g1": float(mlp.model.K1), "g2": float(mlp.model.K2)}
    spec = adapter.spec_from_program(compiled.program, occupancy=occ, tile_time=tt)
    try:
        gpu = gpus.detect_gpu()
    except Exception:
        gpu = gpus.get_gpu("h100")
    rec = planner.make_plan(spec, gpu)["recommended"]
    return {"policy": rec["policy"], "speedup": rec["speedup"], "occupancy": occ}


def family(config: str) -> str:
    return config.split("+")[0]


def tune_mlp(models, sweep, iters, cache_path: Path, progress=True, device: str | None = None) -> dict:
    """Measure (or, for points already in the cache, reuse) every candidate and choose per size.
    device: report from the cache of that device without a GPU (every point must be cached, with
    the runtime the cache was last measured with, which may predate this checkout's)."""
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    if device is None:
        from cusyncgen.cuda import driver
        dev = driver.device_name()
    else:
        dev = device
    cache.setdefault(dev, {})
    gpu = {}  # the CUDA side, made on the first point to measure

    def measure(model, M, tiles):
        if device is not None:
            raise KeyError(f"{model} M={M} tiles {tiles.label} is not in the cache for {dev} (this runtime)")
        import cupy

        from cusyncgen.cuda.bench import measure_mlp_point
        stream = gpu.setdefault("stream", cupy.cuda.Stream())
        point, mlp, *_ = measure_mlp_point(model, M, iters, stream, seed=M, tiles=tiles)
        entry = {"rows": point, "tiles": asdict(tiles)}
        if tiles == default_tiles(model, M):
            entry["prediction"] = predict(mlp)
        del mlp
        cupy.get_default_memory_pool().free_all_blocks()
        return entry

    runtime = build.runtime_digest()[:12]  # results of an older runtime or kernel are measured again
    if device is not None and cache[dev]:
        # a report from the cache: the runtime it was measured with (its latest, if several)
        runtime = next(reversed(cache[dev])).rsplit("|", 1)[1]
    choices = []
    for model in models:
        for M in sweep:
            t0 = time.time()
            rows, prediction = [], None
            for tiles in tile_candidates(model, M):
                key = f"{model}|{M}|{tiles.label}|{runtime}"
                if key not in cache[dev]:
                    cache[dev][key] = measure(model, M, tiles)
                    cache_path.write_text(json.dumps(cache, indent=1) + "\n")
                entry = cache[dev][key]
                rows += [dict(r, tile_cfg=entry["tiles"]) for r in entry["rows"]]
                if tiles == default_tiles(model, M):
                    default_rows = entry["rows"]
                prediction = entry.get("prediction", prediction)
            # The baseline of every candidate: the fastest StreamSync over all candidate tiles
            base = min((r for r in rows if r["config"] == "StreamSync"), key=lambda r: r["time_us"])
            for r in rows:
                r["speedup_vs_streamsync"] = round(base["time_us"] / r["time_us"], 4)
            best = min((r for r in rows if r["correct"]), key=lambda r: r["time_us"])
            same = next(r for r in rows if r["config"] == "StreamSync" and r["tiles"] == best["tiles"])
            measured_family = family(best["config"]) if best["config"] not in ("StreamSync",) else "StreamSync"
            choices.append({"model": model, "M": M, "config": best["config"], "tiles": best["tiles"],
                            "streamsync_tiles": base["tiles"],
                            "tile_cfg": best["tile_cfg"], "time_us": best["time_us"],
                            "streamsync_us": base["time_us"], "speedup_vs_streamsync": best["speedup_vs_streamsync"],
                            "speedup_same_tiles": round(same["time_us"] / best["time_us"], 4),
                            "predicted": prediction, "measured_family": measured_family,
                            "prediction_matches": matches(prediction, measured_family),
                            "prediction_policy_matches": matches_policy(prediction, measured_family),
                            "prediction_matches_within_noise": matches_within_noise(prediction, default_rows),
                            "candidates": len(rows)})
            if progress:
                print(f"{model} M={M}: {best['config']} [{best['tiles']}] {best['speedup_vs_streamsync']:.3f}x "
                      f"(predicted {prediction and prediction['policy']}) [{time.time() - t0:.0f} s]",
                      file=sys.stderr, flush=True)
    return {"device": dev, "workload": "mlp", "runtime": runtime, "choices": choices}


NO_TILE_SYNC = ("StreamSync", "PDL")


def _no_gain(prediction: dict) -> bool:
    """A recommendation that predicts no gain: StreamSync itself, or a speed-up <= 1.005."""
    return prediction["policy"] == "StreamSync" or (prediction.get("speedup") or 0) <= 1.005


def matches(prediction: dict | None, measured_family: str) -> bool:
    """Does the wave model's recommendation agree with the measured best? A recommendation that
    predicts no gain (speed-up <= 1.005, or StreamSync itself) agrees with a measured best that
    uses no tile semaphores (StreamSync, or PDL alone); otherwise the policy names must agree."""
    if not prediction:
        return False
    if measured_family in NO_TILE_SYNC:
        return _no_gain(prediction)
    return not _no_gain(prediction) and prediction["policy"] == measured_family


def matches_policy(prediction: dict | None, measured_family: str) -> bool:
    """The predicted policy alone: the recommended policy is the measured best's policy family
    (whatever gain either predicts), or the measured best uses no tile semaphores and the
    prediction is no gain. Looser than `matches`, which also wants the gain predicted: a "RowSync,
    1.00x" prediction where RowSync+PDL+R is measured 1.04x faster is a policy match, not a match."""
    if not prediction:
        return False
    if measured_family in NO_TILE_SYNC:
        return _no_gain(prediction)
    return prediction["policy"] == measured_family


def matches_within_noise(prediction: dict | None, rows: list[dict]) -> bool:
    """The looser reading, on the tiles the prediction was made for: is the predicted family (a
    configuration without tile semaphores for a no-gain prediction) as fast as the measured best
    within the run's noise (StreamSync's first-vs-last spread, at least 1%)? Where several policies
    are within the noise of each other the measurement cannot tell them apart."""
    if not prediction:
        return False
    ok = [r for r in rows if r["correct"] and r["config"] not in VENDOR]
    best = min(r["time_us"] for r in ok)
    noise = max(next((r.get("baseline_spread") or 0.0 for r in ok if r["config"] == "StreamSync"), 0.0), 0.01)
    no_gain = _no_gain(prediction)
    fam = [r["time_us"] for r in ok if (r["config"] in NO_TILE_SYNC if no_gain else family(r["config"]) == prediction["policy"])]
    return bool(fam) and min(fam) <= best * (1 + noise)


VENDOR = ("cuBLAS", "cuBLAS+graph", "cuDNN", "cuDNN+graph", "floor")


def choose_from_bench(result) -> dict:
    """The tuner's choice for Conv2D and Attention: per (model, size) of one or more `cusyncgen
    bench` results of one device and workload (with and without sync warps or spread, on the
    default and the other tile shape: `bench --tiles`), the fastest correct configuration of our
    kernels, StreamSync and PDL alone included, never a vendor row. With several results the
    baseline is the fastest StreamSync among them; 'same tiles' is over the fastest StreamSync on
    the chosen tiles."""
    results = result if isinstance(result, list) else [result]
    if len({(r["device"], r["workload"]) for r in results}) != 1:
        raise ValueError("bench results of different devices or workloads")
    groups: dict = {}
    for res in results:
        for r in res["rows"]:
            if r["config"] not in VENDOR:
                groups.setdefault((r["model"], r["M"]), []).append(r)
    choices = []
    for (model, M), rows in sorted(groups.items()):
        base = min((r for r in rows if r["config"] == "StreamSync"), key=lambda r: r["time_us"])
        best = min((r for r in rows if r["correct"]), key=lambda r: r["time_us"])
        speed = round(base["time_us"] / best["time_us"], 4)
        tiles = best.get("tiles", "default")
        same = min(r["time_us"] for r in rows if r["config"] == "StreamSync" and r.get("tiles", "default") == tiles)
        choices.append({"model": model, "M": M, "config": best["config"], "tiles": tiles, "tile_cfg": None,
                        "sync_warp": best.get("sync_warp") if best["config"] not in ("StreamSync", "PDL") else None,
                        "time_us": best["time_us"], "streamsync_us": base["time_us"], "speedup_vs_streamsync": speed,
                        "speedup_same_tiles": round(same / best["time_us"], 4), "predicted": None,
                        "measured_family": family(best["config"]),
                        "prediction_matches": False, "candidates": len(rows)})
    return {"device": results[0]["device"], "workload": results[0]["workload"], "choices": choices}


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def report(result: dict) -> str:
    fixed = all(c["tile_cfg"] is None for c in result["choices"])
    lines = [f"# cusyncgen tune: {result['workload']} on {result['device']}", ""]
    if fixed:
        lines += ["The fastest correct configuration per size among those `cusyncgen bench "
                  f"{result['workload']}` measured (one or more runs: sync warps auto/on, spread on/off, the "
                  "default and the other tile shape of `bench --tiles`; every generated policy x the orderings and R), "
                  "StreamSync and PDL alone included, and its speed-up over the fastest StreamSync of those runs "
                  "('same tiles': over the fastest StreamSync on the chosen tiles). '(sync warp)': the waiting "
                  "kernels of the chosen run had one.", ""]
    else:
        lines += ["The fastest correct configuration per size (every policy x {W, R, T, PDL} x tile shapes), "
                  "its speed-up over StreamSync (same run), and the wave model's prediction "
                  "(`cusyncgen plan` with the compiled kernels' occupancy). 'speed-up' is over the fastest StreamSync "
                  "among all candidate tiles, 'same tiles' over StreamSync with the chosen tiles (the synchronization's "
                  "own share). "
                  "A prediction of no gain (<= 1.005x) matches a measured best without tile semaphores "
                  "(StreamSync or PDL alone); 'match' also wants a gain predicted where one was measured, "
                  "'policy' only the policy (a 'RowSync, 1.00x' prediction where RowSync+PDL+R measured 1.04x "
                  "is a policy match, not a match).", ""]
    for model in sorted({c["model"] for c in result["choices"]}):
        cs = [c for c in result["choices"] if c["model"] == model]
        lines += [f"## {model}", "", "| M | chosen | tiles | time (us) | StreamSync (us) | speed-up | same tiles | predicted (speed-up) | match | policy | within noise |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in cs:
            p = c["predicted"]
            pred = f"{p['policy']} ({(p.get('speedup') or 0):.2f}x)" if p else "-"
            match = ("yes" if c["prediction_matches"] else "no") if p else "-"
            loose = ("yes" if c.get("prediction_matches_within_noise") else "no") if p and "prediction_matches_within_noise" in c else "-"
            pol = ("yes" if c.get("prediction_policy_matches") else "no") if p and "prediction_policy_matches" in c else "-"
            chosen = c["config"] + (" (sync warp)" if sync_warp_label(c) not in ("", "auto") else "")
            lines.append(f"| {c['M']} | {chosen} | {c['tiles']} | {c['time_us']:.1f} | {c['streamsync_us']:.1f} | "
                         f"{c['speedup_vs_streamsync']:.3f}x | {c.get('speedup_same_tiles', c['speedup_vs_streamsync']):.3f}x | "
                         f"{pred} | {match} | {pol} | {loose} |")
        predicted = [c for c in cs if c["predicted"]]
        loose_n = sum(bool(c.get("prediction_matches_within_noise")) for c in predicted)
        policy_n = sum(bool(c.get("prediction_policy_matches")) for c in predicted)
        lines += ["", f"Geometric-mean speed-up over StreamSync across the sweep: "
                  f"{geomean(c['speedup_vs_streamsync'] for c in cs):.3f}x"
                  + (f"; prediction matches the measured best policy family at "
                     f"{sum(c['prediction_matches'] for c in predicted)} of {len(predicted)} sizes "
                     f"(the predicted policy alone, whatever gain it predicts: {policy_n} of {len(predicted)}; "
                     f"{loose_n} of {len(predicted)} within the run's noise, on the predicted tiles)." if predicted else
                     " (no wave-model prediction for this workload)."), ""]
    return "\n".join(lines)


def sync_warp_label(choice: dict) -> str:
    """Which kernels of the choice wait in a sync warp: "auto" (MLP: the host's rule), "" (none),
    "all" (a chain of Conv2Ds), or the Attention kernels' roles."""
    sw = choice.get("sync_warp", "auto")
    if sw is None or sw is False or sw == []:
        return ""
    if sw is True:
        return "all"
    return sw if isinstance(sw, str) else ",".join(sw)


def dispatch_header(result: dict) -> str:
    from cusyncgen.emit import render_template
    models = {}
    for c in sorted(result["choices"], key=lambda c: (c["model"], c["M"])):
        models.setdefault(c["model"], []).append(dict(c, sync_warp_label=sync_warp_label(c)))
    return render_template("dispatch.h.j2", device=result["device"], workload=result["workload"], models=models)


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = sorted({c["model"] for c in result["choices"]})
    fig, ax = plt.subplots(figsize=(7, 4))
    for model in models:
        cs = [c for c in result["choices"] if c["model"] == model]
        ax.plot(range(len(cs)), [c["speedup_vs_streamsync"] for c in cs], marker="o", label=f"{model} (tuned)")
        ax.set_xticks(range(len(cs)), [str(c["M"]) for c in cs])
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("M = B x S")
    ax.set_ylabel("speed-up over StreamSync")
    ax.set_title(f"tuned MLP, {result['device']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def load_dispatch(path) -> dict:
    """{model: [(M, config, tiles-dict)]}: the Python side of the dispatch table."""
    data = json.loads(Path(path).read_text())
    out = {}
    for c in data["choices"]:
        out.setdefault(c["model"], []).append((c["M"], c["config"], c["tile_cfg"]))
    return {m: sorted(v, key=lambda t: t[0]) for m, v in out.items()}


def select(table: dict, model: str, M: int):
    """The tuned choice for M: that of the smallest tuned size >= M (the largest past the sweep)."""
    rows = table[model]
    for m, config, tiles in rows:
        if M <= m:
            return config, tiles_from_dict(tiles)
    return rows[-1][1], tiles_from_dict(rows[-1][2])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="cusyncgen tune", description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=["mlp", "conv2d", "attention"])
    ap.add_argument("--models", default=None)
    ap.add_argument("--M", default=None)
    ap.add_argument("--from-json", type=Path, nargs="+", default=None,
                    help="choose from existing `cusyncgen bench` results (one or more, e.g. with and without "
                         "sync warps) instead of measuring (no GPU needed; conv2d and attention)")
    ap.add_argument("--from-cache", type=Path, default=None,
                    help="mlp: report from a tune cache (tune-cache-<device>.json) without a GPU; every point "
                         "must be in it (measured with the runtime of its latest entries)")
    ap.add_argument("--iters", type=int, default=25)
    ap.add_argument("-o", "--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.from_json is not None:
        if args.workload == "mlp":
            ap.error("--from-json is for conv2d and attention (the MLP tune also varies tile shapes)")
        try:
            res = choose_from_bench([json.loads(p.read_text()) for p in args.from_json])
        except (OSError, ValueError, KeyError, StopIteration) as exc:
            print(f"cusyncgen tune: error: {' '.join(map(str, args.from_json))}: not bench results of one "
                  f"device and workload ({exc})", file=sys.stderr)
            return 1
        return _write(res, args.out_dir, slug(res["device"]))
    if args.from_cache is not None:
        if args.workload != "mlp":
            ap.error("--from-cache is for mlp (conv2d and attention: --from-json)")
        try:
            device = next(iter(json.loads(args.from_cache.read_text())))
            res = tune_mlp([m for m in (args.models or "gpt3,llama,llama-ep").split(",") if m in MODELS],
                           [int(m) for m in (args.M or ",".join(map(str, SWEEP))).split(",")],
                           args.iters, args.from_cache, progress=False, device=device)
        except (OSError, ValueError, KeyError, StopIteration) as exc:
            print(f"cusyncgen tune: error: {args.from_cache}: {exc}", file=sys.stderr)
            return 1
        return _write(res, args.out_dir, slug(device))
    from cusyncgen.cuda import available
    ok, why = available()
    if not ok:
        print(f"cusyncgen tune: error: {why}", file=sys.stderr)
        return 1
    from cusyncgen.cuda import driver
    dev = slug(driver.device_name())
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.workload == "mlp":
        res = tune_mlp([m for m in (args.models or "gpt3,llama,llama-ep").split(",") if m in MODELS],
                       [int(m) for m in (args.M or ",".join(map(str, SWEEP))).split(",")],
                       args.iters, args.out_dir / f"tune-cache-{dev}.json")
    else:
        import importlib

        from cusyncgen.cuda.bench import WORKLOADS
        mod, fn = WORKLOADS[args.workload].split(":")
        sweep = [int(m) for m in args.M.split(",")] if args.M else None
        res = choose_from_bench(getattr(importlib.import_module(mod), fn)(models=args.models, sweep=sweep,
                                                                            iters=args.iters))
    return _write(res, args.out_dir, dev)


def _write(res: dict, out_dir: Path, dev: str) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"tune-{res['workload']}-{dev}"
    Path(f"{stem}.json").write_text(json.dumps(res, indent=1) + "\n")
    Path(f"{stem}.md").write_text(report(res) + "\n")
    Path(f"{stem}.h").write_text(dispatch_header(res))
    try:
        plot(res, Path(f"{stem}.png"))
    except ImportError:
        pass
    print(report(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
