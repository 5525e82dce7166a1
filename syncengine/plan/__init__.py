"""Deciding: what a checkpoint or a restore will do, as frozen values.

Owns the rules, not the I/O: `checkpoint` turns a scan and the index into one
action per path, `restore` turns the manifest and the local tree into one
action per path.  Each action prints as one readable line, so a dry run is
"plan, then print", and tests assert on the plan as text.  The executors in
`syncengine.checkpoint` and `syncengine.restore` carry the actions out and
decide nothing the plan does not say.  The names below are the plan's public
face: callers import them from `syncengine.plan`.  Each side is loaded on the
first use of one of its names (PEP 562), so a checkpoint never builds the
restore side's action classes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from syncengine.plan.checkpoint import (
        PUBLISHING,
        AppendSegments,
        CheckpointAction,
        Compact,
        MarkAbsent,
        PlainCopy,
        RecordDir,
        RecordLink,
        SkipCompanion,
        SkipDir,
        SkipSpecial,
        Snapshot,
        Sniffer,
        Upload,
        plan_checkpoint,
    )
    from syncengine.plan.restore import (
        SPECIAL_BITS,
        Fetch,
        KeepLocal,
        LocalState,
        MakeDir,
        MakeLink,
        Reject,
        RestoreAction,
        RestoreDB,
        keep_reason,
        plan_restore_entry,
        without_special_bits,
    )


_RESTORE = frozenset(
    {
        "SPECIAL_BITS",
        "Fetch",
        "KeepLocal",
        "LocalState",
        "MakeDir",
        "MakeLink",
        "Reject",
        "RestoreAction",
        "RestoreDB",
        "keep_reason",
        "plan_restore_entry",
        "without_special_bits",
    }
)


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'syncengine.plan' has no attribute {name!r}")
    side = "restore" if name in _RESTORE else "checkpoint"
    value = getattr(importlib.import_module(f"syncengine.plan.{side}"), name)
    globals()[name] = value
    return value


__all__ = [
    "PUBLISHING",
    "SPECIAL_BITS",
    "AppendSegments",
    "CheckpointAction",
    "Compact",
    "Fetch",
    "KeepLocal",
    "LocalState",
    "MakeDir",
    "MakeLink",
    "MarkAbsent",
    "PlainCopy",
    "RecordDir",
    "RecordLink",
    "Reject",
    "RestoreAction",
    "RestoreDB",
    "SkipCompanion",
    "SkipDir",
    "SkipSpecial",
    "Snapshot",
    "Sniffer",
    "Upload",
    "keep_reason",
    "plan_checkpoint",
    "plan_restore_entry",
    "without_special_bits",
]
