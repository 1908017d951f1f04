"""Heron's operator suite as TensorIR PrimFuncs, each with random inputs and a numpy reference.

Families: gemm, bmm, gemv, c1d, c2d, c3d, dil (dilated c2d), t2d (transposed c2d), scan (prefix sum
as a matmul with a lower-triangular ones matrix). Every one of these comes in three forms:

* ``int8``: u8 activations, s8 weights in the packed layout the target CPU's dot product reads
  (``[o // lanes, *kernel, i // reduction, o % lanes, i % reduction]``; ``make(..., target=...)``,
  AVX-512 VNNI's 16 x 4 without one: :mod:`ms_heron.hardware.dot_products`), stored as s16 where it
  multiplies s16 pairs (AVX2: the weight is widened offline, as a model's is at compile time), s32
  accumulation;
  checked bit-exactly. Where the tiles do not divide ``o`` and ``i`` (1000 classes, 3 input
  channels), the weight is stored as fp32's and the Tensorize rule pads the block to whole tiles.
  With ``narrow_weights``, 7-bit weights in the byte multiply's layout (CPUs without VNNI).
* ``fp32``: everything fp32 (CPU); weights as ``[*kernel, i, o]``.
* ``fp16``: fp16 inputs, fp32 accumulation and output (GPU tensor cores); weights as fp32's.

Convolutions are channels-last (NWC / NHWC / NDHWC). The reference works on the logical weight
``[o, *kernel, i]`` in int64/float64, independently of the TE definition it checks.
Named cases follow Heron's benchmark configs, e.g. ``case("gemm.G1", "int8")``.

The memory-bound kernels every transformer has, softmax and layer norm over rows (TOPI's
definitions, as a model's Relax legalization produces them), are fp32 only.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence

import numpy as np
from tvm import te, tirx, topi
from tvm.target import Target

from ..hardware.dot_products import (
    NARROW_WEIGHT,
    NARROW_WEIGHTS,
    VNNI,
    DotProduct,
    narrow_dot_product,
    require_dot_product,
)
from ..hardware.targets import is_cpu
from ..intrinsics import DOT_MAX_PADDING_WASTE
from .workload import Workload, WorkloadError, random_array

DTYPES = ("int8", "fp32", "fp16")

#: (input dtype of activations, of weights, of the output) per form.
_TYPES = {
    "int8": ("uint8", "int8", "int32"),
    "fp32": ("float32", "float32", "float32"),
    "fp16": ("float16", "float16", "float32"),
}


def _workload(
    family, dtype, shape, tensors, ops, inputs, reference, dot: DotProduct = VNNI
) -> Workload:
    """Package TE ``tensors`` (inputs..., output) as a :class:`Workload`."""
    tile = dot.tile
    out = tensors[-1]
    output = (tuple(int(d) for d in out.shape), str(out.dtype))
    func = te.create_prim_func(list(tensors))
    int8 = dtype == "int8"
    workload = Workload(
        family=family,
        dtype=dtype,
        shape=dict(shape),
        func=func,
        ops=int(ops),
        _make_inputs=inputs,
        _reference=reference,
        _output=output,
        tile=tuple(tile) if int8 else None,
    )
    return _check_int8_shape(workload, tile) if int8 else workload


# ----------------------------------------------------------------------------------------------
# Weight layouts


def pack_int8(
    weight: np.ndarray, tile: tuple[int, int] = VNNI.tile, batch_dims: int = 0
) -> np.ndarray:
    """``[*batch, o, *kernel, i]`` -> ``[*batch, o//lanes, *kernel, i//red, o%lanes, i%red]``: the
    layout a dot product of ``tile = (lanes, red)`` reads."""
    lanes, red = tile
    shp = weight.shape
    batch, o, kernel, i = shp[:batch_dims], shp[batch_dims], shp[batch_dims + 1 : -1], shp[-1]
    w = weight.reshape(*batch, o // lanes, lanes, *kernel, i // red, red)
    nb, nk = len(batch), len(kernel)
    b = list(range(nb))
    o_blk, o_lane = nb, nb + 1
    k = list(range(nb + 2, nb + 2 + nk))
    i_blk, i_lane = nb + 2 + nk, nb + 3 + nk
    return np.ascontiguousarray(w.transpose(*b, o_blk, *k, i_blk, o_lane, i_lane))


def _fp_layout(weight: np.ndarray, batch_dims: int = 0) -> np.ndarray:
    """``[*batch, o, *kernel, i]`` -> ``[*batch, *kernel, i, o]``."""
    nb = batch_dims
    n = weight.ndim
    return np.ascontiguousarray(weight.transpose(*range(nb), *range(nb + 1, n), nb))


class _Operand:
    """How the TE compute reads the weight operand, and how numpy lays it out, for one dtype
    form."""

    def __init__(
        self,
        dtype: str,
        batch: Sequence[int],
        o: int,
        kernel: Sequence[int],
        i: int,
        dot: DotProduct,
    ):
        lanes, red = self.tile = dot.tile
        #: The dot product's layout, where its tiles divide the weight; else fp32's, padded when
        #: tensorized.
        self.packed = dtype == "int8" and o % lanes == 0 and i % red == 0
        self.batch, self.o, self.kernel, self.i = tuple(batch), o, tuple(kernel), i
        #: The weight's values (s8 for int8), and the dtype they are stored in: s16 for a dot
        #: product that multiplies s16 pairs, widened offline as a model's weight is at compile
        #: time.
        self.dtype = _TYPES[dtype][1]
        wdtype = dot.weight_dtype if dtype == "int8" else self.dtype
        shape = (
            (*batch, o // lanes, *kernel, i // red, lanes, red)
            if self.packed
            else (*batch, *kernel, i, o)
        )
        self.placeholder = te.placeholder(shape, wdtype, name="W")

    def __call__(self, b: Sequence, o, k: Sequence, i):
        if self.packed:
            lanes, red = self.tile
            return self.placeholder[(*b, o // lanes, *k, i // red, o % lanes, i % red)]
        return self.placeholder[(*b, *k, i, o)]

    def layout(self, logical: np.ndarray) -> np.ndarray:
        nb = len(self.batch)
        stored = pack_int8(logical, self.tile, nb) if self.packed else _fp_layout(logical, nb)
        return stored.astype(str(self.placeholder.dtype), copy=False)


#: Per family, the weight dims a dot product's tiles split: (output lanes, reduction).
_TILED_DIMS = {
    "gemm": ("N", "K"),
    "bmm": ("N", "K"),
    "gemv": ("M", "K"),
    "scan": ("N", "M"),
    **{f: ("CO", "CI") for f in ("c1d", "c2d", "c3d", "dil", "t2d")},
}


def int8_padding(workload: Workload, tile: tuple[int, int] = VNNI.tile) -> tuple[float, str]:
    """How much work padding an int8 workload to a dot product's ``tile`` adds (1.0: none), and a
    sentence naming the dims that need it with the nearest shape that needs none."""
    lanes_name, red_name = _TILED_DIMS[workload.family]
    ratio, parts = 1.0, []
    for name, mult, what in (
        (lanes_name, tile[0], "output lanes"),
        (red_name, tile[1], "reduction"),
    ):
        value = int(workload.shape[name])
        if value % mult:
            lower = value // mult * mult
            # ties round up
            nearest = lower + mult if lower == 0 or value - lower >= mult / 2 else lower
            ratio *= -(-value // mult) * mult / value
            parts.append(
                f"{name}={value} is not a multiple of {mult} ({what}; nearest that is: "
                f"{name}={nearest})"
            )
    return ratio, "; ".join(parts)


def _check_int8_shape(workload: Workload, tile: tuple[int, int]) -> Workload:
    ratio, why = int8_padding(workload, tile)
    if ratio > 1 + DOT_MAX_PADDING_WASTE:
        raise WorkloadError(
            f"{workload.family} int8: {why}; padding it to the dot product's {tile[0]} x {tile[1]} "
            f"tiles would do {ratio:.1f}x the work, more than the {1 + DOT_MAX_PADDING_WASTE:.0f}x "
            "limit"
        )
    return workload


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64) if x.dtype.kind in "iu" else x.astype(np.float64)


def _mac(a, b, out_dtype: str):
    return a.astype(out_dtype) * b.astype(out_dtype)


def _check_dtype(dtype: str) -> tuple[str, str, str]:
    if dtype not in _TYPES:
        raise WorkloadError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return _TYPES[dtype]


def _positive(**dims: int) -> None:
    bad = {k: v for k, v in dims.items() if int(v) < 1}
    if bad:
        raise WorkloadError(f"dimensions must be positive, got {bad}")


# ----------------------------------------------------------------------------------------------
# Matrix families


def _batched_matmul(
    family: str,
    dtype: str,
    shape: dict,
    batch: tuple[int, ...],
    m: int | None,
    n: int,
    k: int,
    dot: DotProduct,
) -> Workload:
    """``C[*b, (m,) n] = sum_k A[*b, (m,) k] * W(*b, n, k)`` -- gemm, bmm and gemv in one
    definition."""
    adt, _, odt = _check_dtype(dtype)
    rows = () if m is None else (m,)
    a = te.placeholder((*batch, *rows, k), adt, name="A")
    w = _Operand(dtype, batch, n, (), k, dot)
    r = te.reduce_axis((0, k), name="k")

    def body(*idx):
        b, row, col = idx[: len(batch)], idx[len(batch) : len(batch) + len(rows)], idx[-1]
        return te.sum(_mac(a[(*b, *row, r)], w(b, col, (), r), odt), axis=r)

    c = te.compute((*batch, *rows, n), body, name="C")

    def inputs(rng):
        return [
            random_array(rng, a.shape, adt),
            w.layout(random_array(rng, (*batch, n, k), w.dtype)),
        ]

    def reference(act, stored):
        logical = _unlayout(w, stored)  # [*batch, n, k]
        out = logical @ _wide(act) if m is None else _wide(act) @ logical.swapaxes(-1, -2)
        return out.astype(odt)

    ops = 2 * int(np.prod(batch, dtype=np.int64)) * (m or 1) * n * k
    return _workload(family, dtype, shape, [a, w.placeholder, c], ops, inputs, reference, dot)


def _unlayout(operand: _Operand, stored: np.ndarray) -> np.ndarray:
    """Invert :meth:`_Operand.layout`: stored weights back to logical ``[*batch, o, *kernel, i]``
    (wide)."""
    nb, nk = len(operand.batch), len(operand.kernel)
    x = _wide(stored)
    if operand.packed:
        # [*b, ob, *k, ib, ol, il] -> [*b, ob, ol, *k, ib, il]
        perm = (*range(nb), nb, nb + nk + 2, *range(nb + 1, nb + 1 + nk), nb + nk + 1, nb + nk + 3)
        x = x.transpose(perm)
        return x.reshape(*operand.batch, operand.o, *operand.kernel, operand.i)
    # [*b, *k, i, o] -> [*b, o, *k, i]
    return x.transpose(*range(nb), nb + nk + 1, *range(nb, nb + nk), nb + nk)


def gemm(M: int, N: int, K: int, dtype: str = "int8", *, dot: DotProduct = VNNI) -> Workload:
    """``C[M, N] = A[M, K] · W[N, K]ᵀ``."""
    _positive(M=M, N=N, K=K)
    return _batched_matmul("gemm", dtype, dict(M=M, N=N, K=K), (), M, N, K, dot)


def bmm(B: int, M: int, N: int, K: int, dtype: str = "int8", *, dot: DotProduct = VNNI) -> Workload:
    """``C[B, M, N] = A[B, M, K] · W[B, N, K]ᵀ`` (both operands batched, as in attention)."""
    _positive(B=B, M=M, N=N, K=K)
    return _batched_matmul("bmm", dtype, dict(B=B, M=M, N=N, K=K), (B,), M, N, K, dot)


def gemv(M: int, K: int, dtype: str = "int8", *, dot: DotProduct = VNNI) -> Workload:
    """``y[M] = W[M, K] · x[K]``."""
    _positive(M=M, K=K)
    return _batched_matmul("gemv", dtype, dict(M=M, K=K), (), None, M, K, dot)


def scan(B: int, M: int, N: int, dtype: str = "int8", *, dot: DotProduct = VNNI) -> Workload:
    """Prefix sum along M of ``x[B, M, N]``, computed as ``Tri[M, M] · x`` (Heron's formulation).

    The 0/1 lower-triangular matrix is a stage of the PrimFunc (the activation operand); ``x`` is
    the weight-like operand, so in the int8 form it is s8 in the dot product's layout (AVX-512
    VNNI's: ``[B, N//16, M//4, 16, 4]``).
    """
    _positive(B=B, M=M, N=N)
    adt, _, odt = _check_dtype(dtype)
    x = _Operand(dtype, (B,), N, (), M, dot)
    tri = te.compute(
        (M, M), lambda i, k: tirx.Select(k <= i, tirx.const(1, adt), tirx.const(0, adt)), name="Tri"
    )
    r = te.reduce_axis((0, M), name="k")
    out = te.compute(
        (B, M, N), lambda b, i, n: te.sum(_mac(tri[i, r], x((b,), n, (), r), odt), axis=r), name="C"
    )

    def inputs(rng):
        return [x.layout(random_array(rng, (B, N, M), x.dtype))]

    def reference(stored):
        logical = _unlayout(x, stored)  # [B, N, M]
        return np.cumsum(logical, axis=2).transpose(0, 2, 1).astype(odt)

    ops = 2 * B * M * M * N
    return _workload(
        "scan", dtype, dict(B=B, M=M, N=N), [x.placeholder, out], ops, inputs, reference, dot
    )


# ----------------------------------------------------------------------------------------------
# Convolutions (channels-last), 1-3 spatial dimensions


def _conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def _conv(
    family: str,
    dtype: str,
    shape: dict,
    n: int,
    spatial: tuple[int, ...],
    ci: int,
    co: int,
    kernel: tuple[int, ...],
    stride: int,
    pad: int,
    dilation: int,
    dot: DotProduct,
) -> Workload:
    adt, _, odt = _check_dtype(dtype)
    _positive(
        N=n,
        CI=ci,
        CO=co,
        stride=stride,
        dilation=dilation,
        **{f"S{d}": s for d, s in enumerate(spatial)},
    )
    if pad < 0:
        raise WorkloadError(f"{family}: padding must be >= 0, got {pad}")
    out_sp = tuple(_conv_out(s, k, stride, pad, dilation) for s, k in zip(spatial, kernel))
    if min(out_sp) < 1:
        raise WorkloadError(
            f"{family}: kernel {kernel} with dilation {dilation} does not fit input {spatial}"
        )
    nd = len(spatial)
    data = te.placeholder((n, *spatial, ci), adt, name="X")
    w = _Operand(dtype, (), co, kernel, ci, dot)
    if pad:
        padded = tuple(s + 2 * pad for s in spatial)

        def pad_body(b, *idx):
            sp, c = idx[:nd], idx[nd]
            inside = tirx.all(*[tirx.all(p >= pad, p < pad + s) for p, s in zip(sp, spatial)])
            return tirx.if_then_else(
                inside, data[(b, *[p - pad for p in sp], c)], tirx.const(0, adt)
            )

        src = te.compute((n, *padded, ci), pad_body, name="Xpad")
    else:
        src = data
    rk = [te.reduce_axis((0, k), name=f"r{d}") for d, k in enumerate(kernel)]
    rc = te.reduce_axis((0, ci), name="rc")

    def body(b, *idx):
        sp, c = idx[:nd], idx[nd]
        pos = [o * stride + r * dilation for o, r in zip(sp, rk)]
        return te.sum(_mac(src[(b, *pos, rc)], w((), c, rk, rc), odt), axis=[*rk, rc])

    out = te.compute((n, *out_sp, co), body, name="C")

    def inputs(rng):
        return [
            random_array(rng, data.shape, adt),
            w.layout(random_array(rng, (co, *kernel, ci), w.dtype)),
        ]

    def reference(x, stored):
        logical = _unlayout(w, stored)
        xp = np.pad(_wide(x), [(0, 0), *[(pad, pad)] * nd, (0, 0)])
        acc = np.zeros((n, *out_sp, co), dtype=xp.dtype)
        for offs in itertools.product(*[range(k) for k in kernel]):
            window = tuple(
                slice(o * dilation, o * dilation + stride * (s - 1) + 1, stride)
                for o, s in zip(offs, out_sp)
            )
            acc += (
                xp[(slice(None), *window, slice(None))]
                @ logical[(slice(None), *offs, slice(None))].T
            )
        return acc.astype(odt)

    ops = 2 * n * int(np.prod(out_sp)) * co * ci * int(np.prod(kernel))
    return _workload(family, dtype, shape, [data, w.placeholder, out], ops, inputs, reference, dot)


def c1d(
    N: int,
    W: int,
    CI: int,
    CO: int,
    KW: int,
    stride: int = 1,
    pad: int = 0,
    dilation: int = 1,
    dtype: str = "int8",
    *,
    dot: DotProduct = VNNI,
) -> Workload:
    """1-D convolution, NWC."""
    shape = dict(N=N, W=W, CI=CI, CO=CO, KW=KW, stride=stride, pad=pad, dilation=dilation)
    return _conv("c1d", dtype, shape, N, (W,), CI, CO, (KW,), stride, pad, dilation, dot)


def c2d(
    N: int,
    H: int,
    W: int,
    CI: int,
    CO: int,
    KH: int,
    KW: int,
    stride: int = 1,
    pad: int = 0,
    dilation: int = 1,
    dtype: str = "int8",
    *,
    dot: DotProduct = VNNI,
) -> Workload:
    """2-D convolution, NHWC."""
    shape = dict(
        N=N, H=H, W=W, CI=CI, CO=CO, KH=KH, KW=KW, stride=stride, pad=pad, dilation=dilation
    )
    return _conv("c2d", dtype, shape, N, (H, W), CI, CO, (KH, KW), stride, pad, dilation, dot)


def dil(
    N: int,
    H: int,
    W: int,
    CI: int,
    CO: int,
    KH: int,
    KW: int,
    stride: int = 1,
    pad: int = 2,
    dilation: int = 2,
    dtype: str = "int8",
    *,
    dot: DotProduct = VNNI,
) -> Workload:
    """Dilated 2-D convolution, NHWC (Heron's ``dil``: c2d with dilation 2)."""
    shape = dict(
        N=N, H=H, W=W, CI=CI, CO=CO, KH=KH, KW=KW, stride=stride, pad=pad, dilation=dilation
    )
    return _conv("dil", dtype, shape, N, (H, W), CI, CO, (KH, KW), stride, pad, dilation, dot)


def c3d(
    N: int,
    D: int,
    H: int,
    W: int,
    CI: int,
    CO: int,
    KD: int,
    KH: int,
    KW: int,
    stride: int = 1,
    pad: int = 0,
    dilation: int = 1,
    dtype: str = "int8",
    *,
    dot: DotProduct = VNNI,
) -> Workload:
    """3-D convolution, NDHWC."""
    shape = dict(
        N=N,
        D=D,
        H=H,
        W=W,
        CI=CI,
        CO=CO,
        KD=KD,
        KH=KH,
        KW=KW,
        stride=stride,
        pad=pad,
        dilation=dilation,
    )
    return _conv(
        "c3d", dtype, shape, N, (D, H, W), CI, CO, (KD, KH, KW), stride, pad, dilation, dot
    )


def t2d(
    N: int,
    H: int,
    W: int,
    CI: int,
    CO: int,
    KH: int,
    KW: int,
    stride: int = 1,
    pad: int = 0,
    dtype: str = "int8",
    *,
    dot: DotProduct = VNNI,
) -> Workload:
    """Transposed 2-D convolution, NHWC: ``out[hi*s - p + kh] += x[hi] · W[kh]``.

    Computed as a convolution over the stride-dilated, (K-1-p)-padded input with the kernel flipped;
    the reference scatters instead, so the two formulations check each other.
    """
    adt, _, odt = _check_dtype(dtype)
    _positive(N=N, H=H, W=W, CI=CI, CO=CO, KH=KH, KW=KW, stride=stride)
    if not 0 <= pad <= min(KH, KW) - 1:
        raise WorkloadError(
            f"t2d: pad must be in [0, kernel-1] = [0, {min(KH, KW) - 1}], got {pad}"
        )
    kernel = (KH, KW)
    sizes = (H, W)
    out_sp = tuple((s - 1) * stride - 2 * pad + k for s, k in zip(sizes, kernel))
    edge = tuple(k - 1 - pad for k in kernel)
    data = te.placeholder((N, H, W, CI), adt, name="X")
    w = _Operand(dtype, (), CO, kernel, CI, dot)
    grown = tuple(o + k - 1 for o, k in zip(out_sp, kernel))

    def dilate_body(b, h, ww, c):
        conds, idx = [], []
        for p, e, s in zip((h, ww), edge, sizes):
            q = p - e
            conds += [q >= 0, q < (s - 1) * stride + 1, tirx.floormod(q, stride) == 0]
            idx.append(tirx.floordiv(q, stride))
        return tirx.if_then_else(tirx.all(*conds), data[b, idx[0], idx[1], c], tirx.const(0, adt))

    src = te.compute((N, *grown, CI), dilate_body, name="Xdil")
    rh, rw, rc = (
        te.reduce_axis((0, KH), "rh"),
        te.reduce_axis((0, KW), "rw"),
        te.reduce_axis((0, CI), "rc"),
    )

    def body(b, h, ww, c):
        return te.sum(
            _mac(src[b, h + rh, ww + rw, rc], w((), c, (KH - 1 - rh, KW - 1 - rw), rc), odt),
            axis=[rh, rw, rc],
        )

    out = te.compute((N, *out_sp, CO), body, name="C")

    def inputs(rng):
        return [
            random_array(rng, data.shape, adt),
            w.layout(random_array(rng, (CO, KH, KW, CI), w.dtype)),
        ]

    def reference(x, stored):
        logical = _unlayout(w, stored)
        full = np.zeros(
            (N, *[(s - 1) * stride + k for s, k in zip(sizes, kernel)], CO), dtype=logical.dtype
        )
        xw = _wide(x)
        for kh, kw in itertools.product(range(KH), range(KW)):
            contrib = xw @ logical[:, kh, kw, :].T
            full[
                :,
                kh : kh + (H - 1) * stride + 1 : stride,
                kw : kw + (W - 1) * stride + 1 : stride,
                :,
            ] += contrib
        return full[:, pad : pad + out_sp[0], pad : pad + out_sp[1], :].astype(odt)

    shape = dict(N=N, H=H, W=W, CI=CI, CO=CO, KH=KH, KW=KW, stride=stride, pad=pad)
    ops = 2 * N * H * W * CI * CO * KH * KW
    return _workload("t2d", dtype, shape, [data, w.placeholder, out], ops, inputs, reference, dot)


# ----------------------------------------------------------------------------------------------
# Memory-bound row kernels


def _fp32_only(family: str, dtype: str) -> None:
    if dtype != "fp32":
        raise WorkloadError(
            f"{family} is a floating-point kernel: use dtype 'fp32' (got {dtype!r})"
        )


def softmax(dtype: str = "fp32", M: int = 128, N: int = 128) -> Workload:
    """``Y[m, :] = exp(X[m, :] - max) / sum(exp(X[m, :] - max))``: two row reductions, two
    element-wise passes."""
    _fp32_only("softmax", dtype)
    _positive(M=M, N=N)
    x = te.placeholder((M, N), "float32", name="X")
    y = topi.nn.softmax(x, axis=1)

    def reference(a):
        e = np.exp(_wide(a) - _wide(a).max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype("float32")

    return _workload(
        "softmax",
        dtype,
        dict(M=M, N=N),
        [x, y],
        5 * M * N,
        lambda rng: [random_array(rng, x.shape, "float32")],
        reference,
    )


def layernorm(dtype: str = "fp32", M: int = 128, N: int = 768) -> Workload:
    """``Y[m, :] = (X[m, :] - mean) / sqrt(var + 1e-5) * gamma + beta``: mean and variance
    reductions per row."""
    _fp32_only("layernorm", dtype)
    _positive(M=M, N=N)
    x = te.placeholder((M, N), "float32", name="X")
    gamma, beta = (
        te.placeholder((N,), "float32", name="gamma"),
        te.placeholder((N,), "float32", name="beta"),
    )
    y = topi.nn.layer_norm(x, gamma, beta, axis=[1], epsilon=1e-5)

    def inputs(rng):
        return [
            random_array(rng, x.shape, "float32"),
            random_array(rng, (N,), "float32"),
            random_array(rng, (N,), "float32"),
        ]

    def reference(a, g, b):
        a = _wide(a)
        norm = (a - a.mean(axis=1, keepdims=True)) / np.sqrt(a.var(axis=1, keepdims=True) + 1e-5)
        return (norm * g + b).astype("float32")

    return _workload(
        "layernorm", dtype, dict(M=M, N=N), [x, gamma, beta, y], 8 * M * N, inputs, reference
    )


# ----------------------------------------------------------------------------------------------
# Registry: families and Heron's named benchmark cases

#: Families without an int8 form: the memory-bound row kernels.
FP32_ONLY = ("softmax", "layernorm")

FAMILIES: dict[str, Callable[..., Workload]] = {
    "gemm": gemm,
    "bmm": bmm,
    "gemv": gemv,
    "c1d": c1d,
    "c2d": c2d,
    "c3d": c3d,
    "dil": dil,
    "t2d": t2d,
    "scan": scan,
    "softmax": softmax,
    "layernorm": layernorm,
}

_RESNET_3X3 = [(56, 64, 64), (28, 128, 128), (14, 256, 256)]

#: Heron's benchmark configs (the paper's §6 CPU and GPU operator tables); 1000 is 1008 as in
#: Heron's CPU configs (VNNI needs 16 | N).
CASES: dict[str, tuple[str, dict]] = {
    "gemm.G1": ("gemm", dict(M=1024, K=1024, N=1024)),
    "gemm.G2": ("gemm", dict(M=4096, K=4096, N=4096)),
    "gemm.G3": ("gemm", dict(M=32, K=2048, N=1008)),
    "gemm.G4": ("gemm", dict(M=32, K=4096, N=4096)),
    "gemm.G5": ("gemm", dict(M=32, K=4096, N=1008)),
    "bmm.B1": ("bmm", dict(B=12, M=512, K=64, N=512)),
    "bmm.B2": ("bmm", dict(B=12, M=512, K=512, N=64)),
    "bmm.B3": ("bmm", dict(B=16, M=512, K=64, N=512)),
    "bmm.B4": ("bmm", dict(B=16, M=512, K=512, N=64)),
    "bmm.B5": ("bmm", dict(B=96, M=2048, K=128, N=2048)),
    "gemv.V1": ("gemv", dict(M=512, K=16)),
    "gemv.V2": ("gemv", dict(M=1024, K=256)),
    "gemv.V3": ("gemv", dict(M=256, K=1024)),
    "gemv.V4": ("gemv", dict(M=512, K=256)),
    "gemv.V5": ("gemv", dict(M=1024, K=1024)),
    "c1d.C1": ("c1d", dict(N=1, W=892, CI=512, CO=512, KW=1)),
    "c1d.C2": ("c1d", dict(N=1, W=892, CI=512, CO=512, KW=3, pad=4, dilation=2)),
    "c1d.C3": ("c1d", dict(N=1, W=892, CI=512, CO=512, KW=3, pad=8, dilation=4)),
    "c1d.C4": ("c1d", dict(N=1, W=892, CI=512, CO=512, KW=3, pad=16, dilation=8)),
    "c2d.C1": ("c2d", dict(N=1, H=56, W=56, CI=64, CO=64, KH=3, KW=3, pad=1)),
    "c2d.C2": ("c2d", dict(N=1, H=56, W=56, CI=64, CO=64, KH=1, KW=1)),
    "c2d.C3": ("c2d", dict(N=1, H=28, W=28, CI=128, CO=128, KH=3, KW=3, pad=1)),
    "c2d.C4": ("c2d", dict(N=1, H=28, W=28, CI=128, CO=256, KH=1, KW=1, stride=2)),
    "c2d.C5": ("c2d", dict(N=1, H=14, W=14, CI=256, CO=256, KH=3, KW=3, pad=1)),
    "c2d.C6": ("c2d", dict(N=1, H=14, W=14, CI=256, CO=512, KH=1, KW=1, stride=2)),
    **{
        f"dil.D{i + 1}": ("dil", dict(N=1, H=h, W=h, CI=ci, CO=co, KH=3, KW=3, pad=2, dilation=2))
        for i, (h, ci, co) in enumerate(_RESNET_3X3)
    },
    **{
        f"c3d.C{i + 1}": ("c3d", dict(N=1, D=d, H=h, W=h, CI=ci, CO=co, KD=3, KH=3, KW=3, pad=1))
        for i, (d, (h, ci, co)) in enumerate(zip((8, 4, 2), _RESNET_3X3))
    },
    "t2d.T1": ("t2d", dict(N=1, H=14, W=14, CI=256, CO=128, KH=4, KW=4, stride=2, pad=1)),
    "t2d.T2": ("t2d", dict(N=1, H=28, W=28, CI=128, CO=64, KH=4, KW=4, stride=2, pad=1)),
    "t2d.T3": ("t2d", dict(N=1, H=56, W=56, CI=64, CO=64, KH=3, KW=3, stride=1, pad=1)),
    "scan.S1": ("scan", dict(B=16, M=512, N=128)),
    "scan.S2": ("scan", dict(B=1024, M=16, N=256)),
    "scan.S3": ("scan", dict(B=256, M=1024, N=256)),
    "scan.S4": ("scan", dict(B=512, M=256, N=16)),
    "scan.S5": ("scan", dict(B=1024, M=1024, N=1024)),
    # Shapes real models have whose extents perfect tiles split badly (padded by PadExtents /
    # Tensorize): 1000 classes, ViT-B's 197 tokens, a 127-token BERT dense, BERT's 30522-row
    # vocabulary projection, and ResNet's stem convolution over 3 input channels.
    "gemm.A1": ("gemm", dict(M=128, K=768, N=1000)),
    "gemm.A2": ("gemm", dict(M=197, K=768, N=768)),
    "gemm.A3": ("gemm", dict(M=127, K=768, N=768)),
    "gemm.A4": ("gemm", dict(M=128, K=768, N=30522)),
    "c2d.A5": ("c2d", dict(N=1, H=224, W=224, CI=3, CO=64, KH=7, KW=7, stride=2, pad=3)),
    # BERT-base at 128 tokens: attention softmax (12 heads x 128 rows of 128), layer norm (128 x
    # 768).
    "softmax.SM1": ("softmax", dict(M=1536, N=128)),
    "layernorm.LN1": ("layernorm", dict(M=128, N=768)),
}


def make(
    family: str,
    dtype: str = "int8",
    *,
    target: Target | None = None,
    narrow_weights: bool = False,
    **shape: int,
) -> Workload:
    """Build ``family`` (a key of :data:`FAMILIES`) at ``shape`` in the ``dtype`` form.

    Parameters
    ----------
    target
        An int8 weight is packed for this CPU's dot product (None, or not a CPU: AVX-512 VNNI's
        16 x 4 tiles).
    narrow_weights
        int8 on a CPU without VNNI: 7-bit weights (within +-:data:`NARROW_WEIGHT`, as ONNX
        Runtime's ``reduce_range`` quantizes), packed for the CPU's byte multiply
        (:func:`narrow_dot_product`) and recorded as narrow on the function, as the lowering
        records a narrow constant, so that kernels may multiply them as bytes.
    """
    if family not in FAMILIES:
        raise WorkloadError(f"unknown workload {family!r}; valid ones: {', '.join(FAMILIES)}")
    _check_dtype(dtype)
    cpu_int8 = target is not None and is_cpu(target) and dtype == "int8"
    if narrow_weights and (not cpu_int8 or family in FP32_ONLY):
        raise WorkloadError(
            f"{family} {dtype}: narrow weights are an int8 form of a weighted family for a CPU "
            "target; pass dtype 'int8' and target=<an x86 CPU>"
        )
    if narrow_weights:
        dot = narrow_dot_product(target)
    else:
        dot = require_dot_product(target) if cpu_int8 else VNNI
    layout = {} if family in FP32_ONLY else {"dot": dot}
    try:
        workload = FAMILIES[family](dtype=dtype, **layout, **shape)
    except TypeError as err:
        raise WorkloadError(f"{family}: bad shape arguments {shape} ({err})") from err
    return _with_narrow_weights(workload) if narrow_weights else workload


def _with_narrow_weights(workload: Workload) -> Workload:
    """``workload`` with its weight ``W`` narrow: random values clipped to 7 bits, the parameter
    recorded as a narrow weight (:data:`NARROW_WEIGHTS`)."""
    func = workload.func
    weight = next(i for i, p in enumerate(func.params) if p.name == "W")
    make_inputs = workload._make_inputs  # pylint: disable=protected-access

    def inputs(rng):
        arrays = make_inputs(rng)
        arrays[weight] = np.clip(arrays[weight], -NARROW_WEIGHT, NARROW_WEIGHT)
        return arrays

    return dataclasses.replace(
        workload,
        func=func.with_attr(NARROW_WEIGHTS, [weight]),
        _make_inputs=inputs,
        narrow_weights=True,
    )


def case(
    name: str, dtype: str = "int8", *, target: Target | None = None, narrow_weights: bool = False
) -> Workload:
    """One of Heron's named configs, e.g. ``case("gemm.G1", "int8", target=host_target())``
    (``target``, ``narrow_weights``: see :func:`make`)."""
    if name not in CASES:
        raise WorkloadError(f"unknown case {name!r}; valid ones: {', '.join(CASES)}")
    family, shape = CASES[name]
    return make(family, dtype, target=target, narrow_weights=narrow_weights, **shape)
