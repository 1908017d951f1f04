"""The constraint model derived from HeronSpace's design spaces, solved with CP-SAT."""

import pytest
import tvm
from conftest import SMALL_SHAPES
from rule_helpers import allocations
from tvm import te
from tvm.s_tir import Schedule

from ms_heron import HeronSpace, workloads
from ms_heron.constraints import (
    ConstraintOptions,
    RepairedDecision,
    Solver,
    count_solutions,
    decided_values,
    derive,
    replay,
)
from ms_heron.hardware.peak import fma_chains
from ms_heron.hardware.probes import PEAK_CHAINS
from ms_heron.hardware.targets import (
    cpu_cache_bytes,
    host_target,
    vector_bytes,
    vector_registers,
)
from ms_heron.postprocs import DisallowBlocksInVectorLoops, blocks_in_vector_loops
from ms_heron.rules import default_rules
from ms_heron.schedule.annotations import TILING_STRUCTURE, block_annotations, iter_kinds
from ms_heron.space import default_postprocs, design_spaces
from ms_heron.workloads import from_func
from ms_heron.workloads.evaluate import build, run_and_check

#: Samples drawn from each space (and twice as many solutions counted to know whether the sampler
#: must return them all: counting distinct assignments of the primary variables is the costly part,
#: 400 took 16 of the transposed convolution's 29 s).
SAMPLES = 100
#: Samples of each space replayed through TVM and its postprocs (the costly part of the check: 100
#: made these tests a third of the suite's time; every sample is still checked against the model).
REPLAYED = 30


def _spaces(workload, target, include_default_spaces=False, rules=None):
    return design_spaces(
        workload.func,
        target,
        HeronSpace(rules=rules, include_default_spaces=include_default_spaces),
    )


@pytest.mark.parametrize("dtype", ["int8", "fp32"])
@pytest.mark.parametrize("family", sorted(SMALL_SHAPES))
def test_samples_are_distinct_valid_and_replay_without_repair(family, dtype, cpu_target):
    workload = workloads.make(family, dtype, **SMALL_SHAPES[family])
    postprocs = default_postprocs()
    for index, space in enumerate(_spaces(workload, cpu_target)):
        model = derive(space, cpu_target)
        samples = Solver(model, seed=index).samples(SAMPLES)
        feasible = count_solutions(model, limit=2 * SAMPLES)
        assert len(samples) == SAMPLES if feasible >= 2 * SAMPLES else len(samples) <= feasible
        assert len({tuple(sorted(s.items())) for s in samples}) == len(samples)
        assert [v for v in map(model.violations, samples) if v] == []
        trace = space.trace.simplified(remove_postproc=True)
        for i, values in enumerate(samples[:REPLAYED]):
            sch = replay(model, trace, workload.func, values)  # raises if TVM repaired a decision
            assert all(p.apply(sch) for p in postprocs)
            if i < 2:
                run_and_check(build(sch.mod, cpu_target), workload, seed=i)


def test_small_space_is_covered_completely(cpu_target):
    workload = workloads.make("gemv", "fp32", M=8, K=4)
    space = _spaces(workload, cpu_target)[0]
    model = derive(space, cpu_target)
    feasible = count_solutions(model)
    assert 1 < feasible < 2 * SAMPLES
    assert len(Solver(model, seed=0).samples(2 * SAMPLES, max_tries=40 * SAMPLES)) == feasible


def test_violating_decisions_are_named(cpu_target):
    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    space = _spaces(workload, cpu_target)[0]
    model = derive(space, cpu_target)
    values = Solver(model, seed=0).sample()
    tile = next(d for d in model.decisions if d.kind == "tile" and d.extent > 1)
    broken = dict(values)
    broken[tile.variables[0]] = values[tile.variables[0]] * 3  # product no longer the extent
    names = model.violations(broken)
    assert any(n.startswith("split ") and tile.variables[0] in n for n in names), names
    with pytest.raises(RepairedDecision):
        replay(model, space.trace.simplified(remove_postproc=True), workload.func, broken)

    serial = dict(values)
    parallel = [c for c in model.constraints if c.kind == "parallel"]
    assert parallel
    outer = model.decisions[0].variables  # the first tile decision's outermost factor is parallel
    for d in model.decisions:
        if d.kind == "tile":
            serial.update(
                {
                    v: (d.extent if j == len(d.variables) - 1 else 1)
                    for j, v in enumerate(d.variables)
                }
            )
    assert any(n.startswith("parallel") for n in model.violations(serial)), (
        outer,
        model.violations(serial),
    )
    assert not any(n.startswith("parallel") for n in model.violations(serial, performance=False))


