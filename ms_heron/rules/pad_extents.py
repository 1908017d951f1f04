"""Padding as a design decision: a reduction block's awkward extents padded to a tileable multiple.

Perfect tiling splits an extent into its divisors, so a prime extent (ViT's 197 tokens, a 127-token
sequence, 771 channels) leaves only tiles of 1 or of the whole extent, and an innermost extent that
is not a multiple of the vector lanes (1000 classes) leaves a partial vector in every row.
TensorIR's ``pad_einsum`` pads the block's iteration domain instead: the inputs are copied into
zero-padded buffers once per call, the block computes the padded problem, and its consumer reads the
result back (:mod:`ms_heron.schedule.padding`), fused into the tile's write-back by the tiling rule.
"""

from __future__ import annotations

from tvm import DataType, tirx
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV, ScheduleError

from ..hardware.targets import is_cpu, vector_bytes
from ..schedule.analysis import (
    extents,
    has_data_reuse,
    is_tensorized,
    is_tiled,
    lane_iterator,
    padded_volume_ratio,
)
from ..schedule.annotations import iter_kinds
from ..schedule.options import check, heron_object
from ..schedule.padding import pad_einsum
from .base import HeronRule
from .tensorize import matching_intrinsics

#: A non-lane extent is padded when it has no divisor in this range (no tile worth the name).
_USEFUL_TILES = range(4, 65)
#: Multiple a padded non-lane extent is rounded up to: tiles of 2, 4 and 8 at least.
_TILE_MULTIPLE = 8


@heron_object
class PadExtents(HeronRule):
    """Condition: a CPU reduction block with data reuse (GEMM-like), not tiled or tensorized yet,
    whose accesses are an einsum (every index a bare iterator), with an awkward extent: the lane
    iterator's is not a multiple of the vector lanes, or another iterator's has no divisor from 4 to
    64 (a prime, or twice a prime).

    Application: two design spaces, the block as it is and the block padded by ``pad_einsum``: the
    lane extent to a multiple of the lanes, with ``tile_extents`` the other awkward extents to a
    multiple of 8. Paddings
    that would make the padded iteration volume more than ``1 + max_waste`` times the true volume
    are left out, the costliest first. The tiling rules then split the padded extents, and the
    constraint model, which reads extents from the trace's tile decisions, knows them.

    Parameters
    ----------
    max_waste
        The largest share of extra work padding may add (0.15: at most 15% more multiply-adds).
    tile_extents
        Also pad the non-lane extents without a useful divisor (ViT's 197 tokens to 200). On by
        default: in ViT's tasks on a Zen 4 (96 trials each, fused epilogues as in the network) it
        took the FFN-in matmul from 86% to 95% of its bound, FFN-out and QKV from 86% to 91%. It
        was off after a Zen 5 run at 64 trials on bare GEMMs
        (``bench/results/tuning_vs_default_heron_fp32_64_awkward_tile_extents.md``), before the
        search spread its trials by expected gain.
    """

    def __init__(self, *, max_waste: float = 0.15, tile_extents: bool = True):
        check(
            max_waste >= 0.0,
            f"PadExtents(max_waste={max_waste!r}): give the extra share of work padding may add, "
            ">= 0",
        )
        self.max_waste = max_waste
        self.tile_extents = tile_extents

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        # Tensorize pads those to its tiles
        if (
            self.target is None
            or not is_cpu(self.target)
            or is_tiled(sch, block)
            or is_tensorized(sch, block)
            or not has_data_reuse(sch, block)
            or not _is_einsum(sch.get(block))
            or matching_intrinsics(sch, block, self.target)
        ):
            return [sch]
        padding = self.padding(sch, block)
        if padding is None:
            return [sch]
        padded = sch.copy()
        try:
            pad_einsum(padded, block, padding)
        except ScheduleError:  # TVM's own conditions (trivial binding, no opaque access) not met
            return [sch]
        return [sch, padded]

    def padding(self, sch: Schedule, block: SBlockRV) -> list[int] | None:
        """Each iterator's padding multiple (1: left as it is); None when nothing is worth
        padding."""
        blk = sch.get(block)
        sizes = extents(blk)
        lanes = max(
            1, vector_bytes(self.target) * 8 // DataType(str(blk.writes[0].source.dtype)).bits
        )
        lane = lane_iterator(sch, block, self.target)
        multiples = [1] * len(sizes)
        for index, extent in enumerate(sizes):
            if index == lane and iter_kinds(sch, block)[index] == "S":
                multiples[index] = lanes if extent % lanes else 1
            elif (
                self.tile_extents
                and extent > _TILE_MULTIPLE
                and not any(extent % d == 0 for d in _USEFUL_TILES)
            ):
                multiples[index] = _TILE_MULTIPLE
        while (
            any(m > 1 for m in multiples)
            and padded_volume_ratio(sizes, multiples) > 1 + self.max_waste
        ):
            costliest = max(
                (i for i, m in enumerate(multiples) if m > 1),
                key=lambda i: -(-sizes[i] // multiples[i]) * multiples[i] / sizes[i],
            )
            multiples[costliest] = 1
        return multiples if any(m > 1 for m in multiples) else None


def _is_einsum(blk) -> bool:
    """Every buffer index a bare block iterator or a constant (what ``pad_einsum`` accepts)."""
    regions = [*blk.reads, *blk.writes]
    return all(
        isinstance(r.min, (tirx.Var, tirx.IntImm)) and int(r.extent) == 1
        for region in regions
        for r in region.region
    )
