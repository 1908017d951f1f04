"""Operand layouts a tensor intrinsic can read in place, and the weight re-layout when it cannot.

A tensor intrinsic's description reads small dense tiles (VNNI: ``B[16, 4]`` -- 16 output lanes by
4 reduction steps, contiguous). A model's weight is usually stored differently (a Relax ``matmul``
reads ``B[k, n]``), so tensorizing it in place would fail at the final ``tensorize``. When that
weight is *layout-free* (a constant the compiler may re-lay out: Relax's
``AttachAttrLayoutFreeBuffers`` marks them), the rule rewrites it to the packed layout the intrinsic
reads -- ``[..., n // 16, k // 4, n % 16, k % 4]`` for VNNI -- through a copy block marked
``meta_schedule.layout_rewrite_preproc``. MetaSchedule's builder drops that block when measuring
(the weight arrives packed), and Relax's ``SplitLayoutRewritePreproc`` turns it into a weight
transform that ``FoldConstant`` runs once at compile time. This is MetaSchedule's own layout-rewrite
mechanism (its ``RewriteLayout`` postproc), driven by the intrinsic's needs instead of the tiling.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx
from tvm.s_tir import SBlockRealize, Schedule
from tvm.s_tir.schedule import SBlockRV, ScheduleError
from tvm.tirx import IndexMap

from .analysis import block_realize, is_layout_free, param_index
from .annotations import LAYOUT_REWRITE_PREPROC, UNROLL_TILE, WIDENED


@dataclass(kw_only=True)
class Operand:
    """One buffer access of the block, matched against the intrinsic's access to the same role."""

    buffer: tirx.Buffer
    read_index: int | None  # index among the block's reads; None for the written buffer
    indices: list  # the block's index expressions into ``buffer``
    tile_vars: list  # block iterators the intrinsic's access uses, in its order
    tile_shape: list[int]  # the intrinsic buffer's shape

    def in_place(self) -> bool:
        """The intrinsic's tile is the buffer's trailing dims, dense: it can be read as it is.

        Each trailing index must depend on its tile iterator alone: ``k`` in ``A[i, k]``, or
        ``n % 16`` in an already packed ``B[n // 16, k // 4, n % 16, k % 4]``.
        """
        n = len(self.tile_vars)
        trailing = self.indices[len(self.indices) - n :]
        if len(self.indices) < n or not all(
            _only_uses(i, v) for i, v in zip(trailing, self.tile_vars)
        ):
            return False
        shape = [int(s) for s in self.buffer.shape[len(self.indices) - n :]]
        return shape[1:] == self.tile_shape[1:]

    def packed_index_map(self, *, panels_in_tile_order: bool = False):
        """``lambda *idx: [outer dims, tile dims]`` with each tiled dim split by its tile extent.

        The outer parts stay in the buffer's dim order, or with ``panels_in_tile_order`` follow the
        untiled dims in the tile's order: ``W[k, n]`` for a ``[16 n, 4 k]`` tile packs as
        ``[n // 16, k // 4, n % 16, k % 4]`` whichever way the weight was stored (AMX's B tile is 16
        consecutive ``k // 4`` rows of one ``n // 16`` panel).
        """
        dims = {}
        for var, extent in zip(self.tile_vars, self.tile_shape):
            dims[next(d for d, i in enumerate(self.indices) if _is_var(i, var))] = extent

        def index_map(*idx):
            if panels_in_tile_order:
                outer = [idx[d] for d in range(len(idx)) if d not in dims] + [
                    idx[d] // e for d, e in dims.items()
                ]
            else:
                outer = [idx[d] // dims[d] if d in dims else idx[d] for d in range(len(idx))]
            return [*outer, *(idx[d] % extent for d, extent in dims.items())]

        return index_map

    def packable(self) -> bool:
        """Every index a bare iterator, each tiled dim once and divisible by its tile extent."""
        if not all(isinstance(i, tirx.Var) for i in self.indices):
            return False
        for var, extent in zip(self.tile_vars, self.tile_shape):
            dims = [d for d, i in enumerate(self.indices) if _is_var(i, var)]
            if len(dims) != 1 or int(self.buffer.shape[dims[0]]) % extent:
                return False
        return True


def _is_var(expr, var) -> bool:
    return isinstance(expr, tirx.Var) and expr.same_as(var)


def _only_uses(expr, var) -> bool:
    used = tirx.analysis.undefined_vars(expr)
    return len(used) == 1 and used[0].same_as(var)


def _desc_accesses(desc) -> tuple[dict, list[tuple[tirx.Buffer, list, bool]]]:
    """The description's loop var -> block iter map, and its (buffer, indices, is_write) accesses
    (the accumulator, read and written, counts once, as written)."""
    realize = desc.body.block.body
    while not isinstance(realize, SBlockRealize):
        realize = realize.body
    block = realize.block
    iter_of_loop = {}
    for iv, value in zip(block.iter_vars, realize.iter_values):
        iter_of_loop[value] = iv.var
    written = [w.source for w in block.writes]
    accesses = [
        (r.source, [rng.min for rng in r.region], False)
        for r in block.reads
        if r.source not in written
    ]
    accesses += [(w.source, [rng.min for rng in w.region], True) for w in block.writes]
    return iter_of_loop, accesses


def match_operands(sch: Schedule, block: SBlockRV, desc, tensorize_info) -> list[Operand] | None:
    """The block's operands in the roles of the description's buffers (None if unclear).

    ``tensorize_info`` is TVM's loop mapping (``get_tensorize_loop_mapping``): block loops to
    description loops; the bindings of both blocks turn that into iterator to iterator.
    """
    realize = block_realize(sch, block)
    if realize is None:
        return None
    block_iter_of_loop = {
        value: iv.var
        for iv, value in zip(realize.block.iter_vars, realize.iter_values)
        if isinstance(value, tirx.Var)
    }
    desc_iter_of_loop, desc_accesses = _desc_accesses(desc)
    to_block_iter = {}
    for sref, desc_loop in tensorize_info.loop_map.items():
        block_var = next(
            (v for lv, v in block_iter_of_loop.items() if lv.same_as(sref.stmt.loop_var)), None
        )
        desc_var = next(
            (v for lv, v in desc_iter_of_loop.items() if lv.same_as(desc_loop.loop_var)), None
        )
        if block_var is None or desc_var is None:
            return None
        to_block_iter[desc_var] = block_var
    blk = realize.block
    mapped = list(to_block_iter.values())
    regions = [(r, i) for i, r in enumerate(blk.reads)] + [(w, None) for w in blk.writes]
    operands = []
    for buf, desc_indices, is_write in desc_accesses:
        tile_vars = [
            next((b for d, b in to_block_iter.items() if d.same_as(i)), None) for i in desc_indices
        ]
        if any(v is None for v in tile_vars):
            return None
        candidates = [
            (r, i)
            for r, i in regions
            if (i is None) == is_write
            and _positions(_used_vars(r), mapped) == _positions(tile_vars, mapped)
        ]
        if len(candidates) != 1:
            return None
        region, read_index = candidates[0]
        operands.append(
            Operand(
                buffer=region.source,
                read_index=read_index,
                indices=[rng.min for rng in region.region],
                tile_vars=tile_vars,
                tile_shape=[int(s) for s in buf.shape],
            )
        )
    return operands


def _positions(variables, mapped: list) -> set[int]:
    """Positions in ``mapped`` (the intrinsic-mapped block iterators) of ``variables``."""
    return {p for p, m in enumerate(mapped) if any(v.same_as(m) for v in variables)}


def _used_vars(region) -> list:
    return [v for rng in region.region for v in tirx.analysis.undefined_vars(rng.min)]


def prepare_operands(
    sch: Schedule, block: SBlockRV, operands: list[Operand], *, panels_in_tile_order: bool = False
) -> bool:
    """Make every operand readable in place, packing layout-free weights (once, at compile time)
    and intermediate buffers (a padded copy: its producer writes the packed layout, no extra pass);
    False if impossible. ``panels_in_tile_order``: see :meth:`Operand.packed_index_map`.

    Checks first and changes the schedule only when all operands will fit.
    """
    to_pack = []
    for op in operands:
        if op.in_place():
            continue
        if op.read_index is None or not op.packable():
            return False
        intermediate = param_index(sch, op.buffer) is None
        if not intermediate and not is_layout_free(sch, op.buffer):
            return False
        to_pack.append((op, intermediate))
    for op, intermediate in to_pack:
        if not intermediate:
            copy = sch.cache_read(block, op.read_index, "global")
            sch.annotate(copy, LAYOUT_REWRITE_PREPROC, 1)
        index_map = op.packed_index_map(panels_in_tile_order=panels_in_tile_order)
        sch.transform_layout(block, ("read", op.read_index), index_map)
        if intermediate:
            _write_in_packed_order(sch, block, op, index_map)
    return True


def _write_in_packed_order(sch: Schedule, block: SBlockRV, op: Operand, packed_index_map) -> None:
    """Make the copy that writes a packed operand iterate in the packed order, its tile marked for
    unrolling (the UnrollTiles postproc unrolls it wherever the copy's sampled place puts it).

    Left in the source's order, the copy writes each tile (16 x 4 bytes for VNNI) one scattered byte
    at a time: on a 30522-row vocabulary weight it took longer than the GEMM reading it. Iterating
    the tile contiguously and unrolled lets LLVM's SLP vectorizer turn its rows into vector loads
    and shuffles (4.3x faster on that weight, close to the memory's bandwidth).
    """
    name = op.buffer.name  # transform_layout replaced the buffer object
    producer = next(
        (p for p in sch.get_producers(block) if sch.get(p).writes[0].source.name == name), None
    )
    if producer is None:
        return
    iters = sch.get(producer).iter_vars
    index_map = IndexMap.from_func(
        packed_index_map, ndim=len(iters), index_dtype=str(iters[0].var.ty)
    )
    try:
        sch.transform_block_layout(producer, index_map)
    except ScheduleError:  # the copy's iterators are not the buffer's dims: leave its order
        return
    sch.annotate(producer, UNROLL_TILE, len(op.tile_shape))  # wherever its place is sampled


def widen_activation(sch: Schedule, block: SBlockRV, dtype: str) -> None:
    """Make ``block`` read its u8 operand from a copy of type ``dtype`` (s16, for ``vpmaddwd``), so
    the micro-kernel broadcasts widened pairs straight from memory instead of widening them per
    step.

    An intermediate operand (a padded copy, an epilogue's output) is written widened by its
    producer, at no extra pass; a function input gets a widening copy (a pass per call). Either
    stays where it is, unsampled (:data:`~.annotations.WIDENED`): a sampled location may inline it.
    Its consumers read it back as u8 (``unsafe_set_dtype`` casts every read), which is what the
    widened intrinsics' descriptions match.
    """
    index, region = next(
        (i, r) for i, r in enumerate(sch.get(block).reads) if str(r.source.dtype) == "uint8"
    )
    name = region.source.name
    producer = next(
        (p for p in sch.get_producers(block) if sch.get(p).writes[0].source.name == name), None
    )
    if (
        producer is None
        or LAYOUT_REWRITE_PREPROC in sch.get(producer).annotations
        or len(sch.get(producer).writes) != 1
    ):
        producer = sch.cache_read(block, index, "global")
    sch.unsafe_set_dtype(producer, 0, dtype)
    sch.annotate(producer, WIDENED, 1)
