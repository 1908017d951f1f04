"""Derive a design space's :class:`ConstraintModel` from its trace and the Target alone.

The walk follows the trace's instructions: ``SamplePerfectTile`` and ``SampleCategorical`` give
the variables; ``Split``/``Reorder``/``GetLoops``/``Fuse`` tell which variable is each loop's
extent; ``Parallel``/``Vectorize`` and the cache stages' ``ComputeAt``/``ReverseComputeAt`` give the
derived quantities (parallel jobs, vector lanes, buffer footprints). Footprints come from the
blocks' read/write regions: per buffer dimension, ``sum |coef_v| * (E_v - 1) + extent`` over the
block iterators ``v`` of its affine index, where ``E_v`` is the product of the tile factors of
``v``'s loops inside the anchor loop -- so strides and dilations count.

On CUDA the walk also reads ``Bind`` (threads per block, a warp per thread-y under
``warp_execution``), cooperative-fetch vector widths and ``storage_align`` padding, and bounds them
by the Target's limits (:class:`~ms_heron.targets.GpuLimits`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ortools.sat.python import cp_model
from tvm import tirx
from tvm.s_tir import Schedule, Trace
from tvm.target import Target

from ..annotations import (
    TILING_STRUCTURE,
    block_annotations,
    is_metaschedule_space,
    iter_kinds,
    split_by_structure,
)
from ..targets import GpuLimits, cpu_cache_bytes, is_cpu, is_cuda, num_cores, vector_bytes, vector_registers
from .model import MAX_BOUND, Constraint, ConstraintModel, Decision, Footprint, divisors


@dataclass(frozen=True)
class ConstraintOptions:
    """Which performance constraints to add (validity constraints are always added)."""

    #: Parallel jobs of a parallelized tile loop >= the target's cores (when the space allows).
    parallel_jobs: bool = True
    #: Tile buffers of one block fit the per-core L2; BLIS's micro-kernel model: the register
    #: micro-tile fits the vector registers, its panels L1, the cache blocks L2.
    cache_capacity: bool = True
    #: Upper bound on a vectorized loop's extent.
    max_vector_extent: int = 64


@dataclass
class _Loop:
    block: str
    iter_index: int | None
    factors: tuple  # variable names or ints; their product is the loop's extent
    parts: tuple = ()  # a fused loop's constituent loops
    thread: str = ""  # the thread axis the loop (or the fused loop holding it) is bound to

    def constituents(self) -> tuple:
        return self.parts or (self,)


@dataclass
class _Kernel:
    """What a GPU kernel's tiled block binds: thread-axis extents, and whether a warp runs each thread."""

    threads: dict = field(default_factory=dict)  # axis -> factors
    warp_lanes: bool = False


