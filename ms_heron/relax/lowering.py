"""Whole-model tuning through Relax: bind weights, lower and fuse, tune every task, compile.

Relax is how models reach MetaSchedule in TVM 0.27 (Relay is gone). The fused TIR functions of a
lowered model are its tuning tasks (``ms_heron.tuning.tune_model`` tunes them); ``compile_model``
applies the database and returns an executable for ``relax.VirtualMachine``. Weights are bound as
constants, so layout-free weights (e.g. int8 weights
the VNNI intrinsic reads packed) are re-laid out once at compile time, not on every call.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tvm
from tvm import IRModule, relax
from tvm.relax import pipeline as relax_pipeline
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ..codegen import tir_pipeline
from ..errors import HeronError
from ..intrinsics import ensure_registered
from .passes import (
    activations_as_formulas,
    chain_stacked_reductions,
    channel_orders_into_producers,
    channel_window_as_slices,
    channels_last_convolutions,
    channels_last_epilogues,
    clamped_gathers,
    drop_inference_noops,
    failure_reason,
    fold_explicit_pads,
    fold_scale_shift,
    gathers_as_injective,
    integer_qdq,
    keep_int8_matmuls,
    never_failing,
    quantization_parameters_as_tensors,
    quantization_round_trips,
    record_narrow_weights,
    s16_weights,
    shared_channel_orders,
    small_powers_as_products,
    views_after_epilogues,
    whole_dot_product_channels,
    whole_window_pools_as_reductions,
    winograd_rewrite,
)
from .tasks import Task, model_tasks, untuned_tasks


class ModelError(HeronError, ValueError):
    """A model ms_heron cannot tune as given; the message names the fix."""


def require_static_shapes(mod: IRModule) -> None:
    """MetaSchedule tunes static shapes only: name every input with a symbolic dimension."""
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        for param in func.params:
            shape = getattr(param.ty, "shape", None)
            dims = getattr(shape, "values", None)
            if shape is not None and (
                dims is None or any(not isinstance(d, tvm.tirx.IntImm) for d in dims)
            ):
                raise ModelError(
                    f"input '{param.name}' of {gv.name_hint} has a dynamic shape ({shape}); tuning "
                    f"needs static shapes: give them, e.g. --input-shape {param.name}:1,128 "
                    f"(from_onnx(..., input_shapes={{'{param.name}': (1, 128)}}))"
                )


def bind_params(mod: IRModule, params: Mapping[str, Any] | None) -> IRModule:
    """Bind weights by parameter name in every Relax function (``nn.Module`` exports ``forward``,
    not ``main``, which MetaSchedule's own binding assumes)."""
    if not params:
        return mod
    tensors = {
        name: value
        if isinstance(value, tvm.runtime.Tensor)
        else tvm.runtime.tensor(np.asarray(value))
        for name, value in params.items()
    }
    used = set()
    for gv, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            mine = {p.name: tensors[p.name] for p in func.params if p.name in tensors}
            used |= set(mine)
            if mine:
                mod = relax.transform.BindParams(gv.name_hint, mine)(mod)
    unused = sorted(set(tensors) - used)
    if unused:
        raise ModelError(f"params {', '.join(unused[:5])} match no function parameter of the model")
    return mod


def lower_for_tuning(
    mod: IRModule,
    params: Mapping[str, Any] | None,
    target: Target,
    *,
    exact_math: bool = False,
    flops_per_byte: float | None = None,
) -> IRModule:
    """Bind weights, legalize and fuse: the fused TIR functions are the tuning tasks.

    First what ONNX Runtime's graph optimizer does before it runs a model (:mod:`.passes`): ops
    that do nothing at inference (Dropout) go, gathers clamp their indices, LRN's channel window
    becomes element-wise ops, zero
    pads in front of convolutions join their padding, poolings whose window holds the whole input
    become means,
    BatchNorms and constant per-channel scales are folded into the weights and bias of the
    convolution or matmul before them, and n-ary sums are chained adds, so that a ResNet's
    residual add and ReLU fuse into the convolution's kernel. Small whole powers become products,
    and the reshape back after a flattened matmul moves past the ops after it
    (:mod:`.passes.views`), so that a transformer's bias, GELU and residual add run in the matmul's
    kernel.
    Weights that reach a TIR function as constants are marked layout-free, so schedules may store
    them in whatever layout their kernels read best. On a CPU without VNNI, s8 ones whose pairs
    cannot saturate are marked narrow (:func:`.passes.record_narrow_weights`), so that it may
    multiply them as bytes, most others once their reduction is paired in another order (one
    order for a residual stream and all the convolutions and matmuls that read it, or one copy
    they share, :func:`.passes.shared_channel_orders`), and the rest are stored as s16
    (:func:`.passes.s16_weights`), as its exact dot product reads them.
    Floating-point convolutions run channels-last (:mod:`.passes.channels_last`), so their
    vector lanes run along contiguous channels, and their 3x3 ones as Winograd's F(2x2, 3x3) or
    F(4x4, 3x3), whichever costs less at ``flops_per_byte`` (:func:`.passes.winograd_rewrite`:
    None measures it on this host once per process; a run keeps the value it began with);
    transposes (the int8 convolutions' channels-last layout, :mod:`.passes.quantized`) move past the
    element-wise epilogues (and poolings and reductions, which then run channels-last), which then
    fuse into the kernels before them; a quantize that only its dequantize reads is rounded and
    clipped in float instead of converted to bytes and back, and a max pool between a dequantize
    and a quantize pools the bytes (:func:`.passes.quantization_round_trips`).
    Unless ``exact_math``, ``exp``, ``erf``, ``tanh`` (GELU's and sigmoid's too, written out
    first) and softmax become TVM's polynomial approximations (``FastMathTransform``, after the
    layout passes, which cannot see into the call_tir it writes), as ONNX Runtime's kernels use:
    on the CPU the exact ones are scalar libm calls whose time depends on the
    data (GELU's erf made BERT's FFN kernel 2-3x slower on real activations than on the tuner's
    inputs), while the approximations vectorize and cost the same on any input.

    Every rewrite above is an optimization: one that fails on a graph it does not know (TVM's
    ``ConvertLayout`` raises InternalErrors on some ops) is skipped for that model, with a warning,
    and named in the lowered module (:func:`.passes.skipped_passes`, which a run's report shows);
    the model still lowers with TVM's own passes. What TVM cannot lower at all is one
    :class:`ModelError` line naming the pass.
    """
    mod = bind_params(mod, params)
    require_static_shapes(mod)
    rewrites = [
        *map(never_failing, relax_pipeline.library_dispatch_passes(target)),
        integer_qdq,  # both before constant folding widens the s8 weights
        keep_int8_matmuls,
        # a bias reshaped by the importer becomes a constant
        never_failing(relax.transform.FoldConstant()),
        drop_inference_noops,
        clamped_gathers,
        channel_window_as_slices,
        fold_explicit_pads,
        whole_window_pools_as_reductions,
        chain_stacked_reductions,  # before the orders: a residual add is one op
        whole_dot_product_channels,
        shared_channel_orders,
        s16_weights,
        channel_orders_into_producers,
        small_powers_as_products,
        views_after_epilogues,
        fold_scale_shift,
        never_failing(relax.transform.DeadCodeElimination()),
        never_failing(relax.transform.DecomposeOpsForInference()),
        activations_as_formulas,
        never_failing(relax.transform.CanonicalizeBindings()),
        channels_last_convolutions,
        winograd_rewrite(flops_per_byte=flops_per_byte),
        channels_last_epilogues,
        quantization_round_trips,  # after the transposes moved: they pass no round
        # after the layout: fast math writes ``exp`` as a call_tir, which ConvertLayout cannot see
        # into, so an activation there ran its formula channels-first between two transposes
        *([] if exact_math else [never_failing(relax.transform.FastMathTransform())]),
        quantization_parameters_as_tensors,
    ]
    required = [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        gathers_as_injective,  # a channel order's copy fuses with the quantize before it
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.AttachAttrLayoutFreeBuffers(),
    ]
    with target:
        mod = tvm.transform.Sequential(rewrites)(mod)
        for step in required:
            try:
                mod = step(mod)
            except Exception as err:  # pylint: disable=broad-exception-caught  # one line, not a C++ trace
                raise ModelError(
                    f"Relax's {step.info.name} cannot lower this model: {failure_reason(err)}; "
                    "replace the operator it names in the model, or report the model to ms_heron"
                ) from err
        return record_narrow_weights(mod)


def _lowering_passes(target: Target) -> list:
    """Relax's own passes from fused dataflow to VM code (what ``tvm.compile`` runs last)."""
    if target.kind.name == "llvm":  # TVM 0.27's dispatcher misses the CPU backend's dataflow passes
        from tvm.relax.backend.cpu_generic import pipeline as backend  # pylint: disable=import-outside-toplevel
    else:
        backend = relax_pipeline
    return [*backend.dataflow_lower_passes(target), *backend.finalize_passes(target)]


def compile_model(
    database: ms.Database,
    mod: IRModule,
    params: Mapping[str, Any] | None,
    target: Target,
    *,
    exact_math: bool = False,
    flops_per_byte: float | None = None,
):
    """Compile the model with the database's best schedules into a ``relax.VirtualMachine``
    executable.

    Tasks the database has no valid record for keep their untuned kernel, with a warning. Weight
    re-layouts the schedules ask for are split out and folded into the constants here, once.
    ``exact_math`` and ``flops_per_byte`` must be what the model was tuned with (see
    :func:`lower_for_tuning`).
    """
    return compile_lowered(
        database,
        lower_for_tuning(mod, params, target, exact_math=exact_math, flops_per_byte=flops_per_byte),
        target,
    )


def compile_lowered(
    database: ms.Database,
    lowered: IRModule,
    target: Target,
    tasks: Sequence[Task] | None = None,
    *,
    fallback: ms.Database | None = None,
):
    """:func:`compile_model` on a module :func:`lower_for_tuning` already lowered (a tuning run's
    own, with its ``tasks``, extracted once).

    ``fallback`` holds kernels for the tasks ``database`` has no valid record for (its caller has
    said which run what); without it they run TVM's untuned kernels, with a warning.
    """
    ensure_registered(target)
    if fallback is None:
        missing = untuned_tasks(
            database, model_tasks(lowered, target) if tasks is None else tasks, target
        )
        if missing:
            warnings.warn(
                f"{len(missing)} task(s) have no tuned schedule and run untuned (slow) kernels: "
                f"{', '.join(missing)}; tune them with more trials",
                stacklevel=2,
            )
    else:
        database = ms.database.OrderedUnionDatabase(database, fallback)

    @tvm.transform.module_pass(opt_level=0)
    def apply_and_lower(mod: IRModule, _ctx) -> IRModule:
        passes = [
            relax.transform.MetaScheduleApplyDatabase(),
            relax.transform.SplitLayoutRewritePreproc(),
            relax.transform.FoldConstant(),
            *_lowering_passes(target),
        ]
        return tvm.transform.Sequential(passes)(mod)

    with target, database, tvm.transform.PassContext(opt_level=3):
        return relax.build(
            lowered,
            target=target,
            relax_pipeline=apply_and_lower,
            tir_pipeline=tir_pipeline(target),
        )


def run_model(executable, inputs: Mapping[str, np.ndarray], func: str = "main") -> list[np.ndarray]:
    """Run a compiled model on the CPU; its outputs as numpy arrays (a tuple output gives
    several)."""
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm[func](*[tvm.runtime.tensor(v) for v in inputs.values()])
    return [o.numpy() for o in out] if not isinstance(out, tvm.runtime.Tensor) else [out.numpy()]


def time_model(
    executable, inputs: Mapping[str, np.ndarray], func: str = "main", repeat: int = 10
) -> float:
    """Median seconds per call of a compiled model (after a warm-up), inputs already on the
    device."""
    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(v) for v in inputs.values()]
    return float(
        vm.time_evaluator(func, tvm.cpu(), number=1, repeat=repeat, min_repeat_ms=100)(*args).median
    )
