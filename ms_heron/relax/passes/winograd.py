"""Relax rewrite: 3x3 stride-1 convolutions as Winograd's F(2x2, 3x3) or F(4x4, 3x3): two
transforms around a batched GEMM, with 2.25x (4x) fewer multiply-adds than the direct convolution.

Winograd's minimal filtering computes an ``m x m`` output tile from an ``(m + 2) x (m + 2)`` input
tile with ``(m + 2)²`` products per channel pair instead of ``9 m²``. Per convolution the rewrite
emits three ops, so that each is a task the tuner knows how to make fast:

* ``winograd_input``: every input tile (stride ``m``, zero-padded) transformed, ``V = Bᵀ d B``, as a
  ``[(m + 2)², tiles, in_channels]`` tensor;
* a batched ``matmul`` of ``V`` with the weights transformed at compile time (``U = G g Gᵀ``,
  ``[(m + 2)², in_channels, out_channels]``): the multiply-adds, ``(m + 2)²`` GEMMs;
* ``winograd_output``: ``Aᵀ M A`` per tile back to NHWC; the bias, residual add and activation after
  the convolution fuse into it (:class:`~ms_heron.rules.AlwaysInline` takes them in).

Both transforms run tile by tile, the loops over a tile's planes or pixels unrolled, so that their
coefficients are constants.

The larger tile does fewer multiply-adds but its transformed weights are 36/16 times larger and its
GEMM has a quarter of the rows to reuse them over; :func:`chosen_form` weighs the two on the host.

ONNX Runtime runs these convolutions directly. In a 15-minute ResNet-50 run (Zen 3) a stage-3
convolution (14x14, 256 channels) took 0.79 ms as F(2x2, 3x3)'s three tasks, against 1.28 ms for the
direct kernel tuned the same way and 1.22 ms for ONNX Runtime's; the model's output stayed within
3e-5 of ONNX Runtime's. Only NHWC convolutions with constant weights are rewritten (run
:mod:`.channels_last` first): the weights are transformed at compile time.

int8 convolutions (u8 x s8, as :mod:`.quantized` writes them) are rewritten exactly, in integers,
where the CPU's exact dot product multiplies s16 pairs (``vpmaddwd``: AVX2, AVX-512BW without
VNNI): :data:`F2_INTEGER`'s transformed inputs and weights are s16 values, which that instruction
multiplies at the rate it multiplies widened bytes, so the 2.25x fewer products are 2.25x fewer
instructions. F(4x4, 3x3)'s fractions do not scale into s16, and a CPU with VNNI sums four byte
products per instruction, which the transforms would not pay for. Each rewritten convolution's sums
are bounded from its weights first (:func:`integer_sums_fit`): the result is numpy's, bit for bit.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import IRModule, relax, te, tirx
from tvm.relax.utils import gen_call_tir_inputs
from tvm.s_tir import Schedule

from ...hardware.dot_products import dot_product
from ...hardware.peak import flops_per_byte as measured_flops_per_byte
from ...hardware.targets import is_cpu, vector_bytes, vector_registers
from .guard import never_failing
from .sinking import constant_value, static_shape


@dataclass(frozen=True, kw_only=True)
class WinogradForm:
    """Winograd's F(m x m, 3 x 3) (Lavin and Gray, 2016): its matrices, as numpy arrays."""

    tile: int  # m, the output tile's side
    b_t: np.ndarray  # the input transform ``Bᵀ``, (m + 2) x (m + 2)
    g: np.ndarray  # the filter transform ``G``, (m + 2) x 3
    a_t: np.ndarray  # the output transform ``Aᵀ``, m x (m + 2)
    # the products are 2**scale_bits times the output's (an integer form's ``G`` scaled to whole
    # numbers); the output transform shifts them back
    scale_bits: int = 0

    @property
    def side(self) -> int:
        """The input tile's side."""
        return self.tile + 2

    def tiles(self, size: int) -> int:
        """Output tiles along an image side of ``size`` pixels (the last one cropped)."""
        return -(-size // self.tile)


F2 = WinogradForm(
    tile=2,
    b_t=np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
    g=np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
    a_t=np.array([[1, 1, 1, 0], [0, 1, -1, -1]]),
)
F4 = WinogradForm(
    tile=4,
    b_t=np.array(
        [
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ]
    ),
    g=np.array(
        [
            [1 / 4, 0, 0],
            [-1 / 6, -1 / 6, -1 / 6],
            [-1 / 6, 1 / 6, -1 / 6],
            [1 / 24, 1 / 12, 1 / 6],
            [1 / 24, -1 / 12, 1 / 6],
            [0, 0, 1],
        ]
    ),
    a_t=np.array(
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]
    ),
)
#: The forms :func:`chosen_form` picks from; the first wins a tie.
FORMS = (F2, F4)
#: F(2x2, 3x3) in integers for an int8 convolution: ``2G`` has whole entries, so ``U`` is 4 times
#: ``G g Gᵀ``, within +-1152 for s8 weights, and ``V = Bᵀ d B`` within +-1020 for u8 inputs: both
#: s16, the operands ``vpmaddwd`` multiplies. Exact where the sums stay in s32
#: (:func:`integer_sums_fit`).
F2_INTEGER = WinogradForm(
    tile=2, b_t=F2.b_t, g=(2 * F2.g).astype(np.int64), a_t=F2.a_t, scale_bits=2
)
#: Fewer channels than this leave the batched GEMM too thin to pay for the transforms.
MIN_CHANNELS = 16


