"""HeronSearch: the constrained genetic search inside MetaSchedule's tuning loop."""

import pathlib
import subprocess
import sys
import time

import pytest
import tvm_ffi
from conftest import HOST_DOT, HOST_DTYPE, SMALL_SHAPES, suite, timing_out_runner
from rule_helpers import started_search
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.postproc import PyPostproc
from tvm.s_tir.meta_schedule.runner import RunnerResult

from ms_heron import HeronSearch, HeronSpace, workloads
from ms_heron.schedule.annotations import is_metaschedule_space
from ms_heron.search.decision_model import DecisionModel, rank_correlation
from ms_heron.tuning import (
    RunSpec,
    TuningRun,
    best_schedule,
    reset_metaschedule_logger,
    tune_func,
    tune_workload,
)
from ms_heron.tuning.budget import LATE_ROUND, Budget, WatchedSearch
from ms_heron.workloads import WorkloadError, load_kernel
from ms_heron.workloads.evaluate import build, run_and_check, time_lib


@pytest.mark.parametrize("family", sorted(SMALL_SHAPES))
def test_tunes_every_family_and_best_record_is_correct(family, cpu_target, tmp_path):
    workload = suite(family, HOST_DTYPE, **SMALL_SHAPES[family])
    db = tune_workload(
        workload,
        cpu_target,
        str(tmp_path),
        8,
        num_trials_per_iter=4,
        space=HeronSpace(),
        strategy=HeronSearch(),
        seed=0,
    )
    records = db.get_all_tuning_records()
    assert len(records) == 8
    # valid by construction
    assert all(r.run_secs and min(float(s) for s in r.run_secs) < 1e9 for r in records)
    run_and_check(build(best_schedule(db, workload, cpu_target).mod, cpu_target), workload)
    log = "".join(p.read_text() for p in (tmp_path / "logs").glob("*task_0*"))
    assert log.count("HeronSearch round") == 2 and "valid 4/4" in log


def _strategy(workload, target, seed, trials=16, per_round=8, cost_model=None, strategy=None):
    strategy = strategy or HeronSearch()
    ctx = ms.TuneContext(
        mod=workload.func,
        target=target,
        space_generator=HeronSpace(),
        search_strategy=strategy,
        task_name="t",
        rand_state=seed,
    )
    strategy.pre_tuning(trials, per_round, ctx.generate_design_space(), None, cost_model)
    return strategy


def _hashes(candidates):
    return [tvm_ffi.structural_hash(c.sch.mod) for c in candidates]


def test_deterministic_with_fixed_seed(cpu_target):
    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    # 16 a round: more than the untried spaces' leading programs, which every seed measures.
    first = _hashes(_strategy(workload, cpu_target, 7, per_round=16).generate_measure_candidates())
    again = _hashes(_strategy(workload, cpu_target, 7, per_round=16).generate_measure_candidates())
    other = _hashes(_strategy(workload, cpu_target, 8, per_round=16).generate_measure_candidates())
    assert first == again and len(set(first)) == len(first) == 16
    assert first != other


