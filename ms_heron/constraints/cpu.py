"""CPU constraints: parallel jobs cover the cores, vector lanes, and BLIS's micro-kernel model.

Every number comes from the Target or the host (cores, vector width and registers, L1/L2 sizes,
how many FMAs are in flight per core).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ..hardware.dot_products import by_name
from ..hardware.peak import dot_chains, fma_chains
from ..hardware.targets import cpu_cache_bytes, is_cpu, num_cores, vector_bytes, vector_registers
from ..schedule.annotations import (
    AUTO_TENSORIZE,
    TILING_STRUCTURE,
    block_annotations,
    iter_kinds,
    split_by_structure,
)
from ..schedule.register_tile import loads_balanced, registers_used
from .geometry import add_summed_bytes, dtype_bytes, read_window_dims
from .model import MAX_BOUND, Constraint, ConstraintModel, Footprint, ObjectiveStage
from .solver import maximum, minimum
from .walk import Loop, Walk

#: Balanced parallel jobs keep every core busy for at least this share of the loop.
BUSY_SHARE = (9, 10)


def on_parallel(walk: Walk, inst) -> None:
    if not (walk.options.parallel_jobs and is_cpu(walk.target)):
        return
    loop = walk.loops.get(inst.inputs[0])
    cores, name = num_cores(walk.target), walk.fresh("parallel")
    _add_parallel(walk.model, loop, cores, name, balanced=walk.options.balanced_jobs)
    if walk.options.row_affinity and cores > 1 and loop is not None:
        _add_row_affinity(walk.model, loop, cores, name)


def on_vectorize(walk: Walk, inst) -> None:
    _add_vector(walk.model, walk.loops.get(inst.inputs[0]), walk.options, walk.fresh("vector"))


def add_cpu_constraints(walk: Walk) -> None:
    """What needs the whole walk: the micro-kernel model and the tile buffers within L2."""
    if not walk.options.cache_capacity or not is_cpu(walk.target):
        return
    pending = _add_micro_kernel(walk.model, walk.space, walk.nest, walk.target)
    limit = cpu_cache_bytes(walk.target)["L2"]
    add_summed_bytes(
        walk.model,
        walk.model.footprints,
        limit,
        "memory[{block}]: tile buffers {buffers} <= L2 {limit} B",
        performance=True,
    )
    for bound in pending:  # last: what a register tile can reach depends on all the rest
        bound.add(walk.model)


def _loop_extent(model: ConstraintModel, loop: Loop | None, name: str):
    """``(variable, upper bound)`` for a loop whose extent depends on sampled factors, else None."""
    if loop is None or not loop.factors or all(isinstance(f, int) for f in loop.factors):
        return None
    hi = model.upper_bound(loop.factors)
    return model.product(name, list(loop.factors), hi), hi


def _add_parallel(
    model: ConstraintModel, loop: Loop | None, cores: int, name: str, *, balanced: bool
) -> None:
    extent = _loop_extent(model, loop, name)
    if extent is None:
        return
    jobs, hi = extent
    need = min(cores, hi)
    model.cp.Add(jobs >= need)
    model.add(
        Constraint(
            name=f"{name}: parallel jobs >= {need}",
            kind="parallel",
            holds=lambda v, n=name, k=need: v[n] >= k,
            performance=True,
        )
    )
    if balanced and need == cores > 1:
        _add_balanced_jobs(model, jobs, hi, cores, name)


def _add_balanced_jobs(model: ConstraintModel, jobs, hi: int, cores: int, name: str) -> None:
    """Each core runs ``rounds = ceil(jobs / cores)`` jobs (TVM splits a parallel loop into equal
    runs), so the loop takes ``rounds`` jobs' time; ``jobs / (rounds x cores)`` is the share of it
    the cores are busy, kept >= :data:`BUSY_SHARE`."""
    busy, whole = BUSY_SHARE
    rounds = model.cp.NewIntVar(1, max(1, -(-hi // cores)), f"{name}.rounds")
    model.cp.Add(cores * rounds >= jobs)
    model.cp.Add(cores * rounds <= jobs + cores - 1)
    model.cp.Add(whole * jobs >= busy * cores * rounds)
    model.add(
        Constraint(
            name=f"{name}: parallel jobs keep {cores} cores >= {busy}/{whole} busy",
            kind="parallel",
            holds=lambda v, n=name: whole * v[n] >= busy * cores * -(-v[n] // cores),
            performance=True,
        )
    )


def _add_row_affinity(model: ConstraintModel, loop: Loop, cores: int, name: str) -> None:
    """The parallel loop's factor of the outermost output axis that is not 1 (a convolution's
    rows, a GEMM's) is a multiple of ``cores``: TVM hands core ``k`` the ``k``-th run of the fused
    jobs, which then holds whole rows, the same rows in every kernel so tiled. Left out where the
    axis has no such factor (7 rows on 2 cores), or the loop's factors are not sampled."""
    for part in loop.constituents():
        factor = part.factors[0] if len(part.factors) == 1 else None
        if factor == 1:
            continue
        decision = model.decision_of(factor) if isinstance(factor, str) else None
        if decision is None or decision.kind != "tile":
            return
        if decision.extent == 1:
            continue
        whole = [d for d in model.domains[factor] if d % cores == 0]
        if whole:
            model.cp.AddLinearExpressionInDomain(
                model.vars[factor], cp_model.Domain.FromValues(whole)
            )
            model.add(
                Constraint(
                    name=f"{name}: rows {factor} in whole shares of {cores} cores",
                    kind="parallel",
                    holds=lambda v, f=factor: v[f] % cores == 0,
                    performance=True,
                )
            )
        return


