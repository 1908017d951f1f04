"""Heron's Tensorize rule (AMX and the x86 dot products on CPU; WMMA has its own rule)."""

import functools
import itertools
import math

from tvm import tirx
from tvm.s_tir import Schedule, TensorIntrin
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.schedule import SBlockRV, ScheduleError
from tvm.s_tir.schedule.analysis import get_tensorize_loop_mapping
from tvm.s_tir.schedule.transform import tile_with_tensor_intrin
from tvm.tirx.analysis import undefined_vars

from ..hardware.dot_products import VNNI, by_name, dot_products, narrow_weight_params
from ..hardware.peak import dot_chains
from ..hardware.targets import has_amx, num_cores, vector_registers
from ..intrinsics import (
    AMX_MAX_PADDING_WASTE,
    DOT_MAX_PADDING_WASTE,
    ensure_registered,
    is_amx,
    register_all_amx,
)
from ..schedule.analysis import extents, is_tiled, padded_volume_ratio, param_index
from ..schedule.annotations import AUTO_TENSORIZE, BLOCKIZED, iter_kinds
from ..schedule.gemm_view import GemmView, as_gemm
from ..schedule.operand_layout import match_operands, prepare_operands, widen_activation
from ..schedule.options import check, heron_object
from ..schedule.padding import pad_einsum
from ..schedule.register_tile import row_multiple
from .base import HeronRule


def intrinsics_for(target) -> list[str]:
    """Tensor intrinsics this target can execute, best first: AMX's (deepest reduction first) where
    this host runs tile code, then the x86 dot products the CPU has (AVX-512 VNNI, AVX-VNNI,
    AVX-512BW, AVX2; the last two with their form for narrow weights first:
    :func:`ms_heron.hardware.dot_products.dot_products`)."""
    dots = dot_products(target) if target is not None else []
    if not dots:
        return []
    return [*(register_all_amx() if has_amx(target) else []), *(d.name for d in dots)]


def matching_intrinsics(sch: Schedule, block: SBlockRV, target) -> list[str]:
    """The target's intrinsics whose operand dtypes are the block's (u8 x s8 -> s32 on x86; u8 x s16
    where the lowering widened the weight for ``vpmaddwd``)."""
    if not intrinsics_for(target):
        return []
    ensure_registered(target)
    return [i for i in intrinsics_for(target) if _dtypes(sch, block) == _block_dtypes(i)]


def _dtypes(sch: Schedule, block: SBlockRV) -> set[str]:
    blk = sch.get(block)
    return {str(region.source.dtype) for region in (*blk.reads, *blk.writes)}


def _block_dtypes(intrin: str) -> set[str]:
    """The operand dtypes of a block ``intrin`` tensorizes: its description's, but a u8 activation
    where a dot product reads it widened (:func:`~ms_heron.schedule.operand_layout.widen_activation`
    makes the copy). TVM's loop-mapping analysis matches the loop structure only, not the dtypes."""
    dot = by_name(intrin)
    if dot is not None:
        return dot.operand_dtypes
    return {str(info.dtype) for info in ArgInfo.from_prim_func(TensorIntrin.get(intrin).desc)}


