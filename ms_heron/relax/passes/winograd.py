"""Relax rewrite: 3x3 stride-1 convolutions as Winograd's F(2x2, 3x3): two transforms around a
batched GEMM, with 2.25x fewer multiply-adds than the direct convolution.

Winograd's minimal filtering computes a 2x2 output tile from a 4x4 input tile with 16 products per
channel pair instead of 36. Per convolution the rewrite emits three ops, so that each is a task the
tuner knows how to make fast:

* ``winograd_input``: every 4x4 input tile (stride 2, zero-padded) transformed, ``V = Bᵀ d B``, as a
  ``[16, tiles, in_channels]`` tensor;
* a batched ``matmul`` of ``V`` with the weights transformed at compile time (``U = G g Gᵀ``,
  ``[16, in_channels, out_channels]``): the multiply-adds, 16 GEMMs;
* ``winograd_output``: ``Aᵀ M A`` per tile back to NHWC; the bias, residual add and activation after
  the convolution fuse into it.

ONNX Runtime runs these convolutions directly. In a 15-minute ResNet-50 run (Zen 3) a stage-3
convolution (14x14, 256 channels) took 0.79 ms as these three tasks, against 1.28 ms for the direct
kernel tuned the same way and 1.22 ms for ONNX Runtime's; the model's output stayed within 3e-5 of
ONNX Runtime's. Only NHWC float32 convolutions with constant HWIO weights are rewritten (run
:mod:`.channels_last` first): the weights are transformed at compile time.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import IRModule, relax, te, tirx
from tvm.relax.utils import gen_call_tir_inputs
from tvm.s_tir import Schedule

from ...hardware.targets import is_cpu, vector_registers
from .guard import never_failing
from .sinking import constant_value, static_shape

#: Output tile side (F(2x2, 3x3)): the input tile is TILE + 2 on a side.
TILE = 2
#: F(2x2, 3x3)'s matrices (Lavin and Gray, 2016): input ``Bᵀ``, filter ``G``, output ``Aᵀ``.
B_T = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], "float32")
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], "float32")
A_T = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], "float32")
#: Fewer channels than this leave the batched GEMM too thin to pay for the transforms.
MIN_CHANNELS = 16


def winograd_weight(weight: np.ndarray) -> np.ndarray:
    """HWIO 3x3 weights as ``U = G g Gᵀ`` per channel pair, ``[16, in, out]``."""
    u = np.einsum(
        "ei,ijco,nj->enco", G.astype(np.float64), weight.astype(np.float64), G.astype(np.float64)
    )
    return u.reshape(-1, *weight.shape[2:]).astype(weight.dtype)


def _tiles(size: int) -> int:
    return -(-size // TILE)


def _select(row, values: list, dtype: str):
    """``values[row]`` for a row that depends on the loops: a chain of selects between constants,
    which the code generator hoists out of the channel loop (rows holding the last value fall
    through)."""
    value = tirx.const(values[-1], dtype)
    for index in range(len(values) - 2, -1, -1):
        if values[index] != values[-1]:
            value = tirx.Select(row == index, tirx.const(values[index], dtype), value)
    return value


def _row_terms(matrix: np.ndarray, row) -> list[tuple[tirx.PrimExpr, tirx.PrimExpr]]:
    """Row ``row`` of a transform matrix applied to a vector, as its nonzero terms only: per term
    the entry of the vector it reads and its coefficient. Every row of Winograd's ``Bᵀ`` has two
    nonzero entries and every row of ``Aᵀ`` three, so a 2-D transform reads 4 (or 9) inputs per
    output, not 16.

    The coefficients are selects, not a constant table: MetaSchedule's RewriteLayout re-lays out a
    model's constant parameters after the loops that index them, and it drops the column of a table
    indexed by a constant (``table[k, 3]``), so the tuned transforms read the wrong coefficients.
    """
    columns = [np.flatnonzero(entries) for entries in matrix]
    assert len({len(c) for c in columns}) == 1, "every row has as many nonzero entries"
    return [
        (
            _select(row, [int(c[term]) for c in columns], "int32"),
            _select(
                row, [float(entries[c[term]]) for entries, c in zip(matrix, columns)], "float32"
            ),
        )
        for term in range(len(columns[0]))
    ]


def padded_rows(rows: int, target: tvm.target.Target | None) -> int:
    """The GEMM's row count (one row per tile) rounded up to a whole number of register micro-tiles.

    A row tile must divide the rows, and a 14x14 image has 49 tiles: only 7-row tiles, which with
    two vectors of columns need more registers than AVX2 has, so its GEMM ran at half the FMA peak.
    Padded, it takes ``MR`` rows by two vectors (``2 MR`` accumulators, two streamed vectors and a
    broadcast in the vector registers: 6 rows on AVX2, 14 on AVX-512); of the tiles from 4 rows to
    ``MR``, the one that pads least (the larger on a tie). Tuned 48 trials on a 14x14, 256-channel
    convolution, its GEMM ran 0.65-0.79 ms padded to 5- or 6-row tiles, 0.99 ms unpadded.
    """
    registers = vector_registers(target) if target is not None and is_cpu(target) else 16
    most = (registers - 3) // 2
    # the first, larger tile wins a tie
    return min(-(-rows // mr) * mr for mr in range(most, 3, -1))


def _input_tiles(data: te.Tensor, padded_tiles: int) -> te.Tensor:
    """``V[4i + j, p, c] = (Bᵀ d_p B)[i, j]`` over each tile ``p``'s 4x4 zero-padded input ``d_p``
    of channel ``c``; rows past the last tile are zeros."""
    batch, height, width, channels = (int(d) for d in data.shape)
    side, rows, cols = TILE + 2, _tiles(height), _tiles(width)

    def value(k, p, c):
        n, t = p // (rows * cols), p % (rows * cols)
        total, columns = tirx.const(0.0, data.dtype), _row_terms(B_T, k % side)
        for dy, row_coefficient in _row_terms(B_T, k // side):
            for dx, column_coefficient in columns:
                y, x = (t // cols) * TILE + dy - 1, (t % cols) * TILE + dx - 1
                inside = tirx.all(n < batch, y >= 0, y < height, x >= 0, x < width)
                term = tirx.if_then_else(inside, data[n, y, x, c], tirx.const(0, data.dtype))
                total = total + row_coefficient * column_coefficient * term
        return total

    return te.compute((side * side, padded_tiles, channels), value, name="winograd_input")


def _planes_per_tile(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """The input transform's loops as (tile, plane, channel), the plane loop unrolled: each tile's
    16 planes then read its 4x4 input window once, with their coefficients and offsets constants.
    In the output's order (plane, tile, channel), every (plane, tile) pair evaluated the selects
    and bounds again for one row of channels: ResNet-50's first 3x3 convolution's transform
    (56x56, 64 channels) took 0.27 ms that way and 0.08 ms this way on a Zen 3, the same bits."""
    sch = Schedule(func)
    plane, tile, _ = sch.get_loops(sch.get_sblock("winograd_input"))
    sch.reorder(tile, plane)
    sch.unroll(plane)
    # annotated, MetaSchedule's parallel postproc does not fuse it into a small image's tile loop
    sch.annotate(plane, "pragma_unroll_explicit", 1)
    return sch.mod["main"]


def _output_tiles(products: te.Tensor, batch: int, height: int, width: int) -> te.Tensor:
    """``out[n, y, x, o] = (Aᵀ M_p A)[y % 2, x % 2]`` over tile ``p``'s 16 products ``M_p`` of
    channel ``o``, cropped to the image."""
    rows, cols, side = _tiles(height), _tiles(width), TILE + 2
    channels = int(products.shape[2])

    def value(n, y, x, o):
        p = n * rows * cols + (y // TILE) * cols + x // TILE
        total, columns = tirx.const(0.0, products.dtype), _row_terms(A_T, x % TILE)
        for i, row_coefficient in _row_terms(A_T, y % TILE):
            for j, column_coefficient in columns:
                total = total + row_coefficient * column_coefficient * products[i * side + j, p, o]
        return total

    return te.compute((batch, height, width, channels), value, name="winograd_output")


def _rewritable_weight(call: relax.Call) -> np.ndarray | None:
    """The HWIO weight of a float32 NHWC 3x3 convolution with stride 1, padding 1, no dilation or
    groups, a constant weight and ``MIN_CHANNELS`` or more on each side; None for any other call.
    The attributes and shapes are checked first: only a convolution that passes is read as numpy."""
    if getattr(call.op, "name", "") != "relax.nn.conv2d":
        return None
    attrs, weight_shape = call.attrs, static_shape(call.args[1])
    if not (
        (attrs.data_layout, attrs.kernel_layout, str(attrs.out_layout)) == ("NHWC", "HWIO", "NHWC")
        and [int(s) for s in attrs.strides] == [1, 1]
        and [int(d) for d in attrs.dilation] == [1, 1]
        and [int(p) for p in attrs.padding] == [1, 1, 1, 1]
        and int(attrs.groups) == 1
        and str(call.args[0].ty.dtype) == "float32"
        and str(attrs.out_dtype) in ("None", "", "void", "float32")  # unset: the input's
        and static_shape(call.args[0]) is not None
        and weight_shape is not None
        and weight_shape[:2] == [3, 3]
        and min(weight_shape[2:]) >= MIN_CHANNELS
    ):
        return None
    return constant_value(call.args[1])


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call):  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        weight = _rewritable_weight(call)
        if weight is None:
            return call
        data = call.args[0]
        batch, height, width, _ = static_shape(data)
        padded = padded_rows(
            batch * _tiles(height) * _tiles(width), tvm.target.Target.current(allow_none=True)
        )
        func, args, output = gen_call_tir_inputs(_input_tiles, data, padded)
        transform = self.builder_.add_func(_planes_per_tile(func), "winograd_input")
        tiles = self.builder_.emit(relax.call_tir(transform, args, output))
        products = self.builder_.emit(relax.op.matmul(tiles, relax.const(winograd_weight(weight))))
        return self.builder_.emit_te(
            _output_tiles,
            products,
            batch,
            height,
            width,
            primfunc_name_hint="winograd_output",
        )


@never_failing
@tvm.transform.module_pass(opt_level=0, name="WinogradConvolutions")
def winograd_convolutions(mod: IRModule, _ctx) -> IRModule:
    """Rewrite every float32 NHWC 3x3 stride-1 convolution with constant weights as Winograd F(2x2,
    3x3)."""
    rewriter = _Rewriter(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    # the rewritten convolution's binding is left as an alias of the output transform: FuseOps fuses
    # the epilogue only into an op it sees as its direct producer
    return relax.transform.CanonicalizeBindings()(rewriter.builder_.get())
