"""Heron's generation rules as MetaSchedule ``PyScheduleRule``s, one rule per module.

Each rule works in MetaSchedule's stock ``PostOrderApply`` as well as in
:class:`ms_heron.HeronSpace`.
"""

from ..hardware.targets import is_cuda
from .add_cache_stage import AddCacheStage
from .always_inline import AlwaysInline
from .blocked_transpose import BlockedTranspose
from .compute_location import ComputeLocation
from .lane_reduction import LaneReduction
from .multi_level_spm import MultiLevelSPM
from .multi_level_tiling import MultiLevelTiling
from .multi_scope_spm import MultiScopeSPM
from .pack_operand import PackOperand
from .pad_extents import PadExtents
from .parallel_vectorize_unroll import ParallelVectorizeUnroll
from .tensor_core import TensorCoreTiling
from .tensorize import Tensorize


def default_rules(target=None) -> list:
    """Heron's rules for ``target`` (CPU when None), in the order they apply to each block.

    On CUDA, blocks TensorCores cannot compute are left to MetaSchedule's RewriteUnboundBlock
    postproc (simple thread binding); add MetaSchedule's own GPU rules as ``user_rules`` for more.
    ``MultiScopeSPM`` is in neither list: the CPU has no scratchpad scopes, and on CUDA
    ``TensorCoreTiling`` stages its own operands; it serves pipelines that tile with
    ``MultiLevelTiling`` on a GPU.
    """
    if target is not None and is_cuda(target):
        return [AlwaysInline(), TensorCoreTiling(), ParallelVectorizeUnroll()]
    return [
        AlwaysInline(),
        PadExtents(),
        Tensorize(),
        MultiLevelTiling(),
        LaneReduction(),
        BlockedTranspose(),
        AddCacheStage(),
        MultiLevelSPM(),
        PackOperand(),
        ParallelVectorizeUnroll(),
        ComputeLocation(),
    ]


__all__ = [
    "AlwaysInline",
    "Tensorize",
    "TensorCoreTiling",
    "MultiLevelTiling",
    "LaneReduction",
    "BlockedTranspose",
    "AddCacheStage",
    "MultiLevelSPM",
    "MultiScopeSPM",
    "PackOperand",
    "PadExtents",
    "ComputeLocation",
    "ParallelVectorizeUnroll",
    "default_rules",
]
