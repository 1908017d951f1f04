"""Sampled compute location: element-wise producers of a tiled block (padding, casts, layout copies)
computed inside the consumer's tiles instead of materialized whole in memory first.

Heron places only the stages its own rules create; MetaSchedule samples where every other
producer goes (its RandomComputeLocation). A padded convolution's best programs compute the padding
per tile, where the padded window is still in cache; materializing the whole padded input costs a
write and a read of it per call. The location is a ``SampleComputeLocation`` decision, so the
constraint model holds it as a categorical (inline, root, or a loop of the consumer) and the
search chooses it like any tile size.
"""

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from ..hardware.targets import is_cpu
from ..schedule.analysis import needs_sampled_location
from ..schedule.options import heron_object
from .base import HeronRule


@heron_object
class ComputeLocation(HeronRule):
    """Condition: :func:`~.analysis.needs_sampled_location` (a CPU producer no rule tiled or placed,
    feeding a tiled block or a stage placed in one). Application: sample a location among the
    consumer's loops, compute it there. Listed after the parallel/vector rule, which leaves such
    blocks alone, so that rule's fusion of outer tiles never meets a producer placed inside them,
    whichever order the space generator applies rules and blocks in.

    The space itself holds the block at the root (decision -1): a random first decision made the
    spaces differ from run to run, and one that inlined the block hid it, and its tensorized
    consumer, from the constraint model, which then offered inlining into the intrinsic."""

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        if (self.target is not None and not is_cpu(self.target)) or not needs_sampled_location(
            sch, block
        ):
            return [sch]
        sch.compute_at(
            block, sch.sample_compute_location(block, decision=-1), preserve_unit_loops=True
        )
        return [sch]
