"""The planner's timing terms (launch gap, tail skew, wait cost) and their calibration on the
H200 measurements (cusyncgen/plan/calibrate.py, gpus.TIMINGS)."""

import json
from pathlib import Path

import pytest

from cusyncgen.plan import GPUS, TIMINGS, Timing, build_chain, make_plan, simulate, stream_sync_time, timing
from cusyncgen.plan.cli import main as plan_main
from cusyncgen.plan.paper import mlp_spec, reproduce_table4
from cusyncgen.plan.simulate import skew_factor

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "benchmarks" / "results" / "nvidia-h200" / "tune-cache-nvidia-h200.json"
H200 = GPUS["h200"]


def _one_wave(t1=50.0, t2=30.0):
    """Two GeMMs of 8 tiles each (one row): one wave each on any of these GPUs."""
    return mlp_spec((1, 8, 1), (1, 8, 1), 1, 1, tile_time1=t1, tile_time2=t2)


# ---- (a) the new terms make an early-resident consumer faster by the calibrated amount ----------

def test_one_wave_chain_gains_exactly_the_calibrated_launch_gap():
    t = timing(H200)
    assert t.launch_gap_us > 0
    plan = make_plan(_one_wave(), H200, time_unit="us", launch_gap=t.launch_gap_us)
    assert plan["streamsync"]["time"] == pytest.approx(80 + t.launch_gap_us)
    times = {v["policy"]: v["time"] for v in plan["variants"]}
    assert times["RowSync"] == pytest.approx(80) and times["TileSync"] == pytest.approx(80)
    # PDL alone saves the same gap and waits on no semaphore: it wins the tie (no wave is saved)
    assert plan["pdl_alone"]["time"] == pytest.approx(80)
    rec = plan["recommended"]
    assert (rec["policy"], rec["launch"]) == ("PDL", "pdl")
    assert rec["speedup"] == pytest.approx((80 + t.launch_gap_us) / 80)


def test_saving_a_wave_beats_pdl_alone():
    # 1.5 waves each on 132 SMs: the consumer's first row fills the producer's half-empty last wave
    spec = mlp_spec((2, 99, 1), (2, 99, 1), 1, 1, tile_time1=10.0, tile_time2=10.0)
    plan = make_plan(spec, GPUS["h100"], time_unit="us", launch_gap=1.0)
    rec = plan["recommended"]
    assert rec["policy"] in ("TileSync", "RowSync") and rec["speedup"] > plan["pdl_alone"]["speedup"]


def test_stream_gap_delays_only_the_next_kernel():
    chain = build_chain(_one_wave(2.0, 1.0), [0], False)
    r = stream_sync_time(chain, 80, launch_gap=0.25)
    assert r.stage_end == {"g1": 2.0, "g2": 3.25} and r.time == 3.25
    assert simulate(chain, 80, "ordered", launch_gap=0.25).time == 3.0   # no boundary with semaphores


def test_skew_fills_the_producers_last_wave():
    # 2.9 waves each (383 tiles on 132 SMs): lockstep, nothing is saved (ceil(5.8) = 6 = 3 + 3);
    # with skew the producer's SMs free up one by one and the consumer's first rows take them
    spec = mlp_spec((383, 1, 1), (383, 1, 1), 1, 1)
    ss0 = stream_sync_time(build_chain(spec, [0], False), 132).time
    tile0 = simulate(build_chain(spec, [0], False), 132).time
    assert tile0 == ss0 == 6
    ss = stream_sync_time(build_chain(spec, [0], False), 132, skew=0.1).time
    tile = simulate(build_chain(spec, [0], False), 132, skew=0.1).time
    assert tile < ss - 0.05


def test_skew_is_deterministic_and_centred():
    fs = [skew_factor(1, t, 0.1) for t in range(132)]
    assert fs == [skew_factor(1, t, 0.1) for t in range(132)]
    assert all(0.9 <= f < 1.1 for f in fs)
    assert sum(fs) / len(fs) == pytest.approx(1.0, abs=0.005)
    assert max(fs) > 1.098 and min(fs) < 0.902      # one wave spans the whole range


def test_wait_cost_in_us_separates_tile_and_row_sync():
    # 8 semaphores waited by TileSync's consumer blocks, one by RowSync's
    plan = make_plan(_one_wave(), H200, time_unit="us", wait_cost=0.4, launch_gap=1.0)
    times = {v["policy"]: v["time"] for v in plan["variants"]}
    assert times["TileSync"] == pytest.approx(80 + 8 * 0.4) and times["RowSync"] == pytest.approx(80 + 0.4)


# ---- (b) zero terms: the lockstep model, bit for bit ---------------------------------------------

def test_zero_terms_are_the_lockstep_model():
    for spec in (_one_wave(), mlp_spec((1, 48, 4), (1, 96, 2), 2, 2), mlp_spec((8, 24, 1), (8, 48, 1), 1, 1)):
        for gpu in (GPUS["v100"], H200):
            a = make_plan(spec, gpu)
            b = make_plan(spec, gpu, launch_gap=0.0, skew=0.0, wait_cost=0.0)
            assert a == b and a["pdl_alone"] is None
            assert a["recommended"]["policy"] != "PDL"


