"""Wave-level discrete-event simulation of a chain of tile kernels.

Input model (plain data, independent of the compiler's IR)
----------------------------------------------------------
A :class:`Chain` is a list of :class:`Stage` s in launch order plus the semaphores between them.

- A stage has ``num_tiles`` thread blocks (one tile each), an ``occupancy`` (blocks per SM), a
  ``tile_time`` (the time one block takes when it never waits), an optional processing ``order``
  (``order[ticket]`` is the tile the ``ticket``-th dispatched block computes, the runtime's
  ``stage.start()`` with a custom order; ``None`` = the block computes its own index, row-major)
  and, per tile, the semaphores it posts (``posts[tile]``, +1 each when the tile is done) and the
  semaphores it waits on (``waits[tile]``: a list of *steps*; before step ``i`` the block waits until
  every semaphore of ``waits[tile][i]`` has reached its value; each step takes
  ``tile_time / len(steps)``, plus ``wait_cost`` if it waits on a semaphore).  A GeMM consumer
  whose main loop waits for the producer tile of each K-step before loading it has one step per producer tile (the ``kstep`` model); the ``block`` model
  puts every semaphore into one step, so the whole tile runs once all dependencies are posted.
- ``sem_values[key]`` is the value a semaphore must reach (the number of producer tiles posting it).

Machine model
-------------
``num_sms`` SMs.  A block of a stage with occupancy ``o`` takes ``1/o`` of an SM (integer units of
``lcm`` of all occupancies).  Blocks are dispatched strictly in queue order (head-of-line: a block
that does not fit blocks the ones after it), each to the SM with the most free capacity (lowest
index on ties), as soon as capacity frees up.  A dispatched block holds its share of the SM until
it finishes, including while it waits on a semaphore.  The queue order is the launch ordering:

- ``ordered``: all blocks of stage 0, then of stage 1, ...  (what the wait-kernel and PDL enforce:
  every producer block is dispatched before any consumer block);
- ``reversed``: the last stage's blocks first (the worst case without an ordering mechanism: the
  consumer kernel is scheduled before its producer);
- ``stream``: ``ordered``, and a stage's blocks are dispatched only after every block of the
  previous stage has finished (StreamSync), plus ``launch_gap``: the time between one kernel's
  last block and the next kernel's first on one stream (PDL alone is ``stream`` with no gap: its
  consumer grid is resident early but waits for the whole producer grid);
- ``persistent``: ONE persistent launch runs the whole chain (the sm90 "<Policy>+Chain";
  :func:`simulate_persistent`): ``G = num_sms * occupancy`` slots (the smallest occupancy of the
  stages), slot ``s`` takes the ``ordered`` queue's items ``s, s+G, s+2G, ...`` one after the
  other (every producer tile's item before any consumer tile's), each item waiting on its
  semaphores as usual while holding its slot.  A slot starts its next item as soon as its
  previous one ends, whatever the other slots do.  It cannot deadlock where every wait is on an
  earlier stage: such an item waits only on items that come earlier in every slot's sequence.

Timing terms (default 0: the lockstep wave model of the paper's tables)
-----------------------------------------------------------------------
- ``launch_gap``: see ``stream`` above.  Only StreamSync pays it: with tile semaphores the consumer
  kernel is launched before its producer ends (wait-kernel, PDL or W), so no boundary is on the path.
- ``skew``: blocks of one kernel do not take equal times (clocks, memory, the SM they land on), so
  the SMs of one wave free up gradually.  Block ``tile`` of stage ``i`` takes
  ``tile_time * (1 + skew * u)``, ``u`` in [-1, 1) from a fixed low-discrepancy sequence of
  ``(i, tile)`` (:func:`skew_factor`: deterministic, mean ~0 over any run of tiles), the same in
  every launch mode.  Under StreamSync the consumer starts after the *slowest* producer block;
  an early-resident consumer starts on each SM as it frees up.

Deadlock: when no block is running and some block is still waiting or undispatched, nothing can
ever change again; :func:`simulate` returns ``deadlock=True`` with the state instead of looping.

At scale (what the planner does per variant, in the same result to the bit)
---------------------------------------------------------------------------
- Chains whose semaphores are the ints ``0 .. len(sem_values) - 1`` (``Chain.int_keys``, as
  ``build_chain`` makes them) with long runs of sync points (TileSync over a whole row) check the
  runs in numpy slices, not one by one.
- ``prefix``: simulations of chains that differ only in their semaphores (one per policy choice)
  share their start. Until the first block of the second stage is dispatched (``ordered``,
  ``stream``) or started (``persistent``) only the first stage runs, and its blocks wait on
  nothing, so the state then (events, SMs, time) is the same for every policy; it is kept in the
  dict and reused, with each chain's own posts of the first stage's finished tiles counted.
- ``unlimited``: every block is dispatched at 0, so the blocks that wait on nothing end in a known
  order; they are merged from one sorted list instead of a heap of every block. Where the
  blocks that wait come after those that do not and post nothing (one dependency),
  :func:`critical_path` takes the same end time from arrays (:func:`_critical_path_np`).
- Once every semaphore is posted and no block waits, what is left can no longer depend on the
  order of equal-time events: with one occupancy (``ordered``, ``stream``) or per slot
  (``persistent``) the rest is counted by time, not block by block (:func:`_drain`,
  :func:`_drain_persistent`).
"""

from __future__ import annotations

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_right
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Hashable, Sequence

import numpy as np

Sem = Hashable

LAUNCH_MODES = ("ordered", "reversed", "stream", "persistent")

#: sync points a block checks one by one before the rest of its run is checked in numpy slices
_SCAN = 16