def winograd_weight(weight: np.ndarray, form: WinogradForm = F2) -> np.ndarray:
    """HWIO 3x3 weights as ``U = G g Gᵀ`` per channel pair, ``[(m + 2)², in, out]``, in the
    weight's dtype (exact for integers: an integer form's ``G`` is whole)."""
    u = np.einsum("ei,ijco,nj->enco", form.g, weight.astype(np.float64), form.g)
    return u.reshape(-1, *weight.shape[2:]).astype(weight.dtype)


def chosen_form(
    shape: tuple[int, int, int, int],
    out_channels: int,
    target: tvm.target.Target | None,
    flops_per_byte: float,
) -> WinogradForm:
    """The form that costs least for an NHWC input of ``shape``: its GEMM's flops, plus the bytes
    it moves (the transformed weights read once, the transformed planes written and read back) at
    ``flops_per_byte``, the host's peak flops per byte of memory bandwidth. F(4x4, 3x3) wins on
    large images; on small ones with many channels its weights, 36/16 times F(2x2, 3x3)'s, are read
    for too few tiles (ResNet-50's 7x7 stage: 4 tiles, 38 MB of weights per convolution)."""
    if not math.isfinite(flops_per_byte):
        return FORMS[0]
    batch, height, width, in_channels = shape

    def cost(form: WinogradForm) -> float:
        rows = padded_rows(batch * form.tiles(height) * form.tiles(width), target)
        planes = form.side**2
        flops = 2 * planes * rows * in_channels * out_channels
        moved = 4 * planes * (in_channels * out_channels + 2 * rows * (in_channels + out_channels))
        return flops + flops_per_byte * moved

    return min(FORMS, key=cost)


def integer_sums_fit(u: np.ndarray, form: WinogradForm = F2_INTEGER) -> bool:
    """Whether every sum the integer form computes on these transformed weights ``U``
    (``[(m + 2)², in, out]``) and any u8 input stays in s32: the products' channel sums, and the
    output transform's sums of those, bounded by absolute values. A constraint on data, checked
    where the weights are constants: a convolution that fails it stays direct. (s8 weights fit up to
    about 200 input channels whatever their values; trained ones, far more.)"""
    spread = lambda m: int(np.abs(m).sum(axis=1).max())  # noqa: E731  # the most a row adds up
    inputs = 255 * spread(form.b_t) ** 2
    products = inputs * int(np.abs(u.astype(np.int64)).sum(axis=1).max())
    return products * spread(form.a_t) ** 2 <= np.iinfo(np.int32).max


def _select(row, values: list, dtype: str):
    """``values[row]`` for a row that depends on the loops: a chain of selects between constants,
    which the code generator hoists out of the channel loop (rows holding the last value fall
    through)."""
    value = tirx.const(values[-1], dtype)
    for index in range(len(values) - 2, -1, -1):
        if values[index] != values[-1]:
            value = tirx.Select(row == index, tirx.const(values[index], dtype), value)
    return value