def test_round_zero_is_ranked_by_the_feature_model_other_tasks_trained(cpu_target):
    """A model's tasks share MetaSchedule's feature model: once earlier tasks trained it, a new
    task's first round is its top predictions (before: constrained-random, ignoring what was
    learned)."""
    from ms_heron.search.ranking import FEATURES  # pylint: disable=import-outside-toplevel

    cost_model = ms.cost_model.XGBModel(num_warmup_samples=1, num_tuning_cores=1)
    first_task = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    untrained = _strategy(first_task, cpu_target, 3, cost_model=cost_model)
    batch = untrained.generate_measure_candidates()
    assert not untrained.guided
    seconds = [
        time_lib(build(c.sch.mod, cpu_target), first_task, repeat=3, min_repeat_ms=5).seconds
        for c in batch
    ]
    cost_model.update(
        untrained.context, batch, [RunnerResult(run_secs=[s], error_msg=None) for s in seconds]
    )

    other = workloads.make("gemm", "fp32", M=64, N=32, K=64)
    other_task = _strategy(other, cpu_target, 3, cost_model=cost_model)
    picked = other_task.generate_measure_candidates()
    assert other_task.guided and other_task.now.ranked_by == FEATURES
    # The greedy picks: each Heron space's first analytical choice, then each other design space's
    # top prediction (see the next tests), then the Heron spaces' other analytical choices, then the
    # rest of the top predictions; the predicted parts in predicted order.
    analytical = sorted(other_task.analytical.items())
    firsts = [programs[0].key for _, programs in analytical]
    seconds = [p.key for _, programs in analytical for p in programs[1:]]
    others = len({p.space for p in other_task.pending} - set(other_task.analytical))
    leading = len(firsts) + others + len(seconds)
    greedy = other_task.pending[
        : max(round(len(picked) * (1 - other_task.epsilon)), min(leading, len(picked)))
    ]
    keys = [p.key for p in greedy]
    assert keys[: len(firsts)] == firsts
    leaders = greedy[len(firsts) : len(firsts) + others]
    assert len({p.space for p in leaders}) == others and not {p.space for p in leaders} & set(
        other_task.analytical
    )
    assert keys[len(firsts) + others : leading] == seconds[: len(keys) - len(firsts) - others]
    for part in (leaders, greedy[len(firsts) + others + len(seconds) :]):
        scores = [p.predicted[FEATURES] for p in part]
        assert scores == sorted(scores, reverse=True)
    assert len(greedy) >= 3

    # Past the deadline the task's first round is cut to its leaders, and the search breeds for
    # those alone.
    watched = _strategy(
        workloads.make("gemm", "fp32", M=64, N=32, K=64),
        cpu_target,
        3,
        cost_model=cost_model,
        strategy=WatchedSearch(HeronSearch(), Budget(deadline=time.monotonic())),
    )
    late = watched.inner
    leaders = watched.generate_measure_candidates()
    assert len(leaders) == len(late.pending) == LATE_ROUND < watched.full_round and late.guided
    seconds = [
        time_lib(build(c.sch.mod, cpu_target), other, repeat=3, min_repeat_ms=5).seconds
        for c in leaders
    ]
    late.notify_runner_results(
        leaders, [RunnerResult(run_secs=[s], error_msg=None) for s in seconds]
    )
    assert (late.stats[0].measured, late.stats[0].valid, late.trials) == (
        LATE_ROUND,
        LATE_ROUND,
        LATE_ROUND,
    )


def test_decision_model_ranks_only_once_it_can_score_every_design_space():
    """Heron's model is one tree ensemble per space; while any space with decisions has too few
    measurements to train its own, a population mixing spaces is ranked by the feature model."""
    import random

    from ms_heron.search.genetic import Program  # pylint: disable=import-outside-toplevel
    from ms_heron.search.ranking import DECISIONS, FEATURES, Ranking  # pylint: disable=import-outside-toplevel

    rng = random.Random(0)
    ranking = Ranking(
        [["a"], ["b"], []], seed=0, cost_model=ms.cost_model.XGBModel(num_tuning_cores=1)
    )
    rows = {name: [{name: rng.choice([1, 2, 4, 8])} for _ in range(12)] for name in "ab"}
    ranking.decision_models[0].fit(rows["a"], [r["a"] / 8 for r in rows["a"]])
    mixed = [
        Program(space=0, values={"a": 8}),
        Program(space=1, values={"b": 8}),
        Program(space=2, values={}),
    ]
    assert ranking.ranking_model() == FEATURES and ranking.predict(DECISIONS, mixed, None) is None

    ranking.decision_models[1].fit(rows["b"], [1 / r["b"] for r in rows["b"]])
    scores = ranking.predict(DECISIONS, mixed, None)
    assert ranking.ranking_model() == DECISIONS and scores[0] > scores[1] and scores[2] == 0.0


def test_survives_failed_candidates_and_stops_at_budget(cpu_target):
    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    strategy = _strategy(workload, cpu_target, 1)
    for _ in range(2):
        batch = strategy.generate_measure_candidates()
        assert batch and len(batch) == 8
        failed = [
            RunnerResult(run_secs=None, error_msg="build failed: simulated by the test")
            for _ in batch
        ]
        strategy.notify_runner_results(batch, failed)
    # 16 trials spent, all failed: tuning ends cleanly
    assert strategy.generate_measure_candidates() is None
    assert [s.valid for s in strategy.stats] == [0, 0]


