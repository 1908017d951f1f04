"""The x86 u8 x s8 -> s32 dot-product instructions, and which one a target's CPU has.

Each computes ``lanes`` s32 sums of ``reduction`` byte products per step:

* AVX-512 VNNI: ``vpdpbusd`` on 512 bits, 16 lanes x 4.
* AVX-VNNI: the 256-bit VEX ``vpdpbusd`` of Alder Lake and later client parts (Zen 5 too), 8 x 4.
* AVX-512BW without VNNI, and AVX2: ``vpmaddwd`` multiplies s16 pairs and sums each pair into s32,
  16 or 8 lanes x 2. Its operands are widened to s16 in memory, not in the micro-kernel: the
  weight once at compile time (the lowering stores it as s16, the suite's packed weight is s16
  there) and the activation by a copy the schedule places
  (:func:`ms_heron.schedule.operand_layout.widen_activation`). Widened per step, each broadcast
  cost a load, a zero-extension and a shuffle, and each weight vector a sign-extension: shuffle-port
  work that held AVX2 kernels to two thirds of the instruction's peak. Widened in memory, the
  micro-kernel issues only loads, broadcasts from memory and ``vpmaddwd``.
* The same two, on narrow weights only: ``vpmaddubsw`` multiplies the bytes directly (16 or 8 lanes
  x 4), but it saturates each pair's sum at s16 (255 x 127 x 2 does not fit; that is why ONNX
  Runtime's int8 is not exact on these CPUs), so it is exact only where no pair of weights it sums
  can leave s16 (:func:`bytes_multiply_exactly`).

* ``vpmaddwd`` on s16 values (not widened bytes): the batched GEMM of an int8 convolution run in
  the Winograd domain (:mod:`ms_heron.relax.passes.winograd`), on the CPUs above whose exact form is
  ``vpmaddwd``.

Each is exact where it is used. The intrinsics (:mod:`ms_heron.intrinsics.x86_dot`) and the peak
probe (:mod:`.probes`) issue the same :meth:`DotProduct.step`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np
from tvm import tirx
from tvm.script import tirx as T
from tvm.target import Target, codegen

from .targets import TargetError, cpu_name, is_cpu, narrowed, vector_bytes

#: How a dot product computes (and the instruction a kernel's assembly shows):
#: ``vpdpbusd`` sums four u8 x s8 products into each s32 accumulator; ``vpmaddwd`` multiplies
#: operands widened to s16 and sums pairs into s32 (exact, half the products per instruction);
#: ``vpmaddubsw`` sums pairs of u8 x s8 products into s16, saturating, then ``vpmaddwd`` by ones
#: widens them (exact only on narrow weights: :func:`bytes_multiply_exactly`).
Form = Literal["vpdpbusd", "vpmaddwd", "vpmaddubsw"]

#: PrimFunc attribute: the parameters that are constant s8 weights a byte multiply is exact on
#: (:func:`bytes_multiply_exactly`), recorded by Relax's lowering where the values are known.
NARROW_WEIGHTS = "ms_heron.narrow_weights"

#: Weights within +-64 (the 7-bit weights of ONNX Runtime's ``reduce_range``) keep every pair of u8
#: x s8 products within s16 (255 x 64 x 2 = 32640), however they are paired.
NARROW_WEIGHT = 64


def bytes_multiply_exactly(weights: np.ndarray, axis: int | None) -> bool:
    """Whether ``vpmaddubsw`` is exact on these s8 weights ("narrow") for every u8 activation: no
    pair it sums -- elements ``2i`` and ``2i + 1`` along the reduction ``axis``, as the weight is
    packed; an odd last one pairs with the padding's zero -- can leave s16. That is 255 x (the
    pair's positive weights) <= 32767 and 255 x (its negative ones) >= -32768: a pair of 127 and
    -128 fits, 65 and 64 do not. With ``axis`` None (the pairing is not known) every weight must lie
    within +-:data:`NARROW_WEIGHT`, which fits whatever the pairing. A constraint on data, not on
    shapes: only the lowering, where weights are constants, can check it."""
    if weights.dtype != np.int8:
        return False
    if weights.size == 0:
        return True
    if axis is None:
        return int(np.abs(weights.astype(np.int16)).max()) <= NARROW_WEIGHT
    w = np.moveaxis(weights.astype(np.int32), axis, -1)
    if w.shape[-1] % 2:
        w = np.concatenate([w, np.zeros((*w.shape[:-1], 1), np.int32)], axis=-1)
    pairs = w.reshape(*w.shape[:-1], -1, 2)
    most, least = np.iinfo(np.int16).max, np.iinfo(np.int16).min
    return bool(
        (255 * np.clip(pairs, 0, None).sum(-1) <= most).all()
        and (255 * np.clip(pairs, None, 0).sum(-1) >= least).all()
    )


def narrowing_order(weights: np.ndarray, axis: int) -> np.ndarray | None:
    """An order of the reduction ``axis`` under which ``vpmaddubsw`` is exact on these s8 weights
    (:func:`bytes_multiply_exactly`), or None where none is found.

    A dot product may sum its products in any order, so a weight whose adjacent pairs saturate
    still multiplies as bytes if its reduction rows are paired anew, the activation's channels
    taken in the same order. In a quantized network's weights few values exceed 64 (per-channel
    quantization maps only each channel's extreme to 127), so two rows rarely clash: rows ``i``
    and ``j`` clash where some column's pair leaves s16 -- a sum of positive weights or of
    negative ones past 128 (255 x 128 = 32640). Pairing rows that do not clash is a matching;
    the most constrained row takes its most constrained partner first. An odd number of rows, or
    a weight where pairing fails (every row holding extremes), has no order."""
    if weights.dtype != np.int8 or weights.shape[axis] % 2:
        return None
    rows = np.moveaxis(weights, axis, 0).reshape(weights.shape[axis], -1).astype(np.int16)
    limit = 128
    clash = np.zeros((len(rows), len(rows)), bool)
    for part in (np.clip(rows, 0, None), np.clip(-rows, 0, None)):
        for row in np.flatnonzero((part > limit // 2).any(1)):  # only such a value can clash
            columns = np.flatnonzero(part[row] > limit // 2)
            clash[row] |= (part[:, columns] > limit - part[row, columns]).any(1)
    fits = ~(clash | clash.T)
    np.fill_diagonal(fits, False)
    taken = len(rows) + 1  # more partners than any row has: never the least
    partners = fits.sum(1)
    order = []
    for _ in range(len(rows) // 2):
        row = np.argmin(partners)
        mate = np.argmin(np.where(fits[row], partners, taken))
        if not fits[row, mate]:
            return None
        partners -= fits[row].astype(int) + fits[mate]
        partners[[row, mate]] = taken
        fits[:, [row, mate]] = False
        order += [row, mate]
    order = np.array(order)
    return order if bytes_multiply_exactly(np.take(weights, order, axis), axis) else None


@dataclass(kw_only=True, frozen=True)
class DotProduct:
    """One x86 integer dot product: ``lanes`` s32 sums of ``reduction`` u8 x s8 products per step.

    Parameters
    ----------
    name
        Its tensor intrinsic's name (what records and the Tensorize rule use).
    isa
        The instruction set, as a user reads it ("AVX2").
    features
        The LLVM target features the instructions need, all of them.
    form
        How it computes (:data:`Form`); also the instruction its kernels' assembly holds.
    instructions
        The LLVM intrinsics one step issues, in order.
    lanes, reduction
        The s32 results per step and the products each sums.
    narrow_weights
        Exact only on weights :func:`bytes_multiply_exactly` accepts (else for
        every s8 weight).
    s16_values
        Its operands hold s16 values themselves, not u8 and s8 values widened: an int8
        convolution's products in the Winograd domain
        (:mod:`ms_heron.relax.passes.winograd`), whose lowering bounds their sums.
    """

    name: str
    isa: str
    features: tuple[str, ...]
    form: Form
    instructions: tuple[str, ...]
    lanes: int
    reduction: int
    narrow_weights: bool = False
    s16_values: bool = False

    @property
    def tile(self) -> tuple[int, int]:
        """``(lanes, reduction)``: the packed weight's tile, ``[n // lanes, k // reduction, n %
        lanes, k % reduction]``."""
        return self.lanes, self.reduction

    @property
    def widens(self) -> bool:
        """Whether it multiplies s16 (``vpmaddwd``): its operands are stored widened."""
        return self.form == "vpmaddwd"

    @property
    def widens_activation(self) -> bool:
        """Whether its activation operand is a u8 one the schedule widens to s16 (a copy)."""
        return self.widens and not self.s16_values

    @property
    def operand_dtypes(self) -> set[str]:
        """The dtypes of a block it tensorizes: the activation's before any widening, the
        weight's as stored, the accumulator's."""
        return {"int16", "int32"} if self.s16_values else {"uint8", self.weight_dtype, "int32"}

    @property
    def weight_dtype(self) -> str:
        """The dtype a weight is stored in for it: s8 values as s8, or widened to s16."""
        return "int16" if self.widens else "int8"

    @property
    def activation_dtype(self) -> str:
        """The dtype its activation operand is read in: u8 values as u8, or widened to s16."""
        return "int16" if self.widens else "uint8"

    @property
    def operand_type(self) -> str:
        """The vector type of the two multiplicands as one step reads them."""
        return f"{self.weight_dtype}x{self.lanes * self.reduction}"

    @property
    def ops_per_step(self) -> int:
        """Operations (a multiply and an add per product) one step does."""
        return 2 * self.lanes * self.reduction

    def step(self, acc: tirx.PrimExpr, a: tirx.PrimExpr, b: tirx.PrimExpr) -> tirx.PrimExpr:
        """``acc`` (``int32 x lanes``) plus the dot products of ``a`` (u8 values) and ``b`` (s8
        values; both s16 values for :attr:`s16_values`), both of :attr:`operand_type`."""
        ops = [T.llvm_lookup_intrinsic_id(i) for i in self.instructions]
        out = f"int32x{self.lanes}"
        if self.form == "vpdpbusd":
            return T.call_llvm_pure_intrin(ops[0], acc, a, b, dtype=out)
        if self.form == "vpmaddwd":
            return acc + T.call_llvm_pure_intrin(ops[0], a, b, dtype=out)
        pairs = T.call_llvm_pure_intrin(ops[0], a, b, dtype=f"int16x{2 * self.lanes}")
        return acc + T.call_llvm_pure_intrin(
            ops[1], pairs, T.broadcast(T.int16(1), 2 * self.lanes), dtype=out
        )

    def broadcast(self, word: tirx.PrimExpr) -> tirx.PrimExpr:
        """A 32-bit word (one activation group: 4 bytes, or 2 s16) repeated across the lanes, as a
        multiplicand."""
        return T.reinterpret(T.broadcast(word, self.lanes), dtype=self.operand_type)

    @property
    def isa_key(self) -> str:
        """Its instruction set as :data:`.ISA_MCPU` and ``--isa`` name it ("avx2"): the first of
        :attr:`features`."""
        return self.features[0]

    def own_target(self, target: Target) -> Target:
        """``target`` compiled for this instruction set and nothing wider (:func:`.narrowed`), as a
        CPU with only this set runs its kernels.
        Where ``target`` has AVX-512 VNNI, LLVM fuses ``vpmaddwd`` and its ``vpaddd`` into
        ``vpdpwssd``, which such a CPU lacks: a Zen 4's AVX2 probe read 472 GOPS for the fused
        instruction against 353 for its AVX2 code."""
        return narrowed(target, self.isa_key)

    def runs_on(self, target: Target) -> bool:
        """Whether the target's CPU has the instructions, from LLVM's feature set."""
        return is_cpu(target) and all(codegen.target_has_features(f, target) for f in self.features)


_AVX512_PAIRS = ("llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512")
_AVX2_PAIRS = ("llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd")

#: Every x86 dot product, fastest first.
DOT_PRODUCTS = (
    DotProduct(
        name="ms_heron_dot_16x4_vnni",
        isa="AVX-512 VNNI",
        features=("avx512vnni",),
        form="vpdpbusd",
        instructions=("llvm.x86.avx512.vpdpbusd.512",),
        lanes=16,
        reduction=4,
    ),
    DotProduct(
        name="ms_heron_dot_8x4_avxvnni",
        isa="AVX-VNNI",
        features=("avxvnni",),
        form="vpdpbusd",
        instructions=("llvm.x86.avx512.vpdpbusd.256",),
        lanes=8,
        reduction=4,
    ),
    DotProduct(
        name="ms_heron_dot_16x4_avx512bw_7bit",
        isa="AVX-512BW",
        features=("avx512bw",),
        form="vpmaddubsw",
        instructions=_AVX512_PAIRS,
        lanes=16,
        reduction=4,
        narrow_weights=True,
    ),
    DotProduct(
        name="ms_heron_dot_16x2_avx512bw",
        isa="AVX-512BW",
        features=("avx512bw",),
        form="vpmaddwd",
        instructions=_AVX512_PAIRS[1:],
        lanes=16,
        reduction=2,
    ),
    DotProduct(
        name="ms_heron_dot_8x4_avx2_7bit",
        isa="AVX2",
        features=("avx2",),
        form="vpmaddubsw",
        instructions=_AVX2_PAIRS,
        lanes=8,
        reduction=4,
        narrow_weights=True,
    ),
    DotProduct(
        name="ms_heron_dot_8x2_avx2",
        isa="AVX2",
        features=("avx2",),
        form="vpmaddwd",
        instructions=_AVX2_PAIRS[1:],
        lanes=8,
        reduction=2,
    ),
)
#: AVX-512 VNNI's: AMX reads weights in its packed layout.
VNNI = DOT_PRODUCTS[0]
#: ``vpmaddwd`` on s16 values (:attr:`DotProduct.s16_values`), per instruction set that multiplies
#: s16: the batched GEMM of an int8 convolution in the Winograd domain.
S16_DOT_PRODUCTS = tuple(
    dataclasses.replace(d, name=f"{d.name}_s16", s16_values=True) for d in DOT_PRODUCTS if d.widens
)


def by_name(name: str) -> DotProduct | None:
    return next((d for d in (*DOT_PRODUCTS, *S16_DOT_PRODUCTS) if d.name == name), None)


def dot_products(target: Target) -> list[DotProduct]:
    """The dot products the Tensorize rule offers for ``target``, fastest first: the best exact one
    the CPU has, and before it, where that one only widens, the form for 7-bit weights of the same
    instruction set (the rule uses it only on weights known to fit); after it, its form for s16
    values (the rule matches it only to blocks of s16 operands)."""
    exact = dot_product(target)
    if exact is None:
        return []
    narrow = [d for d in DOT_PRODUCTS if d.narrow_weights and d.isa == exact.isa]
    s16 = [d for d in S16_DOT_PRODUCTS if d.isa == exact.isa]
    return [*narrow, exact, *s16]


def narrow_dot_product(target: Target) -> DotProduct:
    """The byte multiply ``target``'s CPU runs on narrow weights (:func:`bytes_multiply_exactly`):
    the first of :func:`dot_products` where the exact form widens; a :class:`TargetError` naming
    the CPU where the exact form multiplies every s8 weight as bytes already (VNNI), so that no
    narrow form is offered."""
    exact = require_dot_product(target)
    first = dot_products(target)[0]
    if not first.narrow_weights:
        raise TargetError(
            f"CPU '{cpu_name(target)}' multiplies every s8 weight exactly with {exact.isa}; "
            "narrow weights have a form of their own only without VNNI: narrow the target to "
            "such an instruction set (mcpu 'haswell' for AVX2, 'skylake-avx512' for AVX-512BW)"
        )
    return first


def narrow_weight_params(func: tirx.PrimFunc) -> set[int]:
    """The parameters of ``func`` that the lowering recorded as narrow weights
    (:data:`NARROW_WEIGHTS`)."""
    return {int(i) for i in (func.attrs or {}).get(NARROW_WEIGHTS, [])}


def kernel_dot_product(func: tirx.PrimFunc, target: Target) -> DotProduct | None:
    """The fastest dot product a kernel of ``func`` may use on ``target``: the byte multiply where
    every s8 parameter is a narrow weight and the CPU's exact form widens, else
    :func:`dot_product`."""
    dots = dot_products(target)
    weights = {i for i, p in enumerate(func.params) if str(p.ty.dtype) == "int8"}
    if dots and dots[0].narrow_weights and weights and weights <= narrow_weight_params(func):
        return dots[0]
    return dot_product(target)


def dot_product(target: Target) -> DotProduct | None:
    """The best dot product the target's CPU has that is exact for every weight (None: not an x86
    CPU with AVX2)."""
    return next((d for d in DOT_PRODUCTS if not d.narrow_weights and d.runs_on(target)), None)


def require_dot_product(target: Target) -> DotProduct:
    """:func:`dot_product`, or a :class:`TargetError` naming the CPU where there is none."""
    dot = dot_product(target)
    if dot is None:
        raise TargetError(
            f"int8 kernels need an x86 CPU with AVX2 at least, but target {target.kind.name} with "
            f"CPU '{cpu_name(target)}' has none; use an mcpu such as 'haswell', 'znver3' or "
            "'znver4' (or ms_heron.hardware.targets.host_target() on such a machine), or the fp32 "
            "form"
        )
    return dot


def native_dtype(target: Target) -> str:
    """The operator suite's form this CPU computes fastest: ``int8`` where its dot product does more
    operations per instruction than an fp32 FMA on its widest vector (every x86 CPU with AVX2: 32
    against 16 there), else ``fp32``. The default of ``ms-heron tune`` and ``demo``."""
    dot = dot_product(target)
    return (
        "int8" if dot is not None and dot.ops_per_step > 2 * vector_bytes(target) // 4 else "fp32"
    )
