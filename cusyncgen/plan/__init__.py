"""cusyncgen plan: wave model (Table I), wave-level simulation of policies (Table IV),
launch-ordering safety and the W/T optimization decisions.  CPU only."""

from .gpus import GPU, GPUS, TIMINGS, Timing, get_gpu, occupancy, timing
from .model import ChainSpec, DepSpec, GridSpec, PolicySpec, build_chain
from .planner import make_plan
from .simulate import Chain, SimResult, Stage, critical_path, simulate, stream_sync_time
from .waves import WaveStats, fits_in_two_waves, wave_stats

__all__ = [
    "GPU", "GPUS", "TIMINGS", "Timing", "get_gpu", "occupancy", "timing", "ChainSpec", "DepSpec", "GridSpec", "PolicySpec",
    "build_chain", "make_plan", "Chain", "SimResult", "Stage", "critical_path", "simulate",
    "stream_sync_time", "WaveStats", "fits_in_two_waves", "wave_stats",
]