def _add_vector(model: ConstraintModel, loop: Loop | None, options, name: str) -> None:
    extent = _loop_extent(model, loop, name)
    if extent is None:
        return
    lanes, limit = extent[0], options.max_vector_extent
    model.cp.Add(lanes <= limit)
    model.add(
        Constraint(
            name=f"{name}: vector lanes <= {limit}",
            kind="vector",
            holds=lambda v, n=name, k=limit: v[n] <= k,
        )
    )
    if options.power_of_two_lanes:
        powers = [1 << i for i in range(max(1, limit).bit_length())]
        model.cp.AddLinearExpressionInDomain(lanes, cp_model.Domain.FromValues(powers))
        model.add(
            Constraint(
                name=f"{name}: vector lanes a power of two",
                kind="vector",
                holds=lambda v, n=name: v[n] & (v[n] - 1) == 0,
                performance=True,
            )
        )


def _add_micro_kernel(model, space, nest, target) -> list[_Loads | _Latency]:
    """BLIS's analytical model (Low et al., TOMS 2016) over each CPU block tiled ``...R..S``.

    The spatial levels inside the last reduction level are the register micro-tile: ``MR`` rows
    (every spatial loop but the innermost) by ``NR`` lanes (the innermost, vectorized loop);
    the last reduction level is ``KC``; the first reduction level steps over cache blocks, the
    spatial loops between the two (if any) sweep the micro-tiles of one.

    * ``register``: ``MR x ceil(NR / lanes)`` accumulators, ``ceil(NR / lanes)`` vectors of the
      streamed operand and one broadcast fit the target's vector registers; a step loads no more
      than it multiplies (where the block allows it); and (fp) there are at least as many
      accumulators as FMAs the core keeps in flight (latency x ports, measured);
    * ``L1``: what one micro-tile reads during the last reduction level (the ``MR x KC`` sliver and
      the ``KC x NR`` panel for a GEMM; affine windows for convolutions) fits L1;
    * ``L2``: what the block reads during one step of the first reduction level (the ``MC x KC``
      and ``KC x NC`` blocks) fits L2.
    """
    caches, pending = cpu_cache_bytes(target), []
    for block_name, tiled in nest.items():
        if block_name is None:
            continue
        rv = space.get_sblock(block_name)
        structure = str(block_annotations(space, rv).get(TILING_STRUCTURE, ""))
        if not structure.endswith("S") or "R" not in structure:
            continue
        levels = split_by_structure(structure, iter_kinds(space, rv), tiled)
        names = list(levels)
        micro = [lp for n in names[structure.rfind("R") + 1 :] for lp in levels[n]]
        pending += _add_registers(model, space.get(rv), block_name, micro, target)
        _add_parallel_traffic(model, space.get(rv), block_name, levels)
        between = names[structure.find("R") + 1 : structure.rfind("R")]
        _add_whole_reduction(
            model, block_name, [lp for n in between if n[0] == "S" for lp in levels[n]]
        )
        # the spatial level whose loops sweep one job's micro-tiles
        around = structure.find("R") - 1
        if around > 0:
            swept = [
                levels[names[around]][-1],
                *(lp for n in names[around + 1 :] for lp in levels[n]),
            ]
            _add_sweep(model, space.get(rv), block_name, swept, caches["L2"])
        # L1: over the whole last reduction level (the KC loop); L2: one step of the first (the
        # level inside it), as BLIS keeps one MC x KC block in L2, not the block's whole K span.
        for cache, first in (("L1", structure.rfind("R")), ("L2", structure.find("R") + 1)):
            inside = [lp for n in names[first:] for lp in levels[n]]
            _add_working_set(model, space.get(rv), block_name, inside, cache, caches[cache])
    return pending


