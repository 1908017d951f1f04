"""TVM's Schedule queries without its Python argument checks, for the search's hot paths.

``tvm.s_tir.Schedule`` wraps its methods in ``@type_checked``, which validates every argument
against the method's type hints on every call: 50 us for a ``sch.get(loop)`` that takes 0.7 us
unchecked. The search replays and post-processes thousands of programs a minute, and a 2-minute
MobileNetV2 run made 120,000 such calls, about a third of its search's time. The arguments passed
here are random variables the schedule itself returned, so there is nothing to check.
"""

from __future__ import annotations

from tvm.s_tir import Schedule


def _unchecked(method):
    """``method`` without its type-checking wrapper (as it is where TVM has none)."""
    return getattr(method, "__wrapped__", method)


get = _unchecked(Schedule.get)
get_sblock = _unchecked(Schedule.get_sblock)
get_loops = _unchecked(Schedule.get_loops)
get_child_blocks = _unchecked(Schedule.get_child_blocks)
get_producers = _unchecked(Schedule.get_producers)
get_consumers = _unchecked(Schedule.get_consumers)