def derive(space: Schedule, target: Target, options: ConstraintOptions = ConstraintOptions()) -> ConstraintModel:
    """The constraint model of the design space ``space`` (a Schedule whose trace samples)."""
    trace: Trace = space.trace.simplified(remove_postproc=True)
    if is_metaschedule_space(trace):
        options = dataclasses.replace(options, parallel_jobs=False, cache_capacity=False)
    model = ConstraintModel()
    loops: dict = {}  # LoopRV -> _Loop
    blocks: dict = {}  # SBlockRV -> block name
    nest: dict[str, list[_Loop]] = {}  # block name -> its tiled loops in order, once reordered
    sampled: dict = {}  # ExprRV -> variable name
    kernels: dict[str, _Kernel] = {}  # tiled block name -> its thread binding (GPU)
    fetch_vectors: dict[str, str] = {}  # cooperative-fetch stage name -> its vector-width choice
    counter = [0]

    def fresh(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    for inst in trace.insts:
        kind = inst.kind.name
        ins, outs, attrs = list(inst.inputs), list(inst.outputs), list(inst.attrs)
        if kind == "GetSBlock":
            blocks[outs[0]] = str(attrs[0])
        elif kind == "Blockize":
            blocks[outs[0]] = _block_name(space, outs[0])
        elif kind == "GetLoops":
            name = blocks.get(ins[0])
            known = nest.get(name)
            for pos, rv in enumerate(outs):
                if known is not None and pos >= len(outs) - len(known):
                    loops[rv] = known[pos - (len(outs) - len(known))]
                else:
                    loops[rv] = _Loop(name, pos, ())
        elif kind == "SamplePerfectTile":
            extent = math.prod(int(x) for x in trace.decisions[inst])
            n, max_inner = int(attrs[0]), int(attrs[1])
            names = [fresh("tile") for _ in range(n)]
            for name in names:
                model.new_var(name, divisors(extent))
            for rv, name in zip(outs, names):
                sampled[rv] = name
            decision = Decision(inst, "tile", tuple(names), extent=extent)
            model.add_decision(decision)
            _add_split(model, decision, max_inner)
        elif kind == "SampleCategorical":
            sampled[outs[0]] = fresh("choice")
            _add_categorical(model, inst, "categorical", tuple(int(c) for c in attrs[0]), sampled[outs[0]])
        elif kind == "SampleComputeLocation":
            name = blocks.get(ins[0]) or _block_name(space, ins[0])
            _add_categorical(model, inst, "location", _location_candidates(space, name), fresh("location"))
        elif kind == "Split":
            parent = loops.get(ins[0], _Loop(None, None, ()))
            for rv, factor in zip(outs, ins[1:]):
                term = sampled.get(factor, int(factor) if isinstance(factor, (int, tirx.IntImm)) else None)
                loops[rv] = _Loop(parent.block, parent.iter_index, (term,) if term is not None else ())
        elif kind == "Reorder":
            ordered = [loops.get(rv) for rv in ins]
            if ordered and None not in ordered and all(lp.block == ordered[0].block for lp in ordered):
                nest[ordered[0].block] = ordered
        elif kind == "Fuse":
            parts = [loops.get(rv, _Loop(None, None, ())) for rv in ins]
            known = all(p.factors for p in parts)
            factors = tuple(f for p in parts for f in p.factors) if known else ()
            loops[outs[0]] = _Loop(parts[0].block, None, factors, tuple(c for p in parts for c in p.constituents()))
        elif kind == "Bind":
            _bind(loops.get(ins[0]), str(attrs[0]), kernels)
        elif kind == "Annotate" and str(attrs[0]) == WARP_EXECUTION:
            kernels.setdefault(blocks.get(ins[0]) or _block_name(space, ins[0]), _Kernel()).warp_lanes = True
        elif kind == "Annotate" and str(attrs[0]) == COOPERATIVE_FETCH and ins[1] in sampled:
            fetch_vectors[_block_name(space, ins[0])] = sampled[ins[1]]
        elif kind == "Parallel" and options.parallel_jobs and is_cpu(target):
            _add_parallel(model, loops.get(ins[0]), num_cores(target), fresh("parallel"))
        elif kind == "Vectorize":
            _add_vector(model, loops.get(ins[0]), options.max_vector_extent, fresh("vector"))
        elif kind in ("ComputeAt", "ReverseComputeAt"):
            _add_footprint(model, space, inst, loops, nest, fresh)
    _add_micro_kernel(model, space, nest, target, options)
    if options.cache_capacity and is_cpu(target):
        _add_cache_capacity(model, target)
    if is_cuda(target):
        limits = GpuLimits.of(target)
        _add_threads(model, kernels, limits)
        _add_shared_memory(model, limits)
        _add_fetch_vectors(model, fetch_vectors)
    return model


# -- split, categorical, compute location, parallel, vector -------------------------------------


def _add_categorical(model: ConstraintModel, inst, kind: str, cands: tuple, name: str) -> None:
    """One variable: the index of the chosen candidate."""
    model.new_var(name, lo=0, hi=len(cands) - 1)
    model.add_decision(Decision(inst, kind, (name,), candidates=cands))
    model.add(Constraint(f"{name} in candidates {cands}", "candidates", lambda v, n=name, k=len(cands): 0 <= v[n] < k))


def _location_candidates(space: Schedule, block: str | None) -> tuple[int, ...]:
    """What ``SampleComputeLocation`` may pick for ``block``: inline (-2), root (-1), or a loop of its
    consumer by position.

    TVM's own candidate list (``CollectComputeLocation``) also drops unit loops and loops after the
    first reduction, which depend on the sampled tiles; this is its superset, and TVM maps a position
    it rejects to the next valid one further out when the program is replayed (``replay`` reads
    the normalized decision back).
    """
    try:
        rv = space.get_sblock(block)
        depth = max((len(space.get_loops(c)) for c in space.get_consumers(rv)), default=0)
    except Exception:  # pylint: disable=broad-except  # inlined in this space: no loops to name
        depth = max((len(space.get_loops(b)) for b in space.get_child_blocks(space.get_sblock("root"))), default=0)
    return (-2, -1, *range(depth))


def _add_split(model: ConstraintModel, decision: Decision, max_inner: int) -> None:
    names, extent = decision.variables, decision.extent
    product = model.product(f"{names[0]}..{names[-1]}", list(names), extent)
    if isinstance(product, int):
        return
    model.cp.Add(product == extent)
    label = " * ".join(names)
    model.add(Constraint(f"split {label} == {extent}", "split", lambda v, ns=names, e=extent: math.prod(v[n] for n in ns) == e))
    if max_inner > 0:
        model.cp.Add(model.vars[names[-1]] <= max_inner)
        model.add(Constraint(f"split innermost {names[-1]} <= {max_inner}", "split", lambda v, n=names[-1], m=max_inner: v[n] <= m))


def _loop_extent(model: ConstraintModel, loop: _Loop | None, name: str):
    """``(variable, upper bound)`` for a loop whose extent depends on sampled factors, else None."""
    if loop is None or not loop.factors or all(isinstance(f, int) for f in loop.factors):
        return None
    hi = model.upper_bound(loop.factors)
    return model.product(name, list(loop.factors), hi), hi


def _add_parallel(model: ConstraintModel, loop: _Loop | None, cores: int, name: str) -> None:
    extent = _loop_extent(model, loop, name)
    if extent is None:
        return
    jobs, hi = extent
    need = min(cores, hi)
    model.cp.Add(jobs >= need)
    model.add(Constraint(f"{name}: parallel jobs >= {need}", "parallel", lambda v, n=name, k=need: v[n] >= k, performance=True))


def _add_vector(model: ConstraintModel, loop: _Loop | None, limit: int, name: str) -> None:
    extent = _loop_extent(model, loop, name)
    if extent is None:
        return
    model.cp.Add(extent[0] <= limit)
    model.add(Constraint(f"{name}: vector lanes <= {limit}", "vector", lambda v, n=name, k=limit: v[n] <= k))


# -- GPU: threads, shared memory, vector loads --------------------------------------------------

#: Block annotation MetaSchedule's TensorCore rule sets: a warp executes each thread-y iteration.
WARP_EXECUTION = "warp_execution"
#: Suffix of a padded buffer's element count without the padding.
UNPADDED = ".elements"
#: Block annotation of a shared-memory stage: its loads are spread over the block's threads, vectorized.
COOPERATIVE_FETCH = "meta_schedule.cooperative_fetch"


def _bind(loop: _Loop | None, axis: str, kernels: dict) -> None:
    if loop is None or loop.block is None:
        return
    for part in (loop, *loop.parts):
        part.thread = axis
    if axis.startswith("threadIdx") and loop.factors and axis not in kernels.setdefault(loop.block, _Kernel()).threads:
        kernels[loop.block].threads[axis] = loop.factors


def _add_threads(model: ConstraintModel, kernels: dict, limits: GpuLimits) -> None:
    """Threads per block (thread axes x warp lanes) within the target's ``max_threads_per_block``."""
    for block, kernel in kernels.items():
        factors = [f for fs in kernel.threads.values() for f in fs]
        if not factors:
            continue
        lanes = limits.warp_size if kernel.warp_lanes else 1
        name = f"threads[{block}]"
        threads = model.product(name, [*factors, lanes])
        cap = limits.max_threads_per_block
        model.cp.Add(threads <= cap)
        model.add(Constraint(f"{name}: {' x '.join(kernel.threads)}{f' x {lanes} lanes' if lanes > 1 else ''} <= {cap}",
                             "threads", lambda v, n=name, k=cap: v[n] <= k))


def _add_shared_memory(model: ConstraintModel, limits: GpuLimits) -> None:
    """All shared buffers of one kernel, padded, in bytes, summed within ``max_shared_memory_per_block``."""
    shared = [fp for fp in model.footprints if fp.scope.startswith("shared")]
    _add_summed_bytes(model, shared, limits.max_shared_memory_per_block,
                      "shared memory[{block}]: {buffers} <= {limit} B", performance=False)


def _add_fetch_vectors(model: ConstraintModel, fetch_vectors: dict) -> None:
    """A cooperative fetch's vector width divides the elements it copies (Heron: no ragged vectors)."""
    for fp in model.footprints:
        choice = fetch_vectors.get(fp.stage)
        if choice is None:
            continue
        decision = next(d for d in model.decisions if d.variables == (choice,))
        widths = decision.candidates
        width = model.cp.NewIntVarFromDomain(cp_model.Domain.FromValues(sorted(set(widths))), f"{choice}.width")
        model.cp.AddElement(model.vars[choice], list(widths), width)
        elements = f"{fp.variable}{UNPADDED}" if f"{fp.variable}{UNPADDED}" in model.vars else fp.variable
        count = model.cp.NewIntVar(1, 1 << 40, f"{fp.variable}.vectors")  # bounded through ``elements``
        model.cp.AddMultiplicationEquality(model.vars[elements], [width, count])
        model.add(Constraint(f"vector load of {fp.buffer}: width divides its {elements}", "vector",
                             lambda v, c=choice, w=widths, n=elements: v[n] % w[v[c]] == 0))


# -- memory --------------------------------------------------------------------------------------


def _affine(expr) -> dict | None:
    """``{Var: coefficient}`` plus the key ``1`` for the constant, or None if not affine."""
    if isinstance(expr, tirx.IntImm) or isinstance(expr, int):
        return {1: int(expr)}
    if isinstance(expr, tirx.Var):
        return {expr: 1}
    name = type(expr).__name__
    if name in ("Add", "Sub"):
        a, b = _affine(expr.a), _affine(expr.b)
        if a is None or b is None:
            return None
        sign = 1 if name == "Add" else -1
        out = dict(a)
        for k, c in b.items():
            out[k] = out.get(k, 0) + sign * c
        return out
    if name == "Mul":
        a, b = _affine(expr.a), _affine(expr.b)
        if a is None or b is None:
            return None
        if set(a) == {1}:
            return {k: a[1] * c for k, c in b.items()}
        if set(b) == {1}:
            return {k: b[1] * c for k, c in a.items()}
    return None


def _footprint_terms(region, iter_vars, inner_extent):
    """Per buffer dimension: a variable for ``sum |c_v| (E_v - 1) + extent``; None if not affine."""
    dims = []
    for rng in region.region:
        coefs = _affine(rng.min)
        if coefs is None:
            return None
        const = int(rng.extent)
        terms = []
        for var, coef in coefs.items():
            if var == 1 or coef == 0:
                continue
            idx = next((i for i, iv in enumerate(iter_vars) if iv.var.same_as(var)), None)
            if idx is None:
                return None
            terms.append((abs(coef), inner_extent(idx)))
        dims.append((terms, const))
    return dims


def _add_footprint(model, space, inst, loops, nest, fresh) -> None:
    """Footprint of a cache stage placed under an anchor loop of a tiled block.

    Shared memory is allocated per thread block, so a ``shared`` stage also spans the tiled
    block's thread-bound loops outside the anchor; ``storage_align`` padding of its rows counts.
    """
    anchor = loops.get(list(inst.inputs)[1])
    if anchor is None or anchor.block is None or anchor.block not in nest:
        return
    tiled = nest[anchor.block]
    positions = [i for i, lp in enumerate(tiled) for part in anchor.constituents() if lp is part]
    if not positions:
        return
    stage_rv = list(inst.inputs)[0]
    sch_block = space.get(space.get_sblock(anchor.block))
    buffer_region, buffer = _cached_region(space, sch_block, space.get(stage_rv))
    if buffer_region is None:
        return
    inside = tiled[max(positions) + 1 :]
    if str(buffer.scope()).startswith("shared"):
        inside = [lp for lp in tiled[: max(positions) + 1] if lp.thread.startswith("threadIdx")] + inside
    name = fresh(f"footprint.{buffer.name}.")
    if any(region.source.same_as(buffer_region.source) for region in sch_block.writes):
        dims = _write_tile_dims(model, name, sch_block, buffer_region, inside)
    else:
        dims = _read_window_dims(model, name, sch_block, buffer_region, inside)
    if dims is None:
        return
    alignment = _alignment(space.get(stage_rv), buffer)
    if alignment is not None:
        model.product_of_dims(f"{name}{UNPADDED}", dims)
        dims = _padded(model, name, dims, alignment)
    model.product_of_dims(name, dims)
    model.footprints.append(
        Footprint(name, str(buffer.name), str(buffer.scope()), _bytes(buffer.dtype), anchor.block, _block_name(space, stage_rv))
    )


def _read_window_dims(model, name, sch_block, region, inside):
    """Per buffer dimension ``(variable, upper, fn)``: the window ``sum |c_v| (E_v - 1) + extent``."""

    def inner_extent(idx):
        return [f for lp in inside if lp.iter_index == idx for f in lp.factors]

    terms_per_dim = _footprint_terms(region, list(sch_block.iter_vars), inner_extent)
    if terms_per_dim is None:
        return None
    dims = []
    for d, (terms, const) in enumerate(terms_per_dim):
        parts = []
        for coef, factors in terms:
            prod = model.product(f"{name}.d{d}.E{len(parts)}", factors)
            parts.append((coef, prod, tuple(factors)))
        upper = min(const + sum(c * model.upper_bound(fs) for c, _, fs in parts), MAX_BOUND)
        dim = model.cp.NewIntVar(1, upper, f"{name}.d{d}")
        model.cp.Add(dim == const + sum(c * (p - 1) for c, p, _ in parts))
        fn = lambda v, parts=tuple((c, fs) for c, _, fs in parts), const=const: const + sum(  # noqa: E731
            c * (math.prod(v[f] if not isinstance(f, int) else f for f in fs) - 1) for c, fs in parts)
        dims.append((dim, upper, fn))
    return dims


def _write_tile_dims(model, name, sch_block, region, inside):
    """A write-back holds the output tile: spatial iterations inside the anchor x elements each writes.

    Counting elements instead of index windows also covers outputs whose layout was transformed
    (TensorCore fragments index ``i // 16 % t``), where the window is not affine.
    """
    kinds = [int(iv.iter_type) for iv in sch_block.iter_vars]
    factors = [f for lp in inside if lp.iter_index is not None and kinds[lp.iter_index] == 0 for f in lp.factors]
    per_iteration = math.prod(int(r.extent) for r in region.region)
    upper = model.upper_bound([*factors, per_iteration])
    tile = model.product(f"{name}.tile", [*factors, per_iteration], upper)
    dim = model.cp.NewIntVar(1, upper, f"{name}.d0")
    model.cp.Add(dim == tile)
    fn = lambda v, fs=tuple(factors), k=per_iteration: k * math.prod(v[f] if not isinstance(f, int) else f for f in fs)  # noqa: E731
    return [(dim, upper, fn)]


def _alignment(stage, buffer) -> tuple | None:
    """``(axis, factor, offset)`` of the stage's ``storage_align`` on ``buffer`` (rows padded), or None."""
    for index, axis, factor, offset in stage.annotations.get("buffer_dim_align", []):
        regions = stage.writes if int(index) < len(stage.writes) else []
        if regions and regions[int(index)].source.same_as(buffer):
            return int(axis), int(factor), int(offset)
    return None


def _padded(model, name, dims, alignment):
    """Dims with the row stride after ``axis`` padded to ``factor * q + offset`` (TVM's storage_align)."""
    if alignment is None or len(dims) < 2:
        return dims
    axis, factor, offset = alignment
    axis %= len(dims)
    if axis == len(dims) - 1:
        return dims
    rows, row = dims[: axis + 1], dims[axis + 1 :]
    upper = min(math.prod(u for _, u, _ in row), MAX_BOUND // 2)
    stride = model.cp.NewIntVar(1, upper, f"{name}.row")
    model.multiply(stride, [d for d, _, _ in row], upper, f"{name}.row")
    padded = model.cp.NewIntVar(1, upper + factor + offset, f"{name}.row_padded")
    quotient = model.cp.NewIntVar(0, (upper + factor + offset) // factor, f"{name}.row_q")
    model.cp.Add(padded == factor * quotient + offset)
    model.cp.Add(padded >= stride)
    model.cp.Add(padded < stride + factor)

    def fn(v, fns=tuple(f for _, _, f in row)):
        length = math.prod(f(v) for f in fns)
        return length + (offset - length) % factor

    return [*rows, (padded, upper + factor + offset, fn)]


def _block_name(space, block_rv) -> str | None:
    try:
        return str(space.get(block_rv).name_hint)
    except Exception:  # pylint: disable=broad-except  # the block was inlined later in the trace
        return None


def _copy_pairs(space) -> list[tuple[str, str]]:
    """(source, destination) buffer names of every one-to-one copy block (cache and fragment stages)."""
    pairs, stack = [], list(space.get_child_blocks(space.get_sblock("root")))
    while stack:
        rv = stack.pop()
        stack.extend(space.get_child_blocks(rv))
        block = space.get(rv)
        if len(block.reads) == 1 and len(block.writes) == 1:
            pairs.append((str(block.reads[0].source.name), str(block.writes[0].source.name)))
    return pairs


def _cached_region(space, block, stage):
    """The tiled block's region of the buffer a cache stage copies, and the stage's own buffer.

    The block may reach the stage's buffer through further copies (TensorCore: shared memory ->
    ``wmma.matrix_a`` fragment -> block), so copy chains are followed.
    """
    reach = {str(r.source.name): r.source for r in (*stage.reads, *stage.writes)}
    pairs = None
    for _ in range(3):
        for region in (*block.reads, *block.writes):
            if str(region.source.name) in reach:
                return region, reach[str(region.source.name)]
        pairs = _copy_pairs(space) if pairs is None else pairs
        for src, dst in pairs:
            if src in reach and dst not in reach:
                reach[dst] = reach[src]
            elif dst in reach and src not in reach:
                reach[src] = reach[dst]
    return None, None


def _bytes(dtype) -> int:
    bits = int("".join(ch for ch in str(dtype) if ch.isdigit()) or 32)
    return max(1, bits // 8)


def _add_cache_capacity(model: ConstraintModel, target: Target) -> None:
    """Per tiled block, its tile buffers summed within the per-core L2 (a performance constraint)."""
    limit = cpu_cache_bytes(target)["L2"]
    _add_summed_bytes(model, model.footprints, limit, "memory[{block}]: tile buffers {buffers} <= L2 {limit} B", performance=True)


def _add_summed_bytes(model: ConstraintModel, footprints, limit: int, label: str, performance: bool, kind: str = "memory") -> None:
    """Per tiled block, the bytes of its ``footprints`` summed within ``limit``."""
    by_block: dict[str, list] = {}
    for fp in footprints:
        by_block.setdefault(fp.block, []).append(fp)
    for block, fps in by_block.items():
        terms = tuple((fp.variable, fp.dtype_bytes) for fp in fps)
        model.cp.Add(sum(model.vars[n] * b for n, b in terms) <= limit)
        name = label.format(block=block, buffers=" + ".join(fp.buffer for fp in fps), limit=limit)
        model.add(Constraint(name, kind, lambda v, t=terms, k=limit: sum(v[n] * b for n, b in t) <= k, performance=performance))


def _add_micro_kernel(model, space, nest, target, options) -> None:
    """BLIS's analytical model (Low et al., TOMS 2016) over each CPU block tiled ``...R..S``.

    The spatial levels inside the last reduction level are the register micro-tile: ``MR`` rows
    (every spatial iterator but the innermost) by ``NR`` lanes (the innermost, vectorized one);
    the last reduction level is ``KC``; the first reduction level steps over cache blocks.

    * ``register``: ``MR x ceil(NR / lanes)`` accumulators, ``ceil(NR / lanes)`` vectors of the
      streamed operand and one broadcast fit the target's vector registers;
    * ``L1``: what one micro-tile reads during the last reduction level (the ``MR x KC`` sliver and
      the ``KC x NR`` panel for a GEMM; affine windows for convolutions) fits L1;
    * ``L2``: what the block reads during one step of the first reduction level (the ``MC x KC``
      and ``KC x NC`` blocks) fits L2.
    """
    if not options.cache_capacity or not is_cpu(target):
        return
    caches = cpu_cache_bytes(target)
    for block_name, tiled in nest.items():
        if block_name is None:
            continue
        rv = space.get_sblock(block_name)
        structure = str(block_annotations(space, rv).get(TILING_STRUCTURE, ""))
        if not structure.endswith("S") or "R" not in structure:
            continue
        levels = split_by_structure(structure, iter_kinds(space, rv), tiled)
        names = list(levels)
        _add_registers(model, space.get(rv), block_name, [lp for n in names[structure.rfind("R") + 1 :] for lp in levels[n]], target)
        for cache, first in (("L1", structure.rfind("R")), ("L2", structure.find("R"))):
            inside = [lp for n in names[first:] for lp in levels[n]]
            _add_working_set(model, space.get(rv), block_name, inside, cache, caches[cache])


def _add_registers(model, block, block_name: str, micro: list, target) -> None:
    factors = [f for lp in micro for f in lp.factors]
    if not factors or all(isinstance(f, int) for f in factors):
        return  # fixed by the trace (intrinsic-sized tiles): nothing to choose
    out = block.writes[0]
    per_iteration = _bytes(out.source.dtype) * math.prod(int(r.extent) for r in out.region)
    width, registers = vector_bytes(target), vector_registers(target)
    name = f"register_tile[{block_name}]"
    intrinsic = per_iteration > _bytes(out.source.dtype)  # it writes whole vectors per iteration
    if intrinsic:
        rows, lanes = factors, [per_iteration]
    else:
        rows, lanes = [f for lp in micro[:-1] for f in lp.factors], [*micro[-1].factors, per_iteration]
    lane_bytes = model.product(f"{name}.lane_bytes", lanes)
    vectors = model.cp.NewIntVar(1, max(1, -(-model.upper_bound(lanes) // width)), f"{name}.vectors")
    model.cp.Add(vectors * width >= lane_bytes)
    model.cp.Add(vectors * width <= lane_bytes + width - 1)
    mr = model.product(f"{name}.rows", rows) if rows else 1
    accumulators = model.cp.NewIntVar(1, max(1, model.upper_bound(rows) * (-(-model.upper_bound(lanes) // width))), name)
    model.cp.AddMultiplicationEquality(accumulators, [mr, vectors])
    model.cp.Add(accumulators + vectors + 1 <= registers)
    if not intrinsic and _fills_vectors(model, micro[-1].factors, _bytes(out.source.dtype), width):
        model.cp.Add(vectors * width == lane_bytes)
        model.add(Constraint(f"{name}: NR lanes fill whole {width}-byte vectors", "register",
                             lambda v, lanes=tuple(lanes), w=width: _value(v, lanes) % w == 0, performance=True))

    def used(v, rows=tuple(rows), lanes=tuple(lanes)):
        vec = -(-_value(v, lanes) // width)
        return _value(v, rows) * vec + vec + 1

    model.derived[name] = used
    model.add(Constraint(f"{name}: accumulators + operand vectors <= {registers} vector registers", "register",
                         lambda v, n=name, k=registers: v[n] <= k, performance=True))


def _fills_vectors(model, factors, dtype_bytes: int, width: int) -> bool:
    """Whether the innermost axis can be cut into whole vectors: its extent is a multiple of the
    vector width (a one-decision tile factor), so a partly filled vector would only waste lanes."""
    names = [f for f in factors if not isinstance(f, int)]
    decision = model.decision_of(names[0]) if len(names) == 1 else None
    return decision is not None and decision.kind == "tile" and decision.extent * dtype_bytes % width == 0


def _value(values, factors) -> int:
    return math.prod(values[f] if not isinstance(f, int) else f for f in factors)


def _add_working_set(model, block, block_name: str, inside: list, cache: str, limit: int) -> None:
    """The bytes ``block`` reads inside the loops ``inside`` (one window per read buffer) <= ``limit``."""
    written = {w.source.name for w in block.writes}
    sets = []
    for region in block.reads:
        if region.source.name in written:
            continue
        name = f"{cache}[{block_name}].{region.source.name}"
        dims = _read_window_dims(model, name, block, region, inside)
        if dims is None:
            return  # a non-affine access: its window is unknown
        model.product_of_dims(name, dims)
        sets.append(Footprint(name, str(region.source.name), cache, _bytes(region.source.dtype), block_name))
    if not sets:
        return
    model.working_sets += sets
    _add_summed_bytes(model, sets, limit, f"{cache}[{{block}}]: {{buffers}} read per {'micro-tile' if cache == 'L1' else 'cache block'} <= {cache} {{limit}} B",
                      performance=True, kind=cache)
