"""Padding a block's iteration domain, with its result read back by its consumer directly.

``pad_einsum`` leaves a copy-back block between the padded result and the block's consumer (a
bias, an activation, a residual add). The tiling rules fuse the block's one element-wise consumer
into its tile's write-back; the copy-back would be that consumer, and the real epilogue would run
as a separate pass over the whole output after the kernel, out of cache (ViT's 197-token GEMMs and
its attention scores). Inlined, the consumer reads the padded buffer's true region itself.
"""

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV, ScheduleError

from .analysis import consumers


def pad_einsum(sch: Schedule, block: SBlockRV, multiples: list[int]) -> None:
    """``sch.pad_einsum(block, multiples)``, then the copy-back inlined into the consumer, where
    there is one (an output written by the copy-back itself stays as it is). Raises
    ``ScheduleError`` where ``pad_einsum`` refuses the block."""
    sch.pad_einsum(block, multiples)
    for copy_back in consumers(sch, block):
        try:
            sch.compute_inline(copy_back)
        except ScheduleError:  # the function's output: no consumer to read the padded buffer
            pass
