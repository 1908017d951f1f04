"""Postprocessors TVM lacks, as MetaSchedule ``PyPostproc``s: what a rule decides but can only carry
out once every sampled decision of the program is known."""

from .pack_panels import PackPanels
from .unroll_tiles import UnrollTiles

__all__ = ["PackPanels", "UnrollTiles"]
