"""Run a producer kernel and its consumer under one of the orderings the benchmarks compare.

Configurations, named as in the paper (W: no wait-kernel, T: no custom tile order, R: reordered
tile loads), plus Hopper's programmatic dependent launch:

- StreamSync: both kernels on one stream, plain (no semaphores): CUDA's stream order.
- PDL: plain kernels on one stream; the consumer is launched with programmatic stream
  serialization and waits for the whole producer grid with griddepcontrol.wait.
- <Policy>[+...]: tile semaphores. Ordering "waitkernel" (the paper: two streams, the
  wait-kernel before the consumer), "pdl" (one stream, the consumer PDL-launched, waiting on tile
  semaphores instead of griddepcontrol.wait) or "none" (W: two streams, no ordering: allowed only
  when both grids fit on the GPU at once, since a consumer could otherwise occupy every slot).
"""
from __future__ import annotations

from typing import Callable

import cupy

from cusyncgen.cuda import driver
from cusyncgen.cuda.configs import PDL_ALONE, STREAM_SYNC, Config  # noqa: F401  (re-exported)
from cusyncgen.cuda.stages import Stage


Launch = Callable[[cupy.cuda.Stream, object, bool], None]  # (stream, StageArgs, pdl) -> None


class Chain:
    """Streams and events for one producer -> consumer pair (allocated once, reused)."""

    def __init__(self, wait_kernel=None):
        lo, hi = driver.stream_priority_range()
        # The producer gets the higher priority so its blocks are dispatched first.
        self.s_prod = cupy.cuda.Stream(non_blocking=True, priority=hi)
        self.s_cons = cupy.cuda.Stream(non_blocking=True, priority=lo)
        self.wait_kernel = wait_kernel
        self._events = [cupy.cuda.Event(disable_timing=True) for _ in range(3)]

    def run(self, main: cupy.cuda.Stream, cfg: Config, producer: Stage, consumer: Stage,
            launch_producer: Launch, launch_consumer: Launch, producer_tiles: int, consumer_tiles: int) -> None:
        if cfg.ordering == "stream":
            launch_producer(main, producer.args(), False)
            launch_consumer(main, consumer.args(), False)
            return
        if cfg.ordering == "pdl_alone":
            launch_producer(main, producer.args(pdl_trigger=True), False)
            launch_consumer(main, consumer.args(pdl_wait=True), True)
            return
        if cfg.ordering == "pdl":
            launch_producer(main, producer.args(cfg.custom_order, pdl_trigger=True), False)
            launch_consumer(main, consumer.args(cfg.custom_order), True)
            return
        fork, done_p, done_c = self._events
        fork.record(main)
        self.s_prod.wait_event(fork)
        self.s_cons.wait_event(fork)
        launch_producer(self.s_prod, producer.args(cfg.custom_order), False)
        if cfg.ordering == "waitkernel":
            self.wait_kernel.launch((1, 1, 1), [producer.ticket, consumer.ticket, _u64(producer_tiles), _u64(consumer_tiles)], self.s_cons)
        launch_consumer(self.s_cons, consumer.args(cfg.custom_order), False)
        done_p.record(self.s_prod)
        done_c.record(self.s_cons)
        main.wait_event(done_p)
        main.wait_event(done_c)


def _u64(v: int):
    import ctypes
    return ctypes.c_ulonglong(v)
