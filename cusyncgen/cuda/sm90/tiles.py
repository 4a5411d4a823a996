"""The tile configurations of the sm90 library, read from runtime_cuda/sm90/configs.def: the one
list from which the library's instantiations (lib.build compiles config.cu and stock.cu once per
line), its C table (plan.h, api.cu) and this module's CONFIGS come. Adding a configuration is one
line there. Also what a config's name says: its tile, and the grid an order walks."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cusyncgen.cuda.sm90.errors import Sm90Error
from cusyncgen.paths import data_path

CONFIGS_DEF = "configs.def"
_LINE = re.compile(r"^[ \t]*(CUSYNC_SM90_TILE|CUSYNC_SM90_STOCK)\(([^)]*)\)[ \t]*$", re.M)


def source_dir() -> Path:
    """runtime_cuda/sm90/ of a checkout, or its copy inside an installed wheel."""
    d = data_path("runtime_cuda") / "sm90"
    if not (d / "sm90_api.h").is_file():
        raise Sm90Error(f"cannot find sm90_api.h in {d} (the package's runtime sources)")
    return d


@dataclass(frozen=True)
class Tile:
    """One CUSYNC_SM90_TILE line: the synchronized GeMM's Config<BM, BN, BK, pingpong, epi_cols>
    (epi_cols > 0: the TMA-store epilogue staging that many columns at a time)."""

    name: str
    BM: int
    BN: int
    BK: int
    pingpong: bool = False
    epi_cols: int = 0

    def __post_init__(self):
        if self.pingpong and self.epi_cols:
            raise Sm90Error(f"tile config {self.name}: ping-pong has no TMA-store epilogue")
        if self.name != self.expected_name:
            raise Sm90Error(f"tile config {self.name}: its fields name it {self.expected_name}")

    @property
    def expected_name(self) -> str:
        return f"{self.BM}x{self.BN}x{self.BK}" + ("pp" if self.pingpong else "tma" if self.epi_cols else "")

    @property
    def defines(self) -> list[str]:
        """config.cu's -D flags for this configuration."""
        return [f"-DCUSYNC_SM90_TILE_FN=plan_{self.name}", f"-DCUSYNC_SM90_BM={self.BM}", f"-DCUSYNC_SM90_BN={self.BN}",
                f"-DCUSYNC_SM90_BK={self.BK}", f"-DCUSYNC_SM90_PINGPONG={int(self.pingpong)}",
                f"-DCUSYNC_SM90_EPI_COLS={self.epi_cols}"]


@dataclass(frozen=True)
class StockTile:
    """One CUSYNC_SM90_STOCK line: the stock CUTLASS reference kernels of that tile (stock_ref.cuh)."""

    name: str
    BM: int
    BN: int
    BK: int

    def __post_init__(self):
        if self.name != f"{self.BM}x{self.BN}x{self.BK}":
            raise Sm90Error(f"stock config {self.name}: its fields name it {self.BM}x{self.BN}x{self.BK}")

    @property
    def defines(self) -> list[str]:
        """stock.cu's -D flags for this configuration."""
        return [f"-DCUSYNC_SM90_STOCK_FN=stock_{self.name}", f"-DCUSYNC_SM90_BM={self.BM}",
                f"-DCUSYNC_SM90_BN={self.BN}", f"-DCUSYNC_SM90_BK={self.BK}"]


def parse_configs(text: str, where: str = CONFIGS_DEF) -> tuple[tuple[Tile, ...], tuple[StockTile, ...]]:
    """The TILE and STOCK lines of a configs.def text, in order: lines that hold the macro call
    alone (its #define and comment lines are not entries)."""
    tiles, stock = [], []
    for m in _LINE.finditer(text):
        fields = [f.strip() for f in m.group(2).split(",")]
        line = text.count("\n", 0, m.start()) + 1
        try:
            if m.group(1) == "CUSYNC_SM90_TILE":
                name, bm, bn, bk, pp, epi = fields
                tiles.append(Tile(name, int(bm), int(bn), int(bk), bool(int(pp)), int(epi)))
            else:
                name, bm, bn, bk = fields
                stock.append(StockTile(name, int(bm), int(bn), int(bk)))
        except ValueError:
            raise Sm90Error(f"{where}:{line}: not a {m.group(1)} line: {m.group(0).strip()}") from None
        except Sm90Error as e:
            raise Sm90Error(f"{where}:{line}: {e.message}") from None
    names = [t.name for t in tiles]
    if len(set(names)) != len(names) or not tiles:
        raise Sm90Error(f"{where}: {'a tile config is listed twice' if tiles else 'no tile config'}")
    return tuple(tiles), tuple(stock)


@lru_cache(maxsize=None)
def table() -> tuple[tuple[Tile, ...], tuple[StockTile, ...]]:
    path = source_dir() / CONFIGS_DEF
    return parse_configs(path.read_text(), str(path))


TILES: tuple[Tile, ...] = table()[0]
STOCK_TILES: tuple[StockTile, ...] = table()[1]
# the names, in configs.def's order ("pp": ping-pong, "tma": the TMA-store epilogue)
CONFIGS: tuple[str, ...] = tuple(t.name for t in TILES)
STOCK_CONFIGS: tuple[str, ...] = tuple(t.name for t in STOCK_TILES)


def tile_dims(config: str) -> tuple:
    """(BM, BN, BK) of a config name "<BM>x<BN>x<BK>[pp|tma|c2]" ("pp": the ping-pong form; "tma": the
    TMA-store epilogue; "c2": clusters of two CTAs along M sharing B through TMA multicast)."""
    bm, bn, bk = (int(v) for v in config.removesuffix("pp").removesuffix("tma").removesuffix("c2").split("x"))
    return bm, bn, bk


def cluster_m(config: str) -> int:
    return 2 if config.endswith("c2") else 1


def order_grid(config: str, M: int, N: int) -> tuple:
    """(X, Y) of the grid an order walks: N / BN column blocks by the row blocks, or, with clusters of
    two CTAs along M, by the pairs of row blocks (each item is a pair, one row block per CTA)."""
    bm, bn, _ = tile_dims(config)
    cm = cluster_m(config)
    return N // bn, -(-(-(-M // bm)) // cm)
