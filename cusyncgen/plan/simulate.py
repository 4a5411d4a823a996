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
  order; they are merged from one sorted list instead of a heap of every block.
"""

from __future__ import annotations

from __future__ import annotations

import heapq
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
        if self.int_keys and sorted(self.sem_values) != list(range(len(self.sem_values))):
            raise ValueError("int_keys: the semaphores must be 0 .. len(sem_values) - 1")
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
    __slots__ = ("stage", "tile", "steps", "step", "sp", "units", "sm", "since", "dur")

    def __init__(self, stage: int, tile: int, steps, units: int, sm: int, dur: float):
        steps = steps if type(steps) is Steps else Steps.of(steps)
        self.stage, self.tile, self.steps, self.step = stage, tile, steps, 0
        self.sp = steps.lo   # the first sync point (index into steps.pos) at or after step
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


def _unposted(chain: Chain, need: dict):
    """Per integer semaphore: not yet posted (a numpy bool array), or None for other chains."""
    if not chain.int_keys:
        return None
    unposted = np.zeros(len(need), dtype=bool)
    unposted[np.fromiter(need.keys(), dtype=np.int64, count=len(need))] = \
        np.fromiter(need.values(), dtype=np.int64, count=len(need)) > 0
    return unposted


def _same_order(a, b) -> bool:
    return a is b or (a is not None and b is not None and len(a) == len(b) and list(a) == list(b))


def _recount(need: dict, posts, tiles, check: bool) -> None:
    """Take the posts of ``tiles`` (finished) off ``need`` (``check``: only known semaphores)."""
    if posts is None:
        return
    for t in tiles:
        for k in posts[t]:
            if not check or k in need:
                need[k] -= 1


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
    need: dict = dict(chain.sem_values)   # posts a semaphore still needs (<= 0: posted)
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
    cut, store = -1, None
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
            _recount(need, stages[0].posts, hit.finished, False)
    unposted = _unposted(chain, need)

    def advance(b: _Block) -> None:
        """Run as many ready steps as possible (up to the first whose semaphores are not all
        posted), or park the block on its first unposted semaphore."""
        nonlocal seq, waiting
        st = b.steps
        nsteps = st.n
        if nsteps == 0:
            push(events, (now + b.dur, seq, b))
            seq += 1
            return
        pos, keys = st.pos, st.keys
        j, m = b.sp, st.hi
        blocked = None   # (the first unposted semaphore when j < m)
        if st.single:
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
            n = (j - st.lo if pos is None else pos[j]) - b.step
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
    nqueue = total
    while True:
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
            if stream and not stage_ready(si):
                break
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
            steps = NO_STEPS if st.waits is None else st.waits[tile]
            if steps:
                advance(_Block(si, tile, steps, units, best, dur))
            elif merge:   # a block that waits on nothing: (end, seq, stage, tile)
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
            elif b.step < b.steps.n:   # finished some steps, more to go
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
    need = dict(chain.sem_values)    # posts each semaphore still needs (<= 0: posted)
    waiters: dict = {}               # semaphore -> slots parked on it
    events: list = []                # (time, seq, slot): the slot's current item ends some steps
    # per slot: [queue index, stage, tile, Steps, next step, next sync point, time, parked since]
    item: list = [None] * G
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
            _recount(need, stages[0].posts, hit.finished, True)
    unposted = _unposted(chain, need)

    def advance(slot: int) -> None:
        """Run the ready steps of the slot's item (up to its first sync point whose semaphores are
        not all posted), or park it on its first unposted semaphore."""
        nonlocal seq, waiting
        it = item[slot]
        st = it[3]
        j, m, blocked = it[5], st.hi, None
        keys = st.keys
        if st.single:
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
        n = ((j - st.lo if st.pos is None else st.pos[j]) if j < m else st.n) - it[4]
        if n == 0 and st.n:
            waiters.setdefault(blocked, []).append(slot)
            it[7] = now
            waiting += 1
            return
        synced = j - it[5]
        it[4] += n
        it[5] = j
        frac = n / st.n if st.n else 1.0
        heapq.heappush(events, (now + it[6] * frac + stages[it[1]].wait_cost * synced, seq, slot))
        seq += 1

    def start(slot: int, q: int) -> None:
        nonlocal started, seq
        si = bisect_right(starts, q) - 1
        st = stages[si]
        tile = st.tile_of_ticket(q - starts[si])
        steps = NO_STEPS if st.waits is None else Steps.of(st.waits[tile])
        dur = st.tile_time * skew_factor(si, tile, skew)
        item[slot] = [q, si, tile, steps, 0, steps.lo, dur, 0.0]
        started += 1
        if steps.n:
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
    while events:
        now, _, slot = heapq.heappop(events)
        q, si, tile, steps, step = item[slot][:5]
        if step < steps.n:          # some steps done, more to go
            advance(slot)
            continue
        finished += 1
        done[si] += 1
        if done[si] == stages[si].num_tiles:
            stage_end[stages[si].name] = now
        for k in stages[si].posts_of(tile):
            if k in need:
                need[k] -= 1
                if need[k] == 0:
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
    """The finish time on an infinite machine (every block dispatched at time 0)."""
    return simulate(chain, 1, "ordered", unlimited=True, skew=skew).time


def stream_sync_time(chain: Chain, num_sms: int, launch_gap: float = 0.0, skew: float = 0.0,
                     prefix: dict | None = None) -> SimResult:
    """StreamSync: the stages one after the other on one stream, no semaphores, ``launch_gap``
    between them.  PDL alone is this with ``launch_gap=0``."""
    bare = Chain([Stage(s.name, s.num_tiles, s.occupancy, s.tile_time, None, None, None) for s in chain.stages], {})
    # (no semaphores, so no wait_cost either)
    return simulate(bare, num_sms, "stream", launch_gap=launch_gap, skew=skew, prefix=prefix)
