"""The zeroing of an accumulator tile: vectorized along its rows, and kept a loop where it is
large."""

from __future__ import annotations

import math

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV
from tvm.tirx import ForKind, IntImm

from ..schedule import unchecked
from ..schedule.analysis import reduction_loops
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
        for block in _blocks(sch, unchecked.get_sblock(sch, "root")):
            children = unchecked.get_child_blocks(sch, block)
            if (
                unchecked.get(sch, block).annotations.get(AUTO_TENSORIZE, None) != ""
                or len(children) != 1
            ):
                continue
            loops = unchecked.get_loops(sch, children[0])
            if len(loops) > 1:
                sch.vectorize(loops[-1])
                sch.unannotate(block, AUTO_TENSORIZE)
        return True


@heron_object
class FuseTileInit(HeronPostproc):
    """Zero an accumulator tile larger than one micro-tile in one loop over micro-tile chunks.

    Where the reduction is split at an outer level, RewriteReductionBlock puts the init before it,
    over every micro-tile the block sweeps (a 14 x 14 x 1024 int8 convolution's: 12544 vector
    stores in a nest of constant loops). LLVM unrolled that nest into one basic block and its code
    generator took 2 minutes on it: the candidate timed out in the builder, and 5 of a ResNet's
    first rounds waited 70 s each on such builds. The init's own loops are fused into one, apart
    from the innermost ones that zero at most one micro-tile (what the update's spatial loops
    inside its reduction cover), which LLVM unrolls into that loop's body. An init of one
    micro-tile is left as it is: unrolled, its accumulators stay in registers. Runs after
    RewriteReductionBlock (which names the two blocks ``*_init`` and ``*_update``).
    """

    def apply(self, sch: Schedule) -> bool:
        names = {
            unchecked.get(sch, b).name_hint: b
            for b in _blocks(sch, unchecked.get_sblock(sch, "root"))
        }
        for name, init in names.items():
            update = (
                names.get(name.removesuffix("_init") + "_update")
                if name.endswith("_init")
                else None
            )
            if update is not None:
                _fuse_init(sch, init, update)
        return True


def _blocks(sch: Schedule, parent: SBlockRV) -> list[SBlockRV]:
    """Every block under ``parent``, depth first."""
    out = []
    for child in unchecked.get_child_blocks(sch, parent):
        out += [child, *_blocks(sch, child)]
    return out


def _fuse_init(sch: Schedule, init: SBlockRV, update: SBlockRV) -> None:
    # the init's alone
    own = [
        lp for lp in unchecked.get_loops(sch, init) if len(unchecked.get_child_blocks(sch, lp)) == 1
    ]
    loops = unchecked.get_loops(sch, update)
    reductions = {unchecked.get(sch, lp).loop_var.name for lp in reduction_loops(sch, update)}
    last = max(
        (i for i, lp in enumerate(loops) if unchecked.get(sch, lp).loop_var.name in reductions),
        default=len(loops) - 1,
    )
    micro = math.prod(_extent(sch, lp) for lp in loops[last + 1 :])
    chunk = len(own)  # the innermost own loops that together zero at most one micro-tile stay
    while chunk > 0 and math.prod(_extent(sch, lp) for lp in own[chunk - 1 :]) <= micro:
        chunk -= 1
    outer = own[:chunk]
    if len(outer) > 1 and all(unchecked.get(sch, lp).kind == ForKind.SERIAL for lp in outer):
        sch.fuse(*outer)


def _extent(sch: Schedule, loop) -> int:
    extent = unchecked.get(sch, loop).extent
    return int(extent) if isinstance(extent, IntImm) else 1 << 30  # symbolic: larger than any tile
