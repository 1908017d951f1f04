"""Bad input gets an error that names the fix."""

import pytest
from tvm.target import Target

from ms_heron import workloads
from ms_heron.hardware.targets import TargetError, parse_target
from ms_heron.tuning import tune_workload
from ms_heron.workloads import WorkloadError, from_func


def test_int8_shape_too_small_to_pad_names_the_limit_and_nearest_shape():
    with pytest.raises(
        ValueError,
        match=r"N=1 is not a multiple of 16 .*nearest that is: N=16.*32.0x the work.*2x limit",
    ):
        workloads.gemm(M=32, N=1, K=2)


def test_int8_shape_vnni_tiles_do_not_divide_keeps_a_plain_weight_to_pad():
    assert workloads.gemm(M=32, N=1000, K=64).random_inputs()[1].shape == (64, 1000)
    assert workloads.c2d(N=1, H=8, W=8, CI=6, CO=16, KH=3, KW=3).random_inputs()[1].shape == (
        3,
        3,
        6,
        16,
    )


def test_fp32_has_no_vnni_shape_rule():
    assert workloads.gemm(M=3, N=5, K=7, dtype="fp32").output_shape == (3, 5)


def test_unknown_names_list_valid_ones():
    with pytest.raises(ValueError, match="valid ones: gemm, bmm, gemv"):
        workloads.make("matmul")
    with pytest.raises(ValueError, match="valid ones: .*gemm.G1"):
        workloads.case("gemm.G9")
    with pytest.raises(ValueError, match="choose one of int8, fp32, fp16"):
        workloads.make("gemm", "bf16", M=16, N=16, K=16)


def test_int8_on_a_cpu_without_avx2_names_the_cpu(tmp_path):
    generic = Target({"kind": "llvm", "mcpu": "x86-64", "num-cores": 2})
    with pytest.raises(
        TargetError,
        match="int8 kernels need an x86 CPU with AVX2 at least, but .*'x86-64' has none",
    ):
        tune_workload(workloads.gemm(M=16, N=16, K=16), generic, str(tmp_path), 2)


def test_an_int8_workload_packed_for_another_cpu_names_the_tile_to_build_it_with(tmp_path):
    haswell = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    with pytest.raises(
        WorkloadError,
        match=r"packed in 16 x 4 tiles, but .* \(AVX2\) reads 8 x 2; build it for the target: "
        r"workloads.make\(\.\.\., target=target\)",
    ):
        tune_workload(workloads.gemm(M=16, N=16, K=16), haswell, str(tmp_path), 2)


def test_old_cli_target_string_is_explained():
    with pytest.raises(TargetError, match="old CLI form.*num-cores"):
        parse_target("llvm -mcpu=znver4 -num-cores 2")


def test_missing_num_cores_is_explained(tmp_path):
    with pytest.raises(TargetError, match="num-cores"):
        tune_workload(
            workloads.gemm(M=16, N=16, K=16, dtype="fp32"),
            Target({"kind": "llvm"}),
            str(tmp_path),
            2,
        )


def test_kernel_whose_output_is_not_last_names_the_fix():
    from tvm.script import tirx as T  # pylint: disable=import-outside-toplevel

    @T.prim_func(s_tir=True)
    def output_first(out: T.Buffer((8,), "float32"), a: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.sblock("copy"):
                vi = T.axis.remap("S", [i])
                out[vi] = a[vi]

    with pytest.raises(
        WorkloadError,
        match=r"output_first: .*one output, passed last; this one writes parameters \[0\]",
    ):
        from_func(output_first, "output_first")


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(population=0), "HeronSearch(population=0): give a whole number >= 1"),
        (dict(elite=-1), "HeronSearch(elite=-1): give a whole number >= 0"),
        (dict(generations=2.5), "HeronSearch(generations=2.5): give a whole number >= 0"),
        (dict(epsilon=1.5), "HeronSearch(epsilon=1.5): give a share between 0 and 1"),
        (dict(key_ratio=-0.1), "HeronSearch(key_ratio=-0.1): give a share between 0 and 1"),
    ],
)
def test_heron_search_refuses_options_outside_their_range(options, message):
    from ms_heron import HeronSearch  # pylint: disable=import-outside-toplevel

    with pytest.raises(ValueError) as raised:
        HeronSearch(**options)
    assert str(raised.value) == message