class Steps:
    """A block's steps, compactly: ``n`` steps, of which the ones at positions ``pos[lo:hi]``
    (increasing) wait on the semaphores ``keys[lo:hi]`` (a sequence of semaphores each, or with
    ``single`` one semaphore each); the others wait on none. ``pos`` and ``keys`` may be lists
    shared by many tiles; ``pos`` None: every step waits (sync point ``j`` is step ``j - lo``).
    ``np_keys``: ``keys`` as a numpy array (``single``, integer semaphores), for scanning long
    runs. Iterates as the list of steps (a tuple of semaphores each) that it stands for."""

    __slots__ = ("n", "pos", "keys", "lo", "hi", "single", "np_keys")

    def __init__(self, n: int, pos: Sequence[int] | None, keys: Sequence, lo: int = 0, hi: int | None = None,
                 single: bool = False, np_keys=None):
        self.n, self.pos, self.keys, self.lo, self.single, self.np_keys = n, pos, keys, lo, single, np_keys
        self.hi = len(keys) if hi is None else hi

    @classmethod
    def of(cls, steps) -> "Steps":
        """``steps`` (a Steps, or a list of steps: sequences of semaphores) as a Steps."""
        if isinstance(steps, Steps):
            return steps
        if not len(steps):
            return NO_STEPS
        pos = [i for i, step in enumerate(steps) if len(step)]
        return cls(len(steps), pos, [steps[i] for i in pos])

    def position(self, j: int) -> int:
        """The step of sync point ``j`` (``lo <= j < hi``)."""
        return j - self.lo if self.pos is None else self.pos[j]

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        keys = self.keys[self.lo:self.hi]
        pos = range(self.hi - self.lo) if self.pos is None else self.pos[self.lo:self.hi]
        sync = dict(zip(pos, [(k,) for k in keys] if self.single else keys))
        for i in range(self.n):
            yield tuple(sync.get(i, ()))

    def __eq__(self, other) -> bool:
        return isinstance(other, Steps) and list(self) == list(other)


NO_STEPS = Steps(0, (), ())   # a block that waits on nothing


class StepTable(Sequence):
    """Every tile's Steps of one stage from shared arrays (one semaphore per sync point, as
    ``build_chain`` makes them): tile ``c`` has ``n[c]`` steps and the sync points
    ``bounds[c]:bounds[c + 1]`` of ``pos`` (None: every step is one) and ``keys``. ``array.array``
    (indexing gives Python ints, 4 or 8 bytes an element). ``table[c]`` is tile c's Steps (or ()
    with none); the simulator reads the arrays without making one."""

    def __init__(self, n, bounds, pos, keys):
        self.n, self.bounds, self.pos, self.keys = n, bounds, pos, keys
        np_keys = None
        if len(keys):
            np_keys = np.frombuffer(keys, dtype=np.int32 if keys.typecode == "i" else np.int64)
        self.shared = Steps(0, pos, keys, 0, 0, single=True, np_keys=np_keys)   # the arrays, for _Block

    def __len__(self) -> int:
        return len(self.n)

    def __getitem__(self, c: int):
        n = self.n[c]
        if not n:
            return ()
        sh = self.shared
        return Steps(n, sh.pos, sh.keys, self.bounds[c], self.bounds[c + 1], single=True, np_keys=sh.np_keys)


@dataclass
class Stage:
    name: str
    num_tiles: int
    occupancy: int = 1
    tile_time: float = 1.0
    order: Sequence[int] | None = None
    posts: Sequence[Sequence[Sem]] | None = None
    waits: Sequence[Sequence[Sequence[Sem]]] | None = None   # per tile: its steps (or a Steps)
    wait_cost: float = 0.0   # time each step with a semaphore adds (the load of the semaphore)

    def tile_of_ticket(self, ticket: int) -> int:
        return ticket if self.order is None else self.order[ticket]

    def steps(self, tile: int) -> Sequence[Sequence[Sem]]:
        if self.waits is None:
            return ()
        return self.waits[tile]

    def posts_of(self, tile: int) -> Sequence[Sem]:
        if self.posts is None:
            return ()
        return self.posts[tile]


@dataclass
class Chain:
    stages: list[Stage]
    sem_values: dict = field(default_factory=dict)
    int_keys: bool = False   # the semaphores are the ints 0 .. len(sem_values) - 1

    def sem_array(self) -> np.ndarray:
        """``int_keys``: the values as an int64 array indexed by semaphore (made once; the chain
        is not changed after it is simulated)."""
        if getattr(self, "_sem_array", None) is None or len(self._sem_array) != len(self.sem_values):
            K = len(self.sem_values)
            a = np.zeros(K, dtype=np.int64)
            a[np.fromiter(self.sem_values.keys(), dtype=np.int64, count=K)] = \
                np.fromiter(self.sem_values.values(), dtype=np.int64, count=K)
            self._sem_array = a
        return self._sem_array

    def validate(self) -> None:
        names = set()
        posted: dict = {}
        for s in self.stages:
            if s.name in names:
                raise ValueError(f"duplicate stage name {s.name!r}")
            names.add(s.name)
            if s.num_tiles <= 0:
                raise ValueError(f"stage {s.name}: needs at least one tile")
            if s.occupancy <= 0:
                raise ValueError(f"stage {s.name}: occupancy must be >= 1")
            if not (s.tile_time > 0) or math.isinf(s.tile_time):
                raise ValueError(f"stage {s.name}: tile time must be positive")
            if s.wait_cost < 0:
                raise ValueError(f"stage {s.name}: wait cost must be >= 0")
            if s.order is not None and sorted(s.order) != list(range(s.num_tiles)):
                raise ValueError(f"stage {s.name}: order is not a permutation of its tiles")
            for t in range(s.num_tiles):
                for k in s.posts_of(t):
                    posted[k] = posted.get(k, 0) + 1
        if self.int_keys and (sorted(self.sem_values) != list(range(len(self.sem_values)))
                              or any(k not in self.sem_values for k in posted)):
            raise ValueError("int_keys: the semaphores (posted ones too) must be 0 .. len(sem_values) - 1")
        for k, v in self.sem_values.items():
            if posted.get(k, 0) < v:
                raise ValueError(f"semaphore {k!r} needs {v} posts but only {posted.get(k, 0)} tiles post it")
        for s in self.stages:
            for t in range(s.num_tiles):
                for step in s.steps(t):
                    for k in step:
                        if k not in self.sem_values:
                            raise ValueError(f"stage {s.name} tile {t} waits on unknown semaphore {k!r}")


@dataclass
class SimResult:
    time: float
    deadlock: bool = False
    finished_blocks: int = 0
    total_blocks: int = 0
    waiting_blocks: int = 0
    undispatched_blocks: int = 0
    stage_end: dict = field(default_factory=dict)
    wait_time: float = 0.0      # block-time spent holding a slot while waiting on semaphores
    note: str = ""

    def as_dict(self) -> dict:
        return {
            "time": self.time, "deadlock": self.deadlock, "finished_blocks": self.finished_blocks,
            "total_blocks": self.total_blocks, "waiting_blocks": self.waiting_blocks,
            "undispatched_blocks": self.undispatched_blocks, "stage_end": dict(self.stage_end),
            "wait_time": self.wait_time, "note": self.note,
        }


