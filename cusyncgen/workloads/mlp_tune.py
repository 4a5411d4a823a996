"""The sm80 MLP's tune (`cusyncgen tune mlp --kernel sm80`, MLP.tune): every candidate tile shape
measured at each size (or read back from the tune cache), the fastest correct configuration
chosen, and the wave model's prediction (`cusyncgen plan`, with the compiled kernels' occupancy)
set beside it, with the readings of how well it matched. The command (cusyncgen.commands.tune)
writes the report and the dispatch table."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from cusyncgen import files
from cusyncgen.cuda import build
from cusyncgen.errors import CusyncError
from cusyncgen.workloads.base import VENDOR, family
from cusyncgen.workloads.mlp import MODELS, MlpTiles, compile_dep, default_tiles, measure_point, tile_candidates

# Every other size of the sweep calibrates the planner's timing terms (cusyncgen.plan.calibrate),
# the others are held out to check them (the report's "prediction accuracy").
CALIBRATION_M = (1, 64, 256, 1024, 4096)


def mlp_spec(model: str, M: int, tiles: MlpTiles, occupancy: dict, timing=None):
    """The planner's view of one MLP: grids and dependencies from its .dep, each block's time from
    its work (2*BM*BN*K flops) and its occupancy (an SM shared by o blocks gives each 1/o), in µs
    at the GPU's calibrated tile rate (1 TFLOP/s per SM when uncalibrated: then only ratios mean
    anything)."""
    from cusyncgen.plan import adapter, gpus
    m = MODELS[model]
    timing = timing or gpus.Timing()
    compiled, _ = compile_dep(m, M, tiles)
    work = {"g1": 2 * tiles.g1.BM * tiles.g1.BN * m.K1, "g2": 2 * tiles.g2.BM * tiles.g2.BN * m.K2}
    tt = {g: timing.tile_time_us(work[g], occupancy[g]) for g in work}
    return adapter.spec_from_program(compiled.program, occupancy=occupancy, tile_time=tt)


TERMS = ("all", "launch gap", "none")


def predict_from(model: str, M: int, tiles: MlpTiles, occupancy: dict, gpu, terms: str = "all") -> dict:
    """The wave model's recommendation for one MLP on `gpu` with one set of timing terms
    (predictions())."""
    return predictions(model, M, tiles, occupancy, gpu, (terms,))[0]


def predictions(model: str, M: int, tiles: MlpTiles, occupancy: dict, gpu, terms=TERMS) -> list[dict]:
    """The wave model's recommendations (cusyncgen plan) for one MLP on `gpu`, one per entry of
    `terms`: with the GPU's calibrated timing terms (gpus.TIMINGS) "all", only the "launch gap", or
    "none" (the lockstep model of the paper's tables, on the same tile times). The .dep is compiled
    once: the tile times depend only on the tile rate, which every variant keeps. CPU only."""
    from cusyncgen.plan import gpus, planner
    full = gpus.timing(gpu)
    spec = mlp_spec(model, M, tiles, occupancy, full)
    out = []
    for term in terms:
        if term not in TERMS:
            raise ValueError(f"terms: one of {TERMS}")
        t = full if term == "all" else gpus.Timing(
            tile_tflops=full.tile_tflops, launch_gap_us=full.launch_gap_us if term == "launch gap" else 0.0)
        plan = planner.make_plan(spec, gpu, time_unit="us", wait_cost=t.wait_cost_us,
                                 launch_gap=t.launch_gap_us, skew=t.tail_skew)
        rec = plan["recommended"]
        out.append({"policy": rec["policy"], "speedup": rec["speedup"], "occupancy": dict(occupancy),
                    "time_us": rec["time"], "streamsync_us": plan["streamsync"]["time"]})
    return out


def gpu_of(device: str | None):
    """The plan's GPU for a device name ("NVIDIA H200" -> h200); CuPy's limits when unknown."""
    from cusyncgen.plan import gpus
    key = gpus.gpu_key(device or "")
    if key:
        return gpus.get_gpu(key)
    try:
        return gpus.detect_gpu()
    except Exception:
        return gpus.get_gpu("h100")


def predict(mlp) -> dict:
    """The prediction for a built MLP, with the compiled kernels' occupancy (stored in the tune
    cache, so that a report can predict again without a GPU)."""
    from cusyncgen.cuda import driver
    k1, k2, _ = mlp.kernels[None]
    occ = {"g1": driver.max_active_blocks(k1), "g2": driver.max_active_blocks(k2)}
    return predict_from(mlp.model_name, mlp.M, mlp.tiles, occ, gpu_of(driver.device_name()))


def measured_on(rows: list[dict]) -> dict:
    """The fastest correct configuration among `rows` (one tile shape) and its speed-up over their
    StreamSync: what a prediction for those tiles is compared with."""
    ok = [r for r in rows if r["correct"] and r["config"] not in VENDOR]
    ss = next(r for r in rows if r["config"] == "StreamSync")["time_us"]
    best = min(ok, key=lambda r: r["time_us"])
    return {"config": best["config"], "family": family(best["config"]), "speedup": round(ss / best["time_us"], 4)}


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
            raise CusyncError(f"{model} M={M} tiles {tiles.label} is not in the cache for {dev} (this runtime)", None)
        import cupy

        stream = gpu.setdefault("stream", cupy.cuda.Stream())
        point, mlp, *_ = measure_point(model, M, iters, stream, seed=M, tiles=tiles)
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
    plan_gpu = gpu_of(dev)
    for model in models:
        for M in sweep:
            t0 = time.time()
            rows, stored = [], None
            for tiles in tile_candidates(model, M):
                key = f"{model}|{M}|{tiles.label}|{runtime}"
                if key not in cache[dev]:
                    cache[dev][key] = measure(model, M, tiles)
                    files.write_file(cache_path, json.dumps(cache, indent=1) + "\n")
                entry = cache[dev][key]
                rows += [dict(r, tile_cfg=entry["tiles"]) for r in entry["rows"]]
                if tiles == default_tiles(model, M):
                    default_rows = entry["rows"]
                stored = entry.get("prediction", stored)
            # the wave model is CPU-only: predict again (this checkout's model) from the stored occupancy
            # (a cache entry without one keeps the prediction it stored)
            prediction, lockstep, gap_only = stored, None, None
            if stored and "occupancy" in stored:
                args = (model, M, default_tiles(model, M), stored["occupancy"], plan_gpu)
                prediction, gap_only, lockstep = predictions(*args, TERMS)
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
                            "measured_on_predicted_tiles": measured_on(default_rows),
                            "predicted_lockstep": lockstep, "predicted_launch_gap_only": gap_only,
                            "predicted_at_measurement": stored,
                            "lockstep_matches": match_flags(lockstep, measured_family, default_rows),
                            "launch_gap_only_matches": match_flags(gap_only, measured_family, default_rows),
                            "at_measurement_matches": match_flags(stored, measured_family, default_rows),
                            "calibration": M in CALIBRATION_M, "candidates": len(rows)})
            if progress:
                print(f"{model} M={M}: {best['config']} [{best['tiles']}] {best['speedup_vs_streamsync']:.3f}x "
                      f"(predicted {prediction and prediction['policy']}) [{time.time() - t0:.0f} s]",
                      file=sys.stderr, flush=True)
    from cusyncgen.plan import gpus
    return {"device": dev, "workload": "mlp", "runtime": runtime, "timing": gpus.timing(plan_gpu).as_dict(),
            "choices": choices}


NO_TILE_SYNC = ("StreamSync", "PDL")


def _no_gain(prediction: dict) -> bool:
    """A recommendation without tile semaphores: StreamSync, PDL alone (the calibrated model's
    launch gap), or a policy predicted no faster than 1.005x."""
    return prediction["policy"] in NO_TILE_SYNC or (prediction.get("speedup") or 0) <= 1.005


def matches(prediction: dict | None, measured_family: str) -> bool:
    """Does the wave model's recommendation agree with the measured best? A recommendation without
    tile semaphores (StreamSync, PDL alone, or a speed-up <= 1.005) agrees with a measured best that
    uses none (StreamSync, or PDL alone); otherwise the policy names must agree."""
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


def match_flags(prediction: dict | None, measured_family: str, rows: list[dict]) -> dict | None:
    """The three readings of a prediction against the measurement (None without a prediction)."""
    if not prediction:
        return None
    return {"match": matches(prediction, measured_family), "policy": matches_policy(prediction, measured_family),
            "noise": matches_within_noise(prediction, rows)}


def matches_within_noise(prediction: dict | None, rows: list[dict]) -> bool:
    """The looser reading, on the tiles the prediction was made for: is the predicted family (a
    configuration without tile semaphores for a no-gain prediction) as fast as the measured best
    within the run's noise (StreamSync's first-vs-last spread of a point timed in blocks, at least 1%)? Where several policies
    are within the noise of each other the measurement cannot tell them apart."""
    if not prediction:
        return False
    ok = [r for r in rows if r["correct"] and r["config"] not in VENDOR]
    best = min(r["time_us"] for r in ok)
    noise = max(next((r.get("baseline_spread") or 0.0 for r in ok if r["config"] == "StreamSync"), 0.0), 0.01)
    no_gain = _no_gain(prediction)
    fam = [r["time_us"] for r in ok if (r["config"] in NO_TILE_SYNC if no_gain else family(r["config"]) == prediction["policy"])]
    return bool(fam) and min(fam) <= best * (1 + noise)
