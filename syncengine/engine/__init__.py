"""The composition root: `Engine`, built from a `Config`, and the parts it wires.

`engine.py` is the `Engine` (the public entry point); `durableroot.py`,
`rootlease.py`, `adapterstates.py` and `passes.py` are the parts it builds.
`Engine` is imported on first use (PEP 562), so importing one part does not
load the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from syncengine.engine.engine import Engine


def __getattr__(name: str) -> Any:
    if name != "Engine":
        raise AttributeError(f"module 'syncengine.engine' has no attribute {name!r}")
    value = importlib.import_module("syncengine.engine.engine").Engine
    globals()[name] = value
    return value


__all__ = ["Engine"]
