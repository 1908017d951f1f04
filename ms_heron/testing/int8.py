"""Inputs that break an inexact int8 kernel: what the tests and the GEMM benchmark check every dot
product against, bit for bit."""

from __future__ import annotations

import numpy as np

from ..hardware.dot_products import NARROW_WEIGHT, DotProduct, bytes_multiply_exactly
from ..workloads import Workload


def adversarial_inputs(workload: Workload, seed: int, dot: DotProduct) -> list[np.ndarray]:
    """A u8 x s8 workload's inputs (activation, packed weight ``[..., lanes, reduction]``) that a
    saturating kernel gets wrong.

    Seed 0: u8 255 against the extreme weights in alternate lanes -- s8 127 and -128, every pair of
    products 64770 or -65280, past s16 (what ``vpmaddubsw`` would saturate); for a form exact on
    narrow weights only, the widest pairs it still sums exactly (127 with 1, -128 with 0, -128 with
    127, 64 with 64: 32640 or -32640). Other seeds: random (narrow: in +-64)."""
    a, w = workload.random_inputs(seed)
    row = np.arange(w.shape[-2])[:, None] % 4
    if seed == 0:
        a[...] = 255
        if dot.narrow_weights:
            even, odd = np.array([127, 1, -128, 0])[row], np.array([-128, 127, 64, 64])[row]
            w[...] = np.where(np.arange(w.shape[-1]) % 2 == 0, even, odd).astype(w.dtype)
            assert bytes_multiply_exactly(w.astype(np.int8), w.ndim - 2)
        else:
            w[...] = np.where(row % 2 == 0, 127, -128).astype(w.dtype)
    elif dot.narrow_weights:
        w[...] = np.clip(w, -NARROW_WEIGHT, NARROW_WEIGHT)
    return [a, w]
