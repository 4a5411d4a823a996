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
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Hashable, Sequence

Sem = Hashable

LAUNCH_MODES = ("ordered", "reversed", "stream", "persistent")


class Steps:
    """A block's steps, compactly: ``n`` steps, of which the ones at positions ``pos[lo:hi]``
    (increasing) wait on the semaphores ``keys[lo:hi]`` (a sequence of semaphores each, or with
    ``single`` one semaphore each); the others wait on none. ``pos`` and ``keys`` may be lists
    shared by many tiles. Iterates as the list of steps (a tuple of semaphores each) that it
    stands for."""

    __slots__ = ("n", "pos", "keys", "lo", "hi", "single")

    def __init__(self, n: int, pos: Sequence[int], keys: Sequence, lo: int = 0, hi: int | None = None,
                 single: bool = False):
        self.n, self.pos, self.keys, self.lo, self.single = n, pos, keys, lo, single
        self.hi = len(pos) if hi is None else hi

    @classmethod
    def of(cls, steps) -> "Steps":
        """``steps`` (a Steps, or a list of steps: sequences of semaphores) as a Steps."""
        if isinstance(steps, Steps):
            return steps
        pos = [i for i, step in enumerate(steps) if len(step)]
        return cls(len(steps), pos, [steps[i] for i in pos])

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        keys = self.keys[self.lo:self.hi]
        sync = dict(zip(self.pos[self.lo:self.hi], [(k,) for k in keys] if self.single else keys))
        for i in range(self.n):
            yield tuple(sync.get(i, ()))

    def __eq__(self, other) -> bool:
        return isinstance(other, Steps) and list(self) == list(other)


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


def simulate(chain: Chain, num_sms: int, launch: str = "ordered", *, unlimited: bool = False,
             launch_gap: float = 0.0, skew: float = 0.0) -> SimResult:
    """Run the chain; see the module docstring.  ``unlimited=True`` gives every block its own SM
    (infinite machine: the result is the critical path).  ``launch_gap`` (``stream`` only) and
    ``skew``: the timing terms of the module docstring."""
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
        return simulate_persistent(chain, num_sms, skew)
    cap = 1
    for s in stages:
        cap = cap * s.occupancy // math.gcd(cap, s.occupancy)
    free = [cap] * num_sms
    slots = [] if unlimited else [(-cap, i) for i in range(num_sms)]   # heap of (-free, SM); stale entries skipped
    # dispatch queue: (stage index, ticket)
    stage_seq = list(range(len(stages)))
    if launch == "reversed":
        stage_seq.reverse()
    queue = [(si, k) for si in stage_seq for k in range(stages[si].num_tiles)]
    qpos = 0
    need: dict = dict(chain.sem_values)   # posts a semaphore still needs (<= 0: posted)
    waiters: dict = {}
    events: list = []   # (time, seq, block)
    seq = 0
    now = 0.0
    done_per_stage = [0] * len(stages)
    stage_end: dict = {}
    finished = 0
    waiting = 0
    wait_time = 0.0
    woken: set = set()   # stages whose launch-gap wake-up is scheduled (stream mode)
    push, pop = heapq.heappush, heapq.heappop

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
            while j < m:
                if need[keys[j]] > 0:
                    blocked = keys[j]
                    break
                j += 1
        else:
            while j < m:
                unposted = [k for k in keys[j] if need[k] > 0]
                if unposted:
                    blocked = unposted[0]
                    break
                j += 1
        n = (pos[j] if j < m else nsteps) - b.step
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
    nqueue = len(queue)
    while True:
        # dispatch in queue order while the head block fits
        while qpos < nqueue:
            si, ticket = queue[qpos]
            if stream and not stage_ready(si):
                break
            st = stages[si]
            units = cap // st.occupancy
            if unlimited:
                best = qpos
            else:   # the SM with the most free capacity, the lowest index on ties
                while -slots[0][0] != free[slots[0][1]]:
                    pop(slots)
                if -slots[0][0] < units:
                    break
                best = pop(slots)[1]
                free[best] -= units
                push(slots, (-free[best], best))
            qpos += 1
            tile = ticket if st.order is None else st.order[ticket]
            dur = st.tile_time if skew == 0 else st.tile_time * skew_factor(si, tile, skew)
            b = _Block(si, tile, () if st.waits is None else st.waits[tile], units, best, dur)
            if b.steps.n:
                advance(b)
            else:
                push(events, (now + dur, seq, b))
                seq += 1
        if not events:
            break
        now, _, b = pop(events)
        if b is None:               # the launch gap is over: dispatch
            continue
        if b.step < b.steps.n:   # finished some steps, more to go
            advance(b)
            continue
        # block done
        finished += 1
        if not unlimited:
            free[b.sm] += b.units
            push(slots, (-free[b.sm], b.sm))
        st = stages[b.stage]
        done_per_stage[b.stage] += 1
        if done_per_stage[b.stage] == st.num_tiles:
            stage_end[st.name] = now
        if st.posts is not None:
            for k in st.posts[b.tile]:
                need[k] -= 1
                if need[k] == 0 and k in waiters:
                    for w in waiters.pop(k):
                        waiting -= 1
                        wait_time += now - w.since
                        advance(w)
    res = SimResult(time=now, finished_blocks=finished, total_blocks=total, stage_end=stage_end, wait_time=wait_time)
    if finished < total:
        res.deadlock = True
        res.waiting_blocks = waiting
        res.undispatched_blocks = len(queue) - qpos
        res.note = (f"deadlock at t={now:g}: {waiting} dispatched blocks wait on semaphores that no running "
                    f"block will post, {len(queue) - qpos} blocks cannot be dispatched")
    return res


