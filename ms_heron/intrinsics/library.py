"""TVM's tensor-intrinsic library (``tvm.s_tir.tensor_intrin``), imported fast, and for a CPU only
the x86 part.

Importing it parses ~250 TVMScript PrimFuncs, and the parser's decorator calls ``inspect.stack()``
for each. That reads the source line of every frame on the stack; for the import machinery's own
frames (``<frozen importlib._bootstrap>``), which have no file, ``inspect`` scans all of
``sys.modules`` every time. The parser only reads the nearest frames' lines (to tell a function
defined in an ``@I.ir_module`` class) and the frames themselves, so during these imports the stack
it gets carries source lines for those frames alone. The registered intrinsics are the same.

Most of the library is CUDA's: all of it took a CPU process 3 s here, x86's alone 0.07 s, and a CPU
target needs no more. :func:`import_x86_intrinsics` puts the package in ``sys.modules`` with its
``__init__`` (which imports every target's module) held back, so that MetaSchedule's own
``import tvm.s_tir.tensor_intrin`` (every ``TuneContext`` makes it) finds it there, and
:func:`import_tvm_intrinsics` runs that ``__init__`` when a CUDA target (or no known target) needs
the rest.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import sys

_PARENT = "tvm.s_tir"
_PACKAGE = f"{_PARENT}.tensor_intrin"
#: Frames whose source line TVMScript's parser reads: its own, the decorated function's, the
#: class's.
_NEAR_FRAMES = 3


def _stack_with_near_lines(context: int = 1) -> list[inspect.FrameInfo]:
    frames, frame = [], sys._getframe(1)  # pylint: disable=protected-access
    while frame is not None:
        if len(frames) < _NEAR_FRAMES and not frame.f_code.co_filename.startswith("<"):
            info = inspect.getframeinfo(frame, context)
            frames.append(inspect.FrameInfo(frame, *info))
        else:
            frames.append(
                inspect.FrameInfo(
                    frame,
                    frame.f_code.co_filename,
                    frame.f_lineno,
                    frame.f_code.co_name,
                    None,
                    None,
                )
            )
        frame = frame.f_back
    return frames


@contextlib.contextmanager
def fast_parsing():
    """TVMScript parsed in this block reads the source lines of the nearest frames alone."""
    stack, inspect.stack = inspect.stack, _stack_with_near_lines
    try:
        yield
    finally:
        inspect.stack = stack


@functools.cache
def _package_held_back():
    """``tvm.s_tir.tensor_intrin`` in ``sys.modules`` before its ``__init__`` runs (None: it ran
    already, imported by someone else), and the loader that runs it."""
    if _PACKAGE in sys.modules:
        return None
    spec = importlib.util.find_spec(_PACKAGE)
    package = importlib.util.module_from_spec(spec)
    sys.modules[_PACKAGE] = package
    setattr(importlib.import_module(_PARENT), _PACKAGE.rsplit(".", 1)[1], package)
    return package, spec.loader


@functools.cache
def import_x86_intrinsics() -> None:
    """Register TVM's x86 intrinsics (its VNNI and AVX-512 dot products), all a CPU target's rules
    name, without parsing the other targets'; once per process.

    Afterwards ``import tvm.s_tir.tensor_intrin`` registers nothing more: a process that then tunes
    a CUDA target with stock MetaSchedule calls :func:`import_tvm_intrinsics` (or
    ``ensure_registered(target)``, as every ms_heron entry point does) first."""
    _package_held_back()
    with fast_parsing():
        importlib.import_module(f"{_PACKAGE}.x86")


@functools.cache
def import_tvm_intrinsics() -> None:
    """Register every intrinsic of TVM's library (``tvm.s_tir.tensor_intrin`` as its ``__init__``
    imports it), fast; once per process."""
    held = _package_held_back()
    with fast_parsing():
        if held is None:
            importlib.import_module(_PACKAGE)
        else:
            package, loader = held
            loader.exec_module(package)
