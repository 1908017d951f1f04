"""Heron's TensorCore rules for CUDA: multi-level SPM, thread binding and WMMA tensorize in one
step."""

from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import SBlockRV

from ..hardware.targets import is_cuda
from ..intrinsics.wmma import SHAPES, SHARED_SCOPE, wmma_groups
from ..schedule.analysis import is_tiled
from ..schedule.annotations import BLOCKIZED, iter_kinds
from ..schedule.options import check, heron_object
from .base import HeronRule


def _operand_dtypes(sch: Schedule, block: SBlockRV) -> tuple[str, str] | None:
    """(input dtype, output dtype) when all inputs share one dtype, else None."""
    blk = sch.get(block)
    written = {w.source for w in blk.writes}
    inputs = {str(r.source.dtype) for r in blk.reads if r.source not in written}
    return (
        (inputs.pop(), str(blk.writes[0].source.dtype))
        if len(inputs) == 1 and len(blk.writes) == 1
        else None
    )


@heron_object
class TensorCoreTiling(HeronRule):
    """Condition: a CUDA target and a reduction block whose dtypes WMMA computes (fp16 x fp16 ->
    fp32 or fp16, s8 x s8 -> s32) and whose loops TVM's auto-tensorize mapping matches to the
    intrinsic.

    Application (Heron's addCacheTensorCoreOp, tile*Op and tensorcore*Op): one design space per
    fragment shape ``m x n x k`` in ``shapes`` (Heron's ``wmma_m``/``wmma_n`` knob). Each tiles the
    blockized matmul by ``structure`` with block / warp levels bound to ``blockIdx`` and
    ``threadIdx.y`` (the lane dimension is the warp itself), stages A and B through ``shared.dyn``
    (storage-aligned rows, cooperative vectorized loads) into ``wmma.matrix_a/b`` fragments, and
    the accumulator through ``wmma.accumulator`` and ``shared.dyn`` back to global memory. The loop
    transformation is MetaSchedule's ``MultiLevelTilingTensorCore`` (layout reindexing, fragment
    blockizing and its tensorize annotations are subtle; reusing it keeps them right); what Heron
    adds is the constraint model over its decisions (:mod:`ms_heron.constraints`).

    Parameters
    ----------
    shapes
        WMMA fragment shapes ``(m, n, k)``, one design space each.
    structure
        Tile levels, as :class:`MultiLevelTiling`'s.
    max_innermost_factor
        Largest factor sampled for the innermost level.
    vector_load_lens
        Vector widths the cooperative loads sample from.
    """

    def __init__(
        self,
        *,
        shapes: tuple[tuple[int, int, int], ...] = SHAPES,
        structure: str = "SSSRRSRS",
        max_innermost_factor: int = 4,
        vector_load_lens: tuple[int, ...] = (1, 2, 4, 8),
    ):
        unknown = [tuple(s) for s in shapes if tuple(s) not in SHAPES]
        check(
            len(shapes) > 0 and not unknown,
            f"TensorCoreTiling(shapes={shapes!r}): WMMA computes the fragment shapes "
            f"{list(SHAPES)} only",
        )
        self.shapes = tuple(tuple(s) for s in shapes)
        self.structure = structure
        self.max_innermost_factor = max_innermost_factor
        self.vector_load_lens = tuple(vector_load_lens)
        self._context = None
        self._tvm_rules: dict = {}

    def _initialize_with_tune_context(self, context) -> None:
        super()._initialize_with_tune_context(context)
        self._context = context
        self._tvm_rules = {}

    def _tvm_rule(self, dtypes: tuple[str, str]):
        """MetaSchedule's TensorCore tiling rule for one dtype pair, built and initialized once."""
        if dtypes not in self._tvm_rules:
            groups = wmma_groups(*dtypes, shapes=self.shapes)
            rule = None
            if groups:
                rule = ms.schedule_rule.MultiLevelTilingTensorCore(
                    intrin_groups=[g.names() for g in groups],
                    structure=self.structure,
                    tile_binds=["blockIdx.y", "blockIdx.x", "threadIdx.y"],
                    max_innermost_factor=self.max_innermost_factor,
                    vector_load_lens=list(self.vector_load_lens),
                    reuse_read=ms.schedule_rule.ReuseType("must", [4], SHARED_SCOPE),
                    reuse_write=ms.schedule_rule.ReuseType("must", [2], SHARED_SCOPE),
                    use_software_pipeline=False,
                )
                rule._initialize_with_tune_context(self._context)  # pylint: disable=protected-access
            self._tvm_rules[dtypes] = rule
        return self._tvm_rules[dtypes]

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        if self.target is None or not is_cuda(self.target) or "R" not in iter_kinds(sch, block):
            return [sch]
        if is_tiled(sch, block) or BLOCKIZED in sch.get(block).annotations:
            return [sch]
        dtypes = _operand_dtypes(sch, block)
        rule = self._tvm_rule(dtypes) if dtypes else None
        if rule is None:
            return [sch]
        name = sch.get(block).name_hint
        spaces = list(rule.apply(sch, block))
        for space in spaces:
            inner = space.get_sblock(name)
            if is_tiled(space, inner):  # tensorized: later rules see its ``<name>_o`` block
                space.annotate(inner, BLOCKIZED, 1)
        return spaces
