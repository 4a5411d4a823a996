"""The planner's input: grids, dependencies and candidate policies as plain data.

:class:`ChainSpec` is what the planner needs from a program, independent of the compiler's IR
(``adapter.py`` builds one from a ``ProgramIR``; tests and ``paper.py`` build them by hand).
Tiles are linear indices ``x + X*(y + Y*z)`` (the runtime's row-major order, x fastest).
:func:`build_chain` turns a spec plus one choice of policy per dependency and of tile order into a
:class:`~cusyncgen.plan.simulate.Chain` for the simulator.
"""

from __future__ import annotations

import itertools
from array import array
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .simulate import Chain, Stage, Steps


class Ragged(Sequence):
    """Per consumer tile, a list of ints (its waited producer tiles), stored flat:
    ``flat[offsets[c]:offsets[c + 1]]`` (int64 arrays). ``r[c]`` is that list."""

    def __init__(self, offsets, flat):
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.flat = np.asarray(flat, dtype=np.int64)

    @classmethod
    def of(cls, lists) -> "Ragged":
        """``lists`` (a Ragged, or a sequence of sequences of ints) as a Ragged."""
        if isinstance(lists, Ragged):
            return lists
        lengths = [len(t) for t in lists]
        flat = [p for t in lists for p in t]
        return cls(np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]),
                   np.array(flat, dtype=np.int64))

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, c: int) -> list:
        if not -len(self) <= c < len(self):
            raise IndexError(c)
        c %= len(self)
        return self.flat[self.offsets[c]:self.offsets[c + 1]].tolist()

    def new_runs(self, sem) -> np.ndarray:
        """Per waited tile: does its semaphore (``sem[tile]``) differ from the previous one of
        the same consumer tile (the first of each consumer tile always does)?"""
        s = np.asarray(sem)[self.flat]
        new = np.ones(len(s), dtype=bool)
        new[1:] = s[1:] != s[:-1]
        new[self.offsets[:-1][self.lengths > 0]] = True
        return new


