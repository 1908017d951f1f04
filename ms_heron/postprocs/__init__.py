"""Postprocessors TVM lacks, as MetaSchedule ``PyPostproc``s: what a rule decides but can only carry
out once every sampled decision of the program is known."""

from .pack_panels import PackPanels
from .tile_init import FuseTileInit, VectorizeTileInit
from .unroll_tiles import UnrollTiles
from .vector_loops import DisallowBlocksInVectorLoops, blocks_in_vector_loops

__all__ = [
    "DisallowBlocksInVectorLoops",
    "FuseTileInit",
    "PackPanels",
    "UnrollTiles",
    "VectorizeTileInit",
    "blocks_in_vector_loops",
]
