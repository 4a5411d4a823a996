"""The paper's wave arithmetic (Table I): blocks per wave, waves, utilization.

A *wave* is one round of thread blocks that fills every SM to its occupancy:
``blocks_per_wave = num_sms * occupancy``.  A grid of ``n`` blocks takes ``n / blocks_per_wave``
waves (fractional) or ``ceil`` of that (whole waves, each as long as one block when all blocks of a
kernel take the same time).  Two utilizations:

- ``utilization``: the average over the whole waves, ``n / (ceil_waves * blocks_per_wave)``.  This
  is the paper's Table I column (192 blocks, 160 per wave: 1.2 waves, 60 %).
- ``last_wave_utilization``: the share of slots the final wave uses (192 of 160: 32/160 = 20 %).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class WaveStats:
    blocks: int
    blocks_per_wave: int
    waves: float
    full_waves: int
    utilization: float
    last_wave_utilization: float

    def as_dict(self) -> dict:
        return {
            "blocks": self.blocks, "blocks_per_wave": self.blocks_per_wave,
            "waves": self.waves, "full_waves": self.full_waves,
            "utilization": self.utilization, "last_wave_utilization": self.last_wave_utilization,
        }


def wave_stats(blocks: int, num_sms: int, occupancy: int) -> WaveStats:
    if blocks <= 0:
        raise ValueError("a grid needs at least one thread block")
    if num_sms <= 0 or occupancy <= 0:
        raise ValueError("SM count and occupancy must be positive")
    per_wave = num_sms * occupancy
    waves = blocks / per_wave
    full = math.ceil(blocks / per_wave)
    last = blocks - (full - 1) * per_wave
    return WaveStats(blocks, per_wave, waves, full, blocks / (full * per_wave), last / per_wave)


def fits_in_two_waves(*stats: WaveStats) -> bool:
    """The paper's condition for optimizations W and T (Sec. V-C): every kernel of the chain
    executes in at most two waves (``waves <= 2``)."""
    return all(s.waves <= 2 for s in stats)
