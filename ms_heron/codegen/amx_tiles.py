"""AMX kernels finished once the loops around their calls are known: the tile configuration loaded
once per thread, accumulators zeroed in their tiles, and the operand the calls walk through loaded
with the streaming hint.

Why: one call of :mod:`ms_heron.intrinsics.amx` knows only its own 32 x 32 block. The best 1024^3
int8 GEMM kernel of a 200-trial run on an Emerald Rapids Xeon (2 cores) ran at 25% of the measured
AMX peak. Edited by hand, the same kernel ran at 27% with the configuration loaded once per thread
(``ldtilecfg`` zeroes every tile and waits for the tile unit), at 38% with its accumulators zeroed
in tiles and stored to the output directly (the reduction's init had zeroed a buffer that every
call then loaded), and at 44% with the B panels, which each call reads once, loaded by
``tileloaddt1``: the A strip that the next call reuses stays in L1. A C kernel of the same loops
runs at about the same speed on this host, with L2 bandwidth as its limit.

What (:func:`finish_amx_kernels`), for every tensorized call (a block annotated
:data:`~ms_heron.intrinsics.amx.KERNEL`):

1. Every call's tile configuration is dropped, and one is loaded first in the body of each
   parallel loop that holds calls (every thread runs its own), or first in the function where
   calls run outside one.
2. Where a call is the only one of its output block (the reduction's loops outside the call
   have one iteration each), and RewriteReductionBlock's init of that reduction (the block
   ``<name>_init`` beside the call's ``<name>_update``) only stores zeros, the init is dropped and
   the call zeroes its accumulator tiles instead of loading them.
3. Of A and B, the one whose tiles move with the innermost loop of more than one iteration around
   the call, while the other's do not, is loaded with the streaming hint.

A function without calls, or of a form the pass does not know, is returned as it is: each call
then loads its configuration and accumulators itself, as tensorized.
"""

from __future__ import annotations

import tvm
from tvm import s_tir, tirx
from tvm.target import codegen

from ..intrinsics.amx import ACCUMULATOR_LOADS, KERNEL, LOAD, OPERAND_LOADS, TILE_CONFIG
from .ir import transformed, with_body

#: The tile load that hints the data will not be reused soon (kept out of L1).
STREAMING_LOAD = "tileloaddt164"


def finish_amx_kernels() -> tvm.transform.Pass:
    """The pass (module docstring), on every PrimFunc of a module before lowering."""

    @tirx.transform.prim_func_pass(opt_level=0, name="ms_heron.FinishAmxKernels")
    def _pass(func: tirx.PrimFunc, _mod, _ctx) -> tirx.PrimFunc:
        found = _Found()
        try:
            _find(func.body, [], found)
            if not found.kernels:
                return func
            return func.with_body(_finished(func.body, found))
        except (tvm.error.InternalError, ValueError, TypeError, AttributeError):
            return func  # a form the pass does not know: the calls as tensorized, each configured

    return _pass


class _Found:
    """What :func:`_find` collects: the calls, each one's streamed operand (0: A, 1: B), the calls
    that are alone on their output block, every block by name, the configuration, and where the
    calls run (the variables of the parallel loops around them, and whether any runs outside
    one)."""

    def __init__(self):
        self.kernels: set = set()
        self.streamed: dict = {}
        self.alone: list = []
        self.blocks: dict = {}
        self.config = None
        self.parallel_loops: set = set()
        self.outside_parallel = False

    def zeroed_inits(self) -> dict:
        """Each call alone on its block -> the init that only zeroed it."""
        pairs = {}
        for kernel in self.alone:
            name = kernel.block.name_hint
            init = self.blocks.get(name.removesuffix("_update") + "_init")
            if name.endswith("_update") and init is not None and _zeroes_output_of(init, kernel):
                pairs[kernel] = init
        return pairs


def _find(stmt, loops: list, found: _Found) -> None:
    if isinstance(stmt, tirx.For):
        _find(stmt.body, [*loops, stmt], found)
    elif isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            _find(s, loops, found)
    elif isinstance(stmt, tirx.AttrStmt):
        if stmt.attr_key == TILE_CONFIG:
            found.config = found.config or stmt
        _find(stmt.body, loops, found)
    elif isinstance(stmt, s_tir.SBlockRealize):
        found.blocks[stmt.block.name_hint] = stmt
        if KERNEL in stmt.block.annotations:
            _add_kernel(stmt, loops, found)
        _find(stmt.block.body, loops, found)
    elif isinstance(stmt, tirx.IfThenElse):
        _find(stmt.then_case, loops, found)
        if stmt.else_case is not None:
            _find(stmt.else_case, loops, found)


def _add_kernel(kernel, loops: list, found: _Found) -> None:
    found.kernels.add(kernel)
    if _alone_on_its_block(kernel, loops):
        found.alone.append(kernel)
    parallel = {lp.loop_var for lp in loops if lp.kind == tirx.ForKind.PARALLEL}
    found.parallel_loops |= parallel
    found.outside_parallel |= not parallel
    streamed = _streamed_operand(kernel, loops)
    if streamed is not None:
        found.streamed[kernel] = streamed


def _alone_on_its_block(kernel, loops: list) -> bool:
    """Whether the call's reduction iterators are bound to loops of one iteration only: the one
    call that updates its output block."""
    units = {lp.loop_var.name for lp in loops if _is_one(lp.extent)}
    return all(
        all(v.name in units for v in tirx.analysis.undefined_vars(value))
        for var, value in zip(kernel.block.iter_vars, kernel.iter_values)
        if var.iter_type == tirx.IterVar.CommReduce
    )


