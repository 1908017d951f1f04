"""The x86 u8 x s8 -> s32 dot-product instructions, and which one a target's CPU has.

Each computes ``lanes`` s32 sums of ``reduction`` byte products per instruction:

* AVX-512 VNNI: ``vpdpbusd`` on 512 bits, 16 lanes x 4.
* AVX-VNNI: the 256-bit VEX ``vpdpbusd`` of Alder Lake and later client parts (Zen 5 too), 8 x 4.
* AVX-512BW without VNNI, and AVX2: both operands widened to s16 and multiplied by ``vpmaddwd``
  (pairs of s16 products summed into s32), 16 or 8 lanes x 2. ``vpmaddubsw`` would multiply the
  bytes directly, but it saturates each pair's sum at s16 (255 x 127 x 2 does not fit): that is why
  ONNX Runtime's int8 is not exact on these CPUs. Widening costs no extra instruction per step in a
  micro-kernel: the weight's ``vpmovsxbw`` is its load, the activation pair is widened once per
  broadcast.

All are exact. The intrinsics (:mod:`ms_heron.intrinsics.x86_dot`) and the peak probe
(:mod:`.probes`) issue the same :meth:`DotProduct.step`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx
from tvm.script import tirx as T
from tvm.target import Target, codegen

from .targets import TargetError, cpu_name, is_cpu, vector_bytes


@dataclass(frozen=True)
class DotProduct:
    """One x86 integer dot-product instruction: ``lanes`` s32 sums of ``reduction`` products each.

    Parameters
    ----------
    name
        Its tensor intrinsic's name (what records and the Tensorize rule use).
    isa
        The instruction set, as a user reads it ("AVX2").
    features
        The LLVM target features the instruction needs, all of them.
    instruction
        The LLVM intrinsic; it takes the accumulator first where ``fused`` (``vpdpbusd``).
    mnemonic
        The instruction in assembly, for checks and reports.
    operand
        The element type the instruction multiplies: ``int8`` (bytes as loaded) or ``int16`` (both
        operands widened first).
    lanes, reduction
        The s32 results per instruction and the products each sums.
    fused
        Whether the instruction adds into the accumulator itself; else a ``vpaddd`` follows.
    """

    name: str
    isa: str
    features: tuple[str, ...]
    instruction: str
    mnemonic: str
    operand: str
    lanes: int
    reduction: int
    fused: bool

    @property
    def tile(self) -> tuple[int, int]:
        """``(lanes, reduction)``: the packed weight's tile, ``[n // lanes, k // reduction, n % lanes,
        k % reduction]``."""
        return self.lanes, self.reduction

    @property
    def operand_type(self) -> str:
        """The vector type of the instruction's two multiplicands."""
        return f"{self.operand}x{self.lanes * self.reduction}"

    @property
    def ops_per_instruction(self) -> int:
        """Operations (a multiply and an add per product) one instruction does."""
        return 2 * self.lanes * self.reduction

    def step(self, acc: tirx.PrimExpr, a: tirx.PrimExpr, b: tirx.PrimExpr) -> tirx.PrimExpr:
        """``acc`` (``int32 x lanes``) plus the dot products of ``a`` and ``b`` (both of
        :attr:`operand_type`)."""
        op = T.llvm_lookup_intrinsic_id(self.instruction)
        if self.fused:
            return T.call_llvm_pure_intrin(op, acc, a, b, dtype=f"int32x{self.lanes}")
        return acc + T.call_llvm_pure_intrin(op, a, b, dtype=f"int32x{self.lanes}")

    def broadcast(self, word: tirx.PrimExpr) -> tirx.PrimExpr:
        """A 32-bit word repeated across the lanes, as the instruction's operand."""
        return T.reinterpret(T.broadcast(word, self.lanes), dtype=self.operand_type)

    def activation(self, group: tirx.PrimExpr) -> tirx.PrimExpr:
        """One activation group (``uint8 x reduction``), widened where the instruction needs it,
        broadcast across the lanes: 4 bytes, or 2 widened to s16, are one 32-bit word."""
        if self.operand == "int16":
            group = T.Cast(f"int16x{self.reduction}", group)
        return self.broadcast(T.reinterpret(group, dtype="int32"))

    def weights(self, tile: tirx.PrimExpr) -> tirx.PrimExpr:
        """A packed weight tile (``int8 x lanes*reduction``) as the instruction's operand."""
        return tile if self.operand == "int8" else T.Cast(self.operand_type, tile)

    def runs_on(self, target: Target) -> bool:
        """Whether the target's CPU has the instruction, from LLVM's feature set."""
        return is_cpu(target) and all(codegen.target_has_features(f, target) for f in self.features)


#: Every x86 dot product, best first.
DOT_PRODUCTS = (
    DotProduct(
        name="ms_heron_dot_16x4_vnni",
        isa="AVX-512 VNNI",
        features=("avx512vnni",),
        instruction="llvm.x86.avx512.vpdpbusd.512",
        mnemonic="vpdpbusd",
        operand="int8",
        lanes=16,
        reduction=4,
        fused=True,
    ),
    DotProduct(
        name="ms_heron_dot_8x4_avxvnni",
        isa="AVX-VNNI",
        features=("avxvnni",),
        instruction="llvm.x86.avx512.vpdpbusd.256",
        mnemonic="vpdpbusd",
        operand="int8",
        lanes=8,
        reduction=4,
        fused=True,
    ),
    DotProduct(
        name="ms_heron_dot_16x2_avx512bw",
        isa="AVX-512BW",
        features=("avx512bw",),
        instruction="llvm.x86.avx512.pmaddw.d.512",
        mnemonic="vpmaddwd",
        operand="int16",
        lanes=16,
        reduction=2,
        fused=False,
    ),
    DotProduct(
        name="ms_heron_dot_8x2_avx2",
        isa="AVX2",
        features=("avx2",),
        instruction="llvm.x86.avx2.pmadd.wd",
        mnemonic="vpmaddwd",
        operand="int16",
        lanes=8,
        reduction=2,
        fused=False,
    ),
)
#: AVX-512 VNNI's: AMX reads weights in its packed layout.
VNNI = DOT_PRODUCTS[0]


def dot_product(target: Target) -> DotProduct | None:
    """The best dot product the target's CPU has (None: not an x86 CPU with AVX2)."""
    return next((d for d in DOT_PRODUCTS if d.runs_on(target)), None)


def require_dot_product(target: Target) -> DotProduct:
    """:func:`dot_product`, or a :class:`TargetError` naming the CPU where there is none."""
    dot = dot_product(target)
    if dot is None:
        raise TargetError(
            f"int8 kernels need an x86 CPU with AVX2 at least, but target {target.kind.name} with CPU "
            f"'{cpu_name(target)}' has none; use an mcpu such as 'haswell', 'znver3' or 'znver4' (or "
            "ms_heron.hardware.targets.host_target() on such a machine), or the fp32 form"
        )
    return dot


def native_dtype(target: Target) -> str:
    """The operator suite's form this CPU computes fastest: ``int8`` where its dot product does more
    operations per instruction than an fp32 FMA on its widest vector (every x86 CPU with AVX2: 32
    against 16 there), else ``fp32``. The default of ``ms-heron tune`` and ``demo``."""
    dot = dot_product(target)
    return "int8" if dot is not None and dot.ops_per_instruction > 2 * vector_bytes(target) // 4 else "fp32"