def test_design_space_without_decisions_is_measured_once(cpu_target):
    """A space with nothing to decide (a transpose, or here no sampling rule at all) gives one
    program; the genetic operators skip it instead of failing, and tuning ends when it is
    measured."""
    from ms_heron.rules import AlwaysInline  # pylint: disable=import-outside-toplevel

    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    strategy = HeronSearch()
    space = HeronSpace(rules=[AlwaysInline()], include_default_spaces=False)
    ctx = ms.TuneContext(
        mod=workload.func,
        target=cpu_target,
        space_generator=space,
        search_strategy=strategy,
        task_name="t",
        rand_state=0,
    )
    strategy.pre_tuning(4, 2, ctx.generate_design_space(), None, None)
    batch = strategy.generate_measure_candidates()
    assert len(batch) == 1
    strategy.notify_runner_results(batch, [RunnerResult(run_secs=[1e-3], error_msg=None)])
    assert strategy.generate_measure_candidates() is None


def test_first_round_measures_every_design_space(cpu_target):
    """A layer norm's HeronSpace holds Heron's one lane-reduction program beside nine of
    MetaSchedule's spaces; a small task often gets one round only, so that round measures a program
    of every space (before, the one program could lose every pick to the nine spaces' samples)."""
    from ms_heron.search.genetic import Program, untried_spaces_first  # pylint: disable=import-outside-toplevel

    ranked = [
        Program(space=1, values={"a": 1}),
        Program(space=1, values={"a": 2}),
        Program(space=2, values={"b": 1}),
        Program(space=0, values={}),
        Program(space=2, values={"b": 2}),
    ]

    def keys(programs, indices):
        return [p.key for p in programs] == [ranked[i].key for i in indices]

    lead, rest = untried_spaces_first(ranked, tried={2})
    assert keys(lead, (0, 3)) and keys(rest, (1, 2, 4))
    # A space's analytical choices, the first also ranked: the first leads, the second follows the
    # other untried spaces' leaders; each listed once.
    preferred = {1: [Program(space=1, values={"a": 2}), Program(space=1, values={"a": 3})]}
    lead, rest = untried_spaces_first(ranked, tried={2}, preferred=preferred)
    assert keys(lead[:2], (1, 3)) and lead[2].key == preferred[1][1].key and len(lead) == 3
    assert keys(rest, (0, 2, 4))

    workload = workloads.make("layernorm", "fp32", M=4, N=64)
    strategy = HeronSearch()
    ctx = ms.TuneContext(
        mod=workload.func,
        target=cpu_target,
        space_generator=HeronSpace(),
        search_strategy=strategy,
        task_name="t",
        rand_state=0,
    )
    spaces = ctx.generate_design_space()
    strategy.pre_tuning(16, 16, spaces, None, None)
    strategy.generate_measure_candidates()
    assert len(spaces) >= 4 and {p.space for p in strategy.pending} == set(range(len(spaces)))


def test_first_round_measures_each_spaces_analytical_choice_first(cpu_target):
    """Every Heron space with a micro-kernel model starts from the programs BLIS's analytical model
    picks (one per blocking, fewer when they coincide); MetaSchedule's validity-only spaces have
    none and start from their best-ranked sample."""
    strategy = _strategy(
        workloads.make("gemm", "fp32", M=16, N=64, K=32), cpu_target, 0, trials=32, per_round=16
    )
    heron = {i for i, trace in enumerate(strategy.traces) if not is_metaschedule_space(trace)}
    assert set(strategy.analytical) == heron
    assert all(1 <= len(programs) <= 2 for programs in strategy.analytical.values())
    strategy.generate_measure_candidates()
    firsts = [strategy.analytical[i][0].key for i in sorted(heron)]
    assert [p.key for p in strategy.pending[: len(firsts)]] == firsts
    assert {p.key for i in heron for p in strategy.analytical[i]} <= {
        p.key for p in strategy.pending
    }
    assert {p.space for p in strategy.pending} == set(range(len(strategy.traces)))
    # A round those choices fill (a budget's short first round) is theirs, and breeds no population
    short = _strategy(
        workloads.make("gemm", "fp32", M=16, N=64, K=32), cpu_target, 0, trials=32, per_round=16
    )
    short.generate_round(len(firsts))
    assert [p.key for p in short.pending] == firsts
    assert short.now.sampled <= 4  # the feature model's probe alone


