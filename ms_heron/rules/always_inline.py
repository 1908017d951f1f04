"""Heron's Always-Inline rule."""

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV, ScheduleError
from tvm.s_tir.schedule.analysis import is_output_block

from ..schedule.analysis import (
    fusible_consumer,
    is_injective,
    is_tiled,
    is_transpose,
    strictly_inlinable,
)
from ..schedule.options import heron_object
from .base import HeronRule


@heron_object
class AlwaysInline(HeronRule):
    """Condition: the block is strictly inlinable (:func:`~.analysis.strictly_inlinable`) -- a
    transpose feeding a GEMM-like block is kept: an attention's ``Kᵀ`` inlined makes its vector
    loads strided gathers; :class:`.ComputeLocation` samples where it goes instead, inlined being
    one choice.

    Application: ``compute_inline`` into its consumers. An element-wise block that stays (one with
    selects, such as a Winograd output transform, whose loops the lowering laid out tile by tile)
    takes the function's element-wise epilogue, its output block, in instead
    (``reverse_compute_inline``): one pass over memory instead of two for a ResNet's bias, residual
    add and ReLU after the convolution.
    """

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        if strictly_inlinable(sch, block):
            sch.compute_inline(block)
        elif is_injective(sch, block) and not is_tiled(sch, block):
            epilogue = fusible_consumer(sch, block)
            # the function's own epilogue only: a stage a rule added (an operand's pack) is placed
            # by its rule, which must still find it
            if (
                epilogue is not None
                and is_output_block(sch, epilogue)
                and not is_transpose(sch, epilogue)
            ):
                try:
                    sch.reverse_compute_inline(epilogue)
                except ScheduleError:  # it reads the block other than pixel for pixel
                    pass
        return [sch]
