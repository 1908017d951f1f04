"""Derive a design space's :class:`ConstraintModel` from its trace and the Target alone.

The walk follows the trace's instructions: ``SamplePerfectTile`` and ``SampleCategorical`` give
the variables; ``Split``/``Reorder``/``GetLoops``/``Fuse`` tell which variable is each loop's
extent; ``Parallel``/``Vectorize`` and the cache stages' ``ComputeAt``/``ReverseComputeAt`` give the
derived quantities (parallel jobs, vector lanes, buffer footprints). Footprints come from the
blocks' read/write regions: per buffer dimension, ``sum |coef_v| * (E_v - 1) + extent`` over the
block iterators ``v`` of its affine index, where ``E_v`` is the product of the tile factors of
``v``'s loops inside the anchor loop -- so strides and dilations count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import tirx
from tvm.s_tir import Schedule, Trace
from tvm.target import Target

from ..rules.analysis import TILING_STRUCTURE, annotations, iter_kinds, split_by_structure
from ..targets import cpu_cache_bytes, is_cpu, num_cores, vector_bytes
from .model import Constraint, ConstraintModel, Decision, Footprint, divisors


@dataclass(frozen=True)
class ConstraintOptions:
    """Which performance constraints to add (validity constraints are always added)."""

    #: Parallel jobs of a parallelized tile loop >= the target's cores (when the space allows).
    parallel_jobs: bool = True
    #: Tile buffers of one block fit the per-core L2; the output register tile fits the vector registers.
    cache_capacity: bool = True
    #: Upper bound on a vectorized loop's extent.
    max_vector_extent: int = 64


@dataclass
class _Loop:
    block: str
    iter_index: int | None
    factors: tuple  # variable names or ints; their product is the loop's extent


def derive(space: Schedule, target: Target, options: ConstraintOptions = ConstraintOptions()) -> ConstraintModel:
    """The constraint model of the design space ``space`` (a Schedule whose trace samples)."""
    trace: Trace = space.trace.simplified(remove_postproc=True)
    model = ConstraintModel()
    loops: dict = {}  # LoopRV -> _Loop
    blocks: dict = {}  # SBlockRV -> block name
    nest: dict[str, list[_Loop]] = {}  # block name -> its tiled loops in order, once reordered
    sampled: dict = {}  # ExprRV -> variable name
    counter = [0]

    def fresh(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    for inst in trace.insts:
        kind = inst.kind.name
        ins, outs, attrs = list(inst.inputs), list(inst.outputs), list(inst.attrs)
        if kind == "GetSBlock":
            blocks[outs[0]] = str(attrs[0])
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
            model.decisions.append(decision)
            _add_split(model, decision, max_inner)
        elif kind == "SampleCategorical":
            cands = tuple(int(c) for c in attrs[0])
            name = fresh("choice")
            model.new_var(name, lo=0, hi=len(cands) - 1)
            sampled[outs[0]] = name
            model.decisions.append(Decision(inst, "categorical", (name,), candidates=cands))
            model.add(Constraint(f"{name} in candidates {cands}", "candidates", lambda v, n=name, k=len(cands): 0 <= v[n] < k))
        elif kind == "Split":
            parent = loops.get(ins[0], _Loop(None, None, ()))
            for rv, factor in zip(outs, ins[1:]):
                term = sampled.get(factor, int(factor) if isinstance(factor, (int, tirx.IntImm)) else None)
                loops[rv] = _Loop(parent.block, parent.iter_index, (term,) if term is not None else ())
        elif kind == "Reorder":
            ordered = [loops[rv] for rv in ins]
            if ordered and all(lp.block == ordered[0].block for lp in ordered):
                nest[ordered[0].block] = ordered
        elif kind == "Fuse":
            parts = [loops.get(rv, _Loop(None, None, ())) for rv in ins]
            known = all(p.factors for p in parts)
            loops[outs[0]] = _Loop(parts[0].block, None, tuple(f for p in parts for f in p.factors) if known else ())
        elif kind == "Parallel" and options.parallel_jobs and is_cpu(target):
            _add_parallel(model, loops.get(ins[0]), num_cores(target), fresh("parallel"))
        elif kind == "Vectorize":
            _add_vector(model, loops.get(ins[0]), options.max_vector_extent, fresh("vector"))
        elif kind in ("ComputeAt", "ReverseComputeAt"):
            _add_footprint(model, space, inst, loops, nest, fresh)
    _add_register_tile(model, space, nest, target, options)
    if options.cache_capacity and is_cpu(target):
        _add_cache_capacity(model, target)
    return model


# -- split, parallel, vector --------------------------------------------------------------------


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


def _extent_bounds(model: ConstraintModel, factors) -> tuple[int, int]:
    hi = 1
    for f in factors:
        hi *= f if isinstance(f, int) else model.domains[f][-1]
    return 1, hi


def _loop_extent(model: ConstraintModel, loop: _Loop | None, name: str):
    """``(variable, upper bound)`` for a loop whose extent depends on sampled factors, else None."""
    if loop is None or not loop.factors or all(isinstance(f, int) for f in loop.factors):
        return None
    _, hi = _extent_bounds(model, loop.factors)
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
    """Footprint of a cache stage placed under an anchor loop of a tiled block."""
    anchor = loops.get(list(inst.inputs)[1])
    if anchor is None or anchor.block is None or anchor.block not in nest:
        return
    tiled = nest[anchor.block]
    position = next((i for i, lp in enumerate(tiled) if lp is anchor), None)
    if position is None:
        return
    inside = tiled[position + 1 :]
    sch_block = space.get(space.get_sblock(anchor.block))
    buffer_region, scope, dtype_bytes = _cached_region(space, sch_block, inst)
    if buffer_region is None:
        return

    def inner_extent(idx):
        return [f for lp in inside if lp.iter_index == idx for f in lp.factors]

    dims = _footprint_terms(buffer_region, list(sch_block.iter_vars), inner_extent)
    if dims is None:
        return
    name = fresh(f"footprint.{buffer_region.source.name}.")
    dim_vars, dim_fns, dim_uppers = [], [], []
    for d, (terms, const) in enumerate(dims):
        parts = []
        for coef, factors in terms:
            lo_hi = _extent_bounds(model, factors)
            prod = model.product(f"{name}.d{d}.E{len(parts)}", factors, lo_hi[1])
            parts.append((coef, prod, tuple(factors)))
        upper = const + sum(c * _extent_bounds(model, fs)[1] for c, _, fs in parts)
        dim = model.cp.NewIntVar(1, upper, f"{name}.d{d}")
        dim_uppers.append(upper)
        model.cp.Add(dim == const + sum(c * (p - 1) for c, p, _ in parts))
        dim_vars.append(dim)
        dim_fns.append(lambda v, parts=tuple((c, fs) for c, _, fs in parts), const=const: const + sum(
            c * (math.prod(v[f] if not isinstance(f, int) else f for f in fs) - 1) for c, fs in parts))
    upper = math.prod(dim_uppers)
    total = model.cp.NewIntVar(1, max(1, upper), name)
    if len(dim_vars) == 1:
        model.cp.Add(total == dim_vars[0])
    else:
        acc = dim_vars[0]
        for i, dv in enumerate(dim_vars[1:], 1):
            nxt = model.cp.NewIntVar(1, max(1, upper), f"{name}.acc{i}")
            model.cp.AddMultiplicationEquality(nxt, [acc, dv])
            acc = nxt
        model.cp.Add(total == acc)
    model.vars[name] = total
    model.derived[name] = lambda v, fns=tuple(dim_fns): math.prod(fn(v) for fn in fns)
    model.footprints.append(Footprint(name, str(buffer_region.source.name), scope, dtype_bytes, anchor.block))


def _cached_region(space, block, inst):
    """The region of the buffer the cache stage copies, in the tiled block; its scope and dtype size."""
    stage = space.get(list(inst.inputs)[0])
    names = {str(r.source.name) for r in (*stage.reads, *stage.writes)}
    for region in (*block.reads, *block.writes):
        if str(region.source.name) in names:
            return region, str(region.source.scope()), _bytes(region.source.dtype)
    return None, None, None


def _bytes(dtype) -> int:
    bits = int("".join(ch for ch in str(dtype) if ch.isdigit()) or 32)
    return max(1, bits // 8)


def _add_cache_capacity(model: ConstraintModel, target: Target) -> None:
    """Per tiled block, its tile buffers summed within the per-core L2 (a performance constraint)."""
    limit = cpu_cache_bytes(target)["L2"]
    by_block: dict[str, list] = {}
    for fp in model.footprints:
        by_block.setdefault(fp.block, []).append(fp)
    for block, fps in by_block.items():
        terms = tuple((fp.variable, fp.dtype_bytes) for fp in fps)
        model.cp.Add(sum(model.vars[n] * b for n, b in terms) <= limit)
        model.add(Constraint(f"memory[{block}]: tile buffers {' + '.join(fp.buffer for fp in fps)} <= L2 {limit} B",
                             "memory", lambda v, t=terms, k=limit: sum(v[n] * b for n, b in t) <= k, performance=True))


def _add_register_tile(model, space, nest, target, options) -> None:
    """Output elements of the innermost spatial tiles x intrinsic lanes fit the vector registers."""
    if not options.cache_capacity or not is_cpu(target):
        return
    registers = 32 * vector_bytes(target)
    for block_name, tiled in nest.items():
        if block_name is None:
            continue
        rv = space.get_sblock(block_name)
        structure = str(annotations(space, rv).get(TILING_STRUCTURE, ""))
        if not structure.endswith("S"):
            continue
        levels = split_by_structure(structure, iter_kinds(space, rv), tiled)
        innermost = list(levels)[structure.rfind("R") + 1 :]  # the spatial levels inside all reductions
        factors = [f for level in innermost for lp in levels[level] for f in lp.factors]
        if not factors:
            continue
        out = space.get(rv).writes[0]
        lanes = math.prod(int(r.extent) for r in out.region)
        elem = _bytes(out.source.dtype) * lanes
        _, hi = _extent_bounds(model, factors)
        name = f"register_tile[{block_name}]"
        tile = model.product(name, factors, hi)
        limit = registers // elem
        model.cp.Add(tile <= max(1, limit))
        model.add(Constraint(f"{name}: {elem} B x tile <= {registers} B of vector registers", "register",
                             lambda v, n=name, k=max(1, limit): v[n] <= k, performance=True))
