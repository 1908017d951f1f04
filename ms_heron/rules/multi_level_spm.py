"""Heron's Add Multi-level SPM rule, CPU form: tile buffers for re-used inputs."""

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from ..hardware.targets import is_cpu
from ..schedule.analysis import (
    is_constant_weight,
    is_tiled,
    reused_reads,
    tile_levels,
    working_block,
)
from ..schedule.annotations import SPM_LEVEL
from ..schedule.options import check, heron_object
from .base import HeronRule


@heron_object
class MultiLevelSPM(HeronRule):
    """Condition: HasDataReuse (the block was tiled) and the target has a multi-level memory
    hierarchy (every CPU: L1/L2 below DRAM).

    Application: two design spaces -- the block unchanged, and every re-used input copied by
    ``cache_read`` into a contiguous ``scope`` buffer under the outer reduction tile loop (level
    ``R<level>``), so one tile's operands are packed once and stay in cache while the register
    tiles sweep them (the CPU analogue of Heron's shared-memory stage). A constant weight is not
    copied, neither a layout-free one nor the Tensorize rule's packed copy of one
    (:func:`~ms_heron.schedule.analysis.is_constant_weight`): both are laid out at compile time, so
    the copy would only move it again, every call (ViT's FFN output GEMM with its weight copied ran
    3.95 ms warm, 2.93 ms without the copy, on an Emerald Rapids; BERT-base's int8 FFN GEMM for
    AVX2 with its packed weight copied, 2.69-3.00 against 2.59-2.66 ms without, timed in turn on a
    Zen 3).

    Acts only on a block :class:`MultiLevelTiling` tiled (its tiling annotation); put it after.

    Parameters
    ----------
    level
        The reduction tile level (``R<level>``) the copies sit under.
    scope
        Storage scope of the copies.
    """

    def __init__(self, *, level: int = 0, scope: str = "global"):
        check(
            isinstance(level, int) and level >= 0,
            f"MultiLevelSPM(level={level!r}): give a reduction tile level >= 0",
        )
        self.level = level
        self.scope = scope

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        block = working_block(sch, block)
        if self.target is None or not is_cpu(self.target) or not is_tiled(sch, block):
            return [sch]
        key = f"R{self.level}"
        if key not in tile_levels(sch, block):
            return [sch]
        reads = [
            index
            for index in reused_reads(sch, block)
            if not is_constant_weight(sch, sch.get(block).reads[index].source)
        ]
        if not reads:
            return [sch]
        fork = sch.copy()
        anchor = tile_levels(fork, block)[key][-1]
        for index in reads:
            stage = fork.cache_read(block, index, self.scope)
            fork.compute_at(stage, anchor)
            fork.annotate(stage, SPM_LEVEL, self.level)
        return [sch, fork]