class _Block:
    """A dispatched block with steps: ``steps`` holds the arrays (``pos``, ``keys``, ``single``,
    ``np_keys``; a Steps, or a StepTable's shared one), ``n``, ``lo``, ``hi`` its own part."""

    __slots__ = ("stage", "tile", "steps", "n", "lo", "hi", "step", "sp", "units", "sm", "since", "dur")

    def __init__(self, stage: int, tile: int, steps, n: int, lo: int, hi: int, units: int, sm: int, dur: float):
        self.stage, self.tile, self.steps, self.n, self.lo, self.hi = stage, tile, steps, n, lo, hi
        self.step, self.sp = 0, lo   # the next step; the first sync point at or after it
        self.units, self.sm, self.since, self.dur = units, sm, 0.0, dur


_PHI = (5 ** 0.5 - 1) / 2    # golden-ratio and sqrt(2) fractions: the additive recurrence of the skew
_SQRT2 = 2 ** 0.5 - 1


def skew_factor(stage: int, tile: int, skew: float) -> float:
    """A block's time relative to its stage's ``tile_time``: ``1 + skew * u`` with ``u`` in [-1, 1)
    from the additive recurrence ``frac(tile * phi + stage * sqrt2)``, so any run of consecutive
    tiles (one wave) spreads over the whole range with mean ~1, deterministically (no random
    numbers: the same chain gives the same times)."""
    if skew == 0:
        return 1.0
    u = ((tile + 1) * _PHI + stage * _SQRT2) % 1.0
    return 1.0 + skew * (2.0 * u - 1.0)


def _first_unposted(np_keys, unposted, j: int, m: int) -> int:
    """The first sync point in [j, m) whose semaphore is not posted (``unposted[key]``), else m:
    numpy over slices growing 4x."""
    n = 64
    while j < m:
        e = min(m, j + n)
        seg = unposted[np_keys[j:e]]
        i = int(seg.argmax())
        if seg[i]:
            return j + i
        j, n = e, n * 4
    return m


def _need(chain: Chain, posts=None, finished=(), check: bool = False) -> tuple:
    """(need, unposted, open): the posts each semaphore still needs (<= 0: posted) once the
    ``finished`` tiles of a stage posting ``posts`` have posted (``check``: their posts to
    unknown semaphores ignored); per semaphore whether it is not yet posted; how many are not.
    Integer semaphores (``Chain.int_keys``): a list and a numpy bool array, counted in numpy;
    else a dict and None."""
    if chain.int_keys:
        K = len(chain.sem_values)
        need = chain.sem_array().copy()
        if posts is not None and len(finished):
            flat = np.fromiter(itertools.chain.from_iterable(map(posts.__getitem__, finished)), dtype=np.int64)
            if check:
                flat = flat[(flat >= 0) & (flat < K)]
            need -= np.bincount(flat, minlength=K)
        unposted = need > 0
        return need.tolist(), unposted, int(unposted.sum())
    need = dict(chain.sem_values)
    if posts is not None:
        for t in finished:
            for k in posts[t]:
                if not check or k in need:
                    need[k] -= 1
    return need, None, sum(1 for v in need.values() if v > 0)


def _same_order(a, b) -> bool:
    return a is b or (a is not None and b is not None and len(a) == len(b) and list(a) == list(b))


@dataclass
class _Prefix:
    """The state of a simulation when its first stage-two block is dispatched or started."""

    order: Sequence[int] | None   # the first stage's order (the prefix depends on it)
    state: dict
    finished: list                # the first stage's finished tiles then


def _prefix_entry(prefix: dict | None, key: tuple, order):
    """(the stored prefix of ``key`` and ``order`` or None, the list to store a new one in)."""
    if prefix is None:
        return None, None
    entries = prefix.setdefault(key, [])
    for e in entries:
        if _same_order(e.order, order):
            return e, None
    return None, entries