def test_fresh_samples_follow_the_spaces_that_measured_fastest(cpu_target):
    """MetaSchedule's spaces inside HeronSpace share one Heron space's prior (a BERT GEMM spent
    19-27 of 48 trials on their validity-only samples, none among its best); after measurements each
    space's weight follows its best time, so a MetaSchedule space that measures fastest gets its
    full share."""
    from ms_heron.search.genetic import space_weights  # pylint: disable=import-outside-toplevel

    inf = float("inf")
    assert space_weights([1.0, 0.5, 0.5], {}) == [1.0, 0.5, 0.5]
    assert space_weights([1.0, 0.5, 0.5], {0: 2e-3, 1: 1e-3, 2: inf}) == [1.0 / 8, 0.5, 0.5 * 0.02]
    assert space_weights([1.0, 1.0], {0: inf}) == [1.0, 1.0]  # nothing ran yet: the priors

    strategy = _strategy(
        workloads.make("gemm", "fp32", M=16, N=64, K=32), cpu_target, 0, trials=32, per_round=8
    )
    default = [is_metaschedule_space(trace) for trace in strategy.traces]
    assert any(default) and not all(default)
    priors = strategy._space_weights()  # pylint: disable=protected-access
    assert sum(w for w, d in zip(priors, default) if d) == pytest.approx(1.0)
    assert all(w == 1.0 for w, d in zip(priors, default) if not d)
    batch = strategy.generate_measure_candidates()
    fastest = next(i for i, p in enumerate(strategy.pending) if default[p.space])
    strategy.notify_runner_results(
        batch,
        [
            RunnerResult(run_secs=[1e-4 if i == fastest else 1e-3], error_msg=None)
            for i in range(len(batch))
        ],
    )
    weights = strategy._space_weights()  # pylint: disable=protected-access
    assert (
        weights[strategy.pending[fastest].space]
        == max(weights)
        == priors[strategy.pending[fastest].space]
    )
    assert all(w == pytest.approx(0.02) for w, d in zip(weights, default) if not d)


def test_survives_candidates_that_time_out(cpu_target, tmp_path):
    """A runner whose time limit every candidate exceeds: all are recorded as failed, tuning
    finishes."""
    workload = suite("gemm", HOST_DTYPE, M=256, N=256, K=256)
    runner = timing_out_runner()
    db = tune_workload(
        workload,
        cpu_target,
        str(tmp_path),
        4,
        num_trials_per_iter=2,
        space=HeronSpace(),
        strategy=HeronSearch(),
        runner=runner,
        seed=0,
    )
    records = db.get_all_tuning_records()
    assert len(records) == 4 and all(
        not r.run_secs or min(float(s) for s in r.run_secs) >= 1e9 for r in records
    )


def test_decision_model_learns_which_variable_matters():
    """Throughput that depends on one of three variables only: that variable gets the split gain."""
    import random

    rng = random.Random(0)
    rows = [
        {"a": rng.choice([1, 2, 4, 8]), "b": rng.choice([1, 2, 4, 8]), "c": rng.choice([1, 2, 4])}
        for _ in range(40)
    ]
    scores = [r["b"] / 8 for r in rows]
    model = DecisionModel(["a", "b", "c"])
    model.fit(rows, scores)
    gains = model.importance()
    assert max(gains, key=gains.get) == "b"
    assert rank_correlation(list(model.predict(rows)), scores) > 0.9


