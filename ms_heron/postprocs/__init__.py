"""Postprocessors TVM lacks, as MetaSchedule ``PyPostproc``s: what a rule decides but can only carry
out once every sampled decision of the program is known."""

from .pack_panels import PackPanels
from .placed_stage_loops import PlacedStageLoops

__all__ = ["PackPanels", "PlacedStageLoops"]
