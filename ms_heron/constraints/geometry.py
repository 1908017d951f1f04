"""Footprint geometry: how many elements a cache stage or a tile level holds, from the blocks'
regions.

Per buffer dimension, a read window is ``sum |coef_v| * (E_v - 1) + extent`` over the block
iterators ``v`` of its affine index, where ``E_v`` is the product of the tile factors of ``v``'s
loops inside the anchor loop -- so strides and dilations count. A write-back holds the output tile.
``storage_align`` padding of a stage's rows counts too.
"""

from __future__ import annotations

import functools
import math

from tvm import tirx

from .model import MAX_BOUND, Constraint, ConstraintKind, ConstraintModel, Footprint
from .walk import Walk, block_name

#: Suffix of a padded buffer's element count without the padding.
UNPADDED = ".elements"


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


def on_compute_at(walk: Walk, inst) -> None:
    """Footprint of a cache stage placed under an anchor loop of a tiled block.

    Shared memory is allocated per thread block, so a ``shared`` stage also spans the tiled
    block's thread-bound loops outside the anchor; ``storage_align`` padding of its rows counts.
    """
    space, model = walk.space, walk.model
    anchor = walk.loops.get(list(inst.inputs)[1])
    if anchor is None or anchor.block is None or anchor.block not in walk.nest:
        return
    tiled = walk.nest[anchor.block]
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
        inside = [
            lp for lp in tiled[: max(positions) + 1] if lp.thread.startswith("threadIdx")
        ] + inside
    name = walk.fresh(f"footprint.{buffer.name}.")
    if any(region.source.same_as(buffer_region.source) for region in sch_block.writes):
        dims = _write_tile_dims(model, name, sch_block, buffer_region, inside)
    else:
        dims = read_window_dims(model, name, sch_block, buffer_region, inside)
    if dims is None:
        return
    alignment = _alignment(space.get(stage_rv), buffer)
    if alignment is not None:
        model.product_of_dims(f"{name}{UNPADDED}", dims)
        dims = _padded(model, name, dims, alignment)
    model.product_of_dims(name, dims)
    model.footprints.append(
        Footprint(
            variable=name,
            buffer=str(buffer.name),
            scope=str(buffer.scope()),
            dtype_bytes=dtype_bytes(buffer.dtype),
            block=anchor.block,
            stage=block_name(space, stage_rv),
        )
    )


def _extent(parts: tuple, const: int, values) -> int:
    """A dimension's extent from solved ``values``: ``const`` + sum of coef x (product of factors -
    1)."""
    return const + sum(
        c * (math.prod(values[f] if not isinstance(f, int) else f for f in fs) - 1)
        for c, fs in parts
    )


def read_window_dims(model, name, sch_block, region, inside):
    """Per buffer dimension ``(variable, upper, fn)``: the window ``sum |c_v| (E_v - 1) +
    extent``."""

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
        dims.append(
            (dim, upper, functools.partial(_extent, tuple((c, fs) for c, _, fs in parts), const))
        )
    return dims


def _write_tile_dims(model, name, sch_block, region, inside):
    """A write-back holds the output tile: spatial iterations inside the anchor x elements each
    writes.

    Counting elements instead of index windows also covers outputs whose layout was transformed
    (TensorCore fragments index ``i // 16 % t``), where the window is not affine.
    """
    kinds = [int(iv.iter_type) for iv in sch_block.iter_vars]
    factors = [
        f
        for lp in inside
        if lp.iter_index is not None and kinds[lp.iter_index] == 0
        for f in lp.factors
    ]
    per_iteration = math.prod(int(r.extent) for r in region.region)
    upper = model.upper_bound([*factors, per_iteration])
    tile = model.product(f"{name}.tile", [*factors, per_iteration], upper)
    dim = model.cp.NewIntVar(1, upper, f"{name}.d0")
    model.cp.Add(dim == tile)
    fs = tuple(factors)

    def fn(v):
        return per_iteration * math.prod(v[f] if not isinstance(f, int) else f for f in fs)

    return [(dim, upper, fn)]


def _alignment(stage, buffer) -> tuple | None:
    """``(axis, factor, offset)`` of the stage's ``storage_align`` on ``buffer`` (rows padded), or
    None."""
    for index, axis, factor, offset in stage.annotations.get("buffer_dim_align", []):
        regions = stage.writes if int(index) < len(stage.writes) else []
        if regions and regions[int(index)].source.same_as(buffer):
            return int(axis), int(factor), int(offset)
    return None


def _padded(model, name, dims, alignment):
    """Dims with the row stride after ``axis`` padded to ``factor * q + offset`` (TVM's
    storage_align)."""
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


def _copy_pairs(space) -> list[tuple[str, str]]:
    """(source, destination) buffer names of every one-to-one copy block (cache and fragment
    stages)."""
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


def dtype_bytes(dtype) -> int:
    bits = int("".join(ch for ch in str(dtype) if ch.isdigit()) or 32)
    return max(1, bits // 8)


def add_summed_bytes(
    model: ConstraintModel,
    footprints,
    limit: int,
    label: str,
    performance: bool,
    kind: ConstraintKind = "memory",
) -> None:
    """Per tiled block, the bytes of its ``footprints`` summed within ``limit``."""
    by_block: dict[str, list] = {}
    for fp in footprints:
        by_block.setdefault(fp.block, []).append(fp)
    for block, fps in by_block.items():
        terms = tuple((fp.variable, fp.dtype_bytes) for fp in fps)
        model.cp.Add(sum(model.vars[n] * b for n, b in terms) <= limit)
        name = label.format(block=block, buffers=" + ".join(fp.buffer for fp in fps), limit=limit)
        model.add(
            Constraint(
                name=name,
                kind=kind,
                holds=lambda v, t=terms, k=limit: sum(v[n] * b for n, b in t) <= k,
                performance=performance,
            )
        )
