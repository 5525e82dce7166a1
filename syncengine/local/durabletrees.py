"""Which durable tree each adapter's index describes: ``durable-trees.json`` in the state dir.

An adapter's index says what its durable tree already holds.  When the adapter's
durable tree changes (``--durable``, ``*_DURABLE``, ``[[adapter]] durable``) while
the state dir stays, that index describes another tree: the next checkpoint would
call every file unchanged and publish nothing to the new one.  `moved` compares the
trees recorded here with the configured ones and records the new ones; the engine
drops the indexes of the adapters it names (`syncengine.engine.rootlease`).  A state
dir without the file (new, or written by an older version) names none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from syncengine.fs.savefile import write_file
from syncengine.local.status import read_json

FILE = "durable-trees.json"


def moved(state_dir: Path, trees: Mapping[str, str]) -> list[str]:
    """The adapters whose recorded durable tree is not the one in `trees` (adapter ->
    durable tree), sorted; records `trees` (merged over the others) when anything differs."""
    path = state_dir / FILE
    recorded = read_json(path)
    changed = sorted(n for n, tree in trees.items() if recorded.get(n, tree) != tree)
    if changed or any(n not in recorded for n in trees):
        merged = {**recorded, **trees}
        write_file(path, json.dumps(merged, indent=1, sort_keys=True).encode() + b"\n")
    return changed


__all__ = ["FILE", "moved"]