@dataclass
class GridSpec:
    name: str
    extent: tuple[int, int, int]
    occupancy: int = 1
    tile_time: float = 1.0
    order: Sequence[int] | None = None   # generated order: order[ticket] = linear tile; None = row-major

    @property
    def num_tiles(self) -> int:
        x, y, z = self.extent
        return x * y * z

    def linear(self, tile: Sequence[int]) -> int:
        X, Y, _ = self.extent
        t = tuple(tile) + (0,) * (3 - len(tile))
        return t[0] + X * (t[1] + Y * t[2])

    def tile(self, linear: int) -> tuple[int, int, int]:
        X, Y, _ = self.extent
        return (linear % X, (linear // X) % Y, linear // (X * Y))

    @property
    def has_custom_order(self) -> bool:
        return self.order is not None and list(self.order) != list(range(self.num_tiles))


@dataclass
class PolicySpec:
    name: str
    sem: Sequence[int]     # per producer tile (linear): its semaphore
    value: Sequence[int]   # per producer tile (linear): the value of its semaphore

    @property
    def num_sems(self) -> int:
        return len(set(self.sem))


@dataclass
class DepSpec:
    name: str
    consumer: str
    producer: str
    waits: Sequence[Sequence[int]]   # per consumer tile (linear): producer tiles (linear), in wait order (or a Ragged)
    policies: list[PolicySpec] = field(default_factory=list)


@dataclass
class ChainSpec:
    grids: list[GridSpec]          # in launch order (producers before consumers)
    deps: list[DepSpec]
    source: str = ""

    def grid(self, name: str) -> GridSpec:
        for g in self.grids:
            if g.name == name:
                return g
        raise KeyError(name)

    def choices(self) -> list[tuple[int, ...]]:
        """Every combination of one policy per dependency."""
        return list(itertools.product(*[range(len(d.policies)) for d in self.deps]))

    def choice_name(self, choice: Sequence[int]) -> str:
        if len(self.deps) == 1:
            return self.deps[0].policies[choice[0]].name
        return "+".join(f"{d.name}:{d.policies[i].name}" for d, i in zip(self.deps, choice))

    def total_waits(self, choice: Sequence[int]) -> int:
        """Semaphore waits all consumer blocks perform (consecutive waits on one semaphore count once)."""
        return sum(self.total_waits_of(di, i) for di, i in enumerate(choice))

    def total_waits_of(self, dep: int, policy: int) -> int:
        """:meth:`total_waits` of dependency ``dep`` under its ``policy``-th policy."""
        d = self.deps[dep]
        return int(Ragged.of(d.waits).new_runs(d.policies[policy].sem).sum())


def build_chain(spec: ChainSpec, choice: Sequence[int], custom_order: bool, model: str = "kstep",
                wait_cost: float = 0.0) -> Chain:
    """The simulator's chain for one policy per dependency.  ``custom_order``: grids with a
    generated order use it (else every grid is row-major).  ``model``: ``kstep`` (one step per
    waited producer tile, the wait before the load of each K-step) or ``block`` (the whole tile
    starts once all its semaphores are posted).  ``wait_cost``: time added per wait on a new
    semaphore (consecutive waits on the same semaphore return at once in the runtime)."""
    if model not in ("kstep", "block"):
        raise ValueError(f"unknown model {model!r}")
    posts: dict[str, list[list]] = {g.name: [[] for _ in range(g.num_tiles)] for g in spec.grids}
    sem_values: dict = {}
    keys: list = []   # semaphore id -> (dep index, sem): the chain's semaphores are these ids
    syncs: dict = {}  # consumer grid -> [(consumer tiles, step positions, ids)], steps per tile
    for di, (d, pi) in enumerate(zip(spec.deps, choice)):
        pol = d.policies[pi]
        prod = spec.grid(d.producer)
        sems, inv = np.unique(np.asarray(pol.sem[:prod.num_tiles]), return_inverse=True)
        ids = len(keys) + inv.ravel()
        last = np.zeros(len(sems), dtype=np.int64)   # a semaphore's value: its last tile's
        np.maximum.at(last, inv.ravel(), np.arange(len(inv.ravel())))
        value = np.asarray(pol.value)[last].tolist()
        for t, k in enumerate(ids.tolist()):
            posts[d.producer][t].append(k)
        for j, v in enumerate(value):
            sem_values[len(keys) + j] = v
        keys += [(di, s) for s in sems.tolist()]
        # one step per waited tile; a step waits on its tile's semaphore unless the step before
        # it (of the same consumer tile and dep) waited on the same one
        w = Ragged.of(d.waits)
        pieces, nsteps = syncs.setdefault(d.consumer, ([], np.zeros(len(w), dtype=np.int64)))
        lengths = w.lengths
        new = w.new_runs(ids)
        tile = np.repeat(np.arange(len(w)), lengths)
        pos = np.arange(len(w.flat)) - np.repeat(w.offsets[:-1], lengths) + nsteps[tile]
        nsteps += lengths
        pieces.append((tile[new], pos[new], ids[w.flat[new]]))
    stages = []
    for g in spec.grids:
        w = None
        if g.name in syncs:
            w = _steps(syncs[g.name], keys, model)
            if not any(w):
                w = None
        order = list(g.order) if (custom_order and g.order is not None) else None
        stages.append(Stage(g.name, g.num_tiles, g.occupancy, g.tile_time, order, posts[g.name],
                            w, wait_cost))
    return Chain(stages, sem_values)


def _steps(sync: tuple, keys: list, model: str) -> list:
    """Per consumer tile, its Steps (or () with none) from the sync points of its deps."""
    pieces, nsteps = sync
    if len(pieces) == 1:   # one dep: its sync points are by tile, then by position already
        tile, pos, ids = pieces[0]
    else:                  # by tile; within one, by dep, then by position
        tile = np.concatenate([p[0] for p in pieces])
        order = np.argsort(tile, kind="stable")
        tile = tile[order]
        pos = np.concatenate([p[1] for p in pieces])[order]
        ids = np.concatenate([p[2] for p in pieces])[order]
    bounds = np.searchsorted(tile, np.arange(len(nsteps) + 1)).tolist()
    n = nsteps.tolist()
    if model == "block":   # every semaphore in one step, in the order of their (dep, sem) text
        rank = {k: r for r, k in enumerate(sorted(range(len(keys)), key=lambda k: repr(keys[k])))}
        ids = ids.tolist()
        return [Steps(1, (0,), (sorted(set(ids[a:b]), key=rank.__getitem__),)) if n[c] else ()
                for c, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    pos = _int_array(pos)
    ids = _int_array(ids)
    return [Steps(n[c], pos, ids, a, b, single=True) if n[c] else ()
            for c, (a, b) in enumerate(zip(bounds, bounds[1:]))]


def _int_array(a: np.ndarray) -> array:
    """``a`` as an array.array of int64: indexes to Python ints, 8 bytes an element."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return out
