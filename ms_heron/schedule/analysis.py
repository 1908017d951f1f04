"""Heron's static-analysis conditions on TensorIR blocks, and the loop roles rules leave behind.

Rules fire on these conditions (Heron §2: "rules are triggered by static analysis"), and record
the role of every loop level as block annotations (:mod:`ms_heron.schedule.annotations`) so that
later rules, and the constraint model, can recover them from the trace alone.
"""

from __future__ import annotations

import math

from tvm import DataType, tirx
from tvm.s_tir import SBlockRealize, Schedule
from tvm.s_tir.schedule import LoopRV, SBlockRV
from tvm.s_tir.schedule.analysis import is_output_block
from tvm.tirx.analysis import undefined_vars

from ..hardware.targets import is_cpu, vector_bytes
from ..intrinsics.amx import is_amx
from . import unchecked
from .annotations import (
    AUTO_TENSORIZE,
    BLOCKIZED,
    LAYOUT_REWRITE_PREPROC,
    PLACED,
    REDUCE_ITER,
    TILING_STRUCTURE,
    WIDENED,
    block_annotations,
    iter_kinds,
    split_by_structure,
)


def working_block(sch: Schedule, block: SBlockRV) -> SBlockRV:
    """The block rules schedule: the outer block of a tensorized (blockized) one, else itself."""
    if BLOCKIZED in block_annotations(sch, block):
        return unchecked.get_sblock(sch, unchecked.get(sch, block).name_hint + "_o")
    return block


def block_realize(sch: Schedule, block: SBlockRV) -> SBlockRealize | None:
    """The realize of ``block`` directly under its innermost loop (its iterator bindings)."""
    loops = unchecked.get_loops(sch, block)
    if not loops:
        return None
    body = unchecked.get(sch, loops[-1]).body
    for stmt in getattr(body, "seq", [body]):
        if isinstance(stmt, SBlockRealize) and stmt.block.same_as(unchecked.get(sch, block)):
            return stmt
    return None


def reduction_loops(sch: Schedule, block: SBlockRV) -> list[LoopRV]:
    """The block's loops that drive a reduction iterator (whatever order the loops are in)."""
    realize = block_realize(sch, block)
    if realize is None:
        return []
    used = set()
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        if int(iv.iter_type) == REDUCE_ITER:
            used |= {v.name for v in undefined_vars(value)}
    return [
        lp for lp in unchecked.get_loops(sch, block) if unchecked.get(sch, lp).loop_var.name in used
    ]


def is_injective(sch: Schedule, block: SBlockRV) -> bool:
    """Spatial iterators only and no init: one output element per iteration, no reduction."""
    blk = unchecked.get(sch, block)
    kinds = iter_kinds(sch, block)
    return blk.init is None and bool(kinds) and all(k == "S" for k in kinds)


def _children(node) -> list:
    kids = []
    for name in ("a", "b", "value", "condition", "true_value", "false_value"):
        child = getattr(node, name, None)
        if child is not None and not isinstance(child, (int, float, str)):
            kids.append(child)
    for name in ("args", "indices"):
        kids.extend(getattr(node, name, None) or [])
    return kids


def has_branch(sch: Schedule, block: SBlockRV) -> bool:
    """Whether the block's body holds a conditional (padding, masks): inlining would copy it."""
    stack = [unchecked.get(sch, block).body]
    while stack:
        node = stack.pop()
        op = getattr(getattr(node, "op", None), "name", "")
        if isinstance(node, tirx.Select) or str(op).endswith("if_then_else"):
            return True
        stack.extend(_children(node))
    return False


def is_transpose(sch: Schedule, block: SBlockRV) -> bool:
    """Whether a read indexes its buffer with the block's iterators out of order (``T[h, d, l] =
    V[l, h, d]``): inlined, it would turn its consumer's unit-stride reads along ``l`` into strided
    ones, where computed at a tile it is the operand packing a fast kernel wants (MetaSchedule's
    AutoInline keeps such blocks too, its ``require_ordered``)."""
    blk = unchecked.get(sch, block)
    position = {iv.var.name: i for i, iv in enumerate(blk.iter_vars)}
    for region in blk.reads:
        order = [
            position[v.name]
            for r in region.region
            for v in undefined_vars(r.min)
            if v.name in position
        ]
        if order != sorted(order):
            return True
    return False


