"""Heron's loop-annotation rules: parallel outer tiles and vector lanes (CPU), sampled unroll depth (all)."""

from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from ..targets import is_cpu
from .analysis import (
    TILING_STRUCTURE,
    annotations,
    is_injective,
    is_root,
    is_tensorized,
    is_tiled,
    placed_by_rule,
    tile_levels,
    working_block,
)
from .base import HeronRule

#: Root-block annotation MetaSchedule's RewriteParallelVectorizeUnroll postproc turns into unroll pragmas.
UNROLL_EXPLICIT = "meta_schedule.unroll_explicit"


@derived_object
class ParallelVectorizeUnroll(HeronRule):
    """Conditions and applications (Heron's parallelOp, CPUvectorizeOp, unrollPragmaOp):

    * tiled block: fuse the outermost spatial tile level ``S0`` and ``parallel`` it; ``vectorize``
      the innermost loop when it is a spatial lane loop and the block is not tensorized (vectorizing
      around tensorized code does not build);
    * stand-alone injective block (padding, masks, element-wise outputs): ``parallel`` its fused
      outer loops and ``vectorize`` its innermost loop when that is at most ``max_vector_extent``;
    * root block, on every target (Heron's unrollPragmaOp): sample the unroll depth from
      ``unroll_steps`` (MetaSchedule's postproc applies it).
    """

    def __init__(self, unroll_steps: tuple = (0, 16, 64, 512), max_vector_extent: int = 64):
        self.unroll_steps = tuple(unroll_steps)
        self.max_vector_extent = max_vector_extent

    def _params(self):
        return {"unroll_steps": self.unroll_steps, "max_vector_extent": self.max_vector_extent}

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        if is_root(sch, block):
            probs = [1.0 / len(self.unroll_steps)] * len(self.unroll_steps)
            depth = sch.sample_categorical(candidates=list(self.unroll_steps), probs=probs)
            sch.annotate(block, UNROLL_EXPLICIT, depth)
            return [sch]
        if self.target is not None and not is_cpu(self.target):
            return [sch]  # GPU: thread binding and vector loads come with the TensorCore rule
        block = working_block(sch, block)
        if is_tiled(sch, block):
            levels = tile_levels(sch, block)
            structure = str(annotations(sch, block)[TILING_STRUCTURE])
            lanes = levels[f"S{structure.count('S') - 1}"][-1]
            if structure.endswith("S") and not is_tensorized(sch, block):
                sch.vectorize(lanes)
            outer = levels["S0"]
            sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
        elif is_injective(sch, block) and not placed_by_rule(sch, block):
            self._parallel_injective(sch, block)
        return [sch]

    def _parallel_injective(self, sch: Schedule, block: SBlockRV) -> None:
        loops = sch.get_loops(block)
        if not loops:
            return
        inner = loops[-1]
        if len(loops) > 1:
            outer = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
            sch.parallel(outer)
        if 1 < int(sch.get(inner).extent) <= self.max_vector_extent:
            sch.vectorize(inner)
