"""Software prefetch of the next k-block's panel of a kernel's reused operand.

Why: a model kernel reads its weights from memory (the tuner times them cold, as they run in a
network), and a tiled GEMM stays on one k-block's weight panel while its row tiles pass over it,
then jumps to the next. The hardware prefetchers do not run that far ahead: BERT-base's FFN output
GEMM (its best kernel of a 5-minute run, Zen 3) ran 3.52-3.61 ms with cold weights and 3.23 ms with
warm ones. Fetching the next panel a few lines per row tile while the current one is multiplied ran
it 3.28-3.43 ms cold (three runs, medians of 9-15 rounds in turn); its FFN input GEMM went 4.30 ->
3.94 ms, BERT-large's QKV projection 1.57 -> 1.50 ms.

Where (:func:`inject_panel_prefetch`): a serial loop ``k`` and, inside it, a serial loop ``r`` of
two or more iterations (only loops of one iteration between them; ``k``'s body may copy other
operands before it), over a block that reads a parameter buffer at an index that moves with ``k``
but not with ``r`` (the operand every row tile reuses), one ``k`` iteration reading a contiguous
range of it (a packed panel) of :data:`MIN_PANEL_BYTES` to half of the L2. The iterations of ``r``
and of the serial loops right inside it, down to the reduction's, then prefetch their shares of the
cache lines of the panel ``k + 1`` reads: into L1 a panel within half of it, else into L2. A
BLIS-blocked kernel's ``k`` step reads one cache block of weight (ViT's FFN output GEMM: 96 k x 768
columns, 288 KB), swept by every row tile; its first row tile used to wait on memory. Nothing else
in the kernel changes, and a loop nest that does not match is left as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx
from tvm.sym import Analyzer, IntervalSet

from ..hardware.targets import cpu_cache_bytes, is_cpu
from .ir import transformed, with_body

#: The smallest panel prefetched, in bytes: a smaller one is multiplied in too few cycles for its
#: prefetch to arrive ahead of it, and the pairs of an inner reduction loop with the register tile's
#: rows (one vector of weights per step) must not match.
MIN_PANEL_BYTES = 4 * 1024

#: x86's cache line, in bytes.
CACHE_LINE = 64


def inject_panel_prefetch() -> tvm.transform.Pass:
    """The prefetch pass (module docstring), on every PrimFunc of a module before lowering."""

    @tirx.transform.prim_func_pass(opt_level=0, name="ms_heron.InjectPanelPrefetch")
    def _pass(func: tirx.PrimFunc, _mod, _ctx) -> tirx.PrimFunc:
        target = func.attrs.get("target") if func.attrs is not None else None
        if target is None or not is_cpu(target):
            return func
        caches = cpu_cache_bytes(target)
        limits = _Limits(l1_panel=caches["L1"] // 2, l2_panel=caches["L2"] // 2)
        params = list(func.params)
        prefetches: dict = {}
        try:
            _find(func.body, [], params, prefetches, limits)
        except (tvm.error.InternalError, ValueError, TypeError):
            return func  # a form the analysis does not know: built as scheduled, never failed
        if not prefetches:
            return func
        return func.with_body(_inserted(func.body, prefetches))

    return _pass


@dataclass(frozen=True)
class _Limits:
    """The largest panels prefetched into L1 and into L2, in bytes: half of each cache, so that the
    next panel does not evict the current one's."""

    l1_panel: int
    l2_panel: int


def _find(stmt, loops: list, params: list, out: dict, limits: _Limits) -> None:
    """Collect, per loop (its variable), the prefetch loops its body starts with; only through the
    statements :func:`_inserted` rebuilds."""
    if isinstance(stmt, tirx.For):
        _find(stmt.body, [*loops, stmt], params, out, limits)
    elif isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            _find(s, loops, params, out, limits)
    elif isinstance(stmt, s_tir.SBlockRealize):
        block = stmt.block
        if block.iter_vars:  # the root block has none; its body holds the kernel
            _prefetch_reads(stmt, loops, params, out, limits)
        _find(block.body, loops, params, out, limits)


