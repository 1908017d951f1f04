"""A rewrite that fails leaves the model as it was, and says so: the contract of every pass here.

The graphs users bring were written by other tools and hold forms no rewrite here was built for
(a tuple-valued op, an older opset's form); TVM's own rewriters raise InternalErrors on some of them
(``ConvertLayout`` on an inference Dropout). A rewrite is an optimization: the model computes the
same without it. So a failing one returns its input unchanged, warns, and appends one line to the
module's :data:`SKIPPED_PASSES_ATTR`, which the lowering and a tuning run's report show. A rewrite
that can leave just the region it fails on in TVM's form (channels-last) says so with
:func:`with_skipped`.
"""

from __future__ import annotations

import warnings

import tvm
from tvm import IRModule

#: Module attribute: one line per rewrite skipped for this module, ``"<pass> skipped: <reason>"``.
SKIPPED_PASSES_ATTR = "ms_heron.skipped_passes"


def skipped_passes(mod: IRModule) -> list[str]:
    """The rewrites skipped for ``mod`` so far, one line each (none: ``[]``)."""
    attrs = mod.attrs
    return (
        [str(line) for line in attrs[SKIPPED_PASSES_ATTR]]
        if attrs and SKIPPED_PASSES_ATTR in attrs
        else []
    )


def with_skipped(mod: IRModule, line: str) -> IRModule:
    """``mod`` with one more skipped-rewrite ``line`` (and a warning saying it)."""
    warnings.warn(f"{line}; the model runs without that rewrite there", stacklevel=3)
    return mod.with_attr(SKIPPED_PASSES_ATTR, [*skipped_passes(mod), line])


def failure_reason(err: Exception) -> str:
    """TVM's message without its C++ trace: the check that failed (or the last line), on one
    line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    checks = [line for line in lines if "Check failed" in line]
    text = (checks or lines or [type(err).__name__])[-1].rstrip(".")
    return text if len(text) <= 200 else text[:197] + "..."


def never_failing(rewrite: tvm.transform.Pass) -> tvm.transform.Pass:
    """``rewrite`` as a module pass of the same name that, when it raises, leaves the module as it
    was and records why (:data:`SKIPPED_PASSES_ATTR`, a warning)."""
    name = rewrite.info.name

    @tvm.transform.module_pass(opt_level=0, name=name)
    def guarded(mod: IRModule, _ctx) -> IRModule:
        try:
            return rewrite(mod)
        except Exception as err:  # pylint: disable=broad-exception-caught  # any failure: skip it, say so
            return with_skipped(mod, f"{name} skipped: {failure_reason(err)}")

    guarded.__doc__ = rewrite.__doc__
    return guarded
