"""A bench point's measurement (workloads.mlp._measure, shared by the sm80, sm90, decode and swapped
MLPs) without a GPU: every configuration checked on a poisoned output, then all of them timed in the
same interleaved rounds. NumPy stands in for CuPy, and the timing's graph capture and events are
replaced by a record of what would have run."""
from __future__ import annotations

import types

import numpy as np
import pytest

from cusyncgen.cuda import lazy, timing
from cusyncgen.workloads import mlp as W


class FakeMLP:
    """Three configurations: StreamSync, a faster PDL and a policy that writes nothing (its output
    stays poisoned)."""
    model_name, M, kernel = "gpt3", 8, "sm90"
    tiles = types.SimpleNamespace(label="t")

    def configs(self):
        return [types.SimpleNamespace(name=n) for n in ("StreamSync", "PDL", "TileSync+PDL")]

    def buffers(self, seed):
        rs = np.random.RandomState(seed)
        return rs.standard_normal((8, 4)), rs.standard_normal((4, 4)), rs.standard_normal((4, 4))

    def outputs(self):
        return np.zeros((8, 4)), np.zeros((8, 4))

    def reference(self, x, w1, w2):
        return (x @ w1) @ w2

    def run(self, stream, cfg, x, w1, w2, y, z):
        if cfg.name != "TileSync+PDL":
            z[...] = self.reference(x, w1, w2)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(W, "cupy", np)
    monkeypatch.setattr(lazy, "cupy", np)
    graphs = []

    def capture(run, stream):
        g = types.SimpleNamespace(launch=lambda s: None, n=len(graphs))
        graphs.append(g)
        return g
    monkeypatch.setattr(timing, "capture", capture)
    monkeypatch.setattr(timing, "keep_busy", lambda graph, stream, seconds: None)
    seqs = []
    us = {"StreamSync": 100.0, "PDL": 90.0, "TileSync+PDL": 80.0}

    def time_launches(seq, replays, stream):
        seqs.append(list(seq))
        return [us[k] * replays[k].per for k in seq]
    monkeypatch.setattr(timing, "time_launches", time_launches)
    return seqs


def test_every_configuration_of_a_point_is_timed_in_the_same_interleaved_rounds(no_gpu):
    rows, *_ = W._measure(FakeMLP(), 30, types.SimpleNamespace(synchronize=lambda: None), seed=0, configs=None)
    seqs = no_gpu
    names = ["StreamSync", "PDL", "TileSync+PDL"]
    assert len(seqs) == 1 + W.MEASURE_ROUNDS   # a warm-up, then the rounds
    for r, seq in enumerate(seqs[1:]):   # each step one replay of every configuration, the order rotated
        order = names[r % 3:] + names[:r % 3]
        assert seq == order * (30 // W.MEASURE_ROUNDS)
    by = {r["config"]: r for r in rows}
    assert [r["config"] for r in rows] == names
    assert by["PDL"]["time_us"] == 90.0 and by["PDL"]["speedup_vs_streamsync"] == round(100 / 90, 4)
    assert by["StreamSync"]["correct"] and by["PDL"]["correct"]
    assert not by["TileSync+PDL"]["correct"]   # it left the poisoned output: wrong, however fast
    assert all(r["timing"] == timing.INTERLEAVED for r in rows)
