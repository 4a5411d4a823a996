"""Timing on the GPU: CUDA graphs of one pipeline run, replayed and timed with events.

A graph per input set; replays rotate through the sets so that the L2 cache does not keep one
set's activations warm. The median over replays is reported.
"""
from __future__ import annotations

import statistics
from typing import Callable, NamedTuple, Sequence

from cusyncgen.cuda.lazy import cupy


def capture(run: Callable[[cupy.cuda.Stream], None], stream: cupy.cuda.Stream):
    """Capture one call of run(stream) (which may fork to other streams and join back)."""
    run(stream)  # outside capture first: module load, lazy attributes
    stream.synchronize()
    stream.begin_capture()
    try:
        run(stream)
    finally:
        graph = stream.end_capture()
    return graph


def time_graphs(graphs: Sequence, stream: cupy.cuda.Stream, iters: int = 30, warmup: int = 5) -> list[float]:
    """Per-replay times in microseconds."""
    for i in range(warmup):
        graphs[i % len(graphs)].launch(stream)
    starts = [cupy.cuda.Event() for _ in range(iters)]
    ends = [cupy.cuda.Event() for _ in range(iters)]
    for i in range(iters):
        starts[i].record(stream)
        graphs[i % len(graphs)].launch(stream)
        ends[i].record(stream)
    stream.synchronize()
    return [cupy.cuda.get_elapsed_time(s, e) * 1000.0 for s, e in zip(starts, ends)]


# How time_in_rounds times, recorded in the results it measures ("timing"): results without it are
# timed one thing at a time, a block of its own replays each.
INTERLEAVED = "interleaved"
# The rounds of an interleaved timing by default: at least this many, a multiple of the things timed
# (rounds_for), so that each is first in as many rounds as every other.
ROUNDS = 6


def how_timed(records) -> str | None:
    """INTERLEAVED where every record (a result's dict) says so in its "timing", else None."""
    return INTERLEAVED if all(r.get("timing") == INTERLEAVED for r in records) else None


def timing_words(how: str | None) -> str:
    """How a result's rounds are timed (its "timing"), for its report."""
    if how == INTERLEAVED:
        return "interleaved rounds (one replay of each in turn, repeated; the order rotated from round to round)"
    return "rounds, the order rotated from round to round"


class Replay(NamedTuple):
    """One thing time_launches times: `launches` enqueue one replay of it on a stream, one per input
    set (a CUDA graph's launch each); its time counts `per` units (a graph of `per` MLPs back to
    back: its time over per)."""
    launches: tuple
    per: int = 1


def input_sets(seq: Sequence, replays: dict) -> list[int]:
    """The input set of each launch of seq (keys of replays): the n-th takes its key's set n mod (its
    sets), so two launches in a row read different sets wherever the keys have as many (none reads
    weights the launch before it left in L2)."""
    return [n % len(replays[k].launches) for n, k in enumerate(seq)]


def time_launches(seq: Sequence, replays: dict, stream: cupy.cuda.Stream) -> list[float]:
    """The time (us) of each launch of seq (keys of replays, in that order, on input_sets' sets),
    every launch queued between two events on `stream` before one synchronize: the replays run back
    to back, none holds a launch's CPU latency."""
    starts = [cupy.cuda.Event() for _ in seq]
    ends = [cupy.cuda.Event() for _ in seq]
    for k, i, s, e in zip(seq, input_sets(seq, replays), starts, ends):
        s.record(stream)
        replays[k].launches[i](stream)
        e.record(stream)
    stream.synchronize()
    return [cupy.cuda.get_elapsed_time(s, e) * 1000.0 for s, e in zip(starts, ends)]


def keep_busy(graph, stream: cupy.cuda.Stream, seconds: float) -> None:
    """Replay `graph` for about `seconds` of wall time (clocks up, caches and TLBs warm)."""
    import time
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            graph.launch(stream)
        stream.synchronize()


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def settle_baseline(rows: list[dict], last_us: float, last_correct: bool = True) -> float:
    """StreamSync (rows[0]) was timed first and again last: keep the faster as the baseline, record
    the difference (the run's noise) and every row's speed-up over it. Returns the baseline (us)."""
    first = rows[0]["time_us"]
    rows[0]["time_us"] = round(min(first, last_us), 2)
    rows[0]["correct"] = rows[0]["correct"] and last_correct
    spread = abs(first - last_us) / min(first, last_us)
    base = rows[0]["time_us"]
    for r in rows:
        r["speedup_vs_streamsync"] = round(base / r["time_us"], 4)
        r["baseline_spread"] = round(spread, 4)
    return base


def save_partial(workload: str, rows: list[dict], **extra) -> None:
    """With CUSYNCGEN_PARTIAL set, write the rows measured so far there (a crash or a hang later
    in a bench still leaves them)."""
    import json
    import os

    path = os.environ.get("CUSYNCGEN_PARTIAL")
    if path:
        from cusyncgen import files
        from cusyncgen.cuda import driver
        files.write_file(path, json.dumps({"device": driver.device_name(), "workload": workload, "rows": rows,
                                           **extra}))


def rounds_for(timed: int) -> int:
    """The rounds of an interleaved timing of `timed` things: the smallest multiple of `timed` that is
    at least ROUNDS."""
    return -(-ROUNDS // timed) * timed


def rotations(keys: list, rounds: int) -> list[list]:
    """The order of `keys` in each round: rotated by one from round to round."""
    return [keys[r % len(keys):] + keys[:r % len(keys)] for r in range(rounds)]


def time_in_rounds(replays: dict, stream, iters: int, rounds: int | None = None, measure=None) -> tuple[dict, int]:
    """{key: Replay} timed in `rounds` rounds (default rounds_for(len(replays))), interleaved: a round
    is `iters` steps, each step one replay of every key in the round's order (rotated from round to
    round), each replay between two events. So every key runs under the same clocks: under the
    power cap the SM clock swings between about 1.4 and 2.0 GHz within a few hundred milliseconds,
    and a key timed in a block of its own replays after a lighter phase (a slow vendor form) reads
    up to 12% faster than the same kernels after a heavy one (docs/design.md, "Timing under the
    power cap"). measure(seq, replays, stream) -> the us of each launch of seq (time_launches; a
    test passes its own). Returns ({key: the median over the rounds of each round's median replay,
    over its per}, the number of rounds)."""
    measure = measure or time_launches
    keys = list(replays)
    rounds = rounds or rounds_for(len(keys))
    measure([k for k in keys for _ in range(2)], replays, stream)   # warm-up: graph uploads, first launches
    got: dict = {k: [] for k in keys}
    for order in rotations(keys, rounds):
        seq = order * iters
        us = measure(seq, replays, stream)
        for k in keys:
            got[k].append(statistics.median(t for s, t in zip(seq, us) if s == k) / replays[k].per)
    return {k: float(statistics.median(v)) for k, v in got.items()}, rounds
