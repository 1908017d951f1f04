"""Heron's Add-Cache-Stage rule (and, with a fusible consumer, stage fusion at the same levels)."""

from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from ..annotations import CACHE_LEVEL
from .analysis import fusible_consumer, is_tiled, tile_levels, working_block
from .base import HeronRule



@derived_object
class AddCacheStage(HeronRule):
    """Condition: HasDataReuse (the block was multi-level tiled) and not HasFusibleConsumer.

    Application: ``cache_write`` the output into a ``scope`` accumulator and write it back under
    the tile loop of spatial level ``S<l>``, one design space per level in ``levels`` (Heron's
    position knob). When the block has a fusible consumer (bias, activation), that consumer is the
    write-back instead: it is ``reverse_compute_at`` the same levels (Heron's stage fusion).
    (The write-back's loops are left to LLVM's vectorizer: how many ``reverse_compute_at`` creates
    depends on the sampled tile sizes, so a trace cannot name its innermost loop.)
    """

    def __init__(self, levels: tuple = (0, 1), scope: str = "global"):
        self.levels = tuple(levels)
        self.scope = scope

    def _params(self):
        return {"levels": self.levels, "scope": self.scope}

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        block = working_block(sch, block)
        if not is_tiled(sch, block):
            return [sch]
        out = []
        for level in self.levels:
            fork = sch.copy() if len(self.levels) > 1 else sch
            tile = tile_levels(fork, block)
            key = f"S{level}"
            if key not in tile:
                continue
            stage = fusible_consumer(fork, block)
            if stage is None:
                stage = fork.cache_write(block, 0, self.scope)
            fork.reverse_compute_at(stage, tile[key][-1])
            fork.annotate(stage, CACHE_LEVEL, level)
            out.append(fork)
        return out or [sch]
