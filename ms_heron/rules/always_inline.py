"""Heron's Always-Inline rule."""

from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV
from tvm.s_tir.schedule.analysis import is_output_block

from .analysis import consumers, has_branch, has_data_reuse, is_injective, is_transpose
from .base import HeronRule


@derived_object
class AlwaysInline(HeronRule):
    """Condition: the block is strictly inlinable -- injective (spatial iterators only, no init),
    not an output, with consumers, without conditionals (inlining a padding ``if_then_else``
    would copy the branch into every use and hide the buffer a tensor intrinsic must read), and
    not a transpose feeding a GEMM-like block (an attention's ``Kᵀ`` inlined makes its vector loads
    strided gathers; :class:`.ComputeLocation` samples where it goes instead, inlined being one
    choice).

    Application: ``compute_inline`` into its consumers.
    """

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        if (
            not is_injective(sch, block)
            or is_output_block(sch, block)
            or not consumers(sch, block)
            or has_branch(sch, block)
            or (is_transpose(sch, block) and any(has_data_reuse(sch, c) for c in consumers(sch, block)))
        ):
            return [sch]
        sch.compute_inline(block)
        return [sch]
