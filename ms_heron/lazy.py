"""A package's public names imported on first use (PEP 562's module ``__getattr__``).

MetaSchedule's builder and runner workers import ms_heron to unpickle their job (a build function, a
timing evaluator): importing the package and :mod:`ms_heron.tuning` must not import the search
(OR-Tools, pandas, XGBoost), the Relax frontend and the spaces, which half a second of every
worker's start-up went to. ``from ms_heron import HeronSpace`` imports them when it is written.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_attributes(package: str, modules: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package`` that imports each name from its module in
    ``modules`` (relative to ``package``) when first asked for."""

    def __getattr__(name: str) -> object:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(modules[name], package), name)

    return __getattr__
