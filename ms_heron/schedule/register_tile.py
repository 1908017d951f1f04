"""The rows a dot product's register tile wants, and the row padding that admits them.

A micro-kernel keeps ``MR x V`` accumulators (``MR`` broadcast rows by ``V`` weight vectors) in the
vector registers, beside the ``V`` weight vectors and one broadcast. It issues a dot product on
every port every cycle only with at least latency x ports accumulators (BLIS's ``N_vfma x
L_vfma``). Perfect tiles take ``MR`` from the rows' divisors, powers of two for a 1024-row GEMM.
With AVX-VNNI (16 ``ymm`` registers; ``vpdpbusd`` needs 10 chains on an Emerald Rapids) the best of
those is 4 x 2: 8 accumulators, 80% of the peak. A 6 x 2 tile (12) fits too and keeps every port
busy, once the rows are padded to a multiple of 6.
"""

from __future__ import annotations

import itertools
import math

#: Rows padded for a register tile add at most this share of the rows.
MAX_ROW_WASTE = 0.125
#: Padded rows are a multiple of ``MR`` x cores times a power of two up to this (outer tiles for
#: cache blocks), the largest that costs at most :data:`_SPARE_WASTE` of the rows more than the
#: least multiple.
_OUTER = 8
_SPARE_WASTE = 0.01


def registers_used(rows: int, vectors: int) -> int:
    """Vector registers a ``rows x vectors`` tile takes: its accumulators, the streamed operand's
    vectors and one broadcast."""
    return rows * vectors + vectors + 1


def loads_balanced(rows: int, vectors: int) -> bool:
    """Whether a step of the tile loads (``rows`` broadcasts, ``vectors`` vectors) no more than it
    multiplies (``rows x vectors``): x86 cores issue as many loads as multiply-adds per cycle."""
    return rows + vectors <= rows * vectors


def useful_accumulators(rows: int, vectors: int, *, registers: int, chains: int) -> int:
    """The accumulators of a ``rows x vectors`` tile that keep the units busy (at most
    ``chains``); 0 where the tile does not fit the registers or loads more than it multiplies."""
    if registers_used(rows, vectors) > registers or not loads_balanced(rows, vectors):
        return 0
    return min(rows * vectors, chains)


def row_multiple(
    row_extents: list[int], vectors: int, *, registers: int, chains: int, cores: int
) -> int | None:
    """The multiple to pad the innermost row iterator (of extent ``row_extents[-1]``) to, so that a
    register tile with more useful accumulators than any the rows' divisors allow fits; None where
    the divisors do as well, or padding would add more than :data:`MAX_ROW_WASTE` of the rows.
    ``vectors``: the weight vectors along one row (the tile's ``V`` divides it). The multiple holds
    ``cores`` tiles' rows: the cores split a GEMM's rows between them
    (:mod:`ms_heron.constraints.cpu`'s row affinity), each its whole tiles."""
    widths = [v for v in range(1, registers) if vectors % v == 0]

    def best(rows_options) -> tuple[int, int]:
        return max(
            (
                (useful_accumulators(mr, v, registers=registers, chains=chains), mr * v)
                for mr in rows_options
                for v in widths
            ),
            default=(0, 0),
        )

    now = best(_tile_rows(row_extents, registers))
    extent = row_extents[-1]
    choices = []
    for mr in range(2, registers):
        score, multiple = best([mr]), _multiple(extent, mr * cores)
        padded = -(-extent // multiple) * multiple
        if score[0] > now[0] and padded <= extent * (1 + MAX_ROW_WASTE):
            choices.append((score, -padded, multiple))
    return max(choices)[2] if choices else None


def _tile_rows(row_extents: list[int], limit: int) -> set[int]:
    """The row counts up to ``limit`` perfect tiles can give: products of one divisor per
    extent."""
    divisors = [[d for d in range(1, min(e, limit) + 1) if e % d == 0] for e in row_extents]
    return {p for combo in itertools.product(*divisors) if (p := math.prod(combo)) <= limit}


def _multiple(extent: int, rows: int) -> int:
    """``rows`` x the largest power of two up to :data:`_OUTER` whose multiple ``extent`` rounds up
    to costs at most :data:`_SPARE_WASTE` of ``extent`` more than the next multiple of ``rows``."""
    least = -(-extent // rows) * rows
    return next(
        rows * outer
        for outer in (_OUTER >> i for i in range(_OUTER.bit_length()))
        if -(-extent // (rows * outer)) * rows * outer <= least + extent * _SPARE_WASTE
    )
