"""The per-block timeline summary (cusyncgen.commands.timeline), on synthetic block records: which SM
held how many blocks at once, spans and waits, in microseconds from the chain's first block."""
from cusyncgen.commands import timeline


def _b(sm, start, end, wait=0):
    return {"sm": sm, "start": start, "end": end, "wait": wait, "x": 0, "y": 0}


def test_concurrency_per_sm_counts_overlap_not_totals():
    blocks = [_b(0, 0, 10), _b(0, 10, 20), _b(1, 0, 10), _b(1, 5, 15), _b(1, 6, 8)]
    assert timeline.max_concurrent_per_sm(blocks) == 3  # SM 1 holds three at t=6..8
    assert timeline.max_concurrent_per_sm(blocks[:2]) == 1  # back to back on SM 0: one at a time


def test_concurrency_after_the_wait_ignores_the_waiting_part():
    # two consumer blocks on one SM: waiting together, computing one after the other
    blocks = [_b(3, 0, 20, wait=10), _b(3, 0, 30, wait=20)]
    assert timeline.max_concurrent_per_sm(blocks) == 2
    assert timeline.max_concurrent_per_sm(blocks, "wait") == 1


def test_summary_times_are_from_the_first_block_in_microseconds():
    stages = {"gemm1": [_b(0, 1000, 41000), _b(1, 1000, 40000)],
              "gemm2": [_b(2, 2000, 72000, wait=43000), _b(2, 3000, 70000, wait=42000)]}
    s = timeline.summarize(stages)
    assert s["span_us"] == 71.0
    assert s["gemm1"]["sms_used"] == 2 and s["gemm1"]["median_after_wait_us"] is None
    g2 = s["gemm2"]
    assert (g2["blocks"], g2["sms_used"], g2["max_blocks_per_sm"]) == (2, 1, 2)
    assert g2["first_start_us"] == 1.0 and g2["last_wait_us"] == 42.0 and g2["last_end_us"] == 71.0
    assert g2["median_after_wait_us"] == (29000 + 28000) / 2 / 1e3
    assert "gemm2: 2 blocks on 1 SMs" in timeline.describe(
        {"model": "m", "M": 1, "tiles": "t", "sync_warp": True, "configs": {"c": {"summary": s, "rel_err": 0.0}}})
