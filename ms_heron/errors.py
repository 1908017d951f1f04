"""The one base class of the errors a user can fix: each message says what went wrong and names the
fix.

Every layer raises its own subclass (a target without VNNI, a work dir of another run, a model with
dynamic shapes, ...); the ``ms-heron`` command prints any of them as one line and exits with 2, and
Python callers can catch them all as :class:`HeronError`.
"""


class HeronError(Exception):
    """An error whose message names the fix."""


class OptionError(HeronError, ValueError):
    """An option of a rule, postproc, space or search given at construction that it cannot take."""