def _prefetch_reads(realize, loops: list, params: list, out: dict, limits: _Limits) -> None:
    """For each parameter the block reads, the outermost ``(k, r)`` loop pair that fits it."""
    pairs = _k_r_pairs(loops)
    if not pairs:
        return
    analyzer = Analyzer()
    for loop in loops:  # bounds, so that ``(j * 16 + jj) // 16`` reads as ``j``
        analyzer.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
    for var, value in zip(realize.block.iter_vars, realize.iter_values):
        analyzer.bind(var.var, value)
    reduced = _reduction_vars(realize)
    for region in realize.block.reads:
        buffer = region.source
        if not any(buffer.same_as(p) for p in params) or not all(
            isinstance(d, tirx.IntImm) for d in buffer.shape
        ):
            continue
        for k, r in pairs:
            inner = loops[loops.index(r) :]
            spread = _spread_loops(inner, reduced)
            found = _panel_prefetch(buffer, region.region, k, inner, spread, analyzer, limits)
            if found is not None:
                last, statement = found
                out.setdefault(last.name, []).append((last, statement))
                break


def _k_r_pairs(loops: list) -> list:
    """``(k, r)``: serial loops of two or more iterations, ``r`` inside ``k`` with only loops of one
    iteration between them, each loop of the chain its parent's body or one statement of it."""
    pairs = []
    for a, k in enumerate(loops):
        if k.kind != tirx.ForKind.SERIAL or _extent(k) < 2:
            continue
        for b in range(a + 1, len(loops)):
            if not _holds(loops[b - 1], loops[b]):
                break
            r = loops[b]
            if _extent(r) == 1:
                continue
            if r.kind == tirx.ForKind.SERIAL and _extent(r) >= 2:
                pairs.append((k, r))
            break
    return pairs


def _holds(outer, inner) -> bool:
    """Whether ``inner`` is ``outer``'s body or one statement of it."""
    body = outer.body
    if isinstance(body, tirx.SeqStmt):
        return any(s.same_as(inner) for s in body.seq)
    return body.same_as(inner)


def _reduction_vars(realize) -> set:
    """The loop variables the block's reduction iterators are bound to."""
    used = set()
    for var, value in zip(realize.block.iter_vars, realize.iter_values):
        if var.iter_type == tirx.IterVar.CommReduce:
            used |= {v.name for v in tirx.analysis.undefined_vars(value)}
    return used


def _spread_loops(inner: list, reduced: set) -> list:
    """``r`` and the serial loops nested right inside it before the reduction's: the iterations
    the prefetches of one panel are spread over."""
    spread = [inner[0]]
    for loop in inner[1:]:
        if (
            not spread[-1].body.same_as(loop)
            or loop.kind != tirx.ForKind.SERIAL
            or loop.loop_var.name in reduced
        ):
            break
        spread.append(loop)
    return spread