def _vars_of(expr) -> set:
    return set(undefined_vars(expr))


def has_data_reuse(sch: Schedule, block: SBlockRV) -> bool:
    """Heron's HasDataReuse: a reduction block with a read that ignores some spatial iterator.

    Such a read is re-used across that iterator, which is what multi-level tiling and scratchpads
    exploit (a GEMM's A ignores j, its B ignores i).
    """
    return "R" in iter_kinds(sch, block) and bool(reused_reads(sch, block))


def strictly_inlinable(sch: Schedule, block: SBlockRV) -> bool:
    """Heron's Always-Inline condition: injective, not an output, with consumers, without
    conditionals (inlining a padding ``if_then_else`` would copy the branch into every use), not
    feeding a tensorized block (:func:`feeds_tensorized`), and not a transpose feeding a GEMM-like
    block (inlined, the GEMM's vector loads would become strided gathers)."""
    return (
        is_injective(sch, block)
        and not is_output_block(sch, block)
        and bool(consumers(sch, block))
        and not has_branch(sch, block)
        and not feeds_tensorized(sch, block)
        and not (
            is_transpose(sch, block) and any(has_data_reuse(sch, c) for c in consumers(sch, block))
        )
    )


def feeds_tensorized(sch: Schedule, block: SBlockRV) -> bool:
    """Whether a consumer of ``block`` is tensorized: the intrinsic must read ``block``'s buffer (a
    weight packed to its tiles), and inlined into it the expression would not match the
    intrinsic."""
    return any(is_tensorized(sch, c) for c in consumers(sch, block))


def transposed_read(sch: Schedule, block: SBlockRV) -> tuple[int, int] | None:
    """For a block that copies a buffer in another order: ``(r, w)``, the iterators the first such
    read and the write index with their last dimension (their contiguous axes), when they differ;
    None when every read runs along the write's contiguous axis (or is not indexed by plain
    iterators)."""
    blk = unchecked.get(sch, block)
    position = {iv.var.name: i for i, iv in enumerate(blk.iter_vars)}

    def last_iterator(region) -> int | None:
        last = region.region[-1].min if region.region else None
        return position.get(last.name) if isinstance(last, tirx.Var) else None

    written = last_iterator(blk.writes[0]) if len(blk.writes) == 1 else None
    if written is None:
        return None
    for region in blk.reads:
        read = last_iterator(region)
        if read is not None and read != written:
            return read, written
    return None


def consumers(sch: Schedule, block: SBlockRV) -> list[SBlockRV]:
    return list(unchecked.get_consumers(sch, block))


def side_producers(sch: Schedule, block: SBlockRV, consumer: SBlockRV) -> list[SBlockRV]:
    """The producers of ``consumer`` other than ``block``: the other blocks whose output it
    reads."""
    name = unchecked.get(sch, block).name_hint
    return [
        p for p in unchecked.get_producers(sch, consumer) if unchecked.get(sch, p).name_hint != name
    ]


def fusible_consumer(sch: Schedule, block: SBlockRV) -> SBlockRV | None:
    """Heron's HasFusibleConsumer: the single consumer, if it is injective (bias, activation, cast)
    and reads no other block's output. A second producer (a dynamic quantization's scale, reduced
    from the activations at the root) could never sit under the block's tile loop, so
    ``reverse_compute_at`` would refuse the consumer there."""
    cons = consumers(sch, block)
    if len(cons) != 1 or not is_injective(sch, cons[0]) or side_producers(sch, block, cons[0]):
        return None
    return cons[0]


def tile_levels(sch: Schedule, block: SBlockRV) -> dict[str, list[LoopRV]]:
    """Loops of a tiled block by role, from its tiling-structure annotation."""
    structure = str(block_annotations(sch, block)[TILING_STRUCTURE])
    return split_by_structure(structure, iter_kinds(sch, block), unchecked.get_loops(sch, block))


def is_tiled(sch: Schedule, block: SBlockRV) -> bool:
    return TILING_STRUCTURE in block_annotations(sch, block)


