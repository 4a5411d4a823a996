"""`cusyncgen tune WORKLOAD`: pick the fastest correct configuration per size on this GPU.

A workload whose tune_mode is "measure" (the MLP) is measured by its own tune (cusyncgen.workloads.mlp_tune,
mlp_sm90.tune): for every model and M it compiles every generated policy x {W, R, T, PDL} x a few tile shapes,
times them as the benchmark does (CUDA-graph replays, rotating inputs), checks each against the
float32 reference, and keeps the fastest *correct* one (StreamSync itself when nothing beats it).
Results are cached per (device, model, M, tiles) in a JSON file, so an interrupted tune resumes.
It writes a report (markdown + PNG: speed-up per size, the chosen configuration, the wave
model's prediction from `cusyncgen plan` beside the measurement) and a dispatch table (JSON for
Python, a C++ header) that selects the configuration by M at run time. The others ("bench":
Conv2D, Attention) are chosen among `cusyncgen bench` results (--from-json, or a bench run here).
Everything is written to -o (default: the current directory).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from cusyncgen import files
from cusyncgen.commands.bench import check_kernel, command_line, command_note, slug
from cusyncgen.cuda import timing
from cusyncgen.errors import CusyncError
from cusyncgen.workloads.base import STREAM_ORDER, VENDOR, family  # noqa: F401  (the API)
from cusyncgen.workloads.mlp import MODELS, SIZES as SWEEP, MlpTiles, Tiles, default_tiles, tile_candidates  # noqa: F401
from cusyncgen.workloads.mlp_sm90 import Sm90Tiles
# the sm80 MLP's tune, its predictions and their readings (re-exported: the report reads them)
from cusyncgen.workloads.mlp_tune import (CALIBRATION_M, NO_TILE_SYNC, TERMS, gpu_of, match_flags,  # noqa: F401
                                          matches, matches_policy, matches_within_noise, measured_on, mlp_spec,
                                          predict, predict_from, predictions, tune_mlp)


def tiles_from_dict(d: dict):
    """The tiles of a dispatch entry: the sm80 MlpTiles, or for an sm90 choice its Sm90Tiles (tile
    config and the second GeMM's order); the sm90 MLP's decode kernel and swapped GeMM: their
    tile_cfg dict ({"kernel": "decode"}, {"kernel": "swap", "config": ...})."""
    if d.get("kernel") in ("decode", "swap"):
        return dict(d)
    if "config" in d:
        return Sm90Tiles.from_dict(d)
    return MlpTiles(Tiles(**d["g1"]), Tiles(**d["g2"]), d["swiglu_mode"])


def calibration_points(cache: dict, device: str, models=None, sweep=None) -> list:
    """cusyncgen.plan.calibrate.Point per (model, M) of a tune cache: the default tiles (whose
    kernels' occupancy the cache stores), StreamSync, PDL alone and each policy's fastest correct
    time, from the runtime of the cache's latest entries."""
    from cusyncgen.plan import calibrate
    entries = cache[device]
    runtime = next(reversed(entries)).rsplit("|", 1)[1]
    points = []
    for model in models or MODELS:
        for M in sweep or SWEEP:
            tiles = default_tiles(model, M)
            entry = entries.get(f"{model}|{M}|{tiles.label}|{runtime}")
            if not entry or "prediction" not in entry:
                continue
            measured = {}
            for r in entry["rows"]:
                if r["correct"] or r["config"] == "StreamSync":
                    f = family(r["config"])
                    measured[f] = min(measured.get(f, math.inf), r["time_us"])
            spec = mlp_spec(model, M, tiles, entry["prediction"]["occupancy"])
            points.append(calibrate.Point(model, M, spec, measured))
    return points


def calibrate_cache(cache_path: Path) -> dict:
    """Fit the timing terms on CALIBRATION_M of a tune cache and check them on the other sizes."""
    from cusyncgen.plan import calibrate, gpus
    cache = json.loads(cache_path.read_text())
    device = next(iter(cache))
    gpu = gpu_of(device)
    points = calibration_points(cache, device)
    cal = [p for p in points if p.size in CALIBRATION_M]
    held = [p for p in points if p.size not in CALIBRATION_M]
    t = calibrate.calibrate(cal, gpu.num_sms)
    out = {"device": device, "gpu": gpu.name, "timing": t.as_dict(), "stored": gpus.timing(gpu).as_dict()}
    for name, pts in (("calibration", cal), ("held_out", held)):
        for label, tt in (("model", t), ("lockstep", gpus.Timing(tile_tflops=t.tile_tflops))):
            out[f"{name}_{label}_mae"] = calibrate.mean_abs_error(calibrate.evaluate(pts, tt, gpu.num_sms))
    return out


def ran_on(row: dict) -> str | None:
    """What an sm90 bench row of the attention ran on (its tiles are the run's own choice): its GeMM
    engines and, at generation, the attention's splits and form (and, under PDL, whether the
    attention was launched in stream order); None for other rows."""
    from cusyncgen.workloads.attention_sm90 import sizing_words
    if row.get("kernel") != "sm90" or "tiles" in row:
        return None
    parts = [", ".join(row["engines"])] if row.get("engines") else []
    if "splits" in row:
        parts.append(sizing_words(row))
    return "; ".join(parts) or None


def choose_from_bench(result) -> dict:
    """The tuner's choice for Conv2D and Attention: per (model, size) of one or more `cusyncgen
    bench` results of one device and workload (with and without sync warps or spread, on the
    default and the other tile shape: `bench --tiles`), the fastest correct configuration of our
    kernels, StreamSync and PDL alone included, never a vendor row. With several results the
    baseline is the fastest StreamSync among them; 'same tiles' is over the fastest StreamSync on
    the chosen tiles."""
    results = result if isinstance(result, list) else [result]
    if len({(r["device"], r["workload"]) for r in results}) != 1:
        raise CusyncError("bench results of different devices or workloads", None)
    groups: dict = {}
    for res in results:
        for r in res["rows"]:
            if r["config"] not in VENDOR:
                groups.setdefault((r["model"], r["M"]), []).append(r)
    if not groups:
        raise CusyncError(f"no rows of our kernels in the {results[0]['workload']} bench results: nothing to "
                          "choose from", None)
    choices = []
    for (model, M), rows in sorted(groups.items()):
        base = min((r for r in rows if r["config"] in STREAM_ORDER), key=lambda r: r["time_us"], default=None)
        best = min((r for r in rows if r["correct"]), key=lambda r: r["time_us"], default=None)
        if base is None or best is None:
            raise CusyncError(f"{model} M={M}: " + ("no StreamSync row to compare with" if base is None else
                                                    "no configuration computed the reference's result"), None)
        speed = round(base["time_us"] / best["time_us"], 4)
        tiles = best.get("tiles", "default")
        same = min(r["time_us"] for r in rows if r["config"] in STREAM_ORDER and r.get("tiles", "default") == tiles)
        choices.append({"model": model, "M": M, "config": best["config"], "tiles": tiles, "tile_cfg": None,
                        "sync_warp": best.get("sync_warp") if best["config"] not in STREAM_ORDER + ("PDL",) else None,
                        "time_us": best["time_us"], "streamsync_us": base["time_us"], "speedup_vs_streamsync": speed,
                        "speedup_same_tiles": round(same / best["time_us"], 4), "predicted": None,
                        "measured_family": family(best["config"]),
                        "prediction_matches": False, "candidates": len(rows)})
        where = ran_on(best)
        if where:
            choices[-1]["ran_on"] = where
    out = {"device": results[0]["device"], "workload": results[0]["workload"], "choices": choices}
    kernels = {r.get("kernel", "sm80") for r in results}
    if len(kernels) != 1:
        raise CusyncError(f"bench results of different kernel families ({', '.join(sorted(kernels))})", None)
    if kernels != {"sm80"}:
        out["kernel"] = kernels.pop()
    return out


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def confirm_table(cs: list) -> list:
    """The re-measured choices (the sm90 MLP's `confirm`): the chosen configuration, the fastest
    stream order and cuBLAS + graph (its fastest form, named) on fresh inputs in interleaved rounds,
    and their ratios."""
    from cusyncgen.results import form_of, forms_label
    cs = [c for c in cs if c.get("confirm")]
    if not cs:
        return []
    rounds = sorted({c["confirm"].get("rounds", "") for c in cs}, key=str)
    how = timing.how_timed(c["confirm"] for c in cs)
    floors = any(c["confirm"].get("floor_us") for c in cs)   # the roofline floor, measured in the same run
    floor_head = (" floor (us) | chosen / floor |", "---|---|") if floors else ("", "")
    sets = sorted({c["confirm"].get("sets", 1) for c in cs})   # input sets replayed in turn
    fresh = ("fresh inputs" if sets == [1] else
             f"{'/'.join(map(str, sets))} sets of fresh inputs replayed in turn (no weight read twice from L2)")
    lines = ["", f"Re-measured on {fresh}, the choice, the fastest stream order and every form of cuBLAS + graph "
             f"timed in {'/'.join(map(str, rounds))} {timing.timing_words(how)} (free of the "
             "selection among the candidates; > 1: the choice is faster; cuBLAS + graph: its fastest correct "
             "form, named" + ("; the floor: max(FLOPs / peak, bytes / bandwidth), both measured in the run" if floors
                              else "") + "):", "",
             "| M | chosen (us) | fastest stream order (us) | cuBLAS + graph (us) | over the stream order "
             "| over cuBLAS + graph | all correct | cuBLAS form |" + floor_head[0],
             "|---|---|---|---|---|---|---|---|" + floor_head[1]]

    def floor_cells(f: dict, ours: float) -> str:   # the floor and ours over it, where the run measured one
        if not floors:
            return ""
        return f" {f['floor_us']:.1f} | {ours / f['floor_us']:.3f}x |" if f.get("floor_us") else " - | - |"

    for c in cs:
        f = c["confirm"]
        s = f.get("stream_us")
        ok = f"{'yes' if f.get('correct') else 'NO'} | {form_of(f)} |" + floor_cells(f, f["ours_us"])
        if c.get("fallback"):
            lines.append(f"| {c['M']} | {f['ours_us']:.1f} (the fastest stream order: {c['fallback']} re-measured slower) | "
                         f"{s:.1f} | {f['vendor_us']:.1f} | 1.000x | {f['vendor_us'] / f['ours_us']:.3f}x | {ok}")
            continue
        lines.append(f"| {c['M']} | {f['ours_us']:.1f} | {s:.1f} | {f['vendor_us']:.1f} | "
                     f"{s / f['ours_us']:.3f}x | {f['vendor_us'] / f['ours_us']:.3f}x | {ok}" if s else
                     f"| {c['M']} | {f['ours_us']:.1f} | - | {f['vendor_us']:.1f} | - | "
                     f"{f['vendor_us'] / f['ours_us']:.3f}x | {ok}")
    chained = [c for c in cs if c["confirm"].get("ours_chain_us") and c["confirm"].get("vendor_chain_us")]
    if chained:
        n = chained[0]["confirm"].get("chain", "")
        lines += ["", f"The same, back to back: {n} MLPs in one CUDA graph, the sets in turn, its time over {n} (as a "
                  "model's decode graph runs an MLP: a kernel boundary before it, not a graph launch of its own); "
                  "timed in the same rounds:", "",
                  "| M | chosen (us) | cuBLAS + graph (us) | over cuBLAS + graph | cuBLAS form |" + floor_head[0],
                  "|---|---|---|---|---|" + floor_head[1]]
        for c in chained:
            f = c["confirm"]
            lines.append(f"| {c['M']} | {f['ours_chain_us']:.1f} | {f['vendor_chain_us']:.1f} | "
                         f"{f['vendor_chain_us'] / f['ours_chain_us']:.3f}x | {f.get('vendor_chain_form', '-')} |"
                         + floor_cells(f, f["ours_chain_us"]))
    big = [c["confirm"]["vendor_us"] / c["confirm"]["ours_us"] for c in cs if c["M"] >= 128]
    if big:
        lines += ["", f"Geometric mean over M >= 128 against cuBLAS + graph: {geomean(big):.3f}x; faster at "
                  f"{sum(c['confirm']['vendor_us'] > c['confirm']['ours_us'] for c in cs)} of {len(cs)} sizes; "
                  f"cuBLAS's fastest form: {forms_label(form_of(c['confirm']) for c in cs)}."]
    return lines


def report(result: dict) -> str:
    fixed = all(c["tile_cfg"] is None for c in result["choices"])
    lines = [f"# cusyncgen tune: {result['workload']} on {result['device']}", ""] + command_note(result)
    if fixed and result.get("kernel") == "sm90":
        lines += [f"The fastest correct configuration per point among those `cusyncgen bench {result['workload']} "
                  "--kernel sm90` measured (StreamSync, PDL alone and each policy + PDL; at generation also + Chain, "
                  "one launch), never a vendor row, and its speed-up over StreamSync of the same run ('tiles': the "
                  "run's own choice of GeMM engines and, at generation, the attention's splits and form).", ""]
    elif fixed:
        lines += ["The fastest correct configuration per size among those `cusyncgen bench "
                  f"{result['workload']}` measured (one or more runs: sync warps auto/on, spread on/off, the "
                  "default and the other tile shape of `bench --tiles`; every generated policy x the orderings and R; "
                  "Conv2D: each also with split-K where the layer gets it, '/split-K'), "
                  "StreamSync and PDL alone included, and its speed-up over the fastest StreamSync of those runs "
                  "('same tiles': over the fastest StreamSync on the chosen tiles). '(sync warp)': the waiting "
                  "kernels of the chosen run had one.", ""]
    elif result.get("kernel") == "sm90":
        lines += ["The fastest correct configuration per size on the sm90 kernels: StreamSync, PDL alone, "
                  "TileSync/RowSync +PDL and +Chain (one persistent launch), each also with split-K where it "
                  "applies ('/split-K'), on every tile config the model can use; at M <= 64 also the decode kernel's "
                  "StreamSync, PDL and TileSync/RowSync +Chain ('/decode', tiles 'decode'), and the swapped GeMM's "
                  "StreamSync and PDL ('/swap', tiles 'swap <config>': the weight as CUTLASS's A operand). StreamSync "
                  "and PDL alone "
                  "are candidates, so the choice is never slower than the fastest stream order. 'speed-up' is over the "
                  "fastest StreamSync among all tile configs and kernels, 'same tiles' over StreamSync on the chosen "
                  "tiles.", ""]
    else:
        lines += ["The fastest correct configuration per size (every policy x {W, R, T, PDL} x tile shapes), "
                  "its speed-up over StreamSync (same run), and the wave model's prediction "
                  "(`cusyncgen plan` with the compiled kernels' occupancy). 'speed-up' is over the fastest StreamSync "
                  "among all candidate tiles, 'same tiles' over StreamSync with the chosen tiles (the synchronization's "
                  "own share). "
                  "A prediction without tile semaphores (PDL alone, StreamSync, or a policy at <= 1.005x) matches a "
                  "measured best without tile semaphores (StreamSync or PDL alone); 'match' also wants a gain "
                  "predicted where one was measured, "
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
            lines.append(f"| {c['M']} | {chosen} | {c.get('ran_on') or c['tiles']} | {c['time_us']:.1f} | {c['streamsync_us']:.1f} | "
                         f"{c['speedup_vs_streamsync']:.3f}x | {c.get('speedup_same_tiles', c['speedup_vs_streamsync']):.3f}x | "
                         f"{pred} | {match} | {pol} | {loose} |")
        predicted = [c for c in cs if c["predicted"]]
        loose_n = sum(bool(c.get("prediction_matches_within_noise")) for c in predicted)
        policy_n = sum(bool(c.get("prediction_policy_matches")) for c in predicted)
        stream = [c for c in cs if c.get("speedup_vs_stream_order")]
        if stream:
            lines += ["", "Over the fastest stream order (StreamSync or PDL alone, any tile config): "
                      + ", ".join(f"M={c['M']} {c['speedup_vs_stream_order']:.3f}x ({c['fastest_stream_order']})"
                                  for c in stream) + "."]
        lines += confirm_table(cs)
        lines += ["", f"Geometric-mean speed-up over StreamSync across the sweep: "
                  f"{geomean(c['speedup_vs_streamsync'] for c in cs):.3f}x"
                  + (f"; prediction matches the measured best policy family at "
                     f"{sum(c['prediction_matches'] for c in predicted)} of {len(predicted)} sizes "
                     f"(the predicted policy alone, whatever gain it predicts: {policy_n} of {len(predicted)}; "
                     f"{loose_n} of {len(predicted)} within the run's noise, on the predicted tiles)." if predicted else
                     " (no wave-model prediction for this workload)."), ""]
    lines += accuracy_report(result)
    return "\n".join(lines)


def _mae(errors) -> str:
    errors = list(errors)
    return f"{sum(errors) / len(errors):.3f}" if errors else "-"


def accuracy_report(result: dict) -> list[str]:
    """Predicted against measured speed-up per size, on the predicted (default) tiles, with the
    calibrated timing terms and without them (lockstep), split into the sizes that calibrated the
    terms and the held-out ones."""
    cs = [c for c in result["choices"]
          if c.get("predicted") and c.get("predicted_lockstep") and c.get("measured_on_predicted_tiles")]
    if not cs:
        return []
    t = result.get("timing") or {}
    lines = ["## Prediction accuracy", "",
             "The predicted speed-up over StreamSync against the measured one on the same tiles (the predicted, "
             "default tiles: the fastest correct configuration there over StreamSync there). 'model': `cusyncgen plan` "
             f"with this GPU's timing terms (cusyncgen/plan/gpus.py: launch gap {t.get('launch_gap_us', 0):g} us, "
             f"tail skew {t.get('tail_skew', 0):g}, wait cost {t.get('wait_cost_us', 0):g} us per semaphore, "
             f"tile rate {t.get('tile_tflops', 0):g} TFLOP/s per SM); 'lockstep': the same tiles with the terms off "
             "(equal block times, no launch cost: the paper's wave model). Set C: the sizes that calibrated the terms "
             f"(M = {', '.join(map(str, CALIBRATION_M))}); H: held out.", "",
             "| model | M | set | predicted | measured (same tiles) | error | lockstep | error |",
             "|---|---|---|---|---|---|---|---|"]
    err: dict = {}   # (prediction key, set) -> errors
    for c in cs:
        p, ls, m = c["predicted"], c["predicted_lockstep"], c["measured_on_predicted_tiles"]
        key = "C" if c["calibration"] else "H"
        for pk in ("predicted", "predicted_launch_gap_only", "predicted_lockstep"):
            if c.get(pk):
                err.setdefault((pk, key), []).append(abs(c[pk]["speedup"] - m["speedup"]))
        lines.append(f"| {c['model']} | {c['M']} | {key} | {p['policy']} {p['speedup']:.3f}x | {m['config']} "
                     f"{m['speedup']:.3f}x | {err['predicted', key][-1]:.3f} | {ls['policy']} {ls['speedup']:.3f}x | "
                     f"{err['predicted_lockstep', key][-1]:.3f} |")

    def maes(pk: str) -> str:
        return f"{_mae(err.get((pk, 'C'), []))} / {_mae(err.get((pk, 'H'), []))}"
    lines += ["", "Mean absolute error of the speed-up, calibration / held-out sizes: model "
              f"{maes('predicted')}; launch gap alone {maes('predicted_launch_gap_only')}; lockstep "
              f"{maes('predicted_lockstep')}.", ""]
    for model in sorted({c["model"] for c in cs}):
        mc = [c for c in cs if c["model"] == model]
        flags = {"model": [{"match": c["prediction_matches"], "policy": c["prediction_policy_matches"],
                            "noise": c["prediction_matches_within_noise"]} for c in mc],
                 "launch gap alone": [c["launch_gap_only_matches"] for c in mc if c.get("launch_gap_only_matches")],
                 "lockstep": [c["lockstep_matches"] for c in mc if c.get("lockstep_matches")],
                 "at measurement": [c["at_measurement_matches"] for c in mc if c.get("at_measurement_matches")]}
        counts = [f"{label} {'/'.join(str(sum(f[k] for f in fs)) for k in ('match', 'policy', 'noise'))}"
                  for label, fs in flags.items() if fs]
        lines.append(f"- {model} ({len(mc)} sizes), match / policy / within noise: " + "; ".join(counts))
    lines += ["", "('at measurement': the prediction the tune cache stored when the point was measured, "
              "by the model of that time.)", ""]
    return lines


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
    fig.savefig(path, dpi=110, format="png")


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


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise CusyncError(f"{path}: cannot read it ({exc.strerror or exc})", None) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise CusyncError(f"{path}: not JSON ({exc})", None) from None


def load_bench(path: Path, workload: str, kernel: str = "sm80") -> dict:
    """A `cusyncgen bench` result of `workload` (a clear error for anything else)."""
    data = _read_json(path)
    if isinstance(data, dict) and "choices" in data:
        raise CusyncError(f"{path}: a `cusyncgen tune` result, not `cusyncgen bench` results", None)
    if not (isinstance(data, dict) and isinstance(data.get("rows"), list) and isinstance(data.get("workload"), str)
            and isinstance(data.get("device"), str)):
        raise CusyncError(f"{path}: not `cusyncgen bench` results (a JSON object with device, workload and rows)", None)
    if data["workload"] != workload:
        raise CusyncError(f"{path}: holds {data['workload']} bench results, not {workload}", None)
    if str(data.get("kernel", "sm80")) != kernel:
        raise CusyncError(f"{path}: bench results of the {data.get('kernel')} kernels, not {kernel} (--kernel)", None)
    check_rows(path, "rows", data["rows"], BENCH_ROW)
    if not data["rows"]:
        raise CusyncError(f"{path}: no rows (an empty bench run): nothing to choose from", None)
    return data


# The fields of a row the tuner reads, and their kinds: of a `cusyncgen bench` result, of a tune
# cache's measurement, of its GeMMs alone (the sm90 MLP) and of its re-measured choice.
BENCH_ROW = {"model": str, "M": int, "config": str, "time_us": float, "correct": bool}
CACHE_ROW = {"config": str, "time_us": float, "correct": bool, "tiles": str}
GEMM_ROW = {"gemm": int}
CONFIRM = {"ours_us": float, "vendor_us": float}
_KIND = {str: "a string", int: "an integer", float: "a positive number", bool: "true or false", dict: "an object"}


def check_rows(path, where: str, rows, fields: dict) -> None:
    """A CusyncError naming the file, the row and the field unless ``rows`` is a list of objects
    with each of ``fields`` of its kind."""
    if not isinstance(rows, list):
        raise CusyncError(f"{path}: {where} is {_json_kind(rows)}, not a list of rows", None)
    for i, r in enumerate(rows):
        check_fields(path, f"{where}[{i}]", r, fields)


def check_fields(path, where: str, obj, fields: dict) -> None:
    if not isinstance(obj, dict):
        raise CusyncError(f"{path}: {where} is {_json_kind(obj)}, not an object", None)
    for name, kind in fields.items():
        if name not in obj:
            raise CusyncError(f"{path}: {where} has no field '{name}'", None)
        v = obj[name]
        if kind is bool:
            ok = isinstance(v, bool)
        elif kind is float:  # a time: divided by
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
        else:
            ok = isinstance(v, kind) and not isinstance(v, bool)
        if not ok:
            raise CusyncError(f"{path}: {where}: '{name}' is {_short_json(v)}, not {_KIND[kind]}", None)


def _json_kind(v) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true or false", type(None): "null"}.get(
        type(v), "a number")


def _short_json(v) -> str:
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:40] + "..."


def load_tune_cache(path: Path) -> dict:
    """A tune cache ({device: {"model|M|tiles|runtime": {"rows": [...], ...}}}; the sm90 MLP also
    keeps each point's GeMMs alone as "model|M|gemm|runtime": {"gemm": [...]} and its choice
    re-measured as "model|M|confirm:<config>:<tiles>|runtime": {"confirm": {...}}), checked."""
    data = _read_json(path)
    if isinstance(data, dict) and "rows" in data and "workload" in data:
        raise CusyncError(f"{path}: `cusyncgen bench` results of {data['workload']}, not a tune cache "
                          "(tune-cache-<device>.json, written by `cusyncgen tune mlp`)", None)
    ok = isinstance(data, dict) and data and all(
        isinstance(entries, dict) and entries and all(isinstance(k, str) and k.count("|") == 3 and isinstance(v, dict)
                                                      and ("rows" in v or "gemm" in v or "confirm" in v)
                                                      for k, v in entries.items())
        for entries in data.values())
    if not ok:
        raise CusyncError(f"{path}: not a tune cache (tune-cache-<device>.json, written by `cusyncgen tune mlp`)", None)
    for device, entries in data.items():
        for key, entry in entries.items():
            where = f"{device} '{key}'"
            if "rows" in entry:
                check_rows(path, f"{where} rows", entry["rows"], CACHE_ROW)
                if any(r.get("kernel", "sm80") == "sm80" for r in entry["rows"]):
                    # the sm80 tuner's tile shapes of the entry (dispatch tables and load_dispatch read them)
                    check_fields(path, where, entry, {"tiles": dict})
                    check_fields(path, f"{where} tiles", entry["tiles"], {"g1": dict, "g2": dict})
                if "prediction" in entry:
                    check_fields(path, f"{where} prediction", entry["prediction"], {"policy": str})
            if "gemm" in entry:
                check_rows(path, f"{where} gemm", entry["gemm"], GEMM_ROW)
            if "confirm" in entry:
                check_fields(path, f"{where} confirm", entry["confirm"], CONFIRM)
    return data


def main(argv=None) -> int:
    from cusyncgen.workloads import FAMILIES, REGISTRY, get, kernels
    tunable = {n: w for n, w in REGISTRY.items() if w.tune_mode}
    from_bench = [n for n, w in tunable.items() if w.tune_mode == "bench"]
    measured = [n for n, w in tunable.items() if w.tune_mode == "measure"]
    ap = argparse.ArgumentParser(prog="cusyncgen tune", description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=list(tunable))
    ap.add_argument("--kernel", choices=kernels(), default=None,
                    help="the kernel family to tune (default: the device's: sm90 on an sm_90 GPU where the workload "
                         "has sm90 kernels, else sm80; with --from-cache, the family the cache was measured on); "
                         "files of another than sm80 are named -<kernel>")
    ap.add_argument("--models", default=None)
    ap.add_argument("--M", default=None)
    ap.add_argument("--from-json", type=Path, nargs="+", default=None,
                    help="choose from existing `cusyncgen bench` results (one or more, e.g. with and without "
                         f"sync warps) instead of measuring (no GPU needed; {', '.join(from_bench)})")
    ap.add_argument("--from-cache", type=Path, default=None,
                    help=f"{', '.join(measured)}: report from a tune cache (tune-cache-<device>.json) without a GPU; "
                         "every point must be in it (measured with the runtime of its latest entries)")
    ap.add_argument("--calibrate", action="store_true",
                    help="with --from-cache: fit the plan's timing terms (launch gap, tail skew, wait cost, tile "
                         "rate) on every other size of the cache and print them with the held-out error (for "
                         "cusyncgen/plan/gpus.py TIMINGS); writes nothing")
    ap.add_argument("--iters", type=int, default=25)
    ap.add_argument("-o", "--out-dir", type=Path, default=Path("."),
                    help="where the report, dispatch table and tune cache go (default: the current directory)")
    args = ap.parse_args(argv)
    command = command_line("cusyncgen tune", argv)
    check_kernel(ap, args)
    cls = get(args.workload, args.kernel) if args.kernel else tunable[args.workload]
    if args.calibrate and args.from_cache is None:
        ap.error("--calibrate needs --from-cache")
    try:
        sizes = [int(m) for m in args.M.split(",")] if args.M else None
    except ValueError:
        ap.error(f"--M: comma-separated integers, not {args.M!r}")
    models = [m for m in args.models.split(",") if m] if args.models else None

    def check_models(cls):
        if models and set(models) - set(cls.models):
            other = "" if cls.kernel == "sm80" else f" on its {cls.kernel} kernels; --kernel sm80 has the others"
            ap.error(f"--models: {', '.join(sorted(set(models) - set(cls.models)))} not among {cls.name}'s "
                     f"({', '.join(cls.models)}){other}")
    if args.kernel:
        check_models(cls)
    if not cls.tune_mode:
        ap.error(f"{cls.name} on its {cls.kernel} kernels has nothing to tune: `cusyncgen bench {cls.name} --kernel "
                 f"{cls.kernel}` measures every configuration against the vendor")
    if args.from_json is not None:
        check_models(cls)
        if cls.tune_mode != "bench":
            ap.error(f"--from-json is for {', '.join(from_bench)} (the {cls.name} tune also varies tile shapes: "
                     "it measures them, or reports from --from-cache)")
    if args.from_cache is not None and cls.tune_mode != "measure":
        ap.error(f"--from-cache is for {', '.join(measured)} ({cls.name}: --from-json)")
    try:
        if not args.calibrate:
            files.check_directory(args.out_dir)
        return _main(args, cls, models, sizes, check_models, command)
    except CusyncError as exc:
        print(f"cusyncgen tune: error: {exc.message}", file=sys.stderr)
        return 1


def _main(args, cls, models, sizes, check_models, command: str) -> int:
    """main() once the command line is read: every failure a CusyncError."""
    from cusyncgen.workloads import default_kernel, get
    if args.from_json is not None:
        res = choose_from_bench([load_bench(p, cls.name, cls.kernel) for p in args.from_json])
        return _write({"command": command, **res}, args.out_dir, slug(res["device"]), inputs=args.from_json)
    if args.from_cache is not None:
        cache = load_tune_cache(args.from_cache)
        if not args.kernel:
            cls = get(args.workload, cache_kernel(cache))
        check_models(cls)
        device = next(iter(cache))
        try:
            if args.calibrate:
                if cls.kernel != "sm80":
                    raise CusyncError("--calibrate: the plan's timing terms are fitted on sm80 tune caches only", None)
                print(json.dumps(calibrate_cache(args.from_cache), indent=1))
                return 0
            res = cls.tune(models, sizes, args.iters, args.from_cache, progress=False, device=device)
        except KeyError as exc:  # a field load_tune_cache does not check
            raise CusyncError(f"{args.from_cache}: an entry has no field {exc.args[0]!r} (a tune cache of another "
                              "version?)", None) from None
        except (TypeError, ValueError, StopIteration) as exc:
            raise CusyncError(f"{args.from_cache}: not a tune cache this version reads ({exc})", None) from None
        return _write({"command": command, **res}, args.out_dir, slug(device), inputs=[args.from_cache])
    from cusyncgen.cuda import available
    ok, why = available()
    if not ok:
        raise CusyncError(why, None)
    from cusyncgen.cuda import driver
    if not args.kernel:
        cls = get(args.workload, default_kernel(args.workload, driver.arch()))
    check_models(cls)
    dev = slug(driver.device_name())
    files.make_directory(args.out_dir)
    if cls.tune_mode == "measure":
        res = cls.tune(models, sizes, args.iters, args.out_dir / f"tune-cache-{dev}{kernel_suffix(cls.kernel)}.json")
    else:
        res = choose_from_bench(cls.bench(models=models, sizes=sizes, iters=args.iters))
    return _write({"command": command, **res}, args.out_dir, dev)

def kernel_suffix(kernel: str) -> str:
    """The file-name suffix of a kernel family's results (none for the default, sm80)."""
    return "" if kernel == "sm80" else f"-{kernel}"


def cache_kernel(cache: dict) -> str:
    """The kernel family a tune cache was measured on (its rows' "kernel"; sm80 where absent)."""
    for entries in cache.values():
        for entry in entries.values():
            for r in entry.get("rows", []) + entry.get("gemm", []):
                return r.get("kernel", "sm80")
    return "sm80"


def _write(res: dict, out_dir: Path, dev: str, inputs=()) -> int:
    """The report, the dispatch table (JSON, C++ header) and the plot, all written or none; never
    over one of ``inputs``."""
    from cusyncgen.commands.bench import plot_png
    stem = out_dir / f"tune-{res['workload']}-{dev}{kernel_suffix(res.get('kernel', 'sm80'))}"
    text = report(res)
    out = {Path(f"{stem}.json"): json.dumps(res, indent=1) + "\n", Path(f"{stem}.md"): text + "\n",
           Path(f"{stem}.h"): dispatch_header(res)}
    png = plot_png(plot, res)
    if png is not None:
        out[Path(f"{stem}.png")] = png
    files.refuse_overwrite(out, inputs)
    files.make_directory(out_dir)
    files.write_files(out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
