"""Names of the orderings and optimizations a chain runs under (no CUDA needed): StreamSync, PDL
alone, and <Policy>[+PDL][+W][R][T] as described in cusyncgen.cuda.chain."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    policy: str | None          # None: StreamSync / PDL-alone (plain kernels)
    ordering: str = "waitkernel"  # "stream", "pdl_alone", "waitkernel", "pdl", "none"
    custom_order: bool = True
    reorder: bool = False

    @property
    def name(self) -> str:
        if self.policy is None:
            return "StreamSync" if self.ordering == "stream" else "PDL"
        opts = ("W" if self.ordering == "none" else "") + ("R" if self.reorder else "") + ("" if self.custom_order else "T")
        name = self.policy + ("+PDL" if self.ordering == "pdl" else "")
        return name + (f"+{opts}" if opts else "")

    @classmethod
    def parse(cls, name: str) -> "Config":
        """The inverse of .name: "StreamSync", "PDL", "RowSync+PDL+RT", "TileSync+WRT", ..."""
        if name in ("StreamSync", "PDL"):
            return STREAM_SYNC if name == "StreamSync" else PDL_ALONE
        # the policy may itself hold '+' (one policy per dependency: "StridedSync+RowSync+TileSync");
        # the options are the trailing tokens: "PDL", then a token of W, R and T
        tokens = name.split("+")
        flags = tokens.pop() if len(tokens) > 1 and tokens[-1] and not set(tokens[-1]) - set("WRT") else ""
        pdl = len(tokens) > 1 and tokens[-1] == "PDL"
        if pdl:
            tokens.pop()
        policy = "+".join(tokens)
        if not policy or any("Sync" not in t or t == "StreamSync" for t in tokens):
            raise ValueError(f"not a configuration name: {name!r}")
        if "W" in flags and (pdl or "T" not in flags):
            raise ValueError(f"not a configuration name: {name!r} (W goes with T and without PDL)")
        ordering = "pdl" if pdl else "none" if "W" in flags else "waitkernel"
        cfg = cls(policy, ordering, "T" not in flags, "R" in flags)
        if cfg.name != name:
            raise ValueError(f"not a configuration name: {name!r} (did you mean {cfg.name!r}?)")
        return cfg


STREAM_SYNC = Config(None, "stream", False)
PDL_ALONE = Config(None, "pdl_alone", False)
