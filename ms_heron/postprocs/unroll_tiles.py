"""Carry out the Tensorize rule's unrolled packing tile, wherever the search placed the copy."""

from __future__ import annotations

from tvm import tirx
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.postproc import PyPostproc

from ..annotations import UNROLL_TILE


@derived_object
class UnrollTiles(PyPostproc):
    """For every block annotated ``ms_heron.unroll_tile`` = n: its n innermost loops, where still
    serial, are unrolled, and the annotation removed. A padded weight's pad-and-pack copy walks VNNI's
    16 x 4 tiles this way, so LLVM turns each tile into vector loads and shuffles. The rule cannot
    unroll them itself: the copy's place is sampled later, and ``compute_at`` regenerates its loops.
    """

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch: Schedule) -> bool:
        for block in sch.get_child_blocks(sch.get_sblock("root")):  # compute_at keeps the root's scope
            count = sch.get(block).annotations.get(UNROLL_TILE)
            if count is None:
                continue
            sch.unannotate(block, UNROLL_TILE)
            for loop in reversed(sch.get_loops(block)[-int(count):]):
                if sch.get(loop).kind != tirx.ForKind.SERIAL:
                    break
                sch.unroll(loop)
        return True

    def clone(self) -> "UnrollTiles":
        return UnrollTiles()
