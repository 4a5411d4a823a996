"""Device buffers of a CuSync stage, and the error a timed-out wait becomes (CUSYNC_DEBUG)."""
from __future__ import annotations

from cusyncgen.cuda.abi import StageArgs, TimelineStageArgs
from cusyncgen.cuda.lazy import cupy
from cusyncgen.errors import CusyncError

# cusync::DebugRecord (runtime_cuda/cusync/debug.h), int32 words
DEBUG_FIELDS = ("failed", "stage", "producer", "tile_x", "tile_y", "tile_z", "sem", "seen", "expected",
                "consumer_x", "consumer_y", "consumer_z", "block", "claimed")


class CusyncTimeoutError(CusyncError):
    """A wait spun past its timeout in a CUSYNC_DEBUG build: the chain is deadlocked or a producer
    never posted the semaphore the consumer waits for."""

    def __init__(self, message: str):
        super().__init__(message, None)


class Stage:
    """One kernel of a chain: its ticket counter, the semaphores it posts, a debug record.

    Zeroed once at creation and never reset: the runtime derives each launch's epoch from the
    ticket counter, so repeated launches and CUDA-graph replays need no memset.
    """

    def __init__(self, name: str, stage_id: int, num_out_sems: int, timeout_ms: float = 2000.0,
                 timeline_blocks: int = 0, splits: int = 1):
        self.name = name
        self.stage_id = stage_id
        self.splits = splits  # blocks per tile (split-K, kernels/splitk.cuh); its grid's z is tiles' z * splits
        self.ticket = cupy.zeros(1, dtype=cupy.uint64)
        self.sems = cupy.zeros(max(num_out_sems, 1), dtype=cupy.uint32)
        self.num_out_sems = num_out_sems
        self.debug = cupy.zeros(len(DEBUG_FIELDS), dtype=cupy.int32)
        self.timeout_ns = int(timeout_ms * 1e6)
        # CUSYNC_TIMELINE builds: 4 globaltimer words per block of the latest launch (see stage.h).
        self.timeline = cupy.zeros(4 * timeline_blocks, dtype=cupy.uint64) if timeline_blocks else None
        self.inputs: list[Stage | None] = [None, None]
        self.input_names: list[str] = ["", ""]

    def depends_on(self, producer: "Stage", input_index: int = 0, what: str = "") -> None:
        self.inputs[input_index] = producer
        self.input_names[input_index] = what or producer.name

    def args(self, flags: int = 0) -> StageArgs:
        """The kernel parameter; flags: cusync::StageFlags (cusyncgen.cuda.chain.steps decodes a
        Config into them). A timeline stage passes the CUSYNC_TIMELINE build's layout."""
        ins = [p.sems.data.ptr if p is not None else None for p in self.inputs]
        common = dict(ticket=self.ticket.data.ptr, out_sems=self.sems.data.ptr if self.num_out_sems else None,
                      in_sems0=ins[0], in_sems1=ins[1], debug=self.debug.data.ptr, timeout_ns=self.timeout_ns,
                      stage_id=self.stage_id, flags=flags, splits=self.splits)
        if self.timeline is None:
            return StageArgs(**common)
        return TimelineStageArgs(**common, timeline=self.timeline.data.ptr, timeline_capacity=self.timeline.size // 4)

    def raise_if_timed_out(self) -> None:
        """Call after synchronizing: turns the device's debug record into an exception."""
        rec = dict(zip(DEBUG_FIELDS, (int(v) for v in self.debug.get())))
        if rec["failed"] == 0:
            return
        producer = self.input_names[rec["producer"]] or f"input {rec['producer']}"
        raise CusyncTimeoutError(
            f"stage '{self.name}': the block computing tile ({rec['consumer_x']}, {rec['consumer_y']}, "
            f"{rec['consumer_z']}) timed out waiting for tile ({rec['tile_x']}, {rec['tile_y']}, {rec['tile_z']}) "
            f"of '{producer}': semaphore {rec['sem']} was {rec['seen'] & 0xFFFFFFFF}, "
            f"expected {rec['expected'] & 0xFFFFFFFF}")
