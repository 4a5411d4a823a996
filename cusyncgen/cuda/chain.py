"""Run the n kernels of a chain under one of the orderings the benchmarks compare: the one place
where a Config becomes launches (streams, wait-kernels, PDL) and StageArgs flags.

Configurations, named as in the paper (W: no wait-kernel, T: no custom tile order, R: reordered
tile loads), plus Hopper's programmatic dependent launch:

- StreamSync: every kernel on one stream, plain (no semaphores): CUDA's stream order.
- PDL: plain kernels on one stream; each consumer is launched with programmatic stream
  serialization and waits for the whole producer grid with griddepcontrol.wait.
- <Policy>[+...]: tile semaphores. Ordering "waitkernel" (the paper: a stream per kernel, the
  wait-kernel before each consumer), "pdl" (one stream, the consumers PDL-launched, waiting on
  tile semaphores instead of griddepcontrol.wait) or "none" (W: a stream per kernel, no ordering:
  allowed only when every grid fits on the GPU at once, since a consumer could otherwise occupy
  every slot). "stream" with a policy runs the policy's kernels in stream order (a diagnostic:
  what posting and waiting cost with nothing to overlap).
- "persistent" (<Policy>+Chain): one launch for the whole chain, provided by a kernel family: each
  kernel after the first is `joined` to the first's launch; run() takes the family's launcher and
  refuses the ordering without one.

Every kernel family goes through steps(): the SM80 kernels through Chain.run, kernel by kernel
(StageArgs flags, streams, the wait-kernel), the sm90 library through cusyncgen.cuda.sm90.launch
(Sm90Chain: one plan per launch, its LaunchFlag from the Step; those flags are the library's own,
not StageFlag).
"""
from __future__ import annotations

import ctypes
import enum
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

from cusyncgen.cuda.configs import PDL_ALONE, STREAM_SYNC, Config, Ordering  # noqa: F401  (re-exported)
from cusyncgen.cuda.lazy import cupy, driver
from cusyncgen.errors import CusyncError

class StageFlag(enum.IntFlag):
    """cusync::StageFlags (runtime_cuda/cusync/stage.h): StageArgs.flags of the SM80 kernels."""

    NONE = 0
    CUSTOM_ORDER = 1   # take tiles in the generated order through the ticket counter
    PDL_TRIGGER = 2    # let the dependent (PDL-launched) grid start right away
    PDL_WAIT = 4       # "PDL alone": wait for the whole producer grid (griddepcontrol.wait)


@dataclass(frozen=True)
class Step:
    """How kernel i of a chain is launched under a Config."""

    flags: StageFlag    # StageArgs.flags
    pdl: bool           # launched with programmatic stream serialization
    early: bool         # may start before its producer ends, its blocks admitted as SMs free up
    side_stream: bool   # on the chain's stream i (forked from and joined to the caller's) instead of the caller's
    wait_kernel: bool   # the wait-kernel precedes it on its stream
    joined: bool = False  # runs in the previous kernel's launch (the kernel family's one persistent launch)


def steps(cfg: Config, n: int) -> list[Step]:
    """The one decoding of a Config into launches, kernel by kernel."""
    o = cfg.ordering
    custom = StageFlag.CUSTOM_ORDER if cfg.custom_order and cfg.policy is not None else StageFlag.NONE
    none = StageFlag.NONE
    out = []
    for i in range(n):
        first, last = i == 0, i == n - 1
        if o == Ordering.STREAM:
            out.append(Step(custom, False, False, False, False))
        elif o == Ordering.PDL_ALONE:
            flags = (none if last else StageFlag.PDL_TRIGGER) | (none if first else StageFlag.PDL_WAIT)
            out.append(Step(flags, not first, not first, False, False))
        elif o == Ordering.PDL:
            out.append(Step(custom | (none if last else StageFlag.PDL_TRIGGER), not first, not first, False, False))
        elif o == Ordering.WAITKERNEL:
            out.append(Step(custom, False, not first, True, not first))
        elif o == Ordering.NONE:
            # no spread padding: W's admission check counts the kernels' own blocks per SM
            out.append(Step(custom, False, False, True, False))
        elif o == Ordering.PERSISTENT:
            # one launch: every producer tile handed out before any consumer tile (the kernel family's)
            out.append(Step(custom, False, False, False, False, joined=not first))
        else:  # pragma: no cover - Ordering is closed
            raise CusyncError(f"ordering {o.value!r} has no launch decoding", None)
    return out


def launches(plan: list[Step]) -> list[list[int]]:
    """The kernels of each launch of a decoded chain, in order: one each, or the joined ones
    with the kernel they join."""
    out: list[list[int]] = []
    for i, step in enumerate(plan):
        if step.joined and out:
            out[-1].append(i)
        else:
            out.append([i])
    return out


# launch(stream, stage_args, step): one kernel of the chain
Launch = Callable[[object, object, Step], None]


class Link(NamedTuple):
    """One kernel of a chain: its Stage, how to launch it, and its blocks per launch (the tickets
    the wait-kernel counts)."""

    stage: object      # cusyncgen.cuda.stages.Stage
    launch: Launch
    tickets: int


class Chain:
    """Streams and events for a chain of n kernels (allocated once, reused). Earlier kernels get
    higher stream priorities (numerically lower), so their blocks are dispatched first."""

    def __init__(self, n: int, wait_kernel=None):
        lo, hi = driver.stream_priority_range()
        self.n = n
        self.streams = [cupy.cuda.Stream(non_blocking=True, priority=min(lo, hi + i)) for i in range(n)]
        self.wait_kernel = wait_kernel
        self._fork = cupy.cuda.Event(disable_timing=True)
        self._done = [cupy.cuda.Event(disable_timing=True) for _ in range(n)]

    def run(self, main, cfg: Config, links: Sequence[Link], persistent: Callable | None = None) -> None:
        """Launch `links` on `main` under `cfg`. persistent(main, cfg, links): the kernel family's
        one-launch chain, for Ordering.PERSISTENT."""
        if len(links) != self.n:
            raise ValueError(f"a chain of {self.n} kernels got {len(links)}")
        plan = steps(cfg, self.n)
        if any(s.joined for s in plan):
            if persistent is None:
                raise CusyncError(f"{cfg.name}: this kernel family has no one-launch (persistent) chain", None)
            persistent(main, cfg, links)
            return
        forked = any(s.side_stream for s in plan)
        if forked:
            self._fork.record(main)
        for i, (link, step) in enumerate(zip(links, plan)):
            s = self.streams[i] if step.side_stream else main
            if step.side_stream:
                s.wait_event(self._fork)
            if step.wait_kernel:
                prev = links[i - 1]
                self.wait_kernel.launch((1, 1, 1), [prev.stage.ticket, link.stage.ticket, ctypes.c_ulonglong(prev.tickets),
                                                    ctypes.c_ulonglong(link.tickets)], s)
            link.launch(s, link.stage.args(step.flags), step)
            if step.side_stream:
                self._done[i].record(s)
        if forked:
            for i, step in enumerate(plan):
                if step.side_stream:
                    main.wait_event(self._done[i])