def test_skew_zero_keeps_every_simulated_time():
    spec = mlp_spec((2, 24, 2), (2, 48, 1), 1, 1)
    for choice in ([0], [1]):
        chain = build_chain(spec, choice, False)
        assert simulate(chain, 80, skew=0.0).as_dict() == simulate(chain, 80).as_dict()
    assert stream_sync_time(build_chain(spec, [0], False), 80, 0.0, 0.0).as_dict() == \
        stream_sync_time(build_chain(spec, [0], False), 80).as_dict()


def test_paper_gpus_have_no_timing_terms():
    assert timing(GPUS["v100"]) == Timing() and timing(GPUS["a100"]) == Timing()
    rows = reproduce_table4()
    assert [r["sim_streamsync"] for r in rows] == [r["ss_whole_waves"] for r in rows]


def test_pdl_alone_needs_sm90():
    assert make_plan(_one_wave(), GPUS["v100"], launch_gap=1.0)["pdl_alone"] is None
    rec = make_plan(_one_wave(), GPUS["v100"], launch_gap=1.0)["recommended"]
    assert rec["policy"] == "RowSync" and rec["speedup"] > 1     # the policy saves the gap there


def test_timing_lookup_by_device_name():
    from cusyncgen.plan.gpus import GPU, gpu_key
    assert gpu_key("NVIDIA H200") == "h200" and gpu_key("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_key("Test GPU") is None
    assert timing(GPU("NVIDIA H200", "sm_90", 132, 2048, 32, 65536, 228 * 1024, 1024)) == TIMINGS["h200"]


# ---- CLI -------------------------------------------------------------------------------------------

def test_cli_calibrated(capsys):
    args = [str(ROOT / "examples" / "mlp_gpt3.dep"), "-D", "B=1", "-D", "S=128", "--gpu", "h200",
            "--occupancy", "g1=1", "--occupancy", "g2=2", "--tile-time", "g1=100", "--tile-time", "g2=60"]
    assert plan_main(args + ["--calibrated"]) == 0
    out = capsys.readouterr().out
    assert f"launch gap {TIMINGS['h200'].launch_gap_us:g}" in out and "PDL alone" in out
    assert "Recommended: PDL" in out
    assert plan_main(args + ["--calibrated", "--gpu", "v100"]) == 1
    assert "timing terms were measured on h200 only" in capsys.readouterr().err
    assert plan_main(args + ["--skew", "1.5"]) == 2
    assert "--skew" in capsys.readouterr().err


# ---- (c) the calibration reproduces the stored constants from the stored measurements ------------

@pytest.fixture(scope="module")
def h200_points():
    if not CACHE.is_file():
        pytest.skip("no stored H200 tune cache")
    from cusyncgen.commands import tune
    cache = json.loads(CACHE.read_text())
    return tune.calibration_points(cache, next(iter(cache)))


def test_calibration_reproduces_the_stored_h200_constants(h200_points):
    from cusyncgen.commands.tune import CALIBRATION_M
    from cusyncgen.plan import calibrate
    cal = [p for p in h200_points if p.size in CALIBRATION_M]
    assert len(cal) == 15 and len(h200_points) == 27
    assert calibrate.calibrate(cal, H200.num_sms) == TIMINGS["h200"]


def test_calibrated_terms_beat_lockstep(h200_points):
    from cusyncgen.commands.tune import CALIBRATION_M
    from cusyncgen.plan import calibrate
    t, lock = TIMINGS["h200"], Timing(tile_tflops=TIMINGS["h200"].tile_tflops)
    for subset in ([p for p in h200_points if p.size in CALIBRATION_M],
                   [p for p in h200_points if p.size not in CALIBRATION_M]):
        mae = calibrate.mean_abs_error(calibrate.evaluate(subset, t, H200.num_sms))
        mae_lock = calibrate.mean_abs_error(calibrate.evaluate(subset, lock, H200.num_sms))
        assert mae < mae_lock


def test_calibration_predicts_what_make_plan_recommends(h200_points):
    # the calibration's fast path and the planner (tune.predict_from) agree
    from cusyncgen.commands import tune
    from cusyncgen.workloads.mlp import default_tiles
    from cusyncgen.plan import calibrate
    cache = json.loads(CACHE.read_text())["NVIDIA H200"]
    runtime = next(reversed(cache)).rsplit("|", 1)[1]
    for p in [q for q in h200_points if (q.name, q.size) in {("gpt3", 1024), ("llama-ep", 512), ("llama", 64)}]:
        tiles = default_tiles(p.name, p.size)
        occ = cache[f"{p.name}|{p.size}|{tiles.label}|{runtime}"]["prediction"]["occupancy"]
        planned = tune.predict_from(p.name, p.size, tiles, occ, H200)
        (row,) = calibrate.evaluate([p], TIMINGS["h200"], H200.num_sms)
        assert row["policy"] == planned["policy"] and row["speedup"] == pytest.approx(planned["speedup"])