def _is_one(expr) -> bool:
    return isinstance(expr, tirx.IntImm) and expr.value == 1


def _zeroes_output_of(init, kernel) -> bool:
    """Whether the init stores zeros only, to a region of the call's output buffer of the call's
    block's shape."""
    if init.block.init is not None or len(init.block.writes) != 1 or len(kernel.block.writes) != 1:
        return False
    (mine,), (theirs,) = init.block.writes, kernel.block.writes
    same_shape = all(
        isinstance(x.extent, tirx.IntImm)
        and isinstance(y.extent, tirx.IntImm)
        and x.extent.value == y.extent.value
        for x, y in zip(mine.region, theirs.region, strict=True)
    )
    return (
        mine.source.same_as(theirs.source)
        and same_shape
        and _stores_only_zeros(init.block.body, mine.source)
    )


def _stores_only_zeros(stmt, buffer) -> bool:
    if isinstance(stmt, tirx.BufferStore):
        value = stmt.value
        return stmt.buffer.same_as(buffer) and isinstance(value, tirx.IntImm) and value.value == 0
    if isinstance(stmt, tirx.For):
        return _stores_only_zeros(stmt.body, buffer)
    if isinstance(stmt, tirx.SeqStmt):
        return all(_stores_only_zeros(s, buffer) for s in stmt.seq)
    if isinstance(stmt, s_tir.SBlockRealize):
        block = stmt.block
        return block.init is None and _stores_only_zeros(block.body, buffer)
    return False


def _streamed_operand(kernel, loops: list) -> int | None:
    """0 (A) or 1 (B): the operand whose region moves with the innermost loop of more than one
    iteration around the call while the other's does not; None if both or neither move."""
    walked = next((lp for lp in reversed(loops) if not _is_one(lp.extent)), None)
    if walked is None:
        return None
    moving = {
        var.var.name
        for var, value in zip(kernel.block.iter_vars, kernel.iter_values)
        if any(v.same_as(walked.loop_var) for v in tirx.analysis.undefined_vars(value))
    }
    moves = [
        any(
            v.name in moving
            for r in match.source.region
            for v in tirx.analysis.undefined_vars(r.min)
        )
        for match in kernel.block.match_buffers[:2]
    ]
    if moves == [True, False]:
        return 0
    if moves == [False, True]:
        return 1
    return None


def _finished(body, found: _Found):
    load_id = codegen.llvm_lookup_intrinsic_id(f"llvm.x86.{LOAD}")
    zeroed = found.zeroed_inits()
    dropped = set(zeroed.values())

    def in_kernel(kernel):
        streamed = found.streamed.get(kernel)
        zeroes = kernel in zeroed

        def rewrite(node):
            if not isinstance(node, tirx.AttrStmt):
                return None
            if node.attr_key == TILE_CONFIG:
                return tirx.Evaluate(0)
            if node.attr_key == ACCUMULATOR_LOADS and zeroes:
                return tirx.SeqStmt([_tile_call("tilezero", c.args[1]) for c in _calls(node)])
            if node.attr_key == OPERAND_LOADS and streamed is not None:
                if int(node.value) == streamed:
                    return transformed(node, lambda s: _streaming(s, load_id))
            return None

        return with_body(kernel, transformed(kernel.block.body, rewrite))

    def post(node):
        if node in found.kernels:
            return in_kernel(node)
        if node in dropped:
            return _NOTHING
        if isinstance(node, tirx.For) and _is_nothing(node.body):
            return _NOTHING
        if isinstance(node, tirx.SeqStmt) and any(_is_nothing(s) for s in node.seq):
            kept = [s for s in node.seq if not _is_nothing(s)]
            return _NOTHING if not kept else kept[0] if len(kept) == 1 else tirx.SeqStmt(kept)
        return None

    # Identity matters: the calls and inits are the ones found, so they go before the config comes.
    done = transformed(body, post)
    config = found.config
    if config is None:
        return done

    def configured(node):
        if isinstance(node, tirx.For) and node.loop_var in found.parallel_loops:
            return with_body(node, tirx.SeqStmt([config, node.body]))
        return None

    done = transformed(done, configured)
    if not found.outside_parallel:
        return done
    if not isinstance(done, s_tir.SBlockRealize):
        return tirx.SeqStmt([config, done])
    return with_body(done, tirx.SeqStmt([config, done.block.body]))


#: What a dropped statement becomes (its loops and sequences drop it in turn).
_NOTHING = tirx.Evaluate(0)


def _is_nothing(stmt) -> bool:
    return stmt.same_as(_NOTHING)


def _calls(stmt) -> list:
    out = []
    if isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call):
        out.append(stmt.value)
    for child in getattr(stmt, "seq", []) or []:
        out += _calls(child)
    if isinstance(stmt, tirx.AttrStmt):
        out += _calls(stmt.body)
    return out


def _tile_call(name: str, *args):
    return tirx.Evaluate(tirx.call_llvm_intrin("void", f"llvm.x86.{name}", *args))


def _streaming(node, load_id: int):
    if not isinstance(node, tirx.Evaluate) or not isinstance(node.value, tvm.ir.Call):
        return None
    call = node.value
    if int(call.args[0]) != load_id:
        return None
    return _tile_call(STREAMING_LOAD, *call.args[1:])