def test_completion_keeps_fixed_values(cpu_target):
    workload = workloads.make("c2d", "int8", **SMALL_SHAPES["c2d"])
    model = derive(_spaces(workload, cpu_target)[1], cpu_target)
    solver = Solver(model, seed=3)
    first = solver.sample()
    fixed = {name: first[name] for name in model.primary[: len(model.primary) // 2]}
    for _ in range(10):
        child = solver.complete(fixed)
        assert all(child[k] == v for k, v in fixed.items())
        assert model.violations(child) == []


def test_summary_reports_kinds_and_size(cpu_target):
    workload = workloads.make("gemm", "int8", **SMALL_SHAPES["gemm"])
    summaries = [derive(s, cpu_target).summary() for s in _spaces(workload, cpu_target)]
    for summary in summaries:
        assert summary["constraints"]["split"] > 0 and summary["constraints"]["candidates"] == 1
        assert summary["unconstrained_space_size"] > 1
    assert any(s["constraints"].get("memory") for s in summaries)


def test_parallel_jobs_keep_every_core_busy():
    """TVM gives each core an equal run of a parallel loop's jobs, so 3 jobs on 2 cores idle one
    core a third of the time: every sample's jobs keep both cores >= 90% busy, and the 3-job
    split that the space holds without the constraint is named as breaking it."""
    target = host_target(num_cores=2)
    workload = workloads.make("gemm", "fp32", M=48, N=64, K=32)
    space = _spaces(workload, target)[0]
    model = derive(space, target)
    (jobs,) = {c.name.split(":")[0] for c in model.constraints if "busy" in c.name}
    balanced = {model.evaluate(s)[jobs] for s in Solver(model, seed=0).samples(SAMPLES)}
    assert all(10 * n >= 9 * 2 * -(-n // 2) for n in balanced), balanced

    # whole rows per core alone would rule the 3 jobs out too (48 rows split in 3)
    relaxed = derive(space, target, ConstraintOptions(balanced_jobs=False, row_affinity=False))
    samples = Solver(relaxed, seed=0).samples(SAMPLES)
    three = [s for s in samples if relaxed.evaluate(s)[jobs] == 3]
    assert three and balanced
    assert f"{jobs}: parallel jobs keep 2 cores >= 9/10 busy" in model.violations(three[0])


def test_parallel_jobs_give_each_core_whole_rows():
    """TVM hands core k the k-th run of a parallel loop's jobs: with the rows' factor of the jobs a
    multiple of the cores, each core writes whole rows, the rows the next kernel gives it too.
    Every sample of an 8-row convolution splits its rows so, the space holds odd splits without
    the constraint (named as breaking it), and a 3-row output, which has no such split, keeps a
    solvable model without it."""
    target = host_target(num_cores=2)
    rows = workloads.make("c2d", "fp32", N=1, H=8, W=8, CI=8, CO=16, KH=1, KW=1)
    constrained = 0
    for space in _spaces(rows, target):
        model = derive(space, target)
        names = [c.name for c in model.constraints if "whole shares" in c.name]
        if not names:
            continue
        constrained += 1
        (name,) = names
        factor = name.split(": rows ")[1].split()[0]
        assert name.endswith(f": rows {factor} in whole shares of 2 cores")
        assert model.decision_of(factor).extent == 8
        assert {s[factor] for s in Solver(model, seed=0).samples(SAMPLES)} <= {2, 4, 8}
        relaxed = derive(space, target, ConstraintOptions(row_affinity=False))
        odd = [s for s in Solver(relaxed, seed=0).samples(SAMPLES) if s[factor] % 2]
        assert odd and name in model.violations(odd[0])
    assert constrained >= 2

    three = workloads.make("c2d", "fp32", **SMALL_SHAPES["c2d"])  # 3x3 outputs
    for space in _spaces(three, target):
        model = derive(space, target)
        assert not [c for c in model.constraints if "whole shares" in c.name]
        assert model.violations(Solver(model, seed=0).sample()) == []


def test_register_tile_holds_enough_accumulators_to_hide_fma_latency(cpu_target):
    """BLIS's ``MR x NR / lanes >= N_vfma x L_vfma`` with the FMAs in flight measured on this CPU:
    every sample of a GEMM big enough for it has that many accumulators; a convolution with 3x3x16
    outputs cannot reach it on every core and gets what it can hold (its model stays solvable)."""
    chains = fma_chains(cpu_target)
    assert 2 <= chains <= PEAK_CHAINS
    width = vector_bytes(cpu_target)
    workload = workloads.make("gemm", "fp32", M=64, N=64, K=32)
    for index, space in enumerate(_spaces(workload, cpu_target)):
        model = derive(space, cpu_target)
        assert [c.name for c in model.constraints if "latency x ports" in c.name] == [
            f"register_tile[C]: accumulators >= {chains} (latency x ports)"
        ]
        for values in Solver(model, seed=index).samples(20):
            full = model.evaluate(values)
            assert (
                full["register_tile[C].rows"] * -(-full["register_tile[C].lane_bytes"] // width)
                >= chains
            ), values
    small = workloads.make("c2d", "fp32", **SMALL_SHAPES["c2d"])
    for space in _spaces(small, cpu_target):
        model = derive(space, cpu_target)
        assert model.violations(Solver(model, seed=0).sample()) == []


def test_register_tile_loads_no_more_than_it_multiplies_where_the_block_allows(cpu_target):
    """``MR`` broadcasts and ``NR / lanes`` vector loads per micro-kernel step, for ``MR x NR /
    lanes`` FMAs: every sample of a GEMM's space loads no more than it multiplies, a load-bound
    8 x 1-vector tile is named as breaking it, and a GEMM one vector wide, whose every tile loads
    one more than it multiplies, keeps a solvable model without it."""
    width = vector_bytes(cpu_target)
    lanes = width // 4
    name = "register_tile[C]: broadcasts + vector loads <= FMAs per step"
    workload = workloads.make("gemm", "fp32", M=32, N=8 * lanes, K=24)
    for index, space in enumerate(_spaces(workload, cpu_target)):
        model = derive(space, cpu_target)
        assert [c.name for c in model.constraints if "loads <=" in c.name] == [name]
        for values in Solver(model, seed=index).samples(20):
            full = model.evaluate(values)
            rows = full["register_tile[C].rows"]
            vectors = -(-full["register_tile[C].lane_bytes"] // width)
            assert rows + vectors <= rows * vectors, values
        row_tile = next(d for d in model.decisions if d.kind == "tile" and d.extent == 32)
        lane_tile = next(d for d in model.decisions if d.kind == "tile" and d.extent == 8 * lanes)
        narrow = Solver(model, seed=0).sample()
        narrow.update(dict(zip(row_tile.variables, [1, 1, 4, 8])))
        narrow.update(dict(zip(lane_tile.variables, [2, 1, 4, lanes])))
        assert name in model.violations(narrow)
        assert name not in model.violations(narrow, performance=False)
    one_vector = workloads.make("gemm", "fp32", M=16, N=lanes, K=24)
    for space in _spaces(one_vector, cpu_target):
        model = derive(space, cpu_target)
        assert not [c for c in model.constraints if "loads <=" in c.name]
        assert model.violations(Solver(model, seed=0).sample()) == []


def test_vectorized_lanes_are_a_power_of_two(cpu_target):
    """A 48- or 96-lane accumulator (N=96 allows both) lowers to scalar shuffles: samples take
    power-of-two lanes only, a 48-lane decision is named, and the space without performance
    constraints still holds it."""
    workload = workloads.make("gemm", "fp32", M=16, N=96, K=32)
    space = _spaces(workload, cpu_target)[0]
    model = derive(space, cpu_target)
    (lanes,) = [
        c.name.split(":")[0]
        for c in model.constraints
        if c.name.endswith("vector lanes a power of two")
    ]
    lane_tile = next(d for d in model.decisions if d.kind == "tile" and d.extent == 96)
    samples = Solver(model, seed=0).samples(40)
    assert {model.evaluate(v)[lanes] for v in samples} <= {1, 2, 4, 8, 16, 32, 64}
    assert {model.evaluate(v)[lanes] for v in samples} & {16, 32, 64}
    wide = Solver(model, seed=0).complete({lane_tile.variables[-1]: 32})
    wide.update(dict(zip(lane_tile.variables, [2, 1, 1, 48])))
    # 48 lanes are also 6 (AVX2) or 3 (AVX-512) vectors, which may break the register bounds too
    assert f"{lanes}: vector lanes a power of two" in model.violations(wide)
    assert model.violations(wide, performance=False) == []


def _window_bytes(full, scope):
    """The fp32 bytes of the read windows ``<scope>[C].<buffer>`` in an evaluated assignment."""
    return sum(full[n] * 4 for n in full if n.startswith(f"{scope}[C].") and n.count(".") == 1)


def test_analytical_choices_fill_the_registers_and_half_of_each_cache(cpu_target):
    """BLIS's analytical blocking as CP-SAT objectives, maximized in turn: no sample of the space
    has a better micro-kernel (no more loads than FMAs; then more accumulators; then fewer cache
    lines per step); the micro-tile's reads stay within half of L1. The ``cache_block`` choice's
    cache block reads within half of L2, and no sample with as good a micro-kernel reads less over
    all parallel jobs. The ``whole_reduction`` choice has no spatial loop between the reduction
    levels, sweeps no more than L2 around them, and no sample with as good a micro-kernel and such a
    sweep reads less over all jobs. Both are valid and do not depend on the solver's seed."""
    caches, width = cpu_cache_bytes(cpu_target), vector_bytes(cpu_target)
    workload = workloads.make("gemm", "fp32", M=64, N=128, K=256)
    for index, space in enumerate(_spaces(workload, cpu_target)):
        model = derive(space, cpu_target)
        choices = Solver(model, seed=0).analytical()
        assert choices == Solver(model, seed=7).analytical() and set(choices) == {
            "cache_block",
            "whole_reduction",
        }

        def kernel(values):
            full = model.evaluate(values)
            rows, vectors = (
                full["register_tile[C].rows"],
                -(-full["register_tile[C].lane_bytes"] // width),
            )
            return (
                -max(rows + vectors - rows * vectors, 0),
                rows * vectors,
                -(rows + vectors * width // 4),
            )

        def traffic(values):
            full = model.evaluate(values)
            return full["jobs[C]"] * _window_bytes(full, "job")

        def read_bytes(full, level):
            return sum(
                full[w.variable] * w.dtype_bytes for w in model.working_sets if w.scope == level
            )

        def sweep(values):
            return _window_bytes(model.evaluate(values), "sweep")

        for blocking, choice in choices.items():
            assert model.violations(choice) == [], blocking
            full = model.evaluate(choice)
            assert read_bytes(full, "L1") <= caches["L1"] // 2
            if blocking == "cache_block":
                assert read_bytes(full, "L2") <= caches["L2"] // 2 and full["cache_block[C]"] > 1
            else:
                assert full["cache_block[C]"] == 1 and 0 < sweep(choice) <= caches["L2"]
            for values in Solver(model, seed=index).samples(100):
                assert kernel(values) <= kernel(choice), (values, choice)
                if blocking == "cache_block" or sweep(values) <= caches["L2"]:
                    assert kernel(values) < kernel(choice) or traffic(values) >= traffic(choice), (
                        values,
                        choice,
                    )


def test_analytical_micro_tile_rows_run_along_the_contiguous_width(cpu_target):
    """An NHWC convolution's micro-tile rows are output pixels: the analytical choice takes them
    along the width, one contiguous stream of broadcasts and stores, not down the height, one
    stream per image row. Without that last stage this space's choice took 14 rows down the height
    and 2 across."""
    workload = workloads.make("c2d", "fp32", N=1, H=14, W=28, CI=32, CO=16, KH=1, KW=1)
    checked = 0
    for space in _spaces(workload, cpu_target):
        model = derive(space, cpu_target)
        height, width = (
            next(d for d in model.decisions if d.kind == "tile" and d.extent == e) for e in (14, 28)
        )
        for choice in Solver(model, seed=0).analytical().values():
            assert choice[height.variables[-1]] == 1 and choice[width.variables[-1]] > 1, choice
            checked += 1
    assert checked


def test_whole_reduction_sweeps_a_weight_that_fits_L2(cpu_target):
    """A weight larger than L2 (4 MB, or 4x the host's L2 per core): the ``whole_reduction`` choice
    splits its columns until what one sweep of the innermost loop around the reductions reads (the
    job's weight columns over the whole K) fits L2; the fewest bytes over all jobs then take the
    widest such columns. Split only across the cores, a job would sweep twice L2 or more, re-read
    for every row of micro-tiles."""
    l2 = cpu_cache_bytes(cpu_target)["L2"]
    k = max(1024, 2 * l2 // 1024)
    workload = workloads.make("gemm", "fp32", M=64, N=1024, K=k)
    assert 1024 * k * 4 // 2 >= 2 * l2
    checked = 0
    for space in _spaces(workload, cpu_target):
        model = derive(space, cpu_target)
        choice = Solver(model, seed=0).analytical().get("whole_reduction")
        full = model.evaluate(choice) if choice is not None else {}
        sweep = _window_bytes(full, "sweep")
        if not sweep:
            continue
        assert l2 // 4 < sweep <= l2, (sweep, choice)
        assert full["cache_block[C]"] == 1 and model.violations(choice) == []
        checked += 1
    assert checked


def _allocated_elements(mod, buffer):
    found = allocations(mod)
    assert buffer in found, f"{buffer} not allocated in the lowered TIR"
    return found[buffer]


@pytest.mark.parametrize("family", ["gemm", "c1d", "c2d", "dil", "t2d", "scan"])
@pytest.mark.parametrize("dtype", ["int8", "fp32"])
def test_memory_footprints_equal_lowered_allocations(family, dtype, cpu_target):
    """Strided, dilated and transposed convolutions included: the affine window sizes must match."""
    workload = workloads.make(family, dtype, **SMALL_SHAPES[family])
    checked = 0
    for index, space in enumerate(_spaces(workload, cpu_target)):
        model = derive(space, cpu_target)
        trace = space.trace.simplified(remove_postproc=True)
        for values in Solver(model, seed=index).samples(6):
            sch = replay(model, trace, workload.func, values)
            assert all(p.apply(sch) for p in default_postprocs())
            full = model.evaluate(values)
            for fp in model.footprints:
                assert full[fp.variable] == _allocated_elements(sch.mod, fp.buffer), (fp, values)
                checked += 1
    assert checked > 0


def test_no_sampled_location_lies_inside_a_loop_a_rule_vectorized(cpu_target):
    """A concatenation feeding a blocked transpose (a Winograd input gather): the transpose's rule
    vectorizes its write tile, and TVM's vectorizer miscompiles a block computed inside that loop.
    The model's location candidates stop outside it, and the program at every candidate computes
    what the function computes; for searches that mutate locations freely, the postproc
    DisallowBlocksInVectorLoops refuses the program with the block inside the loop."""
    a = te.placeholder((4, 16, 8), name="A")
    cat = te.compute(
        (4, 16, 8),
        lambda i, j, k: te.if_then_else(k >= 4, a[i, j, k - 4] * 2.0, a[i, j, k]),
        name="cat",
    )
    out = te.compute((8, 16, 4), lambda k, j, i: cat[i, j, k], name="transpose")
    workload = from_func(te.create_prim_func([a, out]), "gather")
    (space,) = [
        s for s in _spaces(workload, cpu_target) if "ms_heron.transpose_tile" in str(s.trace)
    ]
    model = derive(space, cpu_target)
    (location,) = [d for d in model.decisions if d.kind == "location"]
    consumer = space.get_sblock("transpose")
    loops = space.get_loops(consumer)
    vectorized = [
        i for i, loop in enumerate(loops) if space.get(loop).kind == tvm.tirx.ForKind.VECTORIZED
    ]
    assert vectorized and max(location.candidates) < vectorized[0], (
        location.candidates,
        vectorized,
    )
    trace = space.trace.simplified(remove_postproc=True)
    for index in range(len(location.candidates)):
        values = {location.variables[0]: index}
        sch = replay(model, trace, workload.func, {**Solver(model, seed=0).samples(1)[0], **values})
        assert DisallowBlocksInVectorLoops().apply(sch)
        run_and_check(build(sch.mod, cpu_target), workload)
    # a search that mutates the location freely: the postproc refuses the program inside the loop
    inside = Schedule(workload.func)
    trace.with_decision(location.inst, vectorized[0], remove_postproc=True).apply_to_schedule(
        inside, remove_postproc=True
    )
    assert blocks_in_vector_loops(inside) and not DisallowBlocksInVectorLoops().apply(inside)


def test_metaschedule_default_spaces_are_modelled_and_replay_valid(cpu_target):
    """MetaSchedule's own spaces (rfactor, compute locations) in HeronSpace: every CP-SAT sample
    replays with its tiles unchanged, passes the postprocs, and two of them compute softmax."""
    workload = workloads.make("softmax", "fp32", M=64, N=128)
    func = workload.func
    heron_only = _spaces(workload, cpu_target)
    spaces = _spaces(workload, cpu_target, include_default_spaces=True)
    assert len(spaces) > len(heron_only)
    postprocs = default_postprocs()
    kinds = set()
    for index, space in enumerate(spaces[len(heron_only) :]):
        model = derive(space, cpu_target)
        kinds |= {d.kind for d in model.decisions}
        trace = space.trace.simplified(remove_postproc=True)
        for i, values in enumerate(Solver(model, seed=index).samples(8)):
            sch = replay(model, trace, func, values)  # raises if TVM repaired a tile or categorical
            normalized = decided_values(model, sch.trace)
            assert model.violations(normalized) == []
            assert all(p.apply(sch) for p in postprocs)
            if i < 1 and index < 2:
                run_and_check(build(sch.mod, cpu_target), workload, seed=i)
    assert "location" in kinds and "tile" in kinds


@pytest.mark.parametrize("family", ["gemm", "c2d", "dil"])
def test_micro_kernel_tile_and_cache_blocks_equal_lowered_allocations(family, cpu_target):
    """BLIS's quantities as the model has them: the register micro-tile equals the output tile a
    write-back under its level allocates, and each L1 / L2 working set equals the buffer a copy of
    that operand placed outside the last reduction level / inside the first one allocates."""
    workload = workloads.make(family, "fp32", **SMALL_SHAPES[family])
    # The padding stays a stage of its own (no ComputeLocation), so each operand is a buffer that a
    # cache_read can copy; with the padding inlined TVM's read region of the input is conservative.
    rules = [
        r
        for r in default_rules(cpu_target)
        if type(getattr(r, "_inst", r)).__name__ != "ComputeLocation"
    ]
    space = _spaces(workload, cpu_target, rules=rules)[0]
    model = derive(space, cpu_target)
    trace = space.trace.simplified(remove_postproc=True)
    structure = str(block_annotations(space, space.get_sblock("C"))[TILING_STRUCTURE])
    kinds = iter_kinds(space, space.get_sblock("C"))

    # the loop just outside tile level ``level`` (outer levels may be fused)
    def outside(sch, level):
        return sch.get_loops(sch.get_sblock("C"))[
            -sum(kinds.count(c) for c in structure[level:]) - 1
        ]

    checked = 0
    for values in Solver(model, seed=5).samples(4):
        full = model.evaluate(values)
        for cache, level in (("L1", structure.rfind("R")), ("L2", structure.find("R") + 1)):
            for fp in (w for w in model.working_sets if w.scope == cache):
                sch = replay(model, trace, workload.func, values)
                block = sch.get_sblock("C")
                anchor = outside(sch, level)
                index = [r.source.name for r in sch.get(block).reads].index(fp.buffer)
                sch.compute_at(sch.cache_read(block, index, "global"), anchor)
                assert full[fp.variable] == _allocated_elements(sch.mod, f"{fp.buffer}_global"), (
                    fp,
                    values,
                )
                checked += 1
    # The accumulators live across the last reduction level only. With the outer reduction tiles
    # at 1 (and the spatial level around the micro-tile at 1, so that TVM's allocation planner does
    # not hoist the buffer over it) a write-back just outside the micro-tile holds exactly them.
    solver = Solver(model, seed=6)
    last = structure.rfind("R")
    outer = {"R": 0, "S": structure[:last].count("S") - 1}
    fixed = {
        d.variables[outer[k]]: 1
        for d in model.decisions
        if d.kind == "tile"
        for k in "RS"
        if len(d.variables) == structure.count(k)
    }
    for _ in range(4):
        values = solver.complete(fixed)
        full = model.evaluate(values)
        sch = replay(model, trace, workload.func, values)
        block = sch.get_sblock("C")
        write_back = sch.cache_write(block, 0, "global")
        sch.reverse_compute_at(write_back, outside(sch, last))
        tile = full["register_tile[C].rows"] * full["register_tile[C].lane_bytes"] // 4
        assert tile == _allocated_elements(sch.mod, sch.get(write_back).reads[0].source.name), (
            values
        )
        assert full["register_tile[C]"] <= vector_registers(cpu_target)
        # Output channels (or GEMM columns) more than one vector long fill whole vectors, so the NR
        # lanes must too; an axis one vector long (16 fp32 on AVX-512) is left free.
        columns = SMALL_SHAPES[family].get("CO", SMALL_SHAPES[family].get("N"))
        if columns * 4 > vector_bytes(cpu_target):
            assert full["register_tile[C].lane_bytes"] % vector_bytes(cpu_target) == 0, values
    assert checked >= 8
