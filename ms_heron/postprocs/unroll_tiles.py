"""Carry out the Tensorize rule's unrolled packing tile, wherever the search placed the copy."""

from __future__ import annotations

from tvm import tirx
from tvm.s_tir import Schedule

from ..schedule import unchecked
from ..schedule.annotations import UNROLL_TILE
from ..schedule.options import heron_object
from .base import HeronPostproc


@heron_object
class UnrollTiles(HeronPostproc):
    """For every block annotated ``ms_heron.unroll_tile`` = n: its n innermost loops, where still
    serial, are unrolled, and the annotation removed. A padded weight's pad-and-pack copy walks
    VNNI's 16 x 4 tiles this way, so LLVM turns each tile into vector loads and shuffles. The rule
    cannot unroll them itself: the copy's place is sampled later, and ``compute_at`` regenerates its
    loops.
    """

    def apply(self, sch: Schedule) -> bool:
        # compute_at keeps the root's scope
        for block in unchecked.get_child_blocks(sch, unchecked.get_sblock(sch, "root")):
            count = unchecked.get(sch, block).annotations.get(UNROLL_TILE)
            if count is None:
                continue
            sch.unannotate(block, UNROLL_TILE)
            for loop in reversed(unchecked.get_loops(sch, block)[-int(count) :]):
                if unchecked.get(sch, loop).kind != tirx.ForKind.SERIAL:
                    break
                sch.unroll(loop)
        return True
