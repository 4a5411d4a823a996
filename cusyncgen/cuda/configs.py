"""Names of the orderings and optimizations a chain runs under (no CUDA needed): StreamSync, PDL
alone, and <Policy>[+PDL][+W][R][T] as described in cusyncgen.cuda.chain."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Ordering(str, Enum):
    """How the kernels of a chain are ordered (cusyncgen.cuda.chain.steps decodes each)."""

    STREAM = "stream"          # one stream, CUDA's stream order (StreamSync; with a policy: its kernels, no overlap)
    PDL_ALONE = "pdl_alone"    # one stream, PDL; each kernel waits for the whole previous grid
    WAITKERNEL = "waitkernel"  # the paper: a stream per kernel, the wait-kernel before each consumer
    PDL = "pdl"                # one stream, PDL; consumers wait on tile semaphores
    NONE = "none"              # W: a stream per kernel, no ordering (every grid resident at once)
    # One persistent launch runs the whole chain ("<Policy>+Chain"; a kernel family whose kernels
    # provide it: the sm90 MLP): a workload offers it only where its `orderings` include it, and
    # Chain.run refuses it without the family's launcher.
    PERSISTENT = "persistent"


# The orderings of the sm80 kernel family (every workload).
SM80_ORDERINGS = frozenset({Ordering.STREAM, Ordering.PDL_ALONE, Ordering.WAITKERNEL, Ordering.PDL, Ordering.NONE})
# The orderings of the sm90 kernel family (cusyncgen.cuda.sm90): stream order, PDL alone, a policy
# with the consumer PDL-launched, and the one-launch chain.
SM90_ORDERINGS = frozenset({Ordering.STREAM, Ordering.PDL_ALONE, Ordering.PDL, Ordering.PERSISTENT})


@dataclass(frozen=True)
class Config:
    policy: str | None          # None: StreamSync / PDL-alone (plain kernels)
    ordering: Ordering = Ordering.WAITKERNEL
    custom_order: bool = True
    reorder: bool = False

    def __post_init__(self):
        object.__setattr__(self, "ordering", Ordering(self.ordering))

    @property
    def name(self) -> str:
        if self.policy is None:
            return "StreamSync" if self.ordering == Ordering.STREAM else "PDL"
        opts = ("W" if self.ordering == Ordering.NONE else "") + ("R" if self.reorder else "") + ("" if self.custom_order else "T")
        name = self.policy + {Ordering.PDL: "+PDL", Ordering.PERSISTENT: "+Chain"}.get(self.ordering, "")
        return name + (f"+{opts}" if opts else "")

    @classmethod
    def parse(cls, name: str) -> "Config":
        """The inverse of .name: "StreamSync", "PDL", "RowSync+PDL+RT", "TileSync+WRT", "RowSync+Chain", ..."""
        if name in ("StreamSync", "PDL"):
            return STREAM_SYNC if name == "StreamSync" else PDL_ALONE
        # the policy may itself hold '+' (one policy per dependency: "StridedSync+RowSync+TileSync");
        # the options are the trailing tokens: "PDL" or "Chain", then a token of W, R and T
        tokens = name.split("+")
        flags = tokens.pop() if len(tokens) > 1 and tokens[-1] and not set(tokens[-1]) - set("WRT") else ""
        launch = tokens.pop() if len(tokens) > 1 and tokens[-1] in ("PDL", "Chain") else ""
        policy = "+".join(tokens)
        if not policy or any("Sync" not in t or t == "StreamSync" for t in tokens):
            raise ValueError(f"not a configuration name: {name!r}")
        if "W" in flags and (launch or "T" not in flags):
            raise ValueError(f"not a configuration name: {name!r} (W goes with T and without PDL)")
        ordering = {"PDL": Ordering.PDL, "Chain": Ordering.PERSISTENT}.get(
            launch, Ordering.NONE if "W" in flags else Ordering.WAITKERNEL)
        cfg = cls(policy, ordering, "T" not in flags, "R" in flags)
        if cfg.name != name:
            raise ValueError(f"not a configuration name: {name!r} (did you mean {cfg.name!r}?)")
        return cfg


STREAM_SYNC = Config(None, Ordering.STREAM, False)
PDL_ALONE = Config(None, Ordering.PDL_ALONE, False)


def policy_configs(policies, orderings=SM80_ORDERINGS, w_ok: bool = False, reorder=(False, True)) -> list[Config]:
    """StreamSync, PDL alone, then per policy and reorder choice: the wait-kernel and PDL orderings
    with and without the custom tile order (T), and W where `w_ok` (every grid resident at once).
    Only the orderings the kernel family supports (`orderings`)."""
    out = [c for c in (STREAM_SYNC, PDL_ALONE) if c.ordering in orderings]
    for p in policies:
        for r in reorder:
            for ordering in (Ordering.WAITKERNEL, Ordering.PDL):
                if ordering in orderings:
                    out += [Config(p, ordering, True, r), Config(p, ordering, False, r)]
            if w_ok and Ordering.NONE in orderings:
                out.append(Config(p, Ordering.NONE, False, r))
    return out