@heron_object
class Tensorize(HeronRule):
    """Condition: the block (a reduction not yet tiled) matches a tensor intrinsic the target
    executes -- TVM's loop-mapping analysis finds its description inside the block, dtypes included
    (u8 x s8 -> s32 16x4 for AVX-512 VNNI; u8 x s16 8x2 for AVX2, whose u8 activation it widens
    too; s16 x s16 8x2 for an int8 convolution's Winograd GEMM there) -- and each operand either
    holds the intrinsic's tile in place or can be packed (:mod:`.operand_layout`): a layout-free
    weight, or a padded copy.

    Application: where an extent the intrinsic covers is not a multiple of its tile (1000 output
    channels for VNNI's 16 lanes, 3 input channels for its 4-deep reduction), ``pad_einsum`` pads
    the block to whole tiles first (zero-filled copies of the inputs, the result copied back),
    unless that adds more than ``max_waste`` work. Then split off and reorder the loops the
    intrinsic covers, ``blockize`` them, and mark the outer block with
    ``meta_schedule.auto_tensorize`` (MetaSchedule's RewriteTensorize postproc does the final
    ``tensorize``). Later rules tile and cache the outer ``<name>_o`` block.

    The intrinsics come in families (AMX tiles of every reduction depth, a dot product): the first
    of each family that fits makes a design space of its own, so that on an AMX host the search
    measures a tile kernel against a VNNI one instead of the rule guessing which is faster for this
    shape. A convolution whose output rows fit no tile (a 7 x 7 map's w padded to 32) gets its tile
    space over its pixels fused into one row iterator
    (:func:`~ms_heron.schedule.gemm_view.as_gemm`). A ``vpdpbusd`` space whose rows leave no
    register tile enough accumulators (AVX-VNNI's 16 registers and a 1024-row GEMM) comes with a
    second one, its rows padded for a tile that has them (:meth:`_register_rows`).

    Parameters
    ----------
    intrinsics
        Intrinsic names to try, best first (None: the ones the target executes); consecutive AMX
        names form one family, as do consecutive others.
    pad
        Whether awkward extents are padded to the intrinsic's tile (off: such blocks stay scalar).
    max_waste
        The largest share of extra work padding may add (1.0: at most twice the multiply-adds; one
        dot-product instruction does two or four per lane, so even that beats the scalar kernel).
    """

    def __init__(
        self,
        *,
        intrinsics: list[str] | None = None,
        pad: bool = True,
        max_waste: float = DOT_MAX_PADDING_WASTE,
    ):
        check(
            max_waste >= 0.0,
            f"Tensorize(max_waste={max_waste!r}): give the extra share of work padding may add, >= "
            "0",
        )
        self.intrinsics = intrinsics
        self.pad = pad
        self.max_waste = max_waste

    def _candidates(self) -> list[str]:
        return list(self.intrinsics) if self.intrinsics is not None else intrinsics_for(self.target)

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        if (
            "R" not in iter_kinds(sch, block)
            or is_tiled(sch, block)
            or BLOCKIZED in sch.get(block).annotations
        ):
            return [sch]
        candidates = self._candidates()
        if candidates:
            ensure_registered(self.target)
        spaces = []
        # a convolution seen as a GEMM, for the tiles that fit none of its row iterators: the same
        # view serves every depth
        fused = functools.cache(lambda: as_gemm(sch, block))
        for _, family in itertools.groupby(candidates, key=is_amx):
            for intrin in family:
                space = self._tensorized(sch, block, intrin)
                if space is None and is_amx(intrin) and fused() is not None:
                    gemm, view = fused()
                    space = self._tensorized(gemm, block, intrin, view=view)
                if space is None:
                    continue
                rows = self._register_rows(sch, block, intrin)
                padded = self._tensorized(sch, block, intrin, rows=rows) if rows else None
                spaces += [space] if padded is None else [space, padded]
                break
        return spaces or [sch]

    def _tensorized(
        self,
        sch: Schedule,
        block: SBlockRV,
        intrin: str,
        *,
        rows: tuple[int, int] | None = None,
        view: GemmView | None = None,
    ) -> Schedule | None:
        """A copy of ``sch`` with ``block`` split for ``intrin`` and marked for tensorizing, or
        None. ``rows``: an iterator and the multiple to pad it to as well (:meth:`_register_rows`).
        ``view``: ``sch`` has the block's pixels fused into one row iterator
        (:mod:`~ms_heron.schedule.gemm_view`), settled once padded.
        """
        desc = TensorIntrin.get(intrin).desc
        if _dtypes(sch, block) != _block_dtypes(intrin):
            return None
        dot = by_name(intrin)
        if dot is not None and dot.narrow_weights and not _weights_are_narrow(sch, block):
            return None
        # AMX pads rows only: a reduction padded to a deep tile wastes what a shallower one saves.
        amx = is_amx(intrin)
        work = self._padded_to_intrinsic(
            sch,
            block,
            desc,
            min(self.max_waste, AMX_MAX_PADDING_WASTE) if amx else self.max_waste,
            pad_reduction=not amx,
            rows=rows,
        )
        if work is not None and view is not None and not view.settle(work, block):
            return None
        # AMX reads VNNI's packed operands (see ms_heron.intrinsics.amx): VNNI's tile matches them.
        layout = TensorIntrin.get(VNNI.name).desc if amx else desc
        mapping = get_tensorize_loop_mapping(work, block, layout) if work is not None else None
        operands = match_operands(work, block, layout, mapping) if mapping is not None else None
        if operands is None or not prepare_operands(
            work, block, operands, panels_in_tile_order=amx
        ):
            return None
        if dot is not None and dot.widens_activation:
            widen_activation(work, block, dot.activation_dtype)
        inner = tile_with_tensor_intrin(work, block, intrin)
        if inner is None:
            return None
        outer = work.blockize(inner)
        if amx and not _tensorizes(work, outer, intrin):
            return None
        work.annotate(outer, AUTO_TENSORIZE, intrin)
        work.annotate(block, BLOCKIZED, 1)
        return work

    def _register_rows(self, sch: Schedule, block: SBlockRV, intrin: str) -> tuple[int, int] | None:
        """The innermost row iterator (spatial, outside the intrinsic) of ``block`` and the multiple
        to pad it to for a register tile that keeps every port of the dot product busy
        (:func:`~ms_heron.schedule.register_tile.row_multiple`); None where the rows' divisors give
        one already. Only for a dot product that accumulates in place (``vpdpbusd``): the widening
        forms' chains run through a one-cycle ``vpaddd``. Not where an input's index moves with
        the rows inside an expression (a 3x3 convolution's ``h + kh``): padding those rows copies
        the input once per kernel tap (im2col)."""
        dot = by_name(intrin)
        if dot is None or dot.form != "vpdpbusd" or not self.pad:
            return None
        mapping = get_tensorize_loop_mapping(
            sch, block, TensorIntrin.get(intrin).desc, allow_padding=True
        )
        loops, kinds = sch.get_loops(block), iter_kinds(sch, block)
        if mapping is None or len(loops) != len(kinds):
            return None
        mapped = [
            any(sch.get(loop).same_as(ref.stmt) for ref in mapping.loop_map) for loop in loops
        ]
        rows = [i for i, (kind, m) in enumerate(zip(kinds, mapped)) if kind == "S" and not m]
        lanes = [i for i, (kind, m) in enumerate(zip(kinds, mapped)) if kind == "S" and m]
        if not rows or len(lanes) != 1 or not _read_bare(sch.get(block), rows[-1]):
            return None
        sizes = extents(sch.get(block))
        multiple = row_multiple(
            [sizes[i] for i in rows],
            -(-sizes[lanes[0]] // dot.lanes),
            registers=vector_registers(self.target),
            chains=dot_chains(self.target, dot),
            cores=num_cores(self.target),
        )
        return (rows[-1], multiple) if multiple else None

    def _padded_to_intrinsic(
        self,
        sch: Schedule,
        block: SBlockRV,
        desc,
        max_waste: float,
        *,
        pad_reduction: bool,
        rows: tuple[int, int] | None = None,
    ) -> Schedule | None:
        """A copy of ``sch`` (to be split for the intrinsic), padded when the intrinsic's tiles
        divide the block only after padding within ``max_waste`` (and, unless ``pad_reduction``,
        on spatial iterators alone), and ``rows`` given; None when they cannot."""
        mapping = get_tensorize_loop_mapping(sch, block, desc, allow_padding=self.pad)
        if mapping is None:
            return None
        paddings = mapping.block_iter_paddings
        sizes = extents(sch.get(block))
        multiples = [1] * len(sizes) if paddings is None else [int(p) for p in paddings]
        if rows is not None:
            multiples[rows[0]] = math.lcm(multiples[rows[0]], rows[1])
        if all(m == 1 for m in multiples):
            return sch.copy()
        if padded_volume_ratio(sizes, multiples) > 1 + max_waste:
            return None
        if not pad_reduction and any(
            k == "R" and e % m for k, e, m in zip(iter_kinds(sch, block), sizes, multiples)
        ):
            return None
        padded = sch.copy()
        try:
            copies = _reindexed_reads(padded, block)
            pad_einsum(padded, block, multiples)
            for copy in copies:  # gathered and zero-padded in one pass
                padded.compute_inline(copy)
        except ScheduleError:  # TVM's own conditions (trivial binding, no opaque access) not met
            return None
        return padded


def _read_bare(blk, index: int) -> bool:
    """Whether every read of ``blk`` indexes by its ``index``-th iterator bare, if at all."""
    var = blk.iter_vars[index].var
    return all(
        r.min.same_as(var) or not any(v.same_as(var) for v in undefined_vars(r.min))
        for region in blk.reads
        for r in region.region
    )


def _weights_are_narrow(sch: Schedule, block: SBlockRV) -> bool:
    """Whether every s8 buffer ``block`` reads is a parameter the function's lowering recorded as a
    narrow constant (:func:`~ms_heron.hardware.dot_products.narrow_weight_params`): the condition
    under which a byte-multiplying dot product (``vpmaddubsw``) cannot saturate. Nothing else is
    known to fit: a suite workload's weight is an argument of any value."""
    narrow = narrow_weight_params(sch.mod["main"])
    weights = [r.source for r in sch.get(block).reads if str(r.source.dtype) == "int8"]
    return bool(weights) and all(param_index(sch, w) in narrow for w in weights)


def _tensorizes(sch: Schedule, outer: SBlockRV, intrin: str) -> bool:
    """Whether ``outer`` (just blockized) tensorizes with ``intrin``, tried on a copy. AMX's tile
    reads 32 rows of the A operand at one stride; a convolution's im2col view puts its kernel
    window between a row and its channels, which only the final ``tensorize`` would refuse, after
    every candidate of the space was sampled and built as scalar code."""
    probe = sch.copy()
    try:
        probe.decompose_reduction(outer, probe.get_loops(outer)[0])
        probe.tensorize(outer, intrin)
    except (ScheduleError, IndexError):
        return False
    return True


def _reindexed_reads(sch: Schedule, block: SBlockRV) -> list[SBlockRV]:
    """Make every read of ``block`` index its buffer by bare iterators, as ``pad_einsum`` needs: a
    convolution's ``X[h + kh, ...]`` is read through a copy ``X_reindex[h, kh, ...]`` (im2col).
    Returns the copies, to be inlined into the padded copies ``pad_einsum`` makes of them."""
    copies = []
    for index, region in enumerate(sch.get(block).reads):
        if not all(isinstance(r.min, tirx.Var) for r in region.region):
            copies.append(sch.reindex(block, ("read", index)))
    return copies
