"""Relax rewrite: constant per-channel scales and shifts (inference BatchNorm) folded into the
weights and bias of the convolution or matmul before them.

An inference BatchNorm is ``y * s + t`` with ``s = gamma / sqrt(var + eps)`` and ``t = beta - mean *
s``, per output channel. After a convolution or a matmul with a constant weight, the scale is
folded into that weight (``conv(x, W) * s = conv(x, W * s)``) and the shifts into one bias, so the
kernel's epilogue is a single add, as ONNX Runtime's Conv + BatchNorm fusion leaves it. TVM's
``FoldBatchnormToConv2D`` folds only a BatchNorm directly on a bias-free ``conv2d``; ONNX's Conv
with a bias imports as ``conv2d`` + ``add``, which this pass takes too, and any other constant
per-channel ``multiply``/``divide``/``add``/``subtract`` after them. Float tensors only: an int8
kernel's rescale stays in its epilogue.
"""

from __future__ import annotations

import numpy as np
from tvm import IRModule, relax
from tvm.relax.dpl import TupleGetItemPattern, is_const, is_op, wildcard

from .guard import never_failing
from .sinking import constant_value, rewrite_until_fixed, static_shape, values_used_once


def _floating(expr) -> bool:
    dtype = getattr(expr.ty, "dtype", "")
    return str(dtype).startswith("float")


def _channel_vector(scale: np.ndarray, out_shape: list[int], axis: int) -> np.ndarray | None:
    """``scale`` as one value per entry of ``out_shape[axis]``, if it varies along that axis
    only."""
    if scale.ndim > len(out_shape):
        return None
    full = [1] * (len(out_shape) - scale.ndim) + list(scale.shape)
    if any(d != 1 for i, d in enumerate(full) if i != axis) or full[axis] not in (
        1,
        out_shape[axis],
    ):
        return None
    return np.broadcast_to(scale.reshape(-1), (out_shape[axis],))


def _weighted(producer) -> tuple[int, int] | None:
    """(output axis, weight's output axis) of a convolution or matmul whose scale can enter its
    weight."""
    name, rank = (
        getattr(getattr(producer, "op", None), "name", ""),
        len(static_shape(producer) or []),
    )
    if name not in ("relax.nn.conv2d", "relax.matmul") or constant_value(producer.args[1]) is None:
        return None
    if not _floating(producer):
        return None
    if name == "relax.nn.conv2d":
        attrs = producer.attrs
        if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == ("NCHW", "OIHW", "NCHW"):
            return 1, 0
    if name == "relax.matmul" and constant_value(producer.args[1]).ndim == 2 and rank >= 2:
        return rank - 1, 1
    return None


def _scaled(producer, scale: np.ndarray):
    """``producer`` (:func:`_weighted`) with ``scale`` folded into its weight, or None."""
    axes, shape = _weighted(producer), static_shape(producer)
    if axes is None or shape is None:
        return None
    vector = _channel_vector(scale, shape, axes[0])
    if vector is None:
        return None
    weight = constant_value(producer.args[1])
    along = [1] * weight.ndim
    along[axes[1]] = -1
    folded = (weight * vector.reshape(along)).astype(weight.dtype)
    return relax.Call(producer.op, [producer.args[0], relax.const(folded)], producer.attrs)


def _rules(func: relax.Function) -> list:
    """(pattern, rewriter) pairs for one round over ``func``; each step moves a scale into a weight
    or merges shifts. A convolution or matmul whose result other ops read too (GPT-2's GELU
    halves the matmul's result and cubes it) keeps its weight: a scaled copy would compute it
    twice."""
    once, bound = values_used_once(func), relax.analysis.get_var2val(func)
    rules = []
    y, gamma, beta, mean, var = wildcard(), is_const(), is_const(), is_const(), is_const()
    norm = is_op("relax.nn.batch_norm")(y, gamma, beta, mean, var)

    def batch_norm(expr, m):
        attrs, shape = m[norm].attrs, static_shape(m[y])
        if not _floating(m[y]) or shape is None or bool(attrs.training):
            return expr
        axis = int(attrs.axis) % len(shape)
        s = 1 / np.sqrt(constant_value(m[var]).astype(np.float64) + float(attrs.epsilon))
        if attrs.scale:
            s = s * constant_value(m[gamma])
        t = -constant_value(m[mean]) * s + (constant_value(m[beta]) if attrs.center else 0)
        along = [1] * len(shape)
        along[axis] = -1
        dtype = str(m[y].ty.dtype)
        return relax.op.add(
            relax.op.multiply(m[y], relax.const(s.reshape(along).astype(dtype))),
            relax.const(t.reshape(along).astype(dtype)),
        )

    rules.append((TupleGetItemPattern(norm, 0), batch_norm))

    x, c = wildcard(), is_const()

    def as_multiply(expr, m):  # y / c = y * (1 / c)
        return (
            relax.op.multiply(
                m[x], relax.const((1 / constant_value(m[c])).astype(constant_value(m[c]).dtype))
            )
            if _floating(expr)
            else expr
        )

    def as_add(expr, m):  # y - c = y + (-c)
        return relax.op.add(m[x], relax.const(-constant_value(m[c]))) if _floating(expr) else expr

    rules += [(is_op("relax.divide")(x, c), as_multiply), (is_op("relax.subtract")(x, c), as_add)]

    def into_weight(expr, m):  # conv(x, W) * c = conv(x, W * c)
        folded = _scaled(m[x], constant_value(m[c])) if m[x] in once else None
        return expr if folded is None else folded

    def through_shift(expr, m):  # (y + b) * c = y * c + b * c, when y * c folds into y's weight
        shifted, scale = _shifted(m[x]) if m[x] in once else None, constant_value(m[c])
        producer = None if shifted is None else bound.get(shifted[0])
        folded = _scaled(producer, scale) if producer in once else None
        if folded is None:
            return expr
        return relax.op.add(folded, relax.const((shifted[1] * scale).astype(scale.dtype)))

    def merged_shifts(expr, m):  # (y + b1) + b2 = y + (b1 + b2)
        shifted = _shifted(m[x])
        if shifted is None or not _floating(expr):
            return expr
        return relax.op.add(shifted[0], relax.const(shifted[1] + constant_value(m[c])))

    rules += [
        (is_op("relax.multiply")(x, c), into_weight),
        (is_op("relax.multiply")(x, c), through_shift),
        (is_op("relax.add")(x, c), merged_shifts),
    ]
    return rules


def _shifted(expr) -> tuple[relax.Expr, np.ndarray] | None:
    """``(y, b)`` when ``expr`` is ``y + b`` with a constant ``b``."""
    if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.add":
        shift = constant_value(expr.args[1])
        if shift is not None:
            return expr.args[0], shift
    return None


@never_failing
@relax.transform.function_pass(opt_level=0, name="FoldScaleShift")
def fold_scale_shift(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Fold inference BatchNorms and constant per-channel scales into the preceding convolution's or
    matmul's constant weight, and constant shifts into one bias (weights must be bound first)."""
    # each round moves a scale one op closer to its weight
    return rewrite_until_fixed(func, _rules)
