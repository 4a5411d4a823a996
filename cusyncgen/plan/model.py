"""The planner's input: grids, dependencies and candidate policies as plain data.

:class:`ChainSpec` is what the planner needs from a program, independent of the compiler's IR
(``adapter.py`` builds one from a ``ProgramIR``; tests and ``paper.py`` build them by hand).
Tiles are linear indices ``x + X*(y + Y*z)`` (the runtime's row-major order, x fastest).
:func:`build_chain` turns a spec plus one choice of policy per dependency and of tile order into a
:class:`~cusyncgen.plan.simulate.Chain` for the simulator.
"""

from __future__ import annotations

import dataclasses
import itertools
from array import array
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .simulate import Chain, Stage, Steps, StepTable

#: listed tiles per block of the array work (new runs, sync points): bounds its temporaries
CHUNK = 1 << 20


class Ragged(Sequence):
    """Per consumer tile, a list of ints (its waited producer tiles), stored flat:
    ``flat[offsets[c]:offsets[c + 1]]`` (int64 offsets; ``flat`` int64, or int32 where the adapter
    knows the tiles fit). ``r[c]`` is that list."""

    def __init__(self, offsets, flat):
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.flat = flat if isinstance(flat, np.ndarray) and flat.dtype in (np.int32, np.int64) \
            else np.asarray(flat, dtype=np.int64)

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

    def blocks(self, chunk: int | None = None):
        """Consumer tiles in blocks ``[start, stop)`` of about ``chunk`` (default CHUNK) listed ints
        each (at least one tile a block)."""
        chunk = CHUNK if chunk is None else chunk
        n, start = len(self), 0
        while start < n:
            stop = int(np.searchsorted(self.offsets, self.offsets[start] + chunk, side="right")) - 1
            stop = min(n, max(stop, start + 1))
            yield start, stop
            start = stop

    def new_runs(self, sem, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Per listed tile of consumer tiles ``start .. stop - 1`` (default all): does its
        semaphore (``sem[tile]``) differ from the previous one of the same consumer tile (the
        first of each consumer tile always does)?"""
        stop = len(self) if stop is None else stop
        a = self.offsets[start]
        s = np.asarray(sem)[self.flat[a:self.offsets[stop]]]
        new = np.ones(len(s), dtype=bool)
        new[1:] = s[1:] != s[:-1]
        heads = self.offsets[start:stop] - a
        new[heads[self.lengths[start:stop] > 0]] = True
        return new

    def count_runs(self, sem) -> int:
        """``new_runs(sem).sum()``, in blocks."""
        sem = np.asarray(sem)
        return sum(int(self.new_runs(sem, a, b).sum()) for a, b in self.blocks())


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
        return Ragged.of(d.waits).count_runs(d.policies[policy].sem)


def build_chain(spec: ChainSpec, choice: Sequence[int], custom_order: bool, model: str = "kstep",
                wait_cost: float = 0.0) -> Chain:
    """The simulator's chain for one policy per dependency.  ``custom_order``: grids with a
    generated order use it (else every grid is row-major).  ``model``: ``kstep`` (one step per
    waited producer tile, the wait before the load of each K-step) or ``block`` (the whole tile
    starts once all its semaphores are posted).  ``wait_cost``: time added per wait on a new
    semaphore (consecutive waits on the same semaphore return at once in the runtime).
    The semaphores are the ints ``0 ..`` (``Chain.int_keys``), dependency by dependency; the
    waits are built in blocks of about CHUNK listed tiles and kept as sync points only."""
    if model not in ("kstep", "block"):
        raise ValueError(f"unknown model {model!r}")
    posts: dict[str, list | None] = {g.name: None for g in spec.grids}
    sem_values: dict = {}
    names: list = []  # per dep, its semaphores' (dep index, sem): the chain's semaphores are 0, 1, ...
    nkeys = 0
    syncs: dict = {}  # consumer grid -> [(waits, semaphore id per producer tile)], in dep order
    for di, (d, pi) in enumerate(zip(spec.deps, choice)):
        pol = d.policies[pi]
        prod = spec.grid(d.producer)
        sems, inv = np.unique(np.asarray(pol.sem[:prod.num_tiles]), return_inverse=True)
        inv = inv.ravel()
        ids = nkeys + inv
        last = np.zeros(len(sems), dtype=np.int64)   # a semaphore's value: its last tile's
        np.maximum.at(last, inv, np.arange(len(inv)))
        value = np.asarray(pol.value)[last].tolist()
        if posts[d.producer] is None:
            posts[d.producer] = ids.reshape(-1, 1).tolist()
        else:
            for p, k in zip(posts[d.producer], ids.tolist()):
                p.append(k)
        sem_values.update(zip(range(nkeys, nkeys + len(value)), value))
        names.append(_Names(di, sems))
        nkeys += len(sems)
        syncs.setdefault(d.consumer, []).append((Ragged.of(d.waits), ids))
    stages = []
    for g in spec.grids:
        w = None
        if g.name in syncs:
            w = _step_table(syncs[g.name], nkeys)
            if w is not None and model == "block":
                w = _block_steps(w, [name for n in names for name in n])
        order = list(g.order) if (custom_order and g.order is not None) else None
        stages.append(Stage(g.name, g.num_tiles, g.occupancy, g.tile_time, order, posts[g.name],
                            w, wait_cost))
    return Chain(stages, sem_values, int_keys=True)


def with_orders(spec: ChainSpec, chain: Chain, custom_order: bool) -> Chain:
    """``chain`` (from build_chain) with the grids' generated orders (``custom_order``) or
    row-major: what build_chain gives for the other choice of order, without building again."""
    stages = [dataclasses.replace(st, order=list(g.order) if (custom_order and g.order is not None) else None)
              for st, g in zip(chain.stages, spec.grids)]
    out = Chain(stages, chain.sem_values, int_keys=chain.int_keys)
    out._sem_array = getattr(chain, "_sem_array", None)
    return out


def _step_table(deps: list, num_keys: int) -> StepTable | None:
    """The StepTable of one consumer stage from its deps' (waits, semaphore id per producer tile):
    one step per waited tile, dep after dep; a step waits on its tile's semaphore unless the step
    before it (of the same consumer tile and dep) waited on the same one. None: no steps."""
    nsteps = sum(w.lengths for w, _ in deps)
    if not nsteps.any():
        return None
    steps = Ragged(np.concatenate([[0], np.cumsum(nsteps)]), np.zeros(0, dtype=np.int64))
    key_code, pos_code = ("i" if num_keys < 2**31 else "q"), ("i" if int(nsteps.max()) < 2**31 else "q")
    keys, pos = array(key_code), array(pos_code)
    counts = np.zeros(len(nsteps), dtype=np.int64)
    dense = True   # so far every step is a sync point: positions need not be stored
    for start, stop in steps.blocks():
        pieces = []
        shift = np.zeros(stop - start, dtype=np.int64)   # steps of the earlier deps
        for w, ids in deps:
            heads = w.offsets[start:stop + 1] - w.offsets[start]
            s = ids[w.flat[w.offsets[start]:w.offsets[stop]]]   # each listed tile's semaphore
            new = np.ones(len(s), dtype=bool)                    # as Ragged.new_runs
            new[1:] = s[1:] != s[:-1]
            new[heads[:-1][heads[1:] > heads[:-1]]] = True
            if new.all():   # every listed tile a sync point (as TileSync): all of them, in order
                idx, k = np.arange(len(s)), s
                tile = np.repeat(np.arange(stop - start), np.diff(heads))
            else:
                idx = np.flatnonzero(new)
                k = s[idx]
                tile = np.searchsorted(heads, idx, side="right") - 1
            pieces.append((tile, idx - heads[tile] + shift[tile], k))
            shift += np.diff(heads)
        if len(pieces) == 1:   # one dep: its sync points are by tile, then by position already
            tile, p, k = pieces[0]
        else:                  # by tile; within one, by dep, then by position
            tile = np.concatenate([q[0] for q in pieces])
            order = np.argsort(tile, kind="stable")
            tile = tile[order]
            p = np.concatenate([q[1] for q in pieces])[order]
            k = np.concatenate([q[2] for q in pieces])[order]
        counts[start:stop] = np.bincount(tile, minlength=stop - start)
        keys.frombytes(k.astype(np.int32 if key_code == "i" else np.int64).tobytes())
        if dense and len(k) < int(nsteps[start:stop].sum()):   # the earlier tiles' positions
            dense = False
            before = int(steps.offsets[start])
            pos.frombytes((np.arange(before) - np.repeat(steps.offsets[:start], nsteps[:start]))
                          .astype(np.int32 if pos_code == "i" else np.int64).tobytes())
        if not dense:
            pos.frombytes(p.astype(np.int32 if pos_code == "i" else np.int64).tobytes())
    bounds = array("q", np.concatenate([[0], np.cumsum(counts)]).tobytes())
    return StepTable(array("q", nsteps.astype(np.int64).tobytes()), bounds, None if dense else pos, keys)


class _Names(Sequence):
    """(dep index, sem) of each of one dep's semaphores, made when read (the block model)."""

    def __init__(self, di: int, sems: np.ndarray):
        self.di, self.sems = di, sems

    def __len__(self) -> int:
        return len(self.sems)

    def __getitem__(self, j):
        return (self.di, int(self.sems[j]))


def _block_steps(table: StepTable, keys: list) -> list:
    """The block model: per consumer tile one step on all its semaphores, in the order of their
    (dep, sem) text (or () with none)."""
    rank = {k: r for r, k in enumerate(sorted(range(len(keys)), key=lambda k: repr(keys[k])))}
    ids, b, n = table.keys, table.bounds, table.n
    return [Steps(1, (0,), (sorted(set(ids[b[c]:b[c + 1]]), key=rank.__getitem__),)) if n[c] else ()
            for c in range(len(n))]
