"""Heron's Multi-Level-Tiling rule."""

from __future__ import annotations

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from ..schedule.analysis import has_data_reuse, is_tiled, lane_iterator, working_block
from ..schedule.annotations import TILING_STRUCTURE, iter_kinds
from ..schedule.options import check, heron_object
from .base import HeronRule


@heron_object
class MultiLevelTiling(HeronRule):
    """Condition: HasDataReuse -- a reduction block with a read that ignores some spatial
    iterator (so tiles of it are re-used across that iterator).

    Application: split every loop into as many levels as its kind has in ``structure`` (factors
    sampled with ``SamplePerfectTile``, so they multiply to the extent), reorder into the structure
    (CPU default "SSRSRS": parallel tiles, cache tiles, outer reduction, register tiles, inner
    reduction, vector lanes) and record the structure on the block for the rules after it.
    For a tensorized block the outer (non-intrinsic) loops are tiled.

    The innermost level is the register micro-tile, and its last loop the vector lanes. They run
    along the block's last spatial iterator, unless that one cannot fill whole vectors while another
    can and every operand read along it is stored, or may be re-laid out, with it contiguous (see
    :func:`lane_iterator`): an NCHW convolution over 56 columns then vectorizes its 64 output
    channels, with the weights re-laid out by MetaSchedule's RewriteLayout.

    The rules after it (:class:`AddCacheStage`, :class:`MultiLevelSPM`, :class:`PackOperand`,
    :class:`LaneReduction`, :class:`ParallelVectorizeUnroll`) act on the tiling annotation it
    leaves.

    Parameters
    ----------
    structure
        Tile levels outermost first, ``S`` spatial and ``R`` reduction, each at least once.
    max_innermost_factor
        Largest factor sampled for the innermost level of each loop.
    """

    def __init__(self, *, structure: str = "SSRSRS", max_innermost_factor: int = 64):
        check(
            not set(structure) - {"S", "R"} and "S" in structure and "R" in structure,
            f"MultiLevelTiling(structure={structure!r}): use 'S' and 'R' only, each at least once, "
            "such as 'SSRSRS'",
        )
        check(
            isinstance(max_innermost_factor, int) and max_innermost_factor >= 1,
            f"MultiLevelTiling(max_innermost_factor={max_innermost_factor!r}): give a whole number "
            ">= 1",
        )
        self.structure = structure
        self.max_innermost_factor = max_innermost_factor

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        block = working_block(sch, block)
        if is_tiled(sch, block) or not has_data_reuse(sch, block):
            return [sch]
        loops = sch.get_loops(block)
        kinds = iter_kinds(sch, block)
        if len(loops) != len(kinds) or "O" in kinds:
            return [sch]  # loops not one-to-one with iterators: not a pattern this rule knows
        lane = lane_iterator(sch, block, self.target) if self.structure.endswith("S") else None
        levels = {c: [[] for _ in range(self.structure.count(c))] for c in "SR"}
        for index, (loop, kind) in enumerate(zip(loops, kinds)):
            n = len(levels[kind])
            factors = sch.sample_perfect_tile(
                loop, n=n, max_innermost_factor=self.max_innermost_factor
            )
            for level, part in zip(levels[kind], sch.split(loop, factors)):
                level.append((index == lane, part))
        order, seen = [], {"S": 0, "R": 0}
        for c in self.structure:
            order += [part for _, part in levels[c][seen[c]]]
            seen[c] += 1
        micro = len(levels["S"][-1])
        # the lane iterator last in the micro-tile (a stable sort: the others keep their order)
        order[-micro:] = [part for _, part in sorted(levels["S"][-1], key=lambda item: item[0])]
        sch.reorder(*order)
        sch.annotate(block, TILING_STRUCTURE, self.structure)
        return [sch]