def is_tensorized(sch: Schedule, block: SBlockRV) -> bool:
    return AUTO_TENSORIZE in block_annotations(sch, block)


def accumulates_in_tiles(sch: Schedule, block: SBlockRV) -> bool:
    """Whether the block is to be tensorized by AMX, whose accumulators are tile registers."""
    return is_amx(str(block_annotations(sch, block).get(AUTO_TENSORIZE, "")))


def is_root(sch: Schedule, block: SBlockRV) -> bool:
    return unchecked.get(sch, block).name_hint == "root"


def reused_reads(sch: Schedule, block: SBlockRV) -> list[int]:
    """Indices of the block's reads that ignore some spatial iterator (the re-used operands)."""
    blk = unchecked.get(sch, block)
    kinds = iter_kinds(sch, block)
    spatial = {iv.var for iv, k in zip(blk.iter_vars, kinds) if k == "S"}
    written = {w.source for w in blk.writes}
    out = []
    for index, region in enumerate(blk.reads):
        used = set()
        for rng in region.region:
            used |= _vars_of(rng.min)
        if spatial - used and region.source not in written:
            out.append(index)
    return out


def placed_by_rule(sch: Schedule, block: SBlockRV) -> bool:
    return any(key in block_annotations(sch, block) for key in PLACED)


def needs_sampled_location(sch: Schedule, block: SBlockRV) -> bool:
    """Whether ``block`` is a producer whose place ComputeLocation samples: outside any other
    block's loops, spatial iterators only, not tiled or placed by a rule, and feeding a tiled block
    or a stage placed in one (padding, casts, layout copies)."""
    if (
        is_root(sch, block)
        or is_tiled(sch, block)
        or placed_by_rule(sch, block)
        or LAYOUT_REWRITE_PREPROC in block_annotations(sch, block)  # stays at the root, folded away
        or WIDENED in block_annotations(sch, block)
        or set(iter_kinds(sch, block)) != {"S"}
    ):
        return False
    loops = unchecked.get_loops(sch, block)
    if not loops or len(unchecked.get_child_blocks(sch, loops[0])) != 1:
        return False  # inside another block's loops already, or sharing its outer loop
    return any(
        is_tiled(sch, c) or placed_by_rule(sch, c) for c in unchecked.get_consumers(sch, block)
    )


def param_index(sch: Schedule, buffer: tirx.Buffer) -> int | None:
    """Position of ``buffer`` among the function's parameters (None for an intermediate buffer)."""
    func = sch.mod["main"]
    # TVM 0.27: a parameter is a buffer-typed Var; its buffer's data is ``tirx.buffer_data(param)``.
    data = buffer.data
    param = (
        data.args[0]
        if getattr(getattr(data, "op", None), "name", "") == "tirx.buffer_data"
        else data
    )
    return next((i for i, p in enumerate(func.params) if p.same_as(param)), None)


def extents(blk) -> list[int]:
    """The block's iterator extents, in iterator order."""
    return [int(iv.dom.extent) for iv in blk.iter_vars]


