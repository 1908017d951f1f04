"""BLIS's packed operand as a sampled decision: the input a CPU micro-kernel streams, copied into
panels."""

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from ..hardware.targets import is_cpu
from ..schedule.analysis import (
    is_tensorized,
    is_tiled,
    lane_iterator,
    streamed_input,
    working_block,
)
from ..schedule.annotations import PACK_PANELS, TILING_STRUCTURE, block_annotations
from ..schedule.options import check, heron_object
from .base import HeronRule


@heron_object
class PackOperand(HeronRule):
    """Condition: a CPU block tiled with its vector lanes innermost (not tensorized) whose
    micro-kernel streams a function input along the lanes and re-reads it for every tile of
    another spatial iterator (:func:`~.analysis.streamed_input`: a GEMM's ``B[k, n]``), that input
    not a layout-free weight (RewriteLayout re-lays those out at compile time, for free).

    Application: sample whether to pack it (0 or 1 on the block's ``ms_heron.pack_panels``
    annotation). Packing costs one parallel pass over the input per call and pays where many row
    tiles re-read it: each vector load of the micro-kernel then comes from one contiguous stream
    instead of rows a whole matrix row apart. The layout depends on the sampled lane tile (NR), so
    the ``PackPanels`` postproc does the copy once the decisions are known.

    Acts only on a block :class:`MultiLevelTiling` tiled (its tiling annotation); put it after.

    Parameters
    ----------
    probs
        Probabilities of not packing and of packing, summing to 1.
    """

    def __init__(self, *, probs: tuple[float, float] = (0.5, 0.5)):
        check(
            len(probs) == 2 and all(p >= 0 for p in probs) and abs(sum(probs) - 1) < 1e-6,
            f"PackOperand(probs={probs!r}): give two probabilities (no packing, packing) summing "
            "to 1",
        )
        self.probs = tuple(probs)

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        block = working_block(sch, block)
        if (
            self.target is None
            or not is_cpu(self.target)
            or not is_tiled(sch, block)
            or is_tensorized(sch, block)
        ):
            return [sch]
        if not str(block_annotations(sch, block)[TILING_STRUCTURE]).endswith("S"):
            return [sch]
        lane = lane_iterator(sch, block, self.target)
        if lane is None or streamed_input(sch, block, sch.get(block).iter_vars[lane].var) is None:
            return [sch]
        sch.annotate(
            block, PACK_PANELS, sch.sample_categorical(candidates=[0, 1], probs=list(self.probs))
        )
        return [sch]
