"""Heron's Tensorize rule (VNNI on CPU here; WMMA joins with the GPU path)."""

from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule, TensorIntrin
from tvm.s_tir.schedule import SBlockRV
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.schedule.analysis import get_tensorize_loop_mapping
from tvm.s_tir.schedule.transform import tile_with_tensor_intrin

from ..intrinsics import VNNI_INTRIN, ensure_registered
from ..targets import has_vnni
from ..annotations import AUTO_TENSORIZE, BLOCKIZED, iter_kinds
from .analysis import is_tiled
from .base import HeronRule
from .operand_layout import match_operands, prepare_operands


def intrinsics_for(target) -> list[str]:
    """Tensor intrinsics this target can execute, best first."""
    return [VNNI_INTRIN] if target is not None and has_vnni(target) else []


def _dtypes(sch: Schedule, block: SBlockRV) -> set[str]:
    blk = sch.get(block)
    return {str(region.source.dtype) for region in (*blk.reads, *blk.writes)}


def _desc_dtypes(desc) -> set[str]:
    # TVM's loop-mapping analysis matches the loop structure only, not the operand dtypes.
    return {str(info.dtype) for info in ArgInfo.from_prim_func(desc)}


@derived_object
class Tensorize(HeronRule):
    """Condition: the block (a reduction not yet tiled) matches a tensor intrinsic the target
    executes -- TVM's loop-mapping analysis finds its description inside the block, dtypes included
    (u8 x s8 -> s32 16x4 for VNNI) -- and each operand either holds the intrinsic's tile in place or
    is a layout-free weight that can be packed (:mod:`.operand_layout`).

    Application: split off and reorder the loops the intrinsic covers, ``blockize`` them, and mark
    the outer block with ``meta_schedule.auto_tensorize`` (MetaSchedule's RewriteTensorize postproc
    does the final ``tensorize``). Later rules tile and cache the outer ``<name>_o`` block.
    """

    def __init__(self, intrinsics: list[str] | None = None):
        self.intrinsics = intrinsics

    def _params(self):
        return {"intrinsics": self.intrinsics}

    def _candidates(self) -> list[str]:
        return list(self.intrinsics) if self.intrinsics is not None else intrinsics_for(self.target)

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        if "R" not in iter_kinds(sch, block) or is_tiled(sch, block) or BLOCKIZED in sch.get(block).annotations:
            return [sch]
        candidates = self._candidates()
        if candidates:
            ensure_registered()
        for intrin in candidates:
            desc = TensorIntrin.get(intrin).desc
            if _dtypes(sch, block) != _desc_dtypes(desc):
                continue
            mapping = get_tensorize_loop_mapping(sch, block, desc)
            operands = match_operands(sch, block, desc, mapping) if mapping is not None else None
            if operands is None or not prepare_operands(sch, block, operands):
                continue
            inner = tile_with_tensor_intrin(sch, block, intrin)
            if inner is None:
                continue
            outer = sch.blockize(inner)
            sch.annotate(outer, AUTO_TENSORIZE, intrin)
            sch.annotate(block, BLOCKIZED, 1)
            break
        return [sch]
