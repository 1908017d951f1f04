"""Heron's Add Multi-Scope SPM rule: inputs and output in separate on-chip scopes (GPU)."""

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from ..hardware.targets import is_cuda
from ..schedule.analysis import is_tiled, reused_reads, tile_levels, working_block
from ..schedule.options import heron_object
from .base import HeronRule


@heron_object
class MultiScopeSPM(HeronRule):
    """Condition: HasDataReuse (the block was tiled) and the target has several scratchpad
    scopes (CUDA: shared memory per block, registers per thread).

    Application: re-used inputs are ``cache_read`` into ``input_scope`` under the outer reduction
    tile loop, and the output is ``cache_write``-n into ``output_scope`` (the accumulator) written
    back under the outermost spatial tile level. Thread binding and cooperative fetch come with the
    GPU rules; on targets without scratchpad scopes this rule does nothing.

    Acts only on a block :class:`MultiLevelTiling` tiled (its tiling annotation); put it after.

    Parameters
    ----------
    input_scope
        Scope the re-used inputs are copied into.
    output_scope
        Scope of the accumulator.
    """

    def __init__(self, *, input_scope: str = "shared", output_scope: str = "local"):
        self.input_scope = input_scope
        self.output_scope = output_scope

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        block = working_block(sch, block)
        if self.target is None or not is_cuda(self.target) or not is_tiled(sch, block):
            return [sch]
        levels = tile_levels(sch, block)
        for index in reused_reads(sch, block):
            stage = sch.cache_read(block, index, self.input_scope)
            sch.compute_at(stage, levels["R0"][-1])
        acc = sch.cache_write(block, 0, self.output_scope)
        sch.reverse_compute_at(acc, tile_levels(sch, block)["S0"][-1])
        return [sch]
