"""TVM's tensor-intrinsic library (``tvm.s_tir.tensor_intrin``), imported in ~2 s instead of ~15 s.

Importing it parses ~650 TVMScript PrimFuncs, and the parser's decorator calls ``inspect.stack()``
for each. That reads the source line of every frame on the stack; for the import machinery's own
frames (``<frozen importlib._bootstrap>``), which have no file, ``inspect`` scans all of
``sys.modules`` every time. The parser only reads the nearest frames' lines (to tell a function
defined in an ``@I.ir_module`` class) and the frames themselves, so during this one import the
stack it gets carries source lines for those frames alone. The registered intrinsics are the same.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys

#: Frames whose source line TVMScript's parser reads: its own, the decorated function's, the class's.
_NEAR_FRAMES = 3


def _stack_with_near_lines(context: int = 1) -> list[inspect.FrameInfo]:
    frames, frame = [], sys._getframe(1)  # pylint: disable=protected-access
    while frame is not None:
        if len(frames) < _NEAR_FRAMES and not frame.f_code.co_filename.startswith("<"):
            info = inspect.getframeinfo(frame, context)
            frames.append(inspect.FrameInfo(frame, *info))
        else:
            frames.append(
                inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, None, None)
            )
        frame = frame.f_back
    return frames


@functools.cache
def import_tvm_intrinsics() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (registering TVM's intrinsics), fast; once per process."""
    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    stack, inspect.stack = inspect.stack, _stack_with_near_lines
    try:
        importlib.import_module("tvm.s_tir.tensor_intrin")
    finally:
        inspect.stack = stack