def simulate(chain: Chain, num_sms: int, launch: str = "ordered", *, unlimited: bool = False,
             launch_gap: float = 0.0, skew: float = 0.0, prefix: dict | None = None) -> SimResult:
    """Run the chain; see the module docstring.  ``unlimited=True`` gives every block its own SM
    (infinite machine: the result is the critical path).  ``launch_gap`` (``stream`` only) and
    ``skew``: the timing terms of the module docstring.  ``prefix``: a dict shared by the
    simulations of chains that differ only in their semaphores (module docstring)."""
    if launch not in LAUNCH_MODES:
        raise ValueError(f"unknown launch mode {launch!r}")
    if not (0 <= launch_gap < math.inf) or not (0 <= skew < 1):
        raise ValueError("launch gap must be finite and >= 0, skew in [0, 1)")
    stages = chain.stages
    total = sum(s.num_tiles for s in stages)
    if unlimited:
        num_sms = total
    if num_sms <= 0:
        raise ValueError("num_sms must be positive")
    if launch == "persistent":
        return simulate_persistent(chain, num_sms, skew, prefix=prefix)
    cap = 1
    for s in stages:
        cap = cap * s.occupancy // math.gcd(cap, s.occupancy)
    free = [cap] * (0 if unlimited else num_sms)
    slots = [] if unlimited else [(-cap, i) for i in range(num_sms)]   # heap of (-free, SM); stale entries skipped
    # the dispatch queue: stage_seq[qi]'s tickets, qpos counting all; queue positions
    # [qstart, qend) are the head stage's
    stage_seq = list(range(len(stages)))
    if launch == "reversed":
        stage_seq.reverse()
    qpos, qi = 0, 0
    qsi = stage_seq[0] if stages else 0
    qstart, qend = 0, (stages[qsi].num_tiles if stages else 0)
    waiters: dict = {}
    # (time, seq, x): x a _Block, a block without steps as (stage, tile, units, SM), or None (the
    # launch gap is over)
    events: list = []
    seq = 0
    now = 0.0
    done_per_stage = [0] * len(stages)
    stage_end: dict = {}
    finished = 0
    waiting = 0
    wait_time = 0.0
    woken: set = set()   # stages whose launch-gap wake-up is scheduled (stream mode)
    push, pop = heapq.heappush, heapq.heappop
    # unlimited: the blocks without steps, (end, seq, stage, tile), sorted once all are dispatched
    pending: list = []
    npend, pi = 0, 0
    merge = unlimited and launch != "stream"
    # the shared start (module docstring): taken when qpos reaches cut
    cut, store, hit = -1, None, None
    if not unlimited and launch != "reversed" and len(stages) > 1 and stages[0].waits is None:
        key = ("dispatch", num_sms, skew, stages[0].name, stages[0].num_tiles, stages[0].tile_time,
               tuple(s.occupancy for s in stages))
        hit, store = _prefix_entry(prefix, key, stages[0].order)
        if store is not None:
            cut = stages[0].num_tiles
        elif hit is not None:
            st_ = hit.state
            events, free, slots = list(st_["events"]), list(st_["free"]), list(st_["slots"])
            seq, now, finished = st_["seq"], st_["now"], st_["finished"]
            qpos, qi, qsi, qstart, qend = st_["queue"]
            done_per_stage[0], stage_end = st_["done"], dict(st_["end"])
    # the posts each semaphore still needs (<= 0: posted), the unposted ones (int_keys) and how
    # many: at 0 every sync point is passed without looking
    need, unposted, open_sems = _need(chain, stages[0].posts if stages else None,
                                      hit.finished if hit is not None else ())

    def advance(b: _Block) -> None:
        """Run as many ready steps as possible (up to the first whose semaphores are not all
        posted), or park the block on its first unposted semaphore."""
        nonlocal seq, waiting
        st = b.steps
        nsteps = b.n
        pos, keys = st.pos, st.keys
        j, m = b.sp, b.hi
        blocked = None   # (the first unposted semaphore when j < m)
        if not open_sems:
            j = m
        elif st.single:
            kv = st.np_keys
            if kv is None or unposted is None:
                while j < m:
                    if need[keys[j]] > 0:
                        blocked = keys[j]
                        break
                    j += 1
            else:
                lim = min(m, j + _SCAN)
                while j < lim and need[keys[j]] <= 0:
                    j += 1
                if j == lim < m:
                    j = _first_unposted(kv, unposted, j, m)
                if j < m:
                    blocked = keys[j]
        else:
            while j < m:
                unposted_ = [k for k in keys[j] if need[k] > 0]
                if unposted_:
                    blocked = unposted_[0]
                    break
                j += 1
        if j < m:
            n = (j - b.lo if pos is None else pos[j]) - b.step
        else:
            n = nsteps - b.step
        if n == 0:   # park on the semaphore
            if blocked in waiters:
                waiters[blocked].append(b)
            else:
                waiters[blocked] = [b]
            b.since = now
            waiting += 1
            return
        synced = j - b.sp
        b.step += n
        b.sp = j
        push(events, (now + b.dur * n / nsteps + stages[b.stage].wait_cost * synced, seq, b))
        seq += 1

    def stage_ready(si: int) -> bool:
        """Stream order: may stage si dispatch now (previous stage done, and the launch gap over)?"""
        nonlocal seq
        if si == 0:
            return True
        prev = stages[si - 1]
        if done_per_stage[si - 1] < prev.num_tiles:
            return False
        start = stage_end[prev.name] + launch_gap
        if now >= start:
            return True
        if si not in woken:   # a wake-up event (no block) at the end of the gap
            woken.add(si)
            push(events, (start, seq, None))
            seq += 1
        return False

    stream = launch == "stream"
    ready = 0
    nqueue = total
    tables = [s.waits if type(s.waits) is StepTable else None for s in stages]
    # the quiet end (_drain): every semaphore posted, none waited on; one occupancy, so any freed
    # slot takes any block; steps from StepTables (or none)
    drainable = (launch in ("ordered", "stream") and not unlimited and len({s.occupancy for s in stages}) == 1
                 and all(s.waits is None or type(s.waits) is StepTable for s in stages))
    while True:
        if drainable and not open_sems and not waiting:
            now, finished = _drain(stages, events, free, cap, (qpos, qi, qsi, qstart, qend), stage_seq,
                                   stream, ready, launch_gap, woken, skew, now, finished, done_per_stage,
                                   stage_end)
            break
        # dispatch in queue order while the head block fits
        while qpos < nqueue:
            if qpos == cut:   # the first stage all dispatched: keep the state for the next chain
                store.append(_Prefix(stages[0].order, {
                    "events": list(events), "free": list(free), "slots": list(slots), "seq": seq,
                    "now": now, "finished": finished, "queue": (qpos, qi, qsi, qstart, qend),
                    "done": done_per_stage[0], "end": dict(stage_end)},
                    _finished_tiles(stages[0].num_tiles, events)))
                cut = -1
            while qpos == qend:   # the head stage is all dispatched: the next one
                qi += 1
                qsi = stage_seq[qi]
                qstart, qend = qend, qend + stages[qsi].num_tiles
            si = qsi
            if stream and si != ready:
                if not stage_ready(si):
                    break
                ready = si   # (stays ready: its previous stage is done)
            st = stages[si]
            units = cap // st.occupancy
            if unlimited:
                best = qpos
            else:   # the SM with the most free capacity, the lowest index on ties (a full SM
                # has no entry: it fits nothing)
                while slots and -slots[0][0] != free[slots[0][1]]:
                    pop(slots)
                if not slots or -slots[0][0] < units:
                    break
                best = pop(slots)[1]
                left = free[best] - units
                free[best] = left
                if left:
                    push(slots, (-left, best))
            ticket = qpos - qstart
            qpos += 1
            tile = ticket if st.order is None else st.order[ticket]
            dur = st.tile_time if skew == 0 else st.tile_time * skew_factor(si, tile, skew)
            table = tables[si]
            if table is not None:
                n = table.n[tile]
                if n:
                    lo, hi = table.bounds[tile], table.bounds[tile + 1]
                    if open_sems or merge:
                        advance(_Block(si, tile, table.shared, n, lo, hi, units, best, dur))
                    else:   # every semaphore posted: what advance does, without a _Block
                        push(events, (now + dur * n / n + st.wait_cost * (hi - lo), seq, (si, tile, units, best)))
                        seq += 1
                    continue
            elif st.waits is not None:
                steps = st.waits[tile]
                if steps:
                    steps = Steps.of(steps)
                    advance(_Block(si, tile, steps, steps.n, steps.lo, steps.hi, units, best, dur))
                    continue
            if merge:   # a block that waits on nothing: (end, seq, stage, tile)
                pending.append((now + dur, seq, si, tile))
                seq += 1
            else:         # ... its event holds (stage, tile, units, SM), no _Block
                push(events, (now + dur, seq, (si, tile, units, best)))
                seq += 1
        if merge and pending and not npend:   # every block is dispatched (at 0): sort once
            pending.sort(key=itemgetter(0))   # stable: by (end, seq)
            npend = len(pending)
        if pi < npend and (not events or pending[pi] < events[0]):
            now, _, si, tile = pending[pi]
            pi += 1
        else:
            if not events:
                break
            now, _, b = pop(events)
            if b is None:               # the launch gap is over: dispatch
                continue
            if type(b) is tuple:
                si, tile, units, sm = b
            elif b.step < b.n:   # finished some steps, more to go
                advance(b)
                continue
            else:
                si, tile, units, sm = b.stage, b.tile, b.units, b.sm
            if not unlimited:
                left = free[sm] + units
                free[sm] = left
                push(slots, (-left, sm))
        # block done
        finished += 1
        st = stages[si]
        done_per_stage[si] += 1
        if done_per_stage[si] == st.num_tiles:
            stage_end[st.name] = now
        if st.posts is not None:
            for k in st.posts[tile]:
                need[k] -= 1
                if need[k] == 0:
                    open_sems -= 1
                    if unposted is not None:
                        unposted[k] = False
                    if k in waiters:
                        for w in waiters.pop(k):
                            waiting -= 1
                            wait_time += now - w.since
                            advance(w)
    res = SimResult(time=now, finished_blocks=finished, total_blocks=total, stage_end=stage_end, wait_time=wait_time)
    if finished < total:
        res.deadlock = True
        res.waiting_blocks = waiting
        res.undispatched_blocks = nqueue - qpos
        res.note = (f"deadlock at t={now:g}: {waiting} dispatched blocks wait on semaphores that no running "
                    f"block will post, {nqueue - qpos} blocks cannot be dispatched")
    return res