def _add_registers(model, block, block_name: str, micro: list, target) -> list[_Loads | _Latency]:
    """The ``register`` constraints; returns the bounds that depend on the whole model (loads per
    step, then the accumulator count's latency bound), to be added last."""
    factors = [f for lp in micro for f in lp.factors]
    if not factors or all(isinstance(f, int) for f in factors):
        return []  # fixed by the trace (intrinsic-sized tiles): nothing to choose
    out = block.writes[0]
    per_iteration = dtype_bytes(out.source.dtype) * math.prod(int(r.extent) for r in out.region)
    width, registers = vector_bytes(target), vector_registers(target)
    name = f"register_tile[{block_name}]"
    # it writes whole vectors per iteration
    intrinsic = per_iteration > dtype_bytes(out.source.dtype)
    # A dot product writes one vector per call, like one lane of an FMA kernel: its innermost tiled
    # iterator (output channels) counts the streamed weight vectors, the others the broadcast rows.
    # A tile product (AMX) writes a whole accumulator tile: its factors count tiles.
    tiles = intrinsic and per_iteration != width
    if tiles:
        rows, lanes = factors, [per_iteration]
    else:
        rows, lanes = (
            [f for lp in micro[:-1] for f in lp.factors],
            [*micro[-1].factors, per_iteration],
        )
    lane_bytes = model.product(f"{name}.lane_bytes", lanes)
    vectors = model.cp.NewIntVar(
        1, max(1, -(-model.upper_bound(lanes) // width)), f"{name}.vectors"
    )
    model.cp.Add(vectors * width >= lane_bytes)
    model.cp.Add(vectors * width <= lane_bytes + width - 1)
    mr = model.product(f"{name}.rows", rows) if rows else 1
    accumulators = model.cp.NewIntVar(
        1, max(1, model.upper_bound(rows) * (-(-model.upper_bound(lanes) // width))), name
    )
    model.cp.AddMultiplicationEquality(accumulators, [mr, vectors])
    model.cp.Add(accumulators + vectors + 1 <= registers)
    model.maximize("registers", [(accumulators, 1)])
    pending: list[_Loads | _Latency] = []
    if not tiles and not isinstance(mr, int):
        excess = _add_load_objectives(
            model,
            name,
            mr,
            vectors,
            accumulators,
            width // dtype_bytes(out.source.dtype),
            registers,
        )
        pending.append(
            _Loads(name=name, excess=excess, rows=tuple(rows), lanes=tuple(lanes), width=width)
        )
    if not tiles and len(micro) > 1:
        _add_contiguity_objective(model, micro[-2])
    if not intrinsic and _fills_vectors(
        model, micro[-1].factors, dtype_bytes(out.source.dtype), width
    ):
        model.cp.Add(vectors * width == lane_bytes)
        model.add(
            Constraint(
                name=f"{name}: NR lanes fill whole {width}-byte vectors",
                kind="register",
                holds=lambda v, lanes=tuple(lanes), w=width: _value(v, lanes) % w == 0,
                performance=True,
            )
        )

    def used(v, rows=tuple(rows), lanes=tuple(lanes)):
        return registers_used(_value(v, rows), _vectors(v, lanes, width))

    model.derived[name] = used
    model.add(
        Constraint(
            name=f"{name}: accumulators + operand vectors <= {registers} vector registers",
            kind="register",
            holds=lambda v, n=name, k=registers: v[n] <= k,
            performance=True,
        )
    )
    chains = _chains(block, target, intrinsic)
    if chains is not None:
        pending.append(
            _Latency(
                name=name,
                accumulators=accumulators,
                rows=tuple(rows),
                lanes=tuple(lanes),
                width=width,
                chains=chains,
            )
        )
    return pending


def _chains(block, target, intrinsic: bool) -> int | None:
    """The accumulators a register tile of ``block`` needs to keep its units busy: the vector FMA's
    chains, or those of the dot product it is tensorized with where that one accumulates in place
    (``vpdpbusd``); None for other intrinsics (a widening dot product's chain is a one-cycle
    ``vpaddd``; an AMX tile holds its own accumulator)."""
    if not intrinsic:
        return fma_chains(target)
    dot = by_name(str(block.annotations.get(AUTO_TENSORIZE, "")))
    return dot_chains(target, dot) if dot is not None and dot.form == "vpdpbusd" else None


def _add_load_objectives(model, name: str, mr, vectors, accumulators, lanes: int, registers: int):
    """Each step of the micro-kernel loads ``MR`` broadcasts and ``NR / lanes`` vectors for ``MR x
    NR / lanes`` FMAs. First no more loads than FMAs (x86 cores issue as many loads as FMAs per
    cycle: a 16 x 1-vector tile is load-bound where 8 x 2 and 4 x 4 are not), then the fewest cache
    lines per step (``MR / lanes`` of broadcast rows, ``NR / lanes`` of the streamed panel): a BERT
    GEMM with cold weights ran 2.0 ms with 8 x 2 vectors, 2.3 ms with 4 x 4. Returns the loads'
    excess over the FMAs (a variable), which :class:`_Loads` bounds once the model is whole."""
    model.maximize("lines", [(mr, -1), (vectors, -lanes)])
    return _minimize_excess(
        model, "loads", f"{name}.load_excess", mr + vectors - accumulators, registers
    )


def _add_contiguity_objective(model, innermost_row: Loop) -> None:
    """Last, among micro-tiles equal in every other stage: the most rows along the innermost spatial
    loop of the rows, the output's (and, in a convolution, the input's) contiguous axis. Rows
    along an outer axis (an NHWC image's height) broadcast from, and store to, one stream per
    row, a row's width apart. Measured on the analytical choices alone (each task's first
    programs, timed cold in turn), the stage made MobileNetV2's 30 convolutions 1.05x faster in
    all (0.95x-1.33x each), ResNet-50's fp32 tasks 1.07x (0.95x-1.43x) and its int8 ones for
    AVX2 1.02x (0.87x-1.28x) on a Zen 4."""
    terms = [(model.vars[f], 1) for f in innermost_row.factors if not isinstance(f, int)]
    if terms:
        model.maximize("contiguous", terms)


def _minimize_excess(model, stage: ObjectiveStage, name: str, amount, upper: int):
    """The stage ``stage``: ``amount`` (a linear expression, at most ``upper``) no more than 0, or
    as little over it as the model allows: a limit the analytical choice keeps where it can.
    Returns the excess, a variable."""
    excess = model.cp.NewIntVar(0, upper, name)
    model.cp.AddMaxEquality(excess, [amount, 0])
    model.maximize(stage, [(excess, -1)])
    return excess


@dataclass(kw_only=True, frozen=True)
class _Loads:
    """No more loads than FMAs per micro-kernel step, ``MR + NR / lanes <= MR x NR / lanes``, for
    every program of the space, where the rest of the model allows it (a block one vector wide
    does not: each of its steps loads one more than it multiplies).
    The analytical choice already kept it; the search sampled the rest: a 64-trial int8 GEMM
    search for AVX-512 VNNI ended on a 16 x 1-vector tile, 1.28x slower than 4 x 4 (Emerald
    Rapids), and the 14 x 1 tiles of AVX2 ran ResNet-50's convolutions 1.2-2.4x slower than 4 x 2
    (Zen 3)."""

    name: str
    excess: object  # the CP-SAT variable: loads over FMAs per step, or 0
    rows: tuple
    lanes: tuple
    width: int

    def add(self, model: ConstraintModel) -> None:
        if minimum(model, self.excess) != 0:
            return
        model.cp.Add(self.excess == 0)

        def balanced(v, rows=self.rows, lanes=self.lanes, width=self.width):
            return loads_balanced(_value(v, rows), _vectors(v, lanes, width))

        model.add(
            Constraint(
                name=f"{self.name}: broadcasts + vector loads <= FMAs per step",
                kind="register",
                holds=balanced,
                performance=True,
            )
        )


@dataclass(kw_only=True, frozen=True)
class _Latency:
    """BLIS's ``MR x NR / lanes >= N_vfma x L_vfma`` for one register tile: enough independent
    accumulators (``chains``, latency x ports) that an FMA or dot product issues on every port
    every cycle (fewer leave the units waiting on the previous one's result)."""

    name: str
    accumulators: object  # the CP-SAT variable
    rows: tuple
    lanes: tuple
    width: int
    chains: int

    def add(self, model: ConstraintModel) -> None:
        """Bound the accumulators by ``chains``, or by the most the rest of the model allows (a
        small block keeps every core busy before it fills the pipelines)."""
        reachable = maximum(model, self.accumulators)
        need = min(self.chains, reachable or 0)
        if need <= 1:
            return
        model.cp.Add(self.accumulators >= need)

        def count(v, rows=self.rows, lanes=self.lanes, width=self.width):
            return _value(v, rows) * _vectors(v, lanes, width)

        model.add(
            Constraint(
                name=f"{self.name}: accumulators >= {need} (latency x ports)",
                kind="register",
                holds=lambda v, c=count, k=need: c(v) >= k,
                performance=True,
            )
        )


def _fills_vectors(model, factors, element_bytes: int, width: int) -> bool:
    """Whether the innermost axis can be cut into whole vectors: its extent is a multiple of the
    vector width (a one-decision tile factor), so a partly filled vector would only waste lanes.
    An axis one vector long is left free: whole vectors would leave it no outer tile to run in
    parallel (a 8-row GEMV on AVX2)."""
    names = [f for f in factors if not isinstance(f, int)]
    decision = model.decision_of(names[0]) if len(names) == 1 else None
    return (
        decision is not None
        and decision.kind == "tile"
        and decision.extent * element_bytes % width == 0
        and decision.extent * element_bytes > width
    )


def _value(values, factors) -> int:
    return math.prod(values[f] if not isinstance(f, int) else f for f in factors)


def _vectors(values, lanes, width: int) -> int:
    """The vector registers the register tile's lanes (``lanes``' factors, in bytes) take."""
    return -(-_value(values, lanes) // width)


def _read_windows(
    model, block, block_name: str, inside: list, scope: str
) -> list[tuple[Footprint, int]]:
    """One window per buffer ``block`` reads inside the loops ``inside``, as derived variables named
    ``<scope>[<block>].<buffer>``, with an upper bound of its elements; empty when an access is not
    affine (its window is unknown)."""
    written = {w.source.name for w in block.writes}
    windows = []
    for region in block.reads:
        if region.source.name in written:
            continue
        name = f"{scope}[{block_name}].{region.source.name}"
        dims = read_window_dims(model, name, block, region, inside)
        if dims is None:
            return []
        model.product_of_dims(name, dims)
        footprint = Footprint(
            variable=name,
            buffer=str(region.source.name),
            scope=scope,
            dtype_bytes=dtype_bytes(region.source.dtype),
            block=block_name,
        )
        windows.append((footprint, math.prod(upper for _, upper, _ in dims)))
    return windows


def _window_bytes(model, windows: list[tuple[Footprint, int]]):
    """The bytes of :func:`_read_windows`' windows, as a linear expression, and an upper bound of
    them."""
    return (
        sum(model.vars[w.variable] * w.dtype_bytes for w, _ in windows),
        sum(upper * w.dtype_bytes for w, upper in windows),
    )


def _add_parallel_traffic(model, block, block_name: str, levels: dict) -> None:
    """The analytical choice's ``traffic`` stage: the fewest bytes all parallel jobs read together
    (jobs x one job's windows). Splitting a GEMM's rows across the cores makes every core read the
    whole weight; splitting its columns, the whole (smaller) activation: with cold weights a BERT
    FFN projection (128 x 3072 x 768) ran 2.2 ms split by rows, 2.0 ms by columns."""
    factors = [f for lp in levels["S0"] for f in lp.factors]
    if not factors or all(isinstance(f, int) for f in factors):
        return
    windows = _read_windows(
        model, block, block_name, [lp for n in list(levels)[1:] for lp in levels[n]], "job"
    )
    if not windows:
        return
    jobs = model.product(f"jobs[{block_name}]", factors)
    per_job, per_job_upper = _window_bytes(model, windows)
    bound = model.upper_bound(factors) * per_job_upper
    one = model.cp.NewIntVar(1, max(1, min(bound, MAX_BOUND)), f"job_bytes[{block_name}]")
    model.cp.Add(one == per_job)
    total = model.cp.NewIntVar(1, max(1, min(bound, MAX_BOUND)), f"traffic[{block_name}]")
    model.cp.AddMultiplicationEquality(total, [jobs, one])
    model.maximize("traffic", [(total, -1)])


def _add_whole_reduction(model, block_name: str, between: list) -> None:
    """The ``whole_reduction`` blocking's stage: the fewest spatial iterations between the reduction
    levels, so that each micro-tile runs its whole reduction, then its epilogue, before the next."""
    factors = [f for lp in between for f in lp.factors]
    if any(not isinstance(f, int) for f in factors):
        block = model.product(f"cache_block[{block_name}]", factors)
        model.maximize("whole_reduction", [(block, -1)])


def _add_sweep(model, block, block_name: str, swept: list, limit: int) -> None:
    """The ``whole_reduction`` blocking's ``sweep`` stage: what one sweep of the innermost loop
    around the reductions reads (a job's weight columns over each micro-tile's whole reduction) no
    more than L2, or as little over it as the model allows. The loops outside that one come back for
    every row of micro-tiles and re-read those bytes: from L2 when they fit, from L3 or memory when
    not. Traffic is minimized after it, among the sweeps that fit."""
    windows = _read_windows(model, block, block_name, swept, "sweep")
    if not windows:
        return
    swept_bytes, upper = _window_bytes(model, windows)
    _minimize_excess(
        model, "sweep", f"sweep[{block_name}].excess", swept_bytes - limit, min(upper, MAX_BOUND)
    )


def _add_working_set(model, block, block_name: str, inside: list, cache: str, limit: int) -> None:
    """The bytes ``block`` reads inside the loops ``inside`` (one window per read buffer) <=
    ``limit``."""
    sets = [footprint for footprint, _ in _read_windows(model, block, block_name, inside, cache)]
    if not sets:
        return
    model.working_sets += sets
    model.maximize(
        cache, [(model.vars[fp.variable], fp.dtype_bytes) for fp in sets], cap=limit // 2
    )
    add_summed_bytes(
        model,
        sets,
        limit,
        f"{cache}[{{block}}]: {{buffers}} read per "
        f"{'micro-tile' if cache == 'L1' else 'cache block'} <= {cache} {{limit}} B",
        performance=True,
        kind=cache,
    )
