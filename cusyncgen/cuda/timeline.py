"""The per-block records of a CUSYNC_TIMELINE build (4 globaltimer words per block: start, last
wait returned, end, packed SM and tile) read back and summarized per stage: what the workloads'
`timelines` return, and what `python -m cusyncgen.commands.timeline` prints and plots."""
from __future__ import annotations

import statistics
from collections import Counter


def block_records(stage) -> list[dict]:
    """The latest launch's records of `stage` (a Stage with a timeline buffer)."""
    raw = stage.timeline.get().reshape(-1, 4)
    out = []
    for start, wait, end, packed in raw.tolist():
        if start == 0:
            continue
        out.append({"start": int(start), "wait": int(wait), "end": int(end), "sm": int(packed) & 0xFFFF,
                    "x": (int(packed) >> 16) & 0xFFFFFF, "y": int(packed) >> 40})
    return out


def max_concurrent_per_sm(blocks: list[dict], lo_key: str = "start") -> int:
    """The most blocks of the list that were resident on one SM at one time."""
    best = 0
    by_sm: dict[int, list[tuple[int, int]]] = {}
    for b in blocks:
        by_sm.setdefault(b["sm"], []).append((b[lo_key] or b["start"], b["end"]))
    for spans in by_sm.values():
        events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
        live = 0
        for _, d in events:
            live += d
            best = max(best, live)
    return best


def summarize(stages: dict[str, list[dict]]) -> dict:
    """Per-stage statistics, times in microseconds from the chain's first block start."""
    t0 = min(b["start"] for bs in stages.values() for b in bs)
    out = {"span_us": (max(b["end"] for bs in stages.values() for b in bs) - t0) / 1e3}
    for name, bs in stages.items():
        waited = [b for b in bs if b["wait"]]
        out[name] = {
            "blocks": len(bs),
            "sms_used": len({b["sm"] for b in bs}),
            "max_blocks_per_sm": max(Counter(b["sm"] for b in bs).values()),
            "max_concurrent_per_sm": max_concurrent_per_sm(bs),
            "max_concurrent_after_wait": max_concurrent_per_sm(waited, "wait") if waited else None,
            "first_start_us": (min(b["start"] for b in bs) - t0) / 1e3,
            "last_start_us": (max(b["start"] for b in bs) - t0) / 1e3,
            "last_end_us": (max(b["end"] for b in bs) - t0) / 1e3,
            "median_block_us": statistics.median(b["end"] - b["start"] for b in bs) / 1e3,
            "median_after_wait_us": statistics.median(b["end"] - b["wait"] for b in waited) / 1e3 if waited else None,
            "last_wait_us": (max(b["wait"] for b in waited) - t0) / 1e3 if waited else None,
        }
    return out
