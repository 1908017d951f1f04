"""A user's TVMScript kernel, as a test file hands it to ``ms-heron tune`` and
``ms_heron.workloads.load_kernel``."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def row_scale(
    a: T.Buffer((64, 48), "float32"),
    s: T.Buffer((48,), "float32"),
    out: T.Buffer((64, 48), "float32"),
):
    for i, j in T.grid(64, 48):
        with T.sblock("scale"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = a[vi, vj] * s[vj] + T.float32(1)
