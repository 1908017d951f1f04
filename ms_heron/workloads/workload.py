"""A task to tune and check: a PrimFunc with random inputs, a reference and its operation count.

Heron's suite (``ms_heron.workloads``) builds Workloads from TE with numpy references; a
user's own kernel becomes one through :func:`from_func` or :func:`load_kernel` (a TVMScript file),
checked against the kernel itself, unscheduled.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import tirx

from ..errors import HeronError

#: The family of a user's kernel (:func:`from_func`).
KERNEL = "kernel"


class WorkloadError(HeronError, ValueError):
    """A workload, case, dtype or shape that does not exist or cannot be built; names the fix."""


@dataclass(kw_only=True, frozen=True)
class Workload:
    """One operator instance: the PrimFunc to tune and what is needed to check and rate it."""

    family: str
    dtype: str
    shape: Mapping[str, int]
    func: tirx.PrimFunc
    #: Arithmetic operations (2 per multiply-accumulate), for GOPS figures.
    ops: int
    _make_inputs: Callable[[np.random.Generator], list[np.ndarray]] = field(repr=False)
    _reference: Callable[..., np.ndarray] = field(repr=False)
    _output: tuple[tuple[int, ...], str] = field(repr=False)
    #: A user's kernel is named by its user; suite workloads by family, dtype and shape.
    label: str = ""
    #: An int8 suite workload's dot-product tile ``(lanes, reduction)``: its weight's packed layout.
    tile: tuple[int, int] | None = None
    #: Its weight holds 7-bit values, recorded on its function as the lowering records a narrow
    #: constant (:func:`~ms_heron.workloads.suite.make`).
    narrow_weights: bool = False

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        dims = "_".join(f"{k}{v}" for k, v in self.shape.items())
        return f"{self.family}_{self.dtype}_{dims}"

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Inputs in the PrimFunc's argument order (the output buffer excluded)."""
        return self._make_inputs(np.random.default_rng(seed))

    def reference(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """The expected output for ``inputs`` (as returned by :meth:`random_inputs`)."""
        return self._reference(*inputs)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self._output[0]

    @property
    def output_dtype(self) -> str:
        return self._output[1]


def random_array(rng: np.random.Generator, shape: Sequence, dtype: str) -> np.ndarray:
    """Random test data in ``dtype``'s whole int8 range, or uniform in [-1, 1) for floats."""
    shape = tuple(int(d) for d in shape)
    if dtype == "uint8":
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    if dtype == "int8":
        return rng.integers(-128, 128, size=shape, dtype=np.int8)
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def from_func(func: tirx.PrimFunc, name: str = "kernel") -> Workload:
    """Any PrimFunc (a user's kernel, one of TVM's ``te_workload`` operators) as a Workload.

    Its reference is the kernel itself, unscheduled and compiled for this CPU, so every tuned
    schedule is checked against the program it transforms. The output is the one parameter the
    kernel writes, which must come last (TE's and TVMScript's usual order); operations are TVM's
    FLOP estimate.
    """
    from tvm.s_tir import analysis  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo  # pylint: disable=import-outside-toplevel

    args = [(tuple(int(d) for d in a.shape), str(a.dtype)) for a in ArgInfo.from_prim_func(func)]
    mod = tvm.IRModule({"main": func})
    unscheduled = tvm.compile(mod, target="llvm")

    def run(arrays):
        tensors = [tvm.runtime.tensor(a, tvm.cpu()) for a in arrays]
        unscheduled["main"](*tensors)
        return [t.numpy() for t in tensors]

    written = _written_params(func)
    if written != [len(args) - 1]:
        raise WorkloadError(
            f"{name}: ms_heron checks kernels with one output, passed last; this one writes "
            f"parameters {written} of {len(args)}. Tune it with ms.tune_tir directly, or reorder "
            "its parameters"
        )
    inputs, output = args[:-1], args[-1]
    dtypes = {dtype for _, dtype in inputs}
    form = "int8" if dtypes & {"int8", "uint8"} else "fp16" if "float16" in dtypes else "fp32"
    return Workload(
        family=KERNEL,
        dtype=form,
        shape={},
        func=func,
        ops=int(analysis.estimate_tir_flops(mod)),
        _make_inputs=lambda g: [random_array(g, shape, dtype) for shape, dtype in inputs],
        _reference=lambda *xs: run([*xs, np.zeros(output[0], output[1])])[-1],
        _output=output,
        label=name,
    )


def _written_params(func: tirx.PrimFunc) -> list[int]:
    """The indices of the parameters ``func``'s blocks write, read off the blocks (not by running
    the kernel: a kernel that runs for hours is still a kernel to tune)."""
    from tvm import s_tir  # pylint: disable=import-outside-toplevel

    sch = s_tir.Schedule(func)
    written, stack = [], [sch.get_sblock("root")]
    while stack:
        block = stack.pop()
        stack.extend(sch.get_child_blocks(block))
        written += [region.source for region in sch.get(block).writes]
    return [
        i
        for i, param in enumerate(sch.mod["main"].params)
        if any(param.same_as(w) for w in written)
    ]


#: The names TVMScript's printer uses, and the imports it prints for them, commented out.
_TVMSCRIPT_IMPORTS = {
    "T": "from tvm.script import tirx as T",
    "I": "from tvm.script import ir as I",
}


def load_kernel(spec: str) -> Workload:
    """``kernel.py`` or ``kernel.py:name``: the TVMScript PrimFunc a Python file defines (an
    IRModule with one function counts), as a Workload named after it (see :func:`from_func`)."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    import pathlib  # pylint: disable=import-outside-toplevel

    path, _, wanted = spec.partition(":")
    if not pathlib.Path(path).is_file():
        raise WorkloadError(
            f"{path}: no such file; give a Python file that defines a @T.prim_func, as "
            "kernel.py[:name]"
        )
    module_spec = importlib.util.spec_from_file_location(
        f"ms_heron_kernel_{pathlib.Path(path).stem}", path
    )
    module = importlib.util.module_from_spec(module_spec)
    # an ``@I.ir_module`` class is parsed from its source, which Python finds by its module's name
    sys.modules[module_spec.name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:  # pylint: disable=broad-except  # the user's file: any error is theirs to fix
        lines = [line for line in str(err).strip().splitlines() if line.strip()]
        reason = lines[-1].strip() if lines else type(err).__name__
        missing = (
            _TVMSCRIPT_IMPORTS.get(getattr(err, "name", None))
            if isinstance(err, NameError)
            else None
        )
        fix = (
            f"add `{missing}` (TVM prints its TVMScript imports commented out)"
            if missing
            else "fix the file (a kernel with T.sblock needs @T.prim_func(s_tir=True))"
        )
        raise WorkloadError(
            f"{path} does not load ({type(err).__name__}: {reason}); {fix}"
        ) from None
    finally:
        sys.modules.pop(module_spec.name, None)
    found = {}
    for name, value in vars(module).items():
        if isinstance(value, tvm.IRModule) and len(value.functions) == 1:
            value = next(iter(value.functions.values()))
        if isinstance(value, tirx.PrimFunc):
            found[name] = value
    if wanted and wanted not in found:
        raise WorkloadError(
            f"{path} defines no PrimFunc named {wanted!r}; it defines: {', '.join(found) or 'none'}"
        )
    if not wanted and len(found) != 1:
        raise WorkloadError(
            f"{path} defines {len(found)} PrimFuncs ({', '.join(found) or 'none'}); name one as "
            f"{path}:NAME"
        )
    name = wanted or next(iter(found))
    return from_func(found[name], name)
