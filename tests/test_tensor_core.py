"""The TensorCore (WMMA) path for CUDA targets, checked as far as this GPU-less machine can: every
constrained sample passes VerifyGPUCode, builds, and compiles with nvcc for the Target's arch.
Nothing here runs on a GPU."""

import re
import shutil

import pytest
from rule_helpers import allocations
from tvm import te
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ms_heron import workloads
from ms_heron.constraints import Solver, derive, replay
from ms_heron.constraints.geometry import UNPADDED
from ms_heron.intrinsics.wmma import SHAPES
from ms_heron.space import design_spaces_and_postprocs
from ms_heron.tuning.builder import build_cuda, compile_cuda, cuda_source, local_builder

TARGETS = ["nvidia/nvidia-h100", "nvidia/nvidia-a100"]  # sm_90a, sm_80


def _target(tag):
    return Target(tag, host={"kind": "llvm"})


def _wmma_shape(space):
    found = [
        re.search(r"wmma_sync_(\d+)x(\d+)x(\d+)", str(inst.inputs[1]))
        for inst in space.trace.insts
        if inst.kind.name == "Annotate"
    ]
    return next(tuple(int(x) for x in m.group(1, 2, 3)) for m in found if m)


def _matmul(in_dtype, out_dtype, n=64):
    a = te.placeholder((n, n), in_dtype, name="A")
    b = te.placeholder((n, n), in_dtype, name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute(
        (n, n),
        lambda i, j: te.sum(a[i, k].astype(out_dtype) * b[k, j].astype(out_dtype), axis=k),
        name="C",
    )
    return te.create_prim_func([a, b, c])


@pytest.mark.skipif(
    shutil.which("nvcc") is None, reason="nvcc is not on PATH: CUDA sources cannot be compiled here"
)
@pytest.mark.parametrize(
    "tag,in_dtype,out_dtype",
    [
        (TARGETS[0], "float16", "float32"),
        (TARGETS[1], "float16", "float32"),
        (TARGETS[1], "float16", "float16"),
        (TARGETS[1], "int8", "int32"),
    ],
)
def test_constrained_wmma_samples_verify_and_compile_with_nvcc(tag, in_dtype, out_dtype):
    target = _target(tag)
    func = _matmul(in_dtype, out_dtype)
    spaces, postprocs = design_spaces_and_postprocs(func, target)
    assert sorted(_wmma_shape(s) for s in spaces) == sorted(SHAPES)  # Heron's fragment-shape choice
    for index, space in enumerate(spaces):
        model = derive(space, target)
        kinds = {c.kind for c in model.constraints}
        assert {"threads", "memory", "vector"} <= kinds
        trace = space.trace.simplified(remove_postproc=True)
        for values in Solver(model, seed=index).samples(2 if out_dtype == "float32" else 1):
            sch = replay(model, trace, func, values)
            failed = [type(p).__name__ for p in postprocs if not p.apply(sch)]
            assert not failed, (failed, values)  # VerifyGPUCode among them
            lib = build_cuda(sch.mod, target)
            assert "wmma::mma_sync" in cuda_source(lib)
            assert len(compile_cuda(lib, target)) > 0


@pytest.mark.parametrize(
    "family,shape",
    [
        ("gemm", dict(M=64, N=128, K=64)),
        ("c2d", dict(N=1, H=8, W=8, CI=32, CO=32, KH=3, KW=3, pad=1)),
    ],
)
def test_shared_memory_model_matches_lowered_allocations(family, shape):
    """Tile buffers A/B: exactly their padded allocation; the write-back stage: an upper bound
    (MetaSchedule's rule stores the output tile in slices), so the summed limit is safe."""
    target = _target(TARGETS[0])
    workload = workloads.make(family, "fp16", **shape)
    spaces, postprocs = design_spaces_and_postprocs(workload.func, target)
    checked = 0
    for index, space in enumerate(spaces):
        model = derive(space, target)
        trace = space.trace.simplified(remove_postproc=True)
        for values in Solver(model, seed=index).samples(3):
            sch = replay(model, trace, workload.func, values)
            assert all(p.apply(sch) for p in postprocs)
            allocated = allocations(sch.mod, "shared")
            full = model.evaluate(values)
            for fp in model.footprints:
                if not fp.scope.startswith("shared"):
                    continue
                got = allocated[fp.buffer.replace(".", "_")]
                if f"{fp.variable}{UNPADDED}" in full:  # a storage-aligned input tile
                    assert full[fp.variable] == got, (fp, values)
                else:
                    assert full[fp.variable] >= got, (fp, values)
                checked += 1
    assert checked >= 9


@pytest.mark.skipif(
    shutil.which("nvcc") is None, reason="nvcc is not on PATH: CUDA sources cannot be compiled here"
)
def test_tuning_builder_exports_an_nvcc_checked_tensor_core_candidate():
    target = _target(TARGETS[1])
    workload = workloads.gemm(64, 64, 64, "fp16")
    spaces, postprocs = design_spaces_and_postprocs(workload.func, target)
    model = derive(spaces[0], target)
    sch = replay(
        model,
        spaces[0].trace.simplified(remove_postproc=True),
        workload.func,
        Solver(model).sample(),
    )
    assert all(p.apply(sch) for p in postprocs)
    (result,) = local_builder(max_workers=1).build([ms.builder.BuilderInput(sch.mod, target)])
    assert result.error_msg is None and result.artifact_path.endswith(".tar")
