"""The contract between the rules and the constraint model: block annotations and how to read them.

Rules record the role of every loop level as block annotations, so that later rules, and the
constraint model, recover them from the trace alone (the trace is the single source of truth: a
design space's trace and the target rebuild its constraint model). The keys live here, with the few
readers both sides need, so that ``constraints/`` never
imports ``rules/``.
"""

from __future__ import annotations

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from . import unchecked

#: Block annotation holding the tile structure, e.g. "SSRSRS" (MetaSchedule uses the same key).
TILING_STRUCTURE = "meta_schedule.tiling_structure"
#: Block annotation MetaSchedule's RewriteTensorize postproc reads.
AUTO_TENSORIZE = "meta_schedule.auto_tensorize"
#: Set on the inner block of a blockized (tensorized) block: rules work on its ``<name>_o`` parent.
BLOCKIZED = "ms_heron.blockized"
#: On a write-back (or fused consumer) block: the spatial tile level it sits under.
CACHE_LEVEL = "ms_heron.cache_level"
#: On a tile buffer's copy block: the reduction tile level it is loaded under.
SPM_LEVEL = "ms_heron.spm_level"
#: On a row reduction: the partial results per row (vector lanes x accumulators) it was split into.
LANE_REDUCTION = "ms_heron.lane_reduction"
#: On a tiled block: whether (1) or not (0, a sampled choice) the PackPanels postproc packs the
#: operand its micro-kernel streams into panels as wide as the sampled vector-lane tile.
PACK_PANELS = "ms_heron.pack_panels"
#: On a layout-changing element-wise block: the elements of the tile it is blocked into (read axis x
#: write axis).
TRANSPOSE_TILE = "ms_heron.transpose_tile"
#: On a copy block: how many of its innermost loops (one tile) the UnrollTiles postproc unrolls.
UNROLL_TILE = "ms_heron.unroll_tile"
#: On the copy that re-lays out a layout-free weight: MetaSchedule's builder drops it when measuring
#: and Relax folds it into the constant, both only where it stays at the root.
LAYOUT_REWRITE_PREPROC = "meta_schedule.layout_rewrite_preproc"
#: On the copy that widens a dot product's u8 operand to s16 (``operand_layout.widen_activation``):
#: it stays where the rule leaves it, unsampled, since TVM's sampler may inline it, and the kernel
#: then widens per step, which the widened intrinsic's description does not match.
WIDENED = "ms_heron.widened"
#: Block annotations of stages a rule already placed (inside another block's tiles, or parallel
#: itself).
PLACED = (CACHE_LEVEL, SPM_LEVEL, LANE_REDUCTION, TRANSPOSE_TILE)
#: On the root block of a design space HeronSpace took from MetaSchedule's own generator: its
#: constraint model keeps validity constraints only, so the space keeps all of MetaSchedule's
#: content.
SPACE_ORIGIN = "ms_heron.space_origin"
METASCHEDULE_SPACE = "metaschedule"

#: ``tirx.IterVar`` types: data parallel and commutative reduction.
SPATIAL_ITER, REDUCE_ITER = 0, 2


def block_annotations(sch: Schedule, block: SBlockRV) -> dict:
    return dict(unchecked.get(sch, block).annotations)


def iter_kinds(sch: Schedule, block: SBlockRV) -> list[str]:
    """'S' or 'R' per block iterator (other iterator types are reported as 'O')."""
    kinds = {SPATIAL_ITER: "S", REDUCE_ITER: "R"}
    return [kinds.get(int(iv.iter_type), "O") for iv in unchecked.get(sch, block).iter_vars]


def split_by_structure(structure: str, kinds: list[str], items: list) -> dict[str, list]:
    """Group a tiled nest's innermost loops (or anything in their order) by level: ``{"S0": [...],
    ...}``.

    Level ``S<n>`` is the n-th 'S' of the structure and holds one item per spatial iterator
    (likewise ``R<n>``); ``kinds`` are the block's iterator kinds (:func:`iter_kinds`).
    """
    sizes = [kinds.count(c) for c in structure]
    items = list(items)[len(items) - sum(sizes) :]
    levels, pos, seen = {}, 0, {"S": 0, "R": 0}
    for c, size in zip(structure, sizes):
        levels[f"{c}{seen[c]}"] = items[pos : pos + size]
        seen[c] += 1
        pos += size
    return levels


def is_metaschedule_space(trace) -> bool:
    """Whether a trace replays one of MetaSchedule's default design spaces that HeronSpace added."""
    return any(
        inst.kind.name == "Annotate"
        and str(inst.attrs[0]) == SPACE_ORIGIN
        and str(inst.inputs[1]) == METASCHEDULE_SPACE
        for inst in trace.insts
    )
