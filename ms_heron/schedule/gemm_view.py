"""A convolution as the GEMM an AMX tile computes: its output pixels fused into one row iterator.

AMX computes 32 x 32 output blocks whose 32 rows are one strided 2-D tile of the input, so a
block's rows must be one iterator next to the reduction's channels. A convolution's rows are its
output pixels, two iterators (h, w):

- on a 14 x 14 or 7 x 7 feature map (ResNet-50's last two stages), padding w alone to 32 rows
  more than doubles the work;
- a 3 x 3 convolution's im2col view ``X[h, w, kh, kw, c]`` puts its kernel window between a row
  and its channels, which no tile reads.

Seen as a GEMM, the pixels are one row iterator, padded once (196 to 224, 49 to 64). The input is
gathered into a copy laid out ``[kernel taps..., rows, channels]``: the im2col copy the padding
makes anyway. The result goes to a ``[rows, channels]`` buffer. The copy back to the output's
layout takes the epilogue in and runs over the fused rows too, so that the tiling rules still fuse
it into the tile's write-back.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import SBlockRV, ScheduleError
from tvm.tirx import IndexMap
from tvm.tirx.analysis import undefined_vars

from .analysis import consumers, extents, fusible_consumer
from .annotations import iter_kinds


@dataclass(frozen=True, kw_only=True)
class GemmView:
    """A block :func:`as_gemm` fused, and the copies it put around it."""

    #: The input's copy (``[kernel taps..., rows, channels]``) the block reads.
    gather: SBlockRV
    #: The result's copy back to the output's layout.
    scatter: SBlockRV
    #: The scatter's loops that are rows, and every loop's extent.
    rows: tuple[int, ...]
    shape: tuple[int, ...]

    def settle(self, sch: Schedule, block: SBlockRV) -> bool:
        """After padding: the gather inlined into the padded copy of it (one gathering copy), the
        epilogue into the scatter (``reverse_compute_inline``: the epilogue's own loops may have
        been fused and parallelized by the rules already, the scatter's are new), and the scatter's
        pixels fused into rows like the block's, so that it reads the result by bare iterators.
        False where that last step fails: reading ``r // 7, r % 7``, the scatter would meet TVM's
        ``reverse_compute_at``, whose region for such reads covers one column of pixels."""
        name = sch.get(block).name_hint
        epilogue = fusible_consumer(sch, self.scatter)
        iters = sch.get(self.scatter).iter_vars
        try:
            if not any(sch.get(c).name_hint == name for c in consumers(sch, self.gather)):
                sch.compute_inline(self.gather)
            if epilogue is not None:
                try:
                    sch.reverse_compute_inline(epilogue)
                except ScheduleError:  # it reads other than pixel for pixel: it follows the scatter
                    pass
            sch.transform_block_layout(
                self.scatter,
                IndexMap.from_func(
                    _rows_first(self.rows, self.shape),
                    ndim=len(iters),
                    index_dtype=str(iters[0].var.ty),
                ),
            )
        except ScheduleError:
            return False
        result = sch.get(block).writes[0].source.name
        return all(
            isinstance(r.min, tirx.Var)
            for region in sch.get(self.scatter).reads
            if region.source.name == result
            for r in region.region
        )


def as_gemm(sch: Schedule, block: SBlockRV) -> tuple[Schedule, GemmView] | None:
    """A copy of ``sch`` with the row iterators of ``block`` -- the spatial ones its output uses
    and its weights do not -- fused into one, the input read through a gathering copy and the output
    written through a scattering one; None where fewer than two of them exceed 1, or the block's
    accesses are not a convolution's: one u8 input that uses every row, whose last index is a
    reduction's, and an output whose last dim is not a row."""
    blk = sch.get(block)
    kinds, sizes = iter_kinds(sch, block), extents(blk)
    iters = [iv.var for iv in blk.iter_vars]
    inputs = [i for i, r in enumerate(blk.reads) if str(r.source.dtype) == "uint8"]
    if len(inputs) != 1 or len(blk.writes) != 1:
        return None
    weight_dims = {d for i, r in enumerate(blk.reads) if i != inputs[0] for d in _used(r, iters)}
    out_dims = _used(blk.writes[0], iters)
    rows = [d for d in out_dims if kinds[d] == "S" and d not in weight_dims]
    in_dims = _used(blk.reads[inputs[0]], iters)
    if (
        sum(sizes[d] > 1 for d in rows) < 2
        or not set(rows) <= set(in_dims)
        or kinds[in_dims[-1]] != "R"
        or out_dims[-1] in rows
        or len(out_dims) != len(blk.writes[0].region)
    ):
        return None
    row_sizes = [sizes[d] for d in rows]
    others = [d for d in range(len(iters)) if d not in rows]
    sch = sch.copy()
    try:
        scatter = sch.reindex(block, ("write", 0))
        out_dims = _reindexed_dims(sch.get(block).writes[0], iters)
        rows_at = tuple(out_dims.index(d) for d in rows)
        shape = tuple(sizes[d] for d in out_dims)
        sch.transform_layout(block, ("write", 0), _rows_first(rows_at, shape))
        gather = sch.reindex(block, ("read", inputs[0]))
        in_dims = _reindexed_dims(sch.get(block).reads[inputs[0]], iters)
        taps = [p for p, d in enumerate(in_dims[:-1]) if d not in rows]
        sch.transform_layout(
            block,
            ("read", inputs[0]),
            lambda *idx: [
                *(idx[p] for p in taps),
                _fused([idx[in_dims.index(d)] for d in rows], row_sizes),
                idx[-1],
            ],
        )
        # unit iterators first: left between the rows and the channels, TVM's loop mapping takes
        # them for the tile's
        sch.transform_block_layout(
            block,
            IndexMap.from_func(
                lambda *v: [
                    *(v[d] for d in others if sizes[d] == 1),
                    _fused([v[d] for d in rows], row_sizes),
                    *(v[d] for d in others if sizes[d] > 1),
                ],
                ndim=len(iters),
                index_dtype=str(iters[0].ty),
            ),
        )
    except (RuntimeError, ValueError):  # TVM's conditions (ScheduleError, an index map's) not met
        return None
    return sch, GemmView(gather=gather, scatter=scatter, rows=rows_at, shape=shape)


def _used(region, iters) -> list[int]:
    """Positions of the block iterators ``region``'s indices use, in the block's order."""
    used = [v for r in region.region for v in undefined_vars(r.min)]
    return [d for d, var in enumerate(iters) if any(var.same_as(u) for u in used)]


def _reindexed_dims(region, iters) -> list[int]:
    """The block iterator each dim of a ``reindex`` copy stands for (TVM leaves out unit iterators
    an index only adds, such as a 1 x 1 kernel's)."""
    positions = {var: d for d, var in enumerate(iters)}
    if not all(r.min in positions for r in region.region):
        raise ValueError("a reindexed access is not by bare iterators")
    return [positions[r.min] for r in region.region]


def _fused(values, sizes):
    fused = values[0]
    for value, size in zip(values[1:], sizes[1:]):
        fused = fused * size + value
    return fused


def _rows_first(rows: tuple[int, ...], shape: tuple[int, ...]):
    """``lambda *idx: [rows fused, other dims]`` over a buffer (or loops) of ``shape``."""

    def index_map(*idx):
        return [
            _fused([idx[p] for p in rows], [shape[p] for p in rows]),
            *(idx[p] for p in range(len(shape)) if p not in rows),
        ]

    return index_map
