"""Heron's Add-Cache-Stage rule (and, with a fusible consumer, stage fusion at the same levels)."""

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV

from ..schedule.analysis import (
    accumulates_in_tiles,
    consumers,
    fusible_consumer,
    is_tiled,
    side_producers,
    strictly_inlinable,
    tile_levels,
    transposed_lane_dim,
    working_block,
)
from ..schedule.annotations import CACHE_LEVEL
from ..schedule.options import check, heron_object
from .base import HeronRule


@heron_object
class AddCacheStage(HeronRule):
    """Condition: HasDataReuse (the block was multi-level tiled) and not HasFusibleConsumer.

    Application: ``cache_write`` the output into a ``scope`` accumulator and write it back under
    the tile loop of spatial level ``S<l>``, one design space per level in ``levels`` (Heron's
    position knob). When the block has a fusible consumer (bias, activation), that consumer is the
    write-back instead: it is ``reverse_compute_at`` the same levels (Heron's stage fusion).
    (The write-back's loops are left to LLVM's vectorizer: how many ``reverse_compute_at`` creates
    depends on the sampled tile sizes, so a trace cannot name its innermost loop.)

    An AMX block without a fusible consumer gets no stage: its accumulators are tile registers,
    stored once per call, and a ``cache_write`` buffer would only add a copy of the output (the
    best 1024^3 GEMM kernel on an Emerald Rapids Xeon ran 1.1x faster without it).

    When the micro-kernel's lanes do not run along the output's last dimension (an NCHW
    convolution vectorized over its channels), the accumulator is always a ``cache_write`` tile,
    stored lanes-last so its vectors are contiguous, and a fusible consumer follows it at the same
    level: accumulating in the output itself would gather and scatter every lane.

    A consumer's other producers that Always-Inline would inline anyway (a quantized GEMM's cast
    of its zero point) are inlined first: the rules visit consumers first, so such a producer is
    still a block of its own here, and it would keep the consumer out of the tile. BERT-base's
    int8 FFN GEMM for AVX2 then ran its GELU in the write-back instead of a second pass over the
    s32 result.

    Acts only on a block :class:`MultiLevelTiling` tiled (its tiling annotation); put it after.

    Parameters
    ----------
    levels
        Spatial tile levels the write-back may sit under, one design space each (0: under ``S0``).
    scope
        Storage scope of the accumulator.
    """

    def __init__(self, *, levels: tuple[int, ...] = (0, 1), scope: str = "global"):
        check(
            len(levels) > 0 and all(isinstance(x, int) and x >= 0 for x in levels),
            f"AddCacheStage(levels={levels!r}): give one or more tile levels >= 0, such as (0, 1)",
        )
        self.levels = tuple(levels)
        self.scope = scope

    def apply(self, sch: Schedule, block: SBlockRV) -> list[Schedule]:
        block = working_block(sch, block)
        if not is_tiled(sch, block):
            return [sch]
        _inline_side_producers(sch, block)
        if accumulates_in_tiles(sch, block) and fusible_consumer(sch, block) is None:
            return [sch]
        out = []
        for level in self.levels:
            fork = sch.copy() if len(self.levels) > 1 else sch
            tile = tile_levels(fork, block)
            key = f"S{level}"
            if key not in tile:
                continue
            transposed = transposed_lane_dim(fork, block, self.target)
            consumer = fusible_consumer(fork, block)
            stage = consumer if transposed is None else None
            if stage is None:
                stage = fork.cache_write(block, 0, self.scope)
                if transposed is not None:
                    fork.transform_layout(block, ("write", 0), _moved_last(transposed))
            fork.reverse_compute_at(stage, tile[key][-1])
            fork.annotate(stage, CACHE_LEVEL, level)
            if consumer is not None and stage is not consumer:
                fork.reverse_compute_at(consumer, tile[key][-1])
                fork.annotate(consumer, CACHE_LEVEL, level)
            out.append(fork)
        return out or [sch]


def _inline_side_producers(sch: Schedule, block: SBlockRV) -> None:
    """Inline the strictly inlinable producers of ``block``'s single consumer, other than
    ``block`` itself."""
    single = consumers(sch, block)
    if len(single) != 1:
        return
    for producer in side_producers(sch, block, single[0]):
        if strictly_inlinable(sch, producer):
            sch.compute_inline(producer)


def _moved_last(dim: int):
    """The index map that moves buffer dimension ``dim`` to the end."""

    def index_map(*idx):
        return [*idx[:dim], *idx[dim + 1 :], idx[dim]]

    return index_map