def _row_terms(matrix: np.ndarray, row, dtype: str) -> list[tuple[tirx.PrimExpr, tirx.PrimExpr]]:
    """Row ``row`` of a transform matrix applied to a vector, as its nonzero terms only: per term
    the entry of the vector it reads and its coefficient. F(2x2, 3x3)'s ``Bᵀ`` has two nonzero
    entries per row and its ``Aᵀ`` three, so a 2-D transform reads 4 (or 9) inputs per output, not
    16; a row with fewer nonzero entries than the others (F(4x4, 3x3)'s) pads its terms with
    coefficient 0.

    The coefficients are selects, not a constant table: MetaSchedule's RewriteLayout re-lays out a
    model's constant parameters after the loops that index them, and it drops the column of a table
    indexed by a constant (``table[k, 3]``), so the tuned transforms read the wrong coefficients.
    """
    # per row, its (column, coefficient) terms, padded with zero terms to the longest row's count
    per_row = [[(int(c), entries[c].item()) for c in np.flatnonzero(entries)] for entries in matrix]
    terms = max(len(r) for r in per_row)
    per_row = [r + [(r[0][0], 0)] * (terms - len(r)) for r in per_row]
    return [
        (
            _select(row, [r[term][0] for r in per_row], "int32"),
            _select(row, [r[term][1] for r in per_row], dtype),
        )
        for term in range(terms)
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


def _input_tiles(
    data: te.Tensor,
    padded_tiles: int,
    form: WinogradForm,
    out_size: tuple[int, int],
    pad: int,
    dtype: str,
) -> te.Tensor:
    """``V[side i + j, p, c] = (Bᵀ d_p B)[i, j]`` in ``dtype`` over each tile ``p``'s input ``d_p``
    of channel ``c``, zero-padded by ``pad`` (tiles of an ``out_size`` output); rows past the last
    tile are zeros."""
    batch, height, width, channels = (int(d) for d in data.shape)
    side, rows, cols = form.side, form.tiles(out_size[0]), form.tiles(out_size[1])

    def value(k, p, c):
        n, t = p // (rows * cols), p % (rows * cols)
        total, columns = tirx.const(0, dtype), _row_terms(form.b_t, k % side, dtype)
        for dy, row_coefficient in _row_terms(form.b_t, k // side, dtype):
            for dx, column_coefficient in columns:
                y, x = (t // cols) * form.tile + dy - pad, (t % cols) * form.tile + dx - pad
                inside = tirx.all(n < batch, y >= 0, y < height, x >= 0, x < width)
                term = tirx.if_then_else(
                    inside, data[n, y, x, c].astype(dtype), tirx.const(0, dtype)
                )
                total = total + row_coefficient * column_coefficient * term
        return total

    return te.compute((side * side, padded_tiles, channels), value, name="winograd_input")


def _channel_groups(sch: Schedule, channel, lanes: int | None) -> tuple:
    """The channel loop cut into groups of ``lanes`` (one vector register), or left whole (one
    group) where no vector width is known or the channels are not a whole number of vectors."""
    extent = int(sch.get(channel).extent)
    if lanes is None or lanes >= extent or extent % lanes:
        return (), channel
    group, channel = sch.split(channel, factors=[None, lanes])
    return (group,), channel


def _unrolled(sch: Schedule, loops) -> None:
    for loop in loops:
        sch.unroll(loop)
        # annotated, MetaSchedule's parallel postproc does not fuse it into a small image's tiles
        sch.annotate(loop, "pragma_unroll_explicit", 1)


def _planes_per_tile(func: tirx.PrimFunc, lanes: int | None) -> tirx.PrimFunc:
    """The input transform's loops as (tile, channel group, plane, channel), the plane loop
    unrolled: each tile's planes read its input window once per group of ``lanes`` channels, with
    their coefficients and offsets constants.

    In the output's order (plane, tile, channel), every (plane, tile) pair evaluated the selects
    and bounds again for one row of channels: ResNet-50's first 3x3 convolution's F(2x2, 3x3)
    transform (56x56, 64 channels) took 0.27 ms that way and 0.08 ms tile by tile on a Zen 3, the
    same bits. In groups of one vector the window stays near the registers: compiled for AVX2 on a
    Zen 3, a 28x28, 128-channel transform took 0.028 ms (F(2x2, 3x3)) and 0.052 ms (F(4x4, 3x3)) in
    8-channel groups, against 0.034 and 0.091 ms with the 64 lanes the tuner's vectorizer picks."""
    sch = Schedule(func)
    plane, tile, channel = sch.get_loops(sch.get_sblock("winograd_input"))
    groups, channel = _channel_groups(sch, channel, lanes)
    sch.reorder(tile, *groups, plane, channel)
    _unrolled(sch, [plane])
    return sch.mod["main"]


def _output_tiles(
    products: te.Tensor, batch: int, height: int, width: int, form: WinogradForm
) -> te.Tensor:
    """``out[n, y, x, o] = (Aᵀ M_p A)[y % m, x % m]`` over tile ``p``'s products ``M_p`` of
    channel ``o``, cropped to the image (shifted back by an integer form's scale)."""
    rows, cols, side, m = form.tiles(height), form.tiles(width), form.side, form.tile
    channels, dtype = int(products.shape[2]), str(products.dtype)

    def value(n, y, x, o):
        p = n * rows * cols + (y // m) * cols + x // m
        total, columns = tirx.const(0, dtype), _row_terms(form.a_t, x % m, dtype)
        for i, row_coefficient in _row_terms(form.a_t, y % m, dtype):
            for j, column_coefficient in columns:
                total = total + row_coefficient * column_coefficient * products[i * side + j, p, o]
        # exact: the products' sum is a multiple of the scale
        return total >> form.scale_bits if form.scale_bits else total

    return te.compute((batch, height, width, channels), value, name="winograd_output")


def _pixels_per_tile(func: tirx.PrimFunc, form: WinogradForm, lanes: int | None) -> tirx.PrimFunc:
    """The output transform's loops as (image, tile row, tile column, channel group, y, x,
    channel), the ``m x m`` pixels of a tile unrolled, as :func:`_planes_per_tile` does for the
    input: each pixel's coefficients and its tile's plane offsets are then constants. Pixel by
    pixel, F(4x4, 3x3)'s output transform (56x56, 64 channels) took 0.33 ms in a tuned model on a
    Zen 3, against 0.14 ms for F(2x2, 3x3)'s; tile by tile in 8-channel groups, a 28x28,
    128-channel one took 0.030 ms (0.074 ms with 64 lanes)."""
    sch = Schedule(func)
    block = sch.get_sblock("winograd_output")
    # its epilogue inlines into it, never it into the epilogue's pixel-by-pixel loops
    sch.annotate(block, "meta_schedule.inline_rule", "disable")
    _, y, x, channel = sch.get_loops(block)
    tile_row, pixel_y = sch.split(y, factors=[None, form.tile])
    tile_column, pixel_x = sch.split(x, factors=[None, form.tile])
    groups, channel = _channel_groups(sch, channel, lanes)
    sch.reorder(tile_row, tile_column, *groups, pixel_y, pixel_x, channel)
    _unrolled(sch, [pixel_y, pixel_x])
    return sch.mod["main"]


def _convolution_weight(call: relax.Call, *, integer: bool) -> tuple[np.ndarray, int] | None:
    """The HWIO weight and the padding (0 or 1 on every side) of an NHWC 3x3 convolution with stride
    1, no dilation or groups, a constant weight and ``MIN_CHANNELS`` or more on each side: float32
    (padded by 1), or with ``integer`` u8 x s16 -> s32 (the s8 weights the lowering widened for
    ``vpmaddwd``, its input padded with the zero point before it or by 0 here); None for any other
    call. The attributes and shapes are checked first: only a convolution that passes is read as
    numpy."""
    if getattr(call.op, "name", "") != "relax.nn.conv2d":
        return None
    attrs, weight_shape = call.attrs, static_shape(call.args[1])
    layout = str(attrs.kernel_layout)
    pads = {tuple(int(p) for p in attrs.padding)} & (
        {(0,) * 4, (1,) * 4} if integer else {(1,) * 4}
    )
    dtypes = (str(call.args[0].ty.dtype), str(attrs.out_dtype), str(call.args[1].ty.dtype))
    if not (
        (str(attrs.data_layout), str(attrs.out_layout)) == ("NHWC", "NHWC")
        and sorted(layout) == sorted("HWIO")
        and [int(s) for s in attrs.strides] == [1, 1]
        and [int(d) for d in attrs.dilation] == [1, 1]
        and pads
        and int(attrs.groups) == 1
        and (
            dtypes == ("uint8", "int32", "int16")
            if integer
            # unset: the input's
            else dtypes[0] == "float32" and dtypes[1] in ("None", "", "void", "float32")
        )
        and static_shape(call.args[0]) is not None
        and weight_shape is not None
        and [weight_shape[layout.index(d)] for d in "HW"] == [3, 3]
        and min(weight_shape[layout.index(d)] for d in "IO") >= MIN_CHANNELS
    ):
        return None
    weight = constant_value(call.args[1])
    if weight is None:
        return None
    return np.transpose(weight, [layout.index(d) for d in "HWIO"]), pads.pop()[0]


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod: IRModule, flops_per_byte: float | None):
        super().__init__(mod)
        self.flops_per_byte = flops_per_byte  # None: measured at the first convolution rewritten
        self.target = target = tvm.target.Target.current(allow_none=True)
        dot = dot_product(target) if target is not None else None
        # int8 only where the exact dot product multiplies s16: elsewhere bytes are faster
        self.integer = dot is not None and dot.widens

    def _form(self, call: relax.Call) -> tuple[WinogradForm, np.ndarray, int, str] | None:
        """The form to rewrite ``call`` in, its weights transformed, its padding and the dtype of
        its transformed input tiles; None: it stays direct."""
        target = self.target
        found = _convolution_weight(call, integer=False)
        if found is not None:
            weight, pad = found
            if self.flops_per_byte is None:
                self.flops_per_byte = (
                    math.inf if target is None else measured_flops_per_byte(target)
                )
            shape = tuple(static_shape(call.args[0]))
            form = chosen_form(shape, weight.shape[3], target, self.flops_per_byte)
            return form, winograd_weight(weight, form), pad, "float32"
        found = _convolution_weight(call, integer=True) if self.integer else None
        if found is None:
            return None
        weight, pad = found
        # s8 values (widened), whose transforms fit s16
        if np.abs(weight.astype(np.int64)).max() > 128:
            return None
        u = winograd_weight(weight, F2_INTEGER)
        return (F2_INTEGER, u, pad, "int16") if integer_sums_fit(u) else None

    def visit_call_(self, call: relax.Call):  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        found = self._form(call)
        if found is None:
            return call
        form, weight, pad, tile_dtype = found
        data, target = call.args[0], self.target
        batch, height, width, _ = (int(d) for d in static_shape(data))
        out_size = (height + 2 * pad - 2, width + 2 * pad - 2)
        tiles = batch * form.tiles(out_size[0]) * form.tiles(out_size[1])
        product_dtype = str(call.ty.dtype)

        def lanes(dtype: str) -> int | None:
            cpu = target is not None and is_cpu(target)
            return vector_bytes(target) * 8 // tvm.DataType(dtype).bits if cpu else None

        func, args, output = gen_call_tir_inputs(
            functools.partial(
                _input_tiles, form=form, out_size=out_size, pad=pad, dtype=tile_dtype
            ),
            data,
            padded_rows(tiles, target),
        )
        transform = self.builder_.add_func(
            _planes_per_tile(func, lanes(tile_dtype)), "winograd_input"
        )
        tiles = self.builder_.emit(relax.call_tir(transform, args, output))
        products = self.builder_.emit(
            relax.op.matmul(tiles, relax.const(weight), out_dtype=product_dtype)
        )
        func, args, output = gen_call_tir_inputs(
            functools.partial(_output_tiles, form=form), products, batch, *out_size
        )
        transform = self.builder_.add_func(
            _pixels_per_tile(func, form, lanes(product_dtype)), "winograd_output"
        )
        return self.builder_.emit(relax.call_tir(transform, args, output))


def winograd_rewrite(*, flops_per_byte: float | None = None) -> tvm.transform.Pass:
    """A pass rewriting every float32 NHWC 3x3 stride-1 convolution with constant weights as
    Winograd's F(2x2, 3x3) or F(4x4, 3x3), whichever :func:`chosen_form` finds cheaper, and on a
    CPU whose exact int8 dot product multiplies s16 (AVX2, AVX-512BW without VNNI) every u8 x s8
    one whose sums fit s32 as :data:`F2_INTEGER`.

    Parameters
    ----------
    flops_per_byte
        The host's peak flops per byte of memory bandwidth, which weighs the forms. None: measured
        on this host for the current target, once per process
        (:func:`ms_heron.hardware.peak.flops_per_byte`; infinite for a target that does not run
        here). A run keeps the value it began with, so that the same model lowers to the same tasks
        in a later process; ``math.inf`` keeps F(2x2, 3x3) everywhere.
    """

    @never_failing
    @tvm.transform.module_pass(opt_level=0, name="WinogradConvolutions")
    def rewrite(mod: IRModule, _ctx) -> IRModule:
        rewriter = _Rewriter(mod, flops_per_byte)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
        # the rewritten convolution's binding is left as an alias of the output transform: FuseOps
        # fuses the epilogue only into an op it sees as its direct producer
        return relax.transform.CanonicalizeBindings()(rewriter.builder_.get())

    return rewrite


#: The rewrite for a stock pipeline: the forms weighed at this host's balance, measured once per
#: process for the current target.
winograd_convolutions = winograd_rewrite()
