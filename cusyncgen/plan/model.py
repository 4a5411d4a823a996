"""The planner's input: grids, dependencies and candidate policies as plain data.

:class:`ChainSpec` is what the planner needs from a program, independent of the compiler's IR
(``adapter.py`` builds one from a ``ProgramIR``; tests and ``paper.py`` build them by hand).
Tiles are linear indices ``x + X*(y + Y*z)`` (the runtime's row-major order, x fastest).
:func:`build_chain` turns a spec plus one choice of policy per dependency and of tile order into a
:class:`~cusyncgen.plan.simulate.Chain` for the simulator.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

from .simulate import Chain, Stage


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
    waits: Sequence[Sequence[int]]   # per consumer tile (linear): producer tiles (linear), in wait order
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
        n = 0
        for d, i in zip(self.deps, choice):
            sem = d.policies[i].sem
            for tiles in d.waits:
                prev = None
                for p in tiles:
                    if sem[p] != prev:
                        n += 1
                        prev = sem[p]
        return n


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
    waits: dict[str, list[list]] = {g.name: [[] for _ in range(g.num_tiles)] for g in spec.grids}
    sem_values: dict = {}
    for di, (d, pi) in enumerate(zip(spec.deps, choice)):
        pol = d.policies[pi]
        prod = spec.grid(d.producer)
        for t in range(prod.num_tiles):
            key = (di, pol.sem[t])
            posts[d.producer][t].append(key)
            sem_values[key] = pol.value[t]
        for c, tiles in enumerate(d.waits):
            steps = waits[d.consumer][c]
            prev = None
            for p in tiles:
                key = (di, pol.sem[p])
                if key != prev:
                    steps.append([key])
                    prev = key
                else:
                    steps.append([])
    stages = []
    for g in spec.grids:
        w = waits[g.name]
        if model == "block":
            w = [[sorted({k for step in steps for k in step}, key=repr)] if steps else [] for steps in w]
        order = list(g.order) if (custom_order and g.order is not None) else None
        stages.append(Stage(g.name, g.num_tiles, g.occupancy, g.tile_time, order, posts[g.name],
                            w if any(w) else None, wait_cost))
    return Chain(stages, sem_values)