def _panel_prefetch(
    buffer, region, k, inner: list, spread: list, analyzer: Analyzer, limits: _Limits
):
    """The prefetch loop for ``buffer``'s panel of ``k + 1``, spread over the iterations of
    ``spread`` (as many of those loops as leave a cache line per iteration), and the variable of
    the loop whose body it starts (None: the read does not fit). ``inner``: the loops from ``r``
    (``inner[0]``) to the block."""
    shape = [int(d) for d in buffer.shape]
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    first = sum((_i64(rng.min) * _i64(s) for rng, s in zip(region, strides)), _i64(0))
    last = sum(
        ((_i64(rng.min) + _i64(rng.extent) - _i64(1)) * _i64(s) for rng, s in zip(region, strides)),
        _i64(0),
    )
    first, last = analyzer.simplify(first), analyzer.simplify(last)
    domain = {lp.loop_var: _iterations(lp) for lp in inner}
    low = analyzer.int_set(first, domain).min_value
    high = analyzer.int_set(last, domain).max_value
    size = analyzer.simplify(high - low + 1)
    stride = [_at(analyzer, low, k, i) for i in (0, 1, 2)]
    moves = [analyzer.simplify(stride[1] - stride[0]), analyzer.simplify(stride[2] - stride[1])]
    bytes_per = tvm.DataType(str(buffer.dtype)).bits // 8
    if not (
        isinstance(size, tirx.IntImm)
        and all(isinstance(m, tirx.IntImm) for m in moves)
        and int(moves[0]) == int(moves[1]) == int(size)  # adjacent panels, one per k
        and MIN_PANEL_BYTES <= int(size) * bytes_per <= limits.l2_panel
        and _constant_in(analyzer, first, inner[0])  # every row tile reads the same panel
    ):
        return None
    lines = -(-int(size) * bytes_per // CACHE_LINE)
    while len(spread) > 1 and math.prod(_extent(lp) for lp in spread) > lines:
        spread = spread[:-1]  # at least a line per iteration
    iteration, iterations = _i64(0), 1
    for loop in spread:
        iteration = iteration * _i64(_extent(loop)) + _i64(loop.loop_var - loop.min)
        iterations *= _extent(loop)
    per_iteration = -(-lines // iterations)
    per_line = CACHE_LINE // bytes_per
    total = math.prod(shape)
    p = tirx.Var("prefetch_line", "int64")
    line = iteration * _i64(per_iteration) + p
    offset = tirx.Min(_i64(low) + moves[0] + line * _i64(per_line), _i64(total - 1))
    address = buffer.access_ptr("r", offset=offset)  # flat: no division per dimension
    locality = 3 if int(size) * bytes_per <= limits.l1_panel else 2  # prefetcht0, else t1
    fetch = tirx.Evaluate(
        tirx.call_llvm_intrin("void", "llvm.prefetch.p0", address, 0, locality, 1)  # read, data
    )
    return spread[-1].loop_var, tirx.For(
        p, _i64(0), _i64(per_iteration), tirx.ForKind.SERIAL, fetch
    )


def _i64(value):
    """``value`` (an int or an index expression) as an int64 expression."""
    if isinstance(value, int):
        return tirx.const(value, "int64")
    return value if str(value.ty) == "int64" else tirx.Cast("int64", value)


def _at(analyzer: Analyzer, expr, loop, value: int):
    """``expr`` at ``loop``'s iteration ``value``."""
    fixed = analyzer.clone()
    fixed.bind(loop.loop_var, tirx.const(value, str(loop.loop_var.ty)), allow_override=True)
    return fixed.simplify(expr)


def _constant_in(analyzer: Analyzer, expr, loop) -> bool:
    """Whether ``expr`` stays the same over ``loop``'s iterations."""
    span = analyzer.int_set(expr, {loop.loop_var: _iterations(loop)})
    return analyzer.can_prove(span.max_value - span.min_value == 0)


def _iterations(loop) -> IntervalSet:
    """The values ``loop``'s variable takes."""
    return IntervalSet(loop.min, loop.min + loop.extent - 1)


def _extent(loop) -> int:
    return int(loop.extent) if isinstance(loop.extent, tirx.IntImm) else 0


def _inserted(stmt, prefetches: dict):
    """``stmt`` with each collected prefetch loop first in its ``r`` loop's body (``prefetches``:
    loop name -> (loop variable, prefetch loop))."""

    def first_in_loop(node):
        if not isinstance(node, tirx.For):
            return None
        mine = [s for v, s in prefetches.get(node.loop_var.name, []) if v.same_as(node.loop_var)]
        if not mine:
            return None
        return with_body(node, tirx.SeqStmt([*mine, node.body]))

    return transformed(stmt, first_in_loop)
