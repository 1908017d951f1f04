"""Heron's generation rules as MetaSchedule ``PyScheduleRule``s, one rule per module.

Each rule works in MetaSchedule's stock ``PostOrderApply`` as well as in :class:`ms_heron.HeronSpace`.
"""

from .add_cache_stage import AddCacheStage
from .always_inline import AlwaysInline
from .multi_level_spm import MultiLevelSPM
from .multi_level_tiling import MultiLevelTiling
from .multi_scope_spm import MultiScopeSPM
from .parallel_vectorize_unroll import ParallelVectorizeUnroll
from .tensorize import Tensorize


def default_rules() -> list:
    """Heron's rules in the order they apply to each block."""
    return [
        AlwaysInline(),
        Tensorize(),
        MultiLevelTiling(),
        AddCacheStage(),
        MultiLevelSPM(),
        MultiScopeSPM(),
        ParallelVectorizeUnroll(),
    ]


__all__ = [
    "AlwaysInline",
    "Tensorize",
    "MultiLevelTiling",
    "AddCacheStage",
    "MultiLevelSPM",
    "MultiScopeSPM",
    "ParallelVectorizeUnroll",
    "default_rules",
]
