"""Heron's rule for memory-bound row reductions: lane-wise partial sums (rfactor), parallel rows."""

import math

import tvm
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import LoopRV, SBlockRV, ScheduleError

from ..hardware.targets import is_cpu, vector_bytes
from ..schedule.analysis import consumers, has_data_reuse, is_tiled, reduction_loops, working_block
from ..schedule.annotations import LANE_REDUCTION, iter_kinds
from ..schedule.options import heron_object
from .base import HeronRule

#: Independent vector accumulators to try (most first): more hide the add latency of a long row.
_ACCUMULATORS = (4, 2, 1)

#: The narrowest vector the rule splits a row into, in bytes: x86's and NEON's 128-bit registers.
#: Narrower "vectors" are scalar code, which MetaSchedule's own space already covers.
_NARROWEST_VECTOR = 16


@heron_object
class LaneReduction(HeronRule):
    """Condition: a CPU reduction over rows that no tiling rule took (no data reuse: softmax's max
    and sum, layer norm's mean and variance) -- spatial loops outside, reduction loops inside --
    whose innermost reduction extent is a multiple of the vector lanes: the widest vector, from the
    Target's width down to 128 bits, that divides it. Half-width vectors keep a ragged row fast:
    Whisper's 1500-token attention rows are 187.5 AVX2 vectors but 375 SSE ones, and its softmax
    with 4 lanes ran 2.1x faster than the best of MetaSchedule's scalar space after a 2-minute run
    (the 8-lane kernel on rows padded to 1504: 2.5x).

    Application:

    * when every consumer sits under one loop over the same rows (the softmax or layer-norm
      output), ``compute_at`` that loop and parallelize it: the whole row kernel becomes one
      parallel pass, each row read while it is in cache (Heron's stage fusion);
    * split the reduction loop (its loops fused first when there are several, as in a norm over
      a matrix) into ``a x lanes`` partial results (``a`` independent vector accumulators, the
      most that divide the extent), ``rfactor`` them into a per-row buffer accumulated with the
      lanes innermost and vectorized, fold the ``a`` vectors into one (a second ``rfactor``,
      vectorized) and reduce its lanes right after, per row, so the scalar step is one vector
      long whatever ``a`` is; parallelize the rows unless the consumer's loop already does.
    """

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        block = working_block(sch, block)
        if (
            self.target is None
            or not is_cpu(self.target)
            or is_tiled(sch, block)
            or has_data_reuse(sch, block)
        ):
            return [sch]
        kinds, loops, blk = iter_kinds(sch, block), sch.get_loops(block), sch.get(block)
        rows = kinds.count("S")
        if (
            blk.init is None
            or len(blk.writes) != 1
            or not rows
            or len(loops) != len(kinds)
            or kinds != ["S"] * rows + ["R"] * (len(kinds) - rows)
        ):
            return [sch]
        lanes = _row_lanes(
            int(sch.get(loops[-1]).extent),
            vector_bytes(self.target),
            tvm.DataType(str(blk.writes[0].source.dtype)).bits,
        )
        if lanes is None:
            return [sch]
        extent = math.prod(int(sch.get(lp).extent) for lp in loops[rows:])
        accumulators = next(a for a in _ACCUMULATORS if extent % (lanes * a) == 0)
        row_count = math.prod(int(sch.get(lp).extent) for lp in loops[:rows])
        reduction = loops[rows:]  # one loop, as rfactor needs (a norm has two)
        reduction = sch.fuse(*reduction) if len(reduction) > 1 else reduction[0]
        _, vectors, lane = sch.split(reduction, [None, accumulators, lanes])
        vectors_var = sch.get(vectors).loop_var.name
        # One vector of partial results per row, then (with several accumulators) the accumulators
        # each vector lane sums: ``partial[row, lane] = sum_a acc[row, a, lane]``. Factored out
        # while the block still has loops of its own: TVM's rfactor fails an internal check on
        # fused reduction loops moved under a consumer's loop.
        partials = [sch.rfactor(lane, factor_axis=rows)]
        if accumulators > 1:
            partials.append(
                sch.rfactor(_loop_named(sch, partials[0], vectors_var), factor_axis=rows)
            )
        fused = len(kinds) - rows == 1 and _compute_at_consumer_rows(sch, block, row_count)
        row_loops = sch.get_loops(block)[:-1]  # the block now reduces one vector's lanes
        for partial in partials:
            # regenerates the partials' loops in iterator order
            sch.compute_at(partial, row_loops[-1])
            spatial, reduced = _lanes_and_reduction(sch, partial, len(row_loops))
            sch.reorder(*reduced, *spatial)
            sch.vectorize(sch.fuse(*spatial) if len(spatial) > 1 else spatial[0])
        if not fused:
            sch.parallel(sch.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0])
        sch.annotate(block, LANE_REDUCTION, lanes * accumulators)
        return [sch]


def _row_lanes(innermost: int, widest_bytes: int, bits: int) -> int | None:
    """The lanes of the widest vector, ``widest_bytes`` down to :data:`_NARROWEST_VECTOR`, whose
    lanes divide the innermost reduction extent (None: none does)."""
    width = widest_bytes
    while width >= _NARROWEST_VECTOR:
        lanes = width * 8 // bits
        if lanes >= 2 and innermost % lanes == 0:
            return lanes
        width //= 2
    return None


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


def _loop_named(sch: Schedule, block: SBlockRV, name: str) -> LoopRV:
    """The loop of ``block`` whose variable is named ``name`` (rfactor copies loops, names kept)."""
    return next(lp for lp in sch.get_loops(block) if sch.get(lp).loop_var.name == name)


def _lanes_and_reduction(
    sch: Schedule, partial: SBlockRV, outside: int
) -> tuple[list[LoopRV], list[LoopRV]]:
    """The partials' own loops below the ``outside`` row loops: the spatial ones (lanes, and the
    accumulators) and the reduction ones."""
    reduced = [sch.get(lp).loop_var for lp in reduction_loops(sch, partial)]
    own = sch.get_loops(partial)[outside:]
    is_reduced = [any(sch.get(lp).loop_var.same_as(v) for v in reduced) for lp in own]
    return [lp for lp, r in zip(own, is_reduced) if not r], [
        lp for lp, r in zip(own, is_reduced) if r
    ]
