"""Carry out the loop rewrites a rule asks of a stage whose place the search samples."""

from __future__ import annotations

from tvm import tirx
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.postproc import PyPostproc
from tvm.s_tir.schedule import LoopRV, SBlockRV
from tvm.sym.pattern import detect_linear_equation
from tvm.tirx.analysis import undefined_vars

from ..annotations import UNROLL_TILE, VECTORIZE_LANES
from ..rules.analysis import block_realize
from ..rules.parallel_vectorize_unroll import vectorize_lanes


@derived_object
class PlacedStageLoops(PyPostproc):
    """A rule cannot rewrite the loops of a stage whose place is sampled later (``compute_at``
    regenerates them, and the number of loops depends on the place), so it leaves an annotation,
    which this postproc carries out on the loops the place produced, and removes:

    * ``ms_heron.unroll_tile`` = n: the n innermost loops, where still serial, are unrolled (a padded
      weight's pad-and-pack copy walks VNNI's 16 x 4 tiles, and LLVM turns each into vector loads
      and shuffles);
    * ``ms_heron.vectorize_lanes`` = n: the innermost loop, where still serial and stepping every
      access along its buffer's last axis, is vectorized over up to n lanes (a convolution's padding:
      copied scalar, the padding computed inside the tiles cost more than inlining its branch).
    """

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch: Schedule) -> bool:
        for block in sch.get_child_blocks(sch.get_sblock("root")):  # compute_at keeps the root's scope
            annotations = sch.get(block).annotations
            if UNROLL_TILE in annotations:
                sch.unannotate(block, UNROLL_TILE)
                for loop in reversed(sch.get_loops(block)[-int(annotations[UNROLL_TILE]):]):
                    if sch.get(loop).kind != tirx.ForKind.SERIAL:
                        break
                    sch.unroll(loop)
            if VECTORIZE_LANES in annotations:
                sch.unannotate(block, VECTORIZE_LANES)
                loops = sch.get_loops(block)
                if loops and _contiguous_along(sch, block, loops):
                    vectorize_lanes(sch, loops[-1], int(annotations[VECTORIZE_LANES]))
        return True

    def clone(self) -> "PlacedStageLoops":
        return PlacedStageLoops()


def _contiguous_along(sch: Schedule, block: SBlockRV, loops: list[LoopRV]) -> bool:
    """Whether the innermost loop is serial, inside no vector loop, and steps every access of the
    block one element at a time along the buffer's last axis, the write included (MetaSchedule's
    postproc vectorizes on the same condition: a transposing copy stays scalar)."""
    kinds = [sch.get(loop).kind for loop in loops]
    realize = block_realize(sch, block)
    if kinds[-1] != tirx.ForKind.SERIAL or tirx.ForKind.VECTORIZED in kinds or realize is None or len(realize.block.writes) != 1:
        return False
    loop_var = sch.get(loops[-1]).loop_var
    moved = [(iv.var, v) for iv, v in zip(realize.block.iter_vars, realize.iter_values)
             if any(u.same_as(loop_var) for u in undefined_vars(v))]
    if len(moved) != 1 or not _unit_step(moved[0][1], loop_var):
        return False  # the loop drives no iterator, or several, or one with a stride
    moved = moved[0][0]

    def along_last_axis(region) -> bool | None:
        axes = [i for i, r in enumerate(region.region) if any(v.same_as(moved) for v in undefined_vars(r.min))]
        return None if not axes else axes == [len(region.region) - 1] and _unit_step(region.region[-1].min, moved)

    return along_last_axis(realize.block.writes[0]) is True and all(
        along_last_axis(r) is not False for r in realize.block.reads)


def _unit_step(expr, var) -> bool:
    coefficients = detect_linear_equation(expr, [var])
    return len(coefficients) == 2 and isinstance(coefficients[0], tirx.IntImm) and int(coefficients[0]) == 1
