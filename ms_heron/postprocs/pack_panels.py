"""Carry out the PackOperand rule's choice: copy the streamed input into NR-wide panels."""

from __future__ import annotations

from tvm import tirx
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from ..schedule import unchecked
from ..schedule.analysis import block_realize, streamed_input
from ..schedule.annotations import PACK_PANELS
from ..schedule.options import heron_object
from .base import HeronPostproc


@heron_object
class PackPanels(HeronPostproc):
    """For every block whose ``ms_heron.pack_panels`` annotation is 1: the input its micro-kernel
    streams (``B[k, n]``) is copied, once per call and in parallel, into
    ``B_global[n // NR, k, n % NR]``, NR being the extent of the block's innermost (vector lane)
    loop, so the micro-kernel reads one contiguous panel per NR columns (BLIS's packed B). The
    annotation is removed either way; a block whose lanes no longer stream such an input is left as
    it is.
    """

    def apply(self, sch: Schedule) -> bool:
        for block in unchecked.get_child_blocks(sch, unchecked.get_sblock(sch, "root")):
            choice = unchecked.get(sch, block).annotations.get(PACK_PANELS)
            if choice is None:
                continue
            sch.unannotate(block, PACK_PANELS)
            if int(choice):
                _pack(sch, block)
        return True


def _pack(sch: Schedule, block: SBlockRV) -> None:
    loops = unchecked.get_loops(sch, block)
    realize = block_realize(sch, block)
    if not loops or realize is None:
        return
    lane_loop = unchecked.get(sch, loops[-1])
    lane_var = next(
        (
            iv.var
            for iv, value in zip(realize.block.iter_vars, realize.iter_values)
            if any(v.same_as(lane_loop.loop_var) for v in tirx.analysis.undefined_vars(value))
        ),
        None,
    )
    index = None if lane_var is None else streamed_input(sch, block, lane_var)
    if index is None:
        return
    panel = int(lane_loop.extent)
    copy = sch.cache_read(block, index, "global")
    sch.transform_layout(
        block, ("read", index), lambda *idx: [idx[-1] // panel, *idx[:-1], idx[-1] % panel]
    )
    *outer, last = unchecked.get_loops(sch, copy)
    columns, lanes = sch.split(last, [None, panel])
    sch.reorder(columns, *outer, lanes)
    sch.parallel(sch.fuse(columns, *outer))
    sch.vectorize(lanes)
