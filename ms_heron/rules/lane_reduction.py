"""Heron's rule for memory-bound row reductions: lane-wise partial sums (rfactor), parallel rows."""

import math

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import LoopRV, SBlockRV, ScheduleError

from ..targets import is_cpu, vector_bytes
from ..annotations import LANE_REDUCTION, iter_kinds
from .analysis import consumers, has_data_reuse, is_tiled, reduction_loops, working_block
from .base import HeronRule

#: Independent vector accumulators to try (most first): more hide the add latency of a long row.
_ACCUMULATORS = (4, 2, 1)


@derived_object
class LaneReduction(HeronRule):
    """Condition: a CPU reduction over rows that no tiling rule took (no data reuse: softmax's max
    and sum, layer norm's mean and variance) -- spatial loops outside, reduction loops inside -- whose
    innermost reduction extent is a multiple of the vector lanes (the Target's vector width over the
    output dtype).

    Application:

    * when every consumer sits under one loop over the same rows (the softmax or layer-norm
      output), ``compute_at`` that loop and parallelize it: the whole row kernel becomes one
      parallel pass, each row read while it is in cache (Heron's stage fusion);
    * split the reduction loop (its loops fused first when there are several, as in a norm over
      a matrix) into ``lanes x a`` partial results (``a`` vector
      accumulators, the most that divide the extent), ``rfactor`` them into a per-row buffer
      accumulated with the lanes innermost and vectorized, and reduce the lanes right after it, per
      row; parallelize the rows unless the consumer's loop already does.
    """

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        block = working_block(sch, block)
        if self.target is None or not is_cpu(self.target) or is_tiled(sch, block) or has_data_reuse(sch, block):
            return [sch]
        kinds, loops, blk = iter_kinds(sch, block), sch.get_loops(block), sch.get(block)
        rows = kinds.count("S")
        if (blk.init is None or len(blk.writes) != 1 or not rows or len(loops) != len(kinds)
                or kinds != ["S"] * rows + ["R"] * (len(kinds) - rows)):
            return [sch]
        lanes = vector_bytes(self.target) * 8 // tvm.DataType(str(blk.writes[0].source.dtype)).bits
        extent = math.prod(int(sch.get(lp).extent) for lp in loops[rows:])
        if lanes < 2 or int(sch.get(loops[-1]).extent) % lanes:
            return [sch]
        width = lanes * next(a for a in _ACCUMULATORS if extent % (lanes * a) == 0)
        row_count = math.prod(int(sch.get(lp).extent) for lp in loops[:rows])
        # TVM's rfactor fails (an internal check) on fused reduction loops moved under a consumer's loop.
        fused = len(kinds) - rows == 1 and _compute_at_consumer_rows(sch, block, row_count)
        reduction = sch.get_loops(block)[-(len(kinds) - rows):]  # one loop, as rfactor needs (a norm has two)
        _, lane = sch.split(sch.fuse(*reduction) if len(reduction) > 1 else reduction[0], [None, width])
        partial = sch.rfactor(lane, factor_axis=rows)
        row_loops = sch.get_loops(block)[:-1]  # the block now reduces the lanes only
        sch.compute_at(partial, row_loops[-1])  # regenerates the partials' loops in iterator order
        lane_loop, outer_loop = _lane_and_reduction_loop(sch, partial, len(row_loops))
        sch.reorder(outer_loop, lane_loop)
        sch.vectorize(lane_loop)
        if not fused:
            sch.parallel(sch.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0])
        sch.annotate(block, LANE_REDUCTION, width)
        return [sch]


def _compute_at_consumer_rows(sch: Schedule, block: SBlockRV, rows: int) -> bool:
    """Move ``block`` under the loop over its rows that all its consumers share, parallel; False if
    there is none."""
    outer = [sch.get_loops(c)[0] for c in consumers(sch, block) if sch.get_loops(c)]
    if not outer or len({sch.get(lp).loop_var.name for lp in outer}) != 1:
        return False
    loop: LoopRV = outer[0]
    if int(sch.get(loop).extent) != rows:
        return False
    try:
        sch.compute_at(block, loop)
    except ScheduleError:
        return False
    if sch.get(loop).kind != tvm.tirx.ForKind.PARALLEL:
        sch.parallel(loop)
    return True


def _lane_and_reduction_loop(sch: Schedule, partial: SBlockRV, outside: int) -> tuple[LoopRV, LoopRV]:
    """The partials' own loops below the ``outside`` row loops: the lanes (now spatial) and the rest
    of the reduction."""
    (reduction,) = reduction_loops(sch, partial)
    lane = next(lp for lp in sch.get_loops(partial)[outside:] if not sch.get(lp).same_as(sch.get(reduction)))
    return lane, reduction