def _finish_times(st: Stage, si: int, tickets: np.ndarray, now, skew: float, order=None) -> np.ndarray:
    """When the blocks of ``tickets`` of stage ``st`` (index ``si``) end if dispatched (or started)
    at ``now`` with every semaphore posted: what advance computes, elementwise (``now`` may be
    one time or one per ticket); ``order``: ``st.order`` as an int64 array, if it has one."""
    tiles = tickets if st.order is None else order[tickets]
    dur = np.full(len(tiles), st.tile_time) if skew == 0 else st.tile_time * _skew_np(si, tiles, skew)
    if st.waits is None:
        return now + dur
    table = st.waits
    n = np.frombuffer(table.n, dtype=np.int64)[tiles]
    bounds = np.frombuffer(table.bounds, dtype=np.int64)
    m = bounds[tiles + 1] - bounds[tiles]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, now + dur * n / n + st.wait_cost * m, now + dur)


def _drain(stages, events, free, cap, queue, stage_seq, stream, ready, launch_gap, woken, skew, now,
           finished, done, stage_end) -> tuple:
    """The rest of an ordered or stream simulation once every semaphore is posted and no block
    waits, by time rather than by block: nothing can wait any more, and with one occupancy any
    freed slot takes the next block, so all that is left to know is when each block ends. At
    each time the blocks that end there free their slots, then the queue fills the free slots
    (as the event loop does one event at a time, the same blocks at the same time); the blocks
    dispatched together whose end times are equal (the lockstep model: many) stay one count.
    The order of equal-time events, which only semaphores could observe, no longer matters.
    Returns (the end time, finished blocks); ``done`` and ``stage_end`` are updated."""
    qpos, qi, qsi, qstart, qend = queue
    nqueue = sum(s.num_tiles for s in stages)
    units = cap // stages[0].occupancy
    spare = sum(free)
    orders: dict = {}  # stage -> its order as an array
    at: dict = {}      # time -> {stage: blocks ending then}
    times: list = []   # heap of the keys of at

    def add(t: float, si: int, count: int) -> None:
        if t not in at:
            at[t] = {}
            heapq.heappush(times, t)
        at[t][si] = at[t].get(si, 0) + count

    for t, _, x in events:   # the blocks in flight (and a launch gap's end: None)
        if x is None:
            if t not in at:
                at[t] = {}
                heapq.heappush(times, t)
        elif type(x) is tuple:
            add(t, x[0], 1)
        elif x.step < x.n:   # its next advance runs every step left
            add(t + x.dur * (x.n - x.step) / x.n + stages[x.stage].wait_cost * (x.hi - x.sp), x.stage, 1)
        else:
            add(t, x.stage, 1)
    while True:   # fill the free slots now, then on to the next time something ends
        while qpos < nqueue and spare >= units:
            while qpos == qend:
                qi += 1
                qsi = stage_seq[qi]
                qstart, qend = qend, qend + stages[qsi].num_tiles
            si = qsi
            if stream and si != ready:
                prev = stages[si - 1]
                if done[si - 1] < prev.num_tiles:
                    break
                start = stage_end[prev.name] + launch_gap
                if now < start:
                    if si not in woken:
                        woken.add(si)
                        if start not in at:
                            at[start] = {}
                            heapq.heappush(times, start)
                    break
                ready = si
            k = min(spare // units, qend - qpos)
            if si not in orders:
                orders[si] = None if stages[si].order is None else np.asarray(stages[si].order, dtype=np.int64)
            ends = _finish_times(stages[si], si, np.arange(qpos - qstart, qpos - qstart + k, dtype=np.int64),
                                 now, skew, orders[si])
            if ends.min() == ends.max():   # (lockstep: one time)
                add(float(ends[0]), si, k)
            else:
                for t, c in zip(*np.unique(ends, return_counts=True)):
                    add(float(t), si, int(c))
            qpos += k
            spare -= k * units
        if not times:
            return now, finished
        now = heapq.heappop(times)
        for si, c in at.pop(now).items():
            finished += c
            done[si] += c
            spare += c * units
            if done[si] == stages[si].num_tiles:
                stage_end[stages[si].name] = now


def _item_costs(st: Stage, si: int, tickets: np.ndarray, skew: float) -> tuple:
    """(time, wait cost) the items ``tickets`` of stage ``st`` add to their slot's clock when
    every semaphore is posted: the persistent start does ``now + time`` (no steps) or
    ``now + time * 1.0 + wait_cost * sync points``, and adding 0.0 changes nothing."""
    tiles = tickets if st.order is None else np.asarray(st.order, dtype=np.int64)[tickets]
    dur = np.full(len(tiles), st.tile_time) if skew == 0 else st.tile_time * _skew_np(si, tiles, skew)
    if st.waits is None:
        return dur, np.zeros(len(tiles))
    bounds = np.frombuffer(st.waits.bounds, dtype=np.int64)
    n = np.frombuffer(st.waits.n, dtype=np.int64)[tiles]
    return dur, np.where(n > 0, st.wait_cost * (bounds[tiles + 1] - bounds[tiles]), 0.0)


def _drain_persistent(stages, events, item, G: int, starts: list, skew: float, stage_end: dict) -> float:
    """The rest of a persistent simulation once every semaphore is posted and no slot waits: each
    slot runs its items back to back, so its clock is a running sum, taken in numpy in the
    order the event loop adds (``np.add.accumulate`` adds strictly left to right). Returns the
    end time; ``stage_end`` is updated."""
    total = starts[-1]
    slots = [slot for _, _, slot in events]
    clock = []   # per slot with an item: when its current item ends
    for t, _, slot in events:
        it = item[slot]
        n, step = it[8], it[4]
        if step < n:   # the rest of its steps at once
            t = t + it[6] * ((n - step) / n) + stages[it[1]].wait_cost * (it[10] - it[5])
        clock.append(t)
    clock = np.array(clock)
    current = np.array([item[slot][0] for slot in slots], dtype=np.int64)
    ends_by_stage = [[] for _ in stages]
    at = np.searchsorted(starts, current, side="right") - 1   # the current items' stages
    for si in np.unique(at).tolist():
        ends_by_stage[si].append(clock[at == si])
    first = current + G                                # each slot's next item
    count = np.maximum(0, -(-(total - first) // G))    # items left per slot
    K = int(count.max()) if len(count) else 0
    if K:
        q = first[:, None] + G * np.arange(K)            # slot x k: the queue index of its k-th next item
        valid = np.arange(K) < count[:, None]
        si = np.searchsorted(starts, np.where(valid, q, 0), side="right") - 1
        adds = np.zeros((len(slots), 1 + 2 * K))
        adds[:, 0] = clock
        for s_ in np.unique(si[valid]).tolist():
            sel = valid & (si == s_)
            dur, cost = _item_costs(stages[s_], s_, q[sel] - starts[s_], skew)
            d_ = np.zeros((len(slots), K))
            c_ = np.zeros((len(slots), K))
            d_[sel], c_[sel] = dur, cost
            adds[:, 1::2] += d_
            adds[:, 2::2] += c_
        ends = np.add.accumulate(adds, axis=1)[:, 2::2]   # after each item's time and wait cost
        for s_ in np.unique(si[valid]).tolist():
            ends_by_stage[s_].append(ends[valid & (si == s_)])
    now = 0.0
    for st, parts in zip(stages, ends_by_stage):
        parts = [p for p in parts if len(p)]
        if parts:
            last = float(max(p.max() for p in parts))
            stage_end[st.name] = last
            now = max(now, last)
    return now


def _finished_tiles(n: int, events: list) -> list:
    """The first stage's tiles (all dispatched, ``n``) whose blocks are no longer in ``events``."""
    running = {b[1] for _, _, b in events}   # (stage, tile, units, SM): no _Block waits on nothing
    return [t for t in range(n) if t not in running]


def simulate_persistent(chain: Chain, num_sms: int, skew: float = 0.0, prefix: dict | None = None) -> SimResult:
    """The ``persistent`` launch mode (module docstring): one launch of ``G = num_sms * min
    occupancy`` slots, slot ``s`` running the ordered queue's items ``s, s+G, ...`` in turn. An
    item's steps run as in :func:`simulate` (``tile_time / len(steps)`` each, ``wait_cost`` per
    step with a semaphore, parked on its first unposted semaphore while holding its slot).
    ``prefix``: as for :func:`simulate`."""
    stages = chain.stages
    starts = [0]   # queue index of each stage's first item
    for st in stages:
        starts.append(starts[-1] + st.num_tiles)
    total = starts[-1]
    G = min(total, num_sms * min(st.occupancy for st in stages))
    waiters: dict = {}               # semaphore -> slots parked on it
    events: list = []                # (time, seq, slot): the slot's current item ends some steps
    # per slot: [queue index, stage, tile, Steps (the arrays), next step, next sync point, time,
    # parked since, steps, first sync point, end of sync points]
    item: list = [None] * G
    tables = [st.waits if type(st.waits) is StepTable else None for st in stages]
    done = [0] * len(stages)
    stage_end: dict = {}
    now, seq, finished, started, waiting, wait_time = 0.0, 0, 0, 0, 0, 0.0
    n0 = stages[0].num_tiles
    store = hit = None
    if len(stages) > 1 and stages[0].waits is None and G <= n0:
        key = ("persistent", num_sms, skew, stages[0].name, n0, stages[0].tile_time, G, total)
        hit, store = _prefix_entry(prefix, key, stages[0].order)
        if hit is not None:
            st_ = hit.state
            item, events, done[0] = list(st_["item"]), list(st_["events"]), st_["done"]
            stage_end = dict(st_["end"])
            now, seq, finished, started = st_["now"], st_["seq"], st_["finished"], st_["started"]
    need, unposted, open_sems = _need(chain, stages[0].posts, hit.finished if hit is not None else (), True)
    known = None if chain.int_keys else need   # posts to a semaphore not in sem_values are ignored

    def advance(slot: int) -> None:
        """Run the ready steps of the slot's item (up to its first sync point whose semaphores are
        not all posted), or park it on its first unposted semaphore."""
        nonlocal seq, waiting
        it = item[slot]
        st = it[3]
        j, m, blocked = it[5], it[10], None
        keys = st.keys
        if not open_sems:
            j = m
        elif st.single:
            kv = st.np_keys
            lim = m if kv is None or unposted is None else min(m, j + _SCAN)
            while j < lim and need[keys[j]] <= 0:
                j += 1
            if j == lim < m:
                j = _first_unposted(kv, unposted, j, m)
            if j < m:
                blocked = keys[j]
        else:
            while j < m:
                blocked = next((k for k in keys[j] if need[k] > 0), None)
                if blocked is not None:
                    break
                j += 1
        nsteps = it[8]
        n = ((j - it[9] if st.pos is None else st.pos[j]) if j < m else nsteps) - it[4]
        if n == 0 and nsteps:
            waiters.setdefault(blocked, []).append(slot)
            it[7] = now
            waiting += 1
            return
        synced = j - it[5]
        it[4] += n
        it[5] = j
        frac = n / nsteps if nsteps else 1.0
        heapq.heappush(events, (now + it[6] * frac + stages[it[1]].wait_cost * synced, seq, slot))
        seq += 1

    def start(slot: int, q: int) -> None:
        nonlocal started, seq
        si = bisect_right(starts, q) - 1
        st = stages[si]
        tile = q - starts[si] if st.order is None else st.order[q - starts[si]]
        table = tables[si]
        if table is not None:
            steps, n, lo, hi = table.shared, table.n[tile], table.bounds[tile], table.bounds[tile + 1]
        else:
            steps = NO_STEPS if st.waits is None else Steps.of(st.waits[tile])
            n, lo, hi = steps.n, steps.lo, steps.hi
        dur = st.tile_time if skew == 0 else st.tile_time * skew_factor(si, tile, skew)   # (x 1.0: x)
        item[slot] = [q, si, tile, steps, 0, lo, dur, 0.0, n, lo, hi]
        started += 1
        if n:
            advance(slot)
        else:   # what advance does for no steps: the whole time at once (times 1, plus 0)
            heapq.heappush(events, (now + dur, seq, slot))
            seq += 1

    if hit is not None:   # resume where the stored run stopped: a slot's first later item
        slot, q = hit.state["next"]
        if q < total:
            start(slot, q)
    else:
        for slot in range(G):
            start(slot, slot)
    drainable = all(st.waits is None or type(st.waits) is StepTable for st in stages)   # as in simulate
    while events:
        if drainable and not open_sems and not waiting:
            now = _drain_persistent(stages, events, item, G, starts, skew, stage_end)
            finished, done = total, [st.num_tiles for st in stages]
            break
        now, _, slot = heapq.heappop(events)
        it = item[slot]
        q, si, tile, step = it[0], it[1], it[2], it[4]
        if step < it[8]:          # some steps done, more to go
            advance(slot)
            continue
        finished += 1
        done[si] += 1
        if done[si] == stages[si].num_tiles:
            stage_end[stages[si].name] = now
        for k in stages[si].posts_of(tile):
            if known is None or k in known:
                need[k] -= 1
                if need[k] == 0:
                    open_sems -= 1
                    if unposted is not None:
                        unposted[k] = False
                    for w in waiters.pop(k, []):
                        waiting -= 1
                        wait_time += now - item[w][7]
                        advance(w)
        if store is not None and q + G >= n0:   # the slot's next item is a later stage's: keep the state
            store.append(_Prefix(stages[0].order, {
                "item": list(item), "events": list(events), "done": done[0], "now": now, "seq": seq,
                "finished": finished, "started": started, "next": (slot, q + G), "end": dict(stage_end)},
                _finished_items(stages[0], item, G, slot)))
            store = None
        if q + G < total:
            start(slot, q + G)
    res = SimResult(time=now, finished_blocks=finished, total_blocks=total, stage_end=stage_end, wait_time=wait_time)
    if finished < total:
        res.deadlock = True
        res.waiting_blocks = waiting
        res.undispatched_blocks = total - started
        res.note = (f"deadlock at t={now:g}: {waiting} slots of the persistent launch wait on semaphores that no "
                    f"running item will post, {total - started} items not started")
    return res


def _finished_items(stage0: Stage, item: list, G: int, done_slot: int) -> list:
    """The first stage's finished tiles when only its items have started: slot s has finished
    s, s + G, ... before its current item, and ``done_slot`` its current one too."""
    out = []
    for s in range(G):
        q = item[s][0]
        out += [stage0.tile_of_ticket(p) for p in range(s, q + (G if s == done_slot else 0), G)]
    return out


def critical_path(chain: Chain, skew: float = 0.0) -> float:
    """The finish time on an infinite machine (every block dispatched at time 0): the unlimited
    simulation, or where it allows (:func:`_critical_path_np`) the same time from arrays."""
    t = _critical_path_np(chain, skew)
    return simulate(chain, 1, "ordered", unlimited=True, skew=skew).time if t is None else t


#: per numpy batch of _critical_path_np at most this many blocks and (unless one block has more)
#: sync points; sync points looked at per block at once
_CP_BLOCKS, _CP_SYNCS, _CP_WINDOW = 1 << 15, 1 << 20, 32


def _critical_path_np(chain: Chain, skew: float):
    """The unlimited simulation's end time in numpy, or None where this does not apply. It
    applies where the stages that wait (StepTables, integer semaphores) come after every stage
    that does not, post nothing, and every semaphore gets its posts: then a waiting block meets
    no other waiting block, and its run is a function of when each semaphore is posted.

    Every block is dispatched at 0, the idle ones first (their events have the smaller seq), so
    an idle block's post is processed at (its end, its dispatch index, its place in its posts).
    A semaphore is posted at its ``value``-th post in that order: ``rank`` numbers them so. A
    waiting block checks a sync point either at an event of its own at time t (posted: every
    semaphore posted at a time <= t, as idle events come first among equal times) or when woken
    by a post (posted: the ones ranked up to it); it then runs as ``simulate``'s advance does,
    with the same floating-point operations in the same order. The rounds below do one check of
    every waiting block at once."""
    stages = chain.stages
    if not chain.int_keys or not stages:
        return None
    waiting = [i for i, s in enumerate(stages) if s.waits is not None]
    idle = [i for i, s in enumerate(stages) if s.waits is None]
    if any(type(stages[i].waits) is not StepTable or stages[i].posts is not None for i in waiting):
        return None
    if waiting and idle and max(idle) > min(waiting):
        return None
    K = len(chain.sem_values)
    ends, post_keys, post_at = [], [], []   # idle blocks: end; their posts: semaphore, block, place
    first = 0
    for si in idle:
        st = stages[si]
        tiles = np.arange(st.num_tiles, dtype=np.int64) if st.order is None else np.asarray(st.order, dtype=np.int64)
        dur = np.full(len(tiles), st.tile_time) if skew == 0 else st.tile_time * _skew_np(si, tiles, skew)
        ends.append(0.0 + dur)
        if st.posts is not None:
            lists = list(map(st.posts.__getitem__, tiles.tolist()))
            counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(tiles))
            flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(counts.sum()))
            block = np.repeat(np.arange(first, first + len(tiles)), counts)
            place = np.arange(len(flat)) - np.repeat(np.cumsum(counts) - counts, counts)
            post_keys.append(flat)
            post_at.append((block, place))
        first += len(tiles)
    end = np.concatenate(ends) if ends else np.zeros(0)
    keys = np.concatenate(post_keys) if post_keys else np.zeros(0, dtype=np.int64)
    if len(keys) and (keys.min() < 0 or keys.max() >= K):
        return None
    block = np.concatenate([b for b, _ in post_at]) if post_at else np.zeros(0, dtype=np.int64)
    place = np.concatenate([p for _, p in post_at]) if post_at else np.zeros(0, dtype=np.int64)
    order = np.lexsort((place, block, end[block]))   # the posts in the order they are processed
    keys = keys[order]
    value = chain.sem_array()
    count = np.bincount(keys, minlength=K)
    if np.any(count < value):
        return None   # a semaphore never posted: the simulation says how it deadlocks
    by_key = np.argsort(keys, kind="stable")   # each semaphore's posts, in processing order
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    early = value <= 0                          # posted before anything runs
    at = np.where(early, -1, by_key[np.clip(start + value - 1, 0, max(len(keys) - 1, 0))] if len(keys) else -1)
    when = np.where(early, -np.inf, end[block[order]][np.maximum(at, 0)] if len(keys) else -np.inf)
    ranked = np.lexsort((at, ~early))            # the early ones first, then by the post that does it
    rank = np.empty(K, dtype=np.int64)
    rank[ranked] = np.arange(K)
    times = when[ranked]                         # non-decreasing: the posts are in processing order
    result = float(end.max()) if len(end) else 0.0
    for si in waiting:
        st, table = stages[si], stages[si].waits
        tiles = np.arange(st.num_tiles, dtype=np.int64) if st.order is None else np.asarray(st.order, dtype=np.int64)
        n_all = np.frombuffer(table.n, dtype=np.int64)[tiles]
        bounds = np.frombuffer(table.bounds, dtype=np.int64)
        dur = np.full(len(tiles), st.tile_time) if skew == 0 else st.tile_time * _skew_np(si, tiles, skew)
        if np.any(n_all == 0):
            result = max(result, float((0.0 + dur[n_all == 0]).max()))
        sk = table.shared.np_keys
        pos = None if table.pos is None else np.frombuffer(table.pos, dtype=np.int32 if table.pos.typecode == "i" else np.int64)
        syncs = np.cumsum(bounds[tiles + 1] - bounds[tiles])   # sync points up to each block
        a = 0
        while a < len(tiles):
            b = int(np.searchsorted(syncs, (syncs[a - 1] if a else 0) + _CP_SYNCS, side="right"))
            b = min(len(tiles), a + _CP_BLOCKS, max(b, a + 1))
            sel = slice(a, b)
            a = b
            keep = n_all[sel] > 0
            n, d = n_all[sel][keep], dur[sel][keep]
            lo, hi = bounds[tiles[sel][keep]], bounds[tiles[sel][keep] + 1]
            fin = _runs_np(n, d, lo, hi, pos, sk, rank, times, int(early.sum()) - 1, st.wait_cost)
            if len(fin):
                result = max(result, float(fin.max()))
    return result


def _skew_np(si: int, tiles, skew: float):
    """skew_factor of many tiles: the same operations, elementwise."""
    u = ((tiles + 1) * _PHI + si * _SQRT2) % 1.0
    return 1.0 + skew * (2.0 * u - 1.0)


def _runs_np(n, d, lo, hi, pos, keys, rank, times, rho0: int, wait_cost: float):
    """The end times of waiting blocks (steps ``n``, time ``d``, sync points ``lo:hi``) that are
    all dispatched at 0 (_critical_path_np)."""
    now = np.zeros(len(n))
    step = np.zeros(len(n), dtype=np.int64)
    sp = lo.copy()
    rho = np.full(len(n), rho0, dtype=np.int64)
    lens = hi - lo   # the latest-ranked semaphore of each block: once it is posted, all are
    flat = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens) + np.repeat(lo, lens)
    top = np.full(len(n), -1, dtype=np.int64)
    has = lens > 0
    if has.any():
        top[has] = np.maximum.reduceat(rank[keys[flat]], (np.cumsum(lens) - lens)[has])
    out = []
    live = np.arange(len(n))
    while len(live):
        # j: the first sync point at or after sp whose semaphore is ranked after rho
        j = sp[live].copy()
        todo = np.flatnonzero(top[live] > rho[live])   # (the others: none)
        j[top[live] <= rho[live]] = hi[live[top[live] <= rho[live]]]
        width = 8
        while len(todo):
            jj = j[todo]
            idx = jj[:, None] + np.arange(width)
            inside = idx < hi[live[todo]][:, None]
            r = rank[keys[np.where(inside, idx, 0)]]
            late = inside & (r > rho[live[todo]][:, None])
            found = late.any(axis=1)
            j[todo] = np.where(found, jj + late.argmax(axis=1), np.minimum(jj + width, hi[live[todo]]))
            todo = todo[~found & (j[todo] < hi[live[todo]])]
            width = _CP_WINDOW
        b = live
        last = j == hi[b]
        if last.any():   # no unposted sync point left: the rest of the steps at once
            e = b[last]
            out.append(now[e] + d[e] * (n[e] - step[e]) / n[e] + wait_cost * (j[last] - sp[e]))
        b, j = b[~last], j[~last]
        if not len(b):
            break
        p = (j - lo[b]) if pos is None else pos[j].astype(np.int64)
        run = p - step[b]
        park = run == 0
        e, k = b[park], keys[j[park]]
        now[e], rho[e] = times[rank[k]], rank[k]            # woken by its semaphore's post
        e, jr = b[~park], j[~park]
        now[e] = now[e] + d[e] * run[~park] / n[e] + wait_cost * (jr - sp[e])
        step[e], sp[e] = p[~park], jr
        rho[e] = np.searchsorted(times, now[e], side="right") - 1
        live = b
    return np.concatenate(out) if out else np.zeros(0)


def stream_sync_time(chain: Chain, num_sms: int, launch_gap: float = 0.0, skew: float = 0.0,
                     prefix: dict | None = None) -> SimResult:
    """StreamSync: the stages one after the other on one stream, no semaphores, ``launch_gap``
    between them.  PDL alone is this with ``launch_gap=0``."""
    bare = Chain([Stage(s.name, s.num_tiles, s.occupancy, s.tile_time, None, None, None) for s in chain.stages], {})
    # (no semaphores, so no wait_cost either)
    return simulate(bare, num_sms, "stream", launch_gap=launch_gap, skew=skew, prefix=prefix)
