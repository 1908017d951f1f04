"""Vectorize the zeroing of a tensorized block's accumulator tile along its rows."""

from __future__ import annotations

from tvm.s_tir import Schedule

from ..schedule.annotations import AUTO_TENSORIZE
from ..schedule.options import heron_object
from .base import HeronPostproc


@heron_object
class VectorizeTileInit(HeronPostproc):
    """Zero a multi-dimensional accumulator tile (AMX's 32 x 32) with vector stores along its rows.

    RewriteReductionBlock marks a tensorized block's init with an empty
    ``meta_schedule.auto_tensorize``, and RewriteTensorize then vectorizes the init's one loop
    (VNNI's 16 lanes) and refuses an init of several loops. Fusing AMX's two into one 1024-lane
    vector made LLVM take minutes per kernel; this vectorizes the row loop instead and takes the
    init off RewriteTensorize's list. Runs between the two postprocs.
    """

    def apply(self, sch: Schedule) -> bool:
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            self._vectorize_inits(sch, block)
        return True

    def _vectorize_inits(self, sch: Schedule, block) -> None:
        children = sch.get_child_blocks(block)
        for child in children:
            self._vectorize_inits(sch, child)
        if sch.get(block).annotations.get(AUTO_TENSORIZE, None) != "" or len(children) != 1:
            return
        loops = sch.get_loops(children[0])
        if len(loops) > 1:
            sch.vectorize(loops[-1])
            sch.unannotate(block, AUTO_TENSORIZE)