def padded_volume_ratio(extents: list[int], multiples: list[int]) -> float:
    """Iteration volume after padding each extent up to its multiple, over the true volume."""
    return math.prod(-(-e // m) * m for e, m in zip(extents, multiples)) / math.prod(extents)


def is_layout_free(sch: Schedule, buffer: tirx.Buffer) -> bool:
    """Whether ``buffer`` is a parameter the compiler may re-lay out (a constant weight; Relax's
    ``AttachAttrLayoutFreeBuffers`` lists them in the ``layout_free_buffers`` function
    attribute)."""
    func = sch.mod["main"]
    indices = func.attrs.get("layout_free_buffers", []) if func.attrs is not None else []
    return param_index(sch, buffer) in [int(i) for i in indices]


def is_constant_weight(sch: Schedule, buffer: tirx.Buffer) -> bool:
    """Whether ``buffer`` holds a layout-free weight (:func:`is_layout_free`) or its re-laid-out
    copy: the output of a block marked ``meta_schedule.layout_rewrite_preproc`` (the Tensorize
    rule's packing, RewriteLayout's), which Relax computes once at compile time. Either way the
    kernel reads it in the layout it wants, with no copy at run time."""
    if is_layout_free(sch, buffer):
        return True
    for block in unchecked.get_child_blocks(sch, unchecked.get_sblock(sch, "root")):
        stmt = unchecked.get(sch, block)
        if any(w.source.same_as(buffer) for w in stmt.writes):
            return LAYOUT_REWRITE_PREPROC in stmt.annotations and any(
                is_layout_free(sch, r.source) for r in stmt.reads
            )
    return False


def streamed_input(sch: Schedule, block: SBlockRV, lane_var) -> int | None:
    """Index among ``block``'s reads of the input its micro-kernel streams along the lane iterator
    ``lane_var``: a function input (not a layout-free weight, which RewriteLayout re-lays out)
    whose last index is that iterator and that ignores another spatial iterator, so it is re-read
    for every tile of it (a GEMM's ``B[k, n]``). None if there is none."""
    blk = unchecked.get(sch, block)
    spatial = {iv.var for iv, k in zip(blk.iter_vars, iter_kinds(sch, block)) if k == "S"}
    written = {w.source for w in blk.writes}
    for index, region in enumerate(blk.reads):
        indices = [rng.min for rng in region.region]
        if (
            region.source in written
            or not indices
            or not (isinstance(indices[-1], tirx.Var) and indices[-1].same_as(lane_var))
        ):
            continue
        used = set().union(*(_vars_of(i) for i in indices))
        if (
            spatial - used
            and param_index(sch, region.source) is not None
            and not is_layout_free(sch, region.source)
        ):
            return index
    return None


def lane_iterator(sch: Schedule, block: SBlockRV, target) -> int | None:
    """Index of the spatial iterator the vector lanes of a CPU block's micro-kernel run along.

    The last spatial iterator, unless its extent is not a multiple of the target's vector lanes
    (partly filled vectors) and an earlier one's is, along which every read that depends on it is
    contiguous already (its last index is that iterator) or is a layout-free weight that
    MetaSchedule's RewriteLayout stores in the order the loops read it. Reads that do not depend on
    the lane iterator are broadcast; the output tile is written back transposed, once.
    """
    blk = unchecked.get(sch, block)
    kinds = iter_kinds(sch, block)
    spatial = [i for i, k in enumerate(kinds) if k == "S"]
    if not spatial or target is None or not is_cpu(target) or is_tensorized(sch, block):
        return spatial[-1] if spatial else None
    lanes = max(1, vector_bytes(target) * 8 // DataType(str(blk.writes[0].source.dtype)).bits)
    extents = [int(iv.dom.extent) for iv in blk.iter_vars]
    if extents[spatial[-1]] % lanes == 0:
        return spatial[-1]
    for index in reversed(spatial[:-1]):
        if extents[index] % lanes == 0 and _streams_along(sch, blk, blk.iter_vars[index].var):
            return index
    return spatial[-1]


def transposed_lane_dim(sch: Schedule, block: SBlockRV, target) -> int | None:
    """The output dimension the micro-kernel's lanes run along (:func:`lane_iterator`) when it is
    not the output's last one (then the accumulator tile is stored lanes-last and written back
    transposed), else None."""
    lane = lane_iterator(sch, block, target)
    blk = unchecked.get(sch, block)
    if lane is None:
        return None
    var = blk.iter_vars[lane].var
    indices = [rng.min for rng in blk.writes[0].region]
    dims = [
        d
        for d, i in enumerate(indices)
        if any(v.same_as(var) for v in tirx.analysis.undefined_vars(i))
    ]
    return dims[0] if len(dims) == 1 and dims[0] != len(indices) - 1 else None


def _streams_along(sch: Schedule, blk, var) -> bool:
    written = {w.source for w in blk.writes}
    for region in blk.reads:
        if region.source in written:
            continue
        indices = [rng.min for rng in region.region]
        used = [any(v.same_as(var) for v in tirx.analysis.undefined_vars(i)) for i in indices]
        if not any(used):
            continue  # broadcast along the lanes
        contiguous = used.index(True) == len(indices) - 1 and isinstance(indices[-1], tirx.Var)
        if not (contiguous or is_layout_free(sch, region.source)):
            return False
    return True
