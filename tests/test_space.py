"""HeronSpace as a drop-in space generator for MetaSchedule's stock evolutionary search."""

import pytest
from conftest import HOST_DOT, SMALL_SHAPES, suite
from tvm import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule.analysis import has_block
from tvm.target import Target

from ms_heron import HeronSpace, workloads
from ms_heron.rules.base import HeronRule
from ms_heron.space import design_spaces
from ms_heron.tuning import RunSpec, TuningRun, tune_workload
from ms_heron.workloads.evaluate import WrongResult, build, run_and_check


@pytest.mark.parametrize(
    "family,dtype",
    [("gemm", "fp32"), ("c2d", "fp32"), ("t2d", "fp32"), ("scan", "fp32"), ("gemm", "int8")],
)
def test_stock_evolutionary_search_tunes_heron_spaces(family, dtype, cpu_target, tmp_path, request):
    """A GEMM, a strided and a transposed convolution, a scan with its computed operand, and the
    int8 GEMM tensorized with the CPU's dot product (every family's spaces are sampled, replayed and
    built in test_constraints, and tuned by HeronSearch in test_search)."""
    if dtype == "int8":
        request.getfixturevalue("int8_target")  # skips on a CPU without AVX2
    workload = suite(family, dtype, **SMALL_SHAPES[family])
    db = tune_workload(
        workload, cpu_target, str(tmp_path), 8, num_trials_per_iter=8, space=HeronSpace(), seed=0
    )
    # stock MetaSchedule rebuilds it
    sch = ms.tir_integration.compile_tir(db, workload.func, cpu_target)
    assert sch is not None
    lib = build(sch.mod, cpu_target)
    run_and_check(lib, workload)
    # HeronSpace's int8 spaces tensorize (on a loaded machine an untensorized one may time best)
    if dtype == "int8":
        traces = [str(record.trace) for record in db.get_all_tuning_records() if record.run_secs]
        assert HOST_DOT.form in lib.mod.inspect_source("asm") or any(
            HOST_DOT.name in t for t in traces
        )


@derived_object
class MarkBlocks(HeronRule):
    """A user rule: annotates every non-root block."""

    def apply(self, sch, block):
        if sch.get(block).name_hint != "root":
            sch.annotate(block, "user.seen", 1)
        return [sch]


def test_user_rules_apply_with_the_rest(cpu_target):
    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    space = HeronSpace(user_rules=[MarkBlocks()], include_default_spaces=False)
    spaces = design_spaces(workload.func, cpu_target, space)
    assert len(spaces) == 4  # 2 cache levels x (with, without) tile buffers
    for sch in spaces:
        assert "user.seen" in sch.mod.script()
        assert "meta_schedule.tiling_structure" in sch.mod.script()


@derived_object
class FailsOnGemm(HeronRule):
    """A user rule with a bug: it raises on the GEMM block."""

    def apply(self, sch, block):
        if sch.get(block).name_hint == "C":
            raise ValueError("user rule bug")
        return [sch]


def test_a_rule_that_raises_is_skipped_on_that_block_with_a_warning(cpu_target, caplog):
    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    space = HeronSpace(user_rules=[FailsOnGemm()], include_default_spaces=False)
    with caplog.at_level("WARNING"):
        spaces = design_spaces(workload.func, cpu_target, space)
    assert len(spaces) == 4 and all(
        "meta_schedule.tiling_structure" in s.mod.script() for s in spaces
    )
    assert "rule FailsOnGemm failed on block 'C' and is skipped there: user rule bug" in caplog.text


@derived_object
class AccumulateInInt8(HeronRule):
    """A user rule that breaks correctness on purpose: the GEMM accumulates into an int8 cache,
    which overflows."""

    def apply(self, sch, block):
        if sch.get(block).name_hint == "C":
            sch.cache_write(block, 0, "global")
            sch.unsafe_set_dtype(block, 0, "int8")
        return [sch]


def test_a_wrong_kernel_is_reported_as_wrong(int8_target, tmp_path):
    """``ms-heron tune`` checks the best kernel before reporting it (``TuningRun.check_best``): a
    kernel that runs fast but computes the wrong thing is caught there, not trusted for its time."""
    workload = suite("gemm", "int8", M=16, N=16, K=64)
    run = TuningRun.create(tmp_path, RunSpec.of(workload, int8_target, seed=0))
    state = run.tune(
        2,
        num_trials_per_iter=2,
        space=HeronSpace(rules=[AccumulateInInt8()], include_default_spaces=False),
    )
    assert state.valid >= 1  # it built and ran: only the check can tell
    with pytest.raises(WrongResult, match=r"gemm.*int outputs differ from numpy"):
        run.check_best()


def _seeded_spaces(workload, target, seed: int) -> list:
    context = ms.TuneContext(
        mod=IRModule({"main": workload.func}),
        target=target,
        rand_state=seed,
        task_name="main",
        space_generator=HeronSpace(include_default_spaces=False),
    )
    return list(context.generate_design_space())


def test_seed_zero_is_a_seed(cpu_target):
    """The CLI's default seed 0 gives the same design spaces every time (it once meant
    "unseeded")."""
    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])

    def traces():
        return [str(space.trace) for space in _seeded_spaces(workload, cpu_target, 0)]

    first = traces()
    assert all(traces() == first for _ in range(3))


def test_the_seed_changes_decisions_never_the_spaces_structure():
    """A padded int8 GEMM's pad-and-pack copy has a sampled place; the spaces hold it at the root
    whatever the seed. A random first decision once inlined it into the tensorized GEMM in some
    runs, which hid it from the constraint model and let the search sample programs that could not
    be tensorized. (Spaces for an AVX-512 VNNI CPU, whose 16 lanes pad N=40; nothing runs.)"""
    workload = workloads.make("gemm", "int8", M=16, N=40, K=64)
    vnni = Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})

    for seed in range(4):  # seed 0 once inlined it in the first two spaces
        spaces = _seeded_spaces(workload, vnni, seed)
        assert len(spaces) > 1 and all(has_block(space, "W_pad") for space in spaces)
