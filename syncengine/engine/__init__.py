"""The composition root: the `Engine`, built from a `Config`, and the parts it wires.

`engine.py` is the `Engine` (the public entry point and the only module here
that knows every part); `context.py` is the frozen `Context` it builds once and
hands down; the parts are `durableroot.py` (the durable root's health, probe,
stores, copy jobs), `rootlease.py` (when the lease is taken, renewed and
released), `adapterstates.py` (the loaded indexes, seeding, the start check)
and `passes.py` (one pass: walk, plan, execute).  A part is given the context,
or the pieces of it it uses, and callbacks; none imports `engine.py`.
`Engine` is imported from here on first use (PEP 562), so importing one part
does not load the others.
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