def _log_lines(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


def test_te_workload_c3d_models_build_and_a_small_c3d_tunes(cpu_target, tmp_path):
    """TVM's C3D (config 0: 7x7x7 kernel over 16x224x224) once overflowed a product bound: its
    models now build and solve; a small conv3d of the same operator tunes through HeronSearch."""
    from tvm import te  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.testing.te_workload import conv3d_ndhwc, create_te_workload

    from ms_heron.constraints import Solver, derive  # pylint: disable=import-outside-toplevel

    big = create_te_workload("C3D", 0)
    ctx = ms.TuneContext(
        mod=big, target=cpu_target, space_generator=HeronSpace(), task_name="c3d"
    ).clone()
    for space in ctx.generate_design_space():
        model = derive(space, cpu_target)
        assert model.violations(Solver(model, seed=0).sample()) == []
    small = te.create_prim_func(conv3d_ndhwc(1, 4, 8, 8, 3, 8, 3, 2, 1))
    db = tune_func(
        small,
        cpu_target,
        str(tmp_path),
        8,
        num_trials_per_iter=4,
        space=HeronSpace(),
        strategy=HeronSearch(),
        seed=0,
    )
    assert len(db.get_all_tuning_records()) == 8


def test_space_without_solution_is_skipped_with_a_warning_and_the_rest_tune(caplog):
    """A CUDA target with 3000 B of shared memory per block: the smallest tiles of the three WMMA
    shapes' spaces need 2944, 3584 and 3840 B (padded A, B and output tiles), so two spaces have no
    solution; HeronSearch names each skipped space and searches the other."""
    from tvm.target import Target  # pylint: disable=import-outside-toplevel

    a100 = dict(Target("nvidia/nvidia-a100").export())
    a100.pop("host", None)
    target = Target({**a100, "max_shared_memory_per_block": 3000}, host={"kind": "llvm"})
    workload = workloads.make("gemm", "fp16", M=64, N=64, K=64)
    strategy = HeronSearch()
    ctx = ms.TuneContext(
        mod=workload.func,
        target=target,
        space_generator=HeronSpace(),
        search_strategy=strategy,
        task_name="t",
        rand_state=0,
    )
    spaces = ctx.generate_design_space()
    with caplog.at_level("WARNING"):
        strategy.pre_tuning(8, 4, spaces, None, None)
    skipped = _log_lines(caplog).count("HeronSearch skips design space")
    assert skipped == 2 and len(spaces) == 3 and "Infeasible" in _log_lines(caplog)
    assert len(strategy.models) == len(spaces) - skipped
    assert len(strategy.generate_measure_candidates()) == 4


def _started_on_own_spaces(workload, target):
    """HeronSearch set up on Heron's spaces of ``workload`` alone (no MetaSchedule default one)."""
    return started_search(
        workload.func,
        target,
        trials=8,
        per_round=4,
        space=HeronSpace(include_default_spaces=False),
    )


def test_space_whose_performance_constraints_conflict_is_searched_under_validity_only(caplog):
    """32 cores ask for 32 parallel jobs on a 2 x (two vectors) output, which leaves no lanes for a
    whole vector: the performance constraints conflict, so the space is searched under its validity
    constraints."""
    from ms_heron.hardware.targets import host_target, vector_bytes  # pylint: disable=import-outside-toplevel

    target = host_target(num_cores=32)
    workload = workloads.make("gemm", "fp32", M=2, N=2 * vector_bytes(target) // 4, K=16)
    with caplog.at_level("WARNING"):
        strategy = _started_on_own_spaces(workload, target)
    assert "searching it under its validity constraints only" in _log_lines(caplog)
    assert strategy.models and len(strategy.generate_measure_candidates()) == 4


def test_space_with_no_even_share_of_the_cores_keeps_its_other_performance_constraints(caplog):
    """A 1 x 3 output splits into 1 or 3 jobs, neither of which keeps 2 cores evenly busy: only
    that constraint comes off, and the micro-kernel's stay."""
    from ms_heron.hardware.targets import host_target  # pylint: disable=import-outside-toplevel

    workload = workloads.make("gemm", "fp32", M=1, N=3, K=16)
    with caplog.at_level("WARNING"):
        strategy = _started_on_own_spaces(workload, host_target(num_cores=2))
    assert "searching it under its performance constraints without even core shares" in (
        _log_lines(caplog)
    )
    kinds = {c.kind for model in strategy.models for c in model.constraints if c.performance}
    assert {"parallel", "register"} <= kinds, kinds
    assert len(strategy.generate_measure_candidates()) == 4


def test_a_users_tvmscript_kernel_tunes_and_is_checked_against_itself_unscheduled(
    cpu_target, tmp_path
):
    workload = load_kernel(str(pathlib.Path(__file__).parent / "row_scale_kernel.py"))
    a, s = workload.random_inputs(0)
    assert workload.name == "row_scale" and workload.output_shape == (64, 48)
    assert abs(workload.reference([a, s]) - (a * s + 1)).max() < 1e-6
    db = tune_func(
        workload.func,
        cpu_target,
        str(tmp_path),
        4,
        num_trials_per_iter=4,
        space=HeronSpace(),
        strategy=HeronSearch(),
        seed=0,
    )
    run_and_check(build(best_schedule(db, workload, cpu_target).mod, cpu_target), workload)


PRINTED_KERNEL = """
from tvm.script import ir as I
from tvm.script import tirx as T


@I.ir_module
class Printed:
    @T.prim_func(s_tir=True)
    def main(a: T.Buffer((64, 48), "float32"), out: T.Buffer((64, 48), "float32")):
        for i, j in T.grid(64, 48):
            with T.sblock("double"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = a[vi, vj] * T.float32(2)
"""


def test_a_kernel_file_holding_an_ir_module_class_loads(tmp_path):
    """The form ``mod.script()`` prints (``ms-heron show`` included): an ``@I.ir_module`` class,
    which TVMScript parses from its source, found through the module's name; printed as it is, with
    its imports commented out, the error names the import to add."""
    source = tmp_path / "printed.py"
    source.write_text(PRINTED_KERNEL)
    workload = load_kernel(str(source))
    (a,) = workload.random_inputs(0)
    assert workload.name == "Printed" and workload.output_shape == (64, 48)
    assert abs(workload.reference([a]) - 2 * a).max() == 0
    assert not [name for name in sys.modules if name.startswith("ms_heron_kernel_")]
    # as printed: TVM comments its imports out
    source.write_text(PRINTED_KERNEL.replace("from tvm.script", "# from tvm.script"))
    with pytest.raises(WorkloadError) as raised:
        load_kernel(str(source))
    assert str(raised.value).endswith(
        "(NameError: name 'I' is not defined); add `from tvm.script import ir as I` (TVM prints "
        "its TVMScript imports commented out)"
    )


def test_stock_tune_tir_whose_builds_all_time_out_stops_after_the_first_round_naming_the_fix(
    cpu_target, tmp_path
):
    """The mission's line as written, with TVM's stock LocalBuilder: its workers import TVM's
    intrinsic library before the first build; when that outlasts the timeout, HeronSearch stops the
    run with one line instead of filling the database with failures."""
    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    # pytest's log capture leaves handlers MetaSchedule's logging set-up crashes on
    reset_metaschedule_logger()
    with pytest.raises(RuntimeError) as raised:
        ms.tune_tir(
            workload.func,
            cpu_target,
            str(tmp_path),
            max_trials_global=8,
            num_trials_per_iter=4,
            space=HeronSpace(),
            strategy=HeronSearch(),
            builder=ms.builder.LocalBuilder(timeout_sec=0.5),
        )
    assert "pass builder=ms_heron.tuning.builder.local_builder() to ms.tune_tir" in str(
        raised.value
    )
    # stopped after the first round
    assert len(ms.database.JSONDatabase(work_dir=str(tmp_path))) <= 4


@pytest.mark.parametrize("dtype", ["fp32", "int8"])
def test_stock_tune_tir_with_heron_tunes_correctly(dtype, request, tmp_path):
    """``ms.tune_tir(mod, target, work_dir, max_trials_global=N, space=HeronSpace(),
    strategy=HeronSearch())`` with ms_heron's builder: every record valid, and stock ``compile_tir``
    rebuilds the best (int8: on the CPU's dot product)."""
    from ms_heron.tuning.builder import local_builder  # pylint: disable=import-outside-toplevel

    target = request.getfixturevalue("int8_target" if dtype == "int8" else "cpu_target")
    workload = suite("gemm", dtype, **SMALL_SHAPES["gemm"])
    reset_metaschedule_logger()  # as above
    db = ms.tune_tir(
        workload.func,
        target,
        str(tmp_path),
        max_trials_global=8,
        num_trials_per_iter=4,
        space=HeronSpace(),
        strategy=HeronSearch(),
        builder=local_builder(),
    )
    assert len(db) == 8 and all(
        min(float(s) for s in r.run_secs) < 1e9 for r in db.get_all_tuning_records()
    )
    best = build(ms.tir_integration.compile_tir(db, workload.func, target).mod, target)
    run_and_check(best, workload)
    assert dtype == "fp32" or HOST_DOT.form in best.mod.inspect_source("asm")


@pytest.mark.parametrize(
    "part",
    [
        "space_generator=HeronSpace()",
        'space_generator="post-order-apply", search_strategy=HeronSearch()',
    ],
)
def test_a_stock_tune_context_on_a_cpu_parses_only_the_x86_intrinsics(part):
    """A TuneContext imports TVM's whole intrinsic library (~1 min of TVMScript parsing in a fresh
    process, most of it CUDA's); given either Heron part, a CPU process parses x86's alone."""
    code = f"""
import sys
from tvm.s_tir import meta_schedule as ms
from ms_heron import HeronSearch, HeronSpace, workloads
from ms_heron.hardware.targets import host_target
func = workloads.make("gemm", "fp32", M=8, N=8, K=8).func
ms.TuneContext(func, target=host_target(), {part})
print(sorted(m for m in sys.modules if m.startswith("tvm.s_tir.tensor_intrin.")))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[-2] == "['tvm.s_tir.tensor_intrin.x86']", proc.stdout


def _heron_annotated(record) -> bool:
    """Whether the record's design space came from HeronSpace (its rules annotate
    ``ms_heron.*``)."""
    return any(
        inst.kind.name == "Annotate" and str(inst.attrs[0]).startswith("ms_heron.")
        for inst in record.trace.insts
    )


def test_every_entry_point_tunes_with_heron_unless_told_metaschedule(cpu_target, tmp_path):
    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    heron = [
        tune_func(
            workload.func, cpu_target, str(tmp_path / "func"), 4, num_trials_per_iter=4, seed=0
        ),
        tune_workload(
            workload, cpu_target, str(tmp_path / "workload"), 4, num_trials_per_iter=4, seed=0
        ),
    ]
    run = TuningRun.create(tmp_path / "run", RunSpec.of(workload, cpu_target, 0))
    run.tune(4, num_trials_per_iter=4)
    heron.append(run.database())
    for db in heron:
        records = db.get_all_tuning_records()
        assert len(records) == 4 and all(_heron_annotated(r) for r in records)
    stock = tune_workload(
        workload,
        cpu_target,
        str(tmp_path / "stock"),
        4,
        num_trials_per_iter=4,
        seed=0,
        search="metaschedule",
    )
    assert not any(_heron_annotated(r) for r in stock.get_all_tuning_records())
    with pytest.raises(ValueError, match="search='ansor': choose 'heron'"):
        tune_func(workload.func, cpu_target, str(tmp_path / "bad"), 4, search="ansor")


@derived_object
class _FailsEveryOtherProgram(PyPostproc):
    """A real TVM schedule error on every second program, as RewriteLayout raised on some int8
    convolutions (a TVM InternalError from inside the postproc, not a False)."""

    def __init__(self):
        self.calls = 0

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch) -> bool:
        self.calls += 1
        if self.calls % 2:
            sch.get_sblock("no_such_block")  # raises TVM's ScheduleError
        return True

    def clone(self):
        return _FailsEveryOtherProgram()


def test_a_postproc_that_raises_rejects_its_program_and_the_search_goes_on(cpu_target):
    """MetaSchedule's own search drops a program whose postprocs throw; HeronSearch did not, and one
    such program ended a 15-minute network run at its sixth minute."""
    from ms_heron.space import default_postprocs  # pylint: disable=import-outside-toplevel

    failing = _FailsEveryOtherProgram()
    strategy = HeronSearch()
    ctx = ms.TuneContext(
        mod=workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"]).func,
        target=cpu_target,
        space_generator=HeronSpace(postprocs=[failing, *default_postprocs()]),
        search_strategy=strategy,
        task_name="gemm",
        rand_state=0,
    )
    strategy.pre_tuning(8, 4, ctx.generate_design_space(), None, None)
    candidates = strategy.generate_measure_candidates()
    assert failing.calls > len(candidates) > 0
