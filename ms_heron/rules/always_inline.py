"""Heron's Always-Inline rule."""

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from ..schedule.analysis import strictly_inlinable
from ..schedule.options import heron_object
from .base import HeronRule


@heron_object
class AlwaysInline(HeronRule):
    """Condition: the block is strictly inlinable (:func:`~.analysis.strictly_inlinable`) -- a
    transpose feeding a GEMM-like block is kept: an attention's ``Kᵀ`` inlined makes its vector
    loads strided gathers; :class:`.ComputeLocation` samples where it goes instead, inlined being
    one choice.

    Application: ``compute_inline`` into its consumers.
    """

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        if strictly_inlinable(sch, block):
            sch.compute_inline(block)
        return [sch]