def _rules_and_space():
    # pylint: disable=import-outside-toplevel
    from ms_heron import HeronSpace
    from ms_heron.rules import (
        AddCacheStage,
        MultiLevelSPM,
        MultiLevelTiling,
        PackOperand,
        PadExtents,
        ParallelVectorizeUnroll,
        TensorCoreTiling,
        Tensorize,
    )

    return {
        "MultiLevelTiling(structure='SXS')": (
            lambda: MultiLevelTiling(structure="SXS"),
            "MultiLevelTiling(structure='SXS'): use 'S' and 'R' only, each at least once, such as "
            "'SSRSRS'",
        ),
        "MultiLevelTiling(max_innermost_factor=0)": (
            lambda: MultiLevelTiling(max_innermost_factor=0),
            "MultiLevelTiling(max_innermost_factor=0): give a whole number >= 1",
        ),
        "AddCacheStage(levels=())": (
            lambda: AddCacheStage(levels=()),
            "AddCacheStage(levels=()): give one or more tile levels >= 0, such as (0, 1)",
        ),
        "MultiLevelSPM(level=-1)": (
            lambda: MultiLevelSPM(level=-1),
            "MultiLevelSPM(level=-1): give a reduction tile level >= 0",
        ),
        "PackOperand(probs=(0.2, 0.2))": (
            lambda: PackOperand(probs=(0.2, 0.2)),
            "PackOperand(probs=(0.2, 0.2)): give two probabilities (no packing, packing) summing "
            "to 1",
        ),
        "PadExtents(max_waste=-1)": (
            lambda: PadExtents(max_waste=-1),
            "PadExtents(max_waste=-1): give the extra share of work padding may add, >= 0",
        ),
        "Tensorize(max_waste=-0.5)": (
            lambda: Tensorize(max_waste=-0.5),
            "Tensorize(max_waste=-0.5): give the extra share of work padding may add, >= 0",
        ),
        "ParallelVectorizeUnroll(max_vector_extent=0)": (
            lambda: ParallelVectorizeUnroll(max_vector_extent=0),
            "ParallelVectorizeUnroll(max_vector_extent=0): give a whole number >= 1",
        ),
        "TensorCoreTiling(shapes=((8, 8, 8),))": (
            lambda: TensorCoreTiling(shapes=((8, 8, 8),)),
            "TensorCoreTiling(shapes=((8, 8, 8),)): WMMA computes the fragment shapes ",
        ),
        "HeronSpace(rules=[MultiLevelTiling])": (
            lambda: HeronSpace(rules=[MultiLevelTiling]),
            "HeronSpace(rules=...): item 0 is <class ",
        ),
        "HeronSpace(include_default_spaces='yes')": (
            lambda: HeronSpace(include_default_spaces="yes"),
            "HeronSpace(include_default_spaces='yes'): give True or False",
        ),
        "a positional option": (
            lambda: MultiLevelTiling("SSRSRS"),
            "takes 1 positional argument but 2 were given",
        ),
    }


@pytest.mark.parametrize("case", list(_rules_and_space()))
def test_rule_and_space_options_are_checked_in_one_line(case):
    """Options are keyword-only and checked at construction; the message names the option and a
    valid value."""
    build, message = _rules_and_space()[case]
    with pytest.raises((ValueError, TypeError)) as raised:
        build()
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_rules_and_postprocs_say_they_are_ms_heron_s_and_clone_their_options():
    # pylint: disable=import-outside-toplevel
    from ms_heron.postprocs import PackPanels
    from ms_heron.rules import AddCacheStage, default_rules

    assert repr(AddCacheStage(levels=(1,))) == "ms_heron.AddCacheStage(levels=(1,), scope='global')"
    assert repr(PackPanels()) == "ms_heron.PackPanels()"
    assert all(repr(r).startswith("ms_heron.") for r in default_rules())
    rule = AddCacheStage(levels=(1,))
    clone = rule._inst.clone()  # pylint: disable=protected-access  # what MetaSchedule calls
    assert repr(clone) == "ms_heron.AddCacheStage(levels=(1,), scope='global')"
