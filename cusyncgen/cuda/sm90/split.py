"""Split-K of one sm90 GeMM and the model that picks it (docs/sm90.md, "Split-K"): Split, the
static persistent schedule's makespan, auto_splits."""
from __future__ import annotations

from typing import NamedTuple


class Split(NamedTuple):
    """Split-K of one GeMM: the tiles from `start` on (in the GeMM's order) are each `S` work items
    over k-ranges of their K; the tiles before `start` are one item each. start = 0: every tile split
    (classic split-K); start a multiple of the grid: whole waves of tiles run unsplit and only the
    last, partial wave is split (a split-K tail)."""

    S: int = 1
    start: int = 0

    def __str__(self) -> str:
        return str(self.S) if self.S == 1 or self.start == 0 else f"{self.S}@{self.start}"

    def items(self, tiles: int) -> int:
        """The work items of a GeMM of `tiles` tiles under this split."""
        return tiles if self.S == 1 else self.start + (tiles - self.start) * self.S


NO_SPLIT = Split()

# The split-K cost model of auto_splits, in k-tile times: what a work item costs beyond its k-tiles
# (prologue, epilogue, the pipeline's fill: latency, which at small M is many k-tiles' worth), and
# what a split adds (its fp32 partial stored, its share of the last split's reduction). Fitted to
# the H100 probe (sm90-mlp-probe log): gpt3 M=1's first GeMM, 48 tiles of 192 k-tiles, is fastest
# with 2 splits (faster than 4 or 11); llama-ep's first at M=1, 43 tiles of 128 k-tiles, with 3;
# gpt3's second, 96 tiles of 96 k-tiles, unsplit.
ITEM_COST_K = 8
SPLIT_COST_K = 8


def split_makespan(tiles: int, k_tiles: int, split: Split, sms: int = 132) -> float:
    """auto_splits' model of a GeMM's time, in k-tile times: the static persistent schedule hands
    CTA b the items b, b + G, ...; the unsplit tiles fill whole rounds, the split tiles' items the
    rest."""
    G = min(sms, tiles) if split.S == 1 else sms
    whole = split.start if split.S > 1 else tiles
    t = -(-whole // G) * (k_tiles + ITEM_COST_K) if whole else 0.0
    if split.S > 1:
        rest = tiles - split.start
        t += -(-(rest * split.S) // G) * (-(-k_tiles // split.S) + ITEM_COST_K + SPLIT_COST_K)
    return t


def auto_splits(tiles: int, k_tiles: int, sms: int = 132, min_k_tiles: int = 8, max_splits: int = 16) -> Split:
    """Split-K of a GeMM of `tiles` tiles: no split, or the tiles past the last whole wave (start =
    w * sms, w = 0 .. tiles // sms) split S ways (2..max_splits, each split at least min_k_tiles
    k-tiles), whichever split_makespan finds fastest; a split must gain 3% over the next simpler
    choice (fewer splits, fewer split tiles)."""
    best = NO_SPLIT
    best_t = split_makespan(tiles, k_tiles, best, sms)
    for w in range(tiles // sms, -1, -1):   # the fewest split tiles first
        start = w * sms
        if start >= tiles:
            continue
        for S in range(2, max_splits + 1):
            if k_tiles // S < min_k_tiles:
                break
            sp = Split(S, start)
            t = split_makespan(tiles, k_tiles, sp, sms)
            if t < best_t * 0.97:
                best, best_t = sp, t
    return best


def as_split(splits) -> Split:
    """A Split from a Split, (S, start) or an int S (every tile split)."""
    if isinstance(splits, Split):
        return splits
    if isinstance(splits, tuple):
        return Split(*(int(v) for v in splits))
    return Split(int(splits))


def has_split(splits) -> bool:
    """Does a sequence of Splits (one per GeMM of a chain) split any GeMM?"""
    return any(as_split(s).S > 1 for s in splits)