def simulate_persistent(chain: Chain, num_sms: int, skew: float = 0.0) -> SimResult:
    """The ``persistent`` launch mode (module docstring): one launch of ``G = num_sms * min
    occupancy`` slots, slot ``s`` running the ordered queue's items ``s, s+G, ...`` in turn. An
    item's steps run as in :func:`simulate` (``tile_time / len(steps)`` each, ``wait_cost`` per
    step with a semaphore, parked on its first unposted semaphore while holding its slot)."""
    stages = chain.stages
    queue = [(si, k) for si, st in enumerate(stages) for k in range(st.num_tiles)]
    total = len(queue)
    G = min(total, num_sms * min(st.occupancy for st in stages))
    need = dict(chain.sem_values)    # posts each semaphore still needs (<= 0: posted)
    waiters: dict = {}               # semaphore -> slots parked on it
    events: list = []                # (time, seq, slot): the slot's current item ends some steps
    # per slot: [queue index, stage, tile, Steps, next step, next sync point, time, parked since]
    item: list = [None] * G
    done = [0] * len(stages)
    stage_end: dict = {}
    now, seq, finished, started, waiting, wait_time = 0.0, 0, 0, 0, 0, 0.0

    def advance(slot: int) -> None:
        """Run the ready steps of the slot's item (up to its first sync point whose semaphores are
        not all posted), or park it on its first unposted semaphore."""
        nonlocal seq, waiting
        it = item[slot]
        st = it[3]
        j, m, blocked = it[5], st.hi, None
        keys = st.keys
        if st.single:
            while j < m and need[keys[j]] <= 0:
                j += 1
            if j < m:
                blocked = keys[j]
        else:
            while j < m:
                blocked = next((k for k in keys[j] if need[k] > 0), None)
                if blocked is not None:
                    break
                j += 1
        n = (st.pos[j] if j < m else st.n) - it[4]
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
        nonlocal started
        si, ticket = queue[q]
        st = stages[si]
        tile = st.tile_of_ticket(ticket)
        steps = Steps.of(st.steps(tile))
        item[slot] = [q, si, tile, steps, 0, steps.lo, st.tile_time * skew_factor(si, tile, skew), 0.0]
        started += 1
        advance(slot)

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
                    for w in waiters.pop(k, []):
                        waiting -= 1
                        wait_time += now - item[w][7]
                        advance(w)
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


def critical_path(chain: Chain, skew: float = 0.0) -> float:
    """The finish time on an infinite machine (every block dispatched at time 0)."""
    return simulate(chain, 1, "ordered", unlimited=True, skew=skew).time


def stream_sync_time(chain: Chain, num_sms: int, launch_gap: float = 0.0, skew: float = 0.0) -> SimResult:
    """StreamSync: the stages one after the other on one stream, no semaphores, ``launch_gap``
    between them.  PDL alone is this with ``launch_gap=0``."""
    bare = Chain([Stage(s.name, s.num_tiles, s.occupancy, s.tile_time, None, None, None) for s in chain.stages], {})
    # (no semaphores, so no wait_cost either)
    return simulate(bare, num_sms, "stream", launch_gap=launch_gap, skew=skew)
