"""The options of ms_heron's rules and postprocs, read back from the constructor for ``clone`` and
``repr``.

A rule's options are its constructor's keyword-only parameters, kept as attributes of the same
names, so ``clone`` (MetaSchedule clones every rule per task) and ``repr`` (a printed rule list
names ms_heron's rules apart from TVM's of the same name) both follow the signature without a second
list.
"""

from __future__ import annotations

import copy
import inspect

from tvm.ir.utils import derived_object

from ..errors import OptionError


def options(obj) -> dict:
    """``obj``'s constructor arguments, read back from the attributes of the same names."""
    names = [
        n
        for n, p in inspect.signature(type(obj).__init__).parameters.items()
        if p.kind is p.KEYWORD_ONLY
    ]
    return {name: getattr(obj, name) for name in names}


def clone(obj):
    """A new TVM object of ``obj``'s class with copies of its options (``obj`` is the Python
    instance inside a ``@derived_object``; its outer object's class is the one to build)."""
    return type(obj._outer())(**{k: copy.deepcopy(v) for k, v in options(obj).items()})  # pylint: disable=protected-access


def describe(obj) -> str:
    """``ms_heron.Name(option=value, ...)``."""
    return (
        f"ms_heron.{type(obj).__name__}({', '.join(f'{k}={v!r}' for k, v in options(obj).items())})"
    )


def heron_object(cls):
    """``@derived_object`` whose ``repr`` is the ms_heron class's own (TVM's names only the C++
    type)."""
    derived = derived_object(cls)
    derived.__repr__ = lambda self: repr(self._inst)
    return derived


def check(ok: bool, message: str) -> None:
    """Refuse an option at construction with one line that names the fix."""
    if not ok:
        raise OptionError(message)
