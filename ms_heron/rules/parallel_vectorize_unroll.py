"""Heron's loop-annotation rules: parallel outer tiles and vector lanes (CPU), sampled unroll depth
(all)."""

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV
from tvm.tirx import ForKind

from ..hardware.targets import is_cpu, num_cores
from ..schedule.analysis import (
    is_root,
    is_tensorized,
    is_tiled,
    needs_sampled_location,
    placed_by_rule,
    tile_levels,
    working_block,
)
from ..schedule.annotations import TILING_STRUCTURE, block_annotations, iter_kinds
from ..schedule.options import check, heron_object
from .base import HeronRule

#: Root-block annotation MetaSchedule's RewriteParallelVectorizeUnroll postproc turns into unroll
#: pragmas.
UNROLL_EXPLICIT = "meta_schedule.unroll_explicit"
#: Root-block annotation the same postproc reads as the most parallel jobs a stage left at the root
#: may fuse its outer loops into (it parallelizes every such stage whose loops are still serial).
PARALLEL = "meta_schedule.parallel"


@heron_object
class ParallelVectorizeUnroll(HeronRule):
    """Conditions and applications (Heron's parallelOp, CPUvectorizeOp, unrollPragmaOp):

    * tiled block: fuse the outermost spatial tile level ``S0`` and ``parallel`` it; ``vectorize``
      the innermost loop when it is a spatial lane loop and the block is not tensorized (vectorizing
      around tensorized code does not build);
    * stand-alone block no tiling rule took -- element-wise stages (padding, masks, outputs) and
      row reductions (softmax's max and sum, layer norm's mean): ``parallel`` its fused spatial
      loops outside the innermost loop, the first reduction loop and the first loop the lowering
      already unrolled (:mod:`ms_heron.relax.passes.winograd`'s planes); ``vectorize`` an innermost
      spatial loop, split to the largest factor of at most ``max_vector_extent`` lanes;
    * root block, on every target (Heron's unrollPragmaOp): sample the unroll depth from
      ``unroll_steps`` (MetaSchedule's postproc applies it); on CPU also allow
      ``max_jobs_per_core`` parallel jobs per core to the stages whose place is sampled and lands
      at the root (a weight's pad-and-pack copy, a convolution's padding), which MetaSchedule's
      postproc then parallelizes. With the pad-and-pack of its 768 x 1000 int8 weight serial, the
      1000-class GEMM reached 29% of the VNNI peak at 64 trials; with it parallel, 52%
      (``bench/results/tuning_vs_default_heron_int8_*awkward.md``).

    Parameters
    ----------
    unroll_steps
        Unroll depths the root block samples from.
    max_vector_extent
        Most lanes a stand-alone block's innermost loop is split to.
    max_jobs_per_core
        Parallel jobs per core allowed to root-level stages.
    """

    def __init__(
        self,
        *,
        unroll_steps: tuple[int, ...] = (0, 16, 64, 512),
        max_vector_extent: int = 64,
        max_jobs_per_core: int = 16,
    ):
        check(
            len(unroll_steps) > 0 and all(isinstance(s, int) and s >= 0 for s in unroll_steps),
            f"ParallelVectorizeUnroll(unroll_steps={unroll_steps!r}): give one or more depths >= 0",
        )
        for name, value in (
            ("max_vector_extent", max_vector_extent),
            ("max_jobs_per_core", max_jobs_per_core),
        ):
            check(
                isinstance(value, int) and value >= 1,
                f"ParallelVectorizeUnroll({name}={value!r}): give a whole number >= 1",
            )
        self.unroll_steps = tuple(unroll_steps)
        self.max_vector_extent = max_vector_extent
        self.max_jobs_per_core = max_jobs_per_core

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        if is_root(sch, block):
            probs = [1.0 / len(self.unroll_steps)] * len(self.unroll_steps)
            depth = sch.sample_categorical(candidates=list(self.unroll_steps), probs=probs)
            sch.annotate(block, UNROLL_EXPLICIT, depth)
            if self.target is not None and is_cpu(self.target):
                sch.annotate(block, PARALLEL, self.max_jobs_per_core * num_cores(self.target))
            return [sch]
        if self.target is not None and not is_cpu(self.target):
            return [sch]  # GPU: thread binding and vector loads come with the TensorCore rule
        block = working_block(sch, block)
        if is_tiled(sch, block):
            levels = tile_levels(sch, block)
            structure = str(block_annotations(sch, block)[TILING_STRUCTURE])
            lanes = levels[f"S{structure.count('S') - 1}"][-1]
            if structure.endswith("S") and not is_tensorized(sch, block):
                sch.vectorize(lanes)
            outer = levels["S0"]
            sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
        elif not placed_by_rule(sch, block) and not needs_sampled_location(sch, block):
            self._parallel_untiled(sch, block)  # (a producer ComputeLocation places is left to it)
        return [sch]

    def _parallel_untiled(self, sch: Schedule, block: SBlockRV) -> None:
        loops, kinds = sch.get_loops(block), iter_kinds(sch, block)
        if not loops or (len(loops) != len(kinds) and "R" in kinds):
            return  # a reduction not in the one-loop-per-iterator nest Relax and TE produce
        # every loop of a spatial block is spatial, however the lowering split them (a Winograd
        # output transform's pixels)
        spatial = kinds.index("R") if "R" in kinds else len(loops)
        outer = loops[: min(spatial, len(loops) - 1)]
        # a loop the lowering unrolled (a Winograd transform's planes) stays, with those inside it
        serial = [sch.get(loop).kind == ForKind.SERIAL for loop in outer]
        outer = outer[: serial.index(False) if False in serial else len(outer)]
        if outer:
            sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
        if spatial == len(loops):
            self._vectorize(sch, loops[-1])

    def _vectorize(self, sch: Schedule, loop) -> None:
        extent = int(sch.get(loop).extent)
        lanes = max(d for d in range(1, min(extent, self.max_vector_extent) + 1) if extent % d == 0)
        if lanes > 1:
            sch.vectorize(loop if lanes == extent else sch.split(loop, [None, lanes])[1])
