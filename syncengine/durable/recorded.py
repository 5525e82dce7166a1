"""Whether a durable copy is the version the manifest records, a newer one, or corrupt.

Owns the one rule that restore and verify share (`judge`), so the two never
disagree about a file.  Its facts:

- A checkpoint renames each new version into place as soon as it is closed,
  and writes the manifest object naming them after all of them (see
  `syncengine.checkpoint.checkpointer`).  A checkpoint killed in between leaves *newer
  complete versions* at their paths that no manifest records yet.  Each
  carries the live file's mtime, set before the rename, and the live file
  changed after the recorded version was read: its mtime is later than the
  manifest's.  The next completed checkpoint after a kill writes a full base
  that records them.
- Bit rot keeps the recorded mtime.  An object written once under a unique
  name (``.syncengine/objects/`` on mounts without rename, open-file copies
  of a migration) is never replaced by a newer version.
- While a state dir shows that no pass of its own was interrupted since it
  wrote the newest manifest object (no staging marker, and its index says it
  wrote that object: `unrecorded_possible`), nothing unrecorded can be at a
  path.

So a copy that differs from its entry (hash, or size when it is not read) is
*newer* only if an unrecorded version is possible, it is not a write-once
object, and its mtime is later than the entry's.  Anything else is *corrupt*:
that path's error, never a success.  The limit, documented in docs/OPERATING.md: a
copy rewritten by something other than syncengine with a later mtime, after a
checkpoint was interrupted or on a machine without the writer's state dir,
cannot be told from a newer version.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from syncengine.durable.manifest import Entry
from syncengine.durable.store import META_DIR

WRITTEN_SEQ = "written_seq"  # index meta: the manifest object this state dir wrote last


@attrs.frozen
class Verdict:
    """What `judge` found: the recorded version, a newer complete one, or a problem."""

    newer: bool = False
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


SAME = Verdict()
NEWER = Verdict(newer=True)


def unrecorded_possible(
    staging_marker: Path, index_meta: Callable[[], Mapping[str, Any]], last_seq: int
) -> bool:
    """Whether a checkpoint may have placed versions no manifest object records yet.

    False only when this state dir wrote the newest manifest object itself
    (`last_seq`, the one the caller read) and no pass of it is pending.  A pass
    creates the marker before it renames anything and removes it after its
    index is saved, so the marker is looked at first and the index after: a
    pass that ends in between is then seen by its index.
    """
    return staging_marker.exists() or index_meta().get(WRITTEN_SEQ) != last_seq


def judge(
    entry: Entry,
    size: int,
    mtime_ns: int,
    digest: int | None,
    *,
    unrecorded: bool | Callable[[], bool],
) -> Verdict:
    """Compare a durable copy (its size, mtime and, when read, xxh3) with its entry.

    `unrecorded` (`unrecorded_possible`, or a function answering it) is only
    asked when the copy differs.
    """
    if size != entry.size:
        how = "truncated" if size < entry.size else "larger"
        what = f"has {size} bytes, the manifest says {entry.size} ({how})"
    elif digest is not None and entry.hash is not None and digest != entry.hash:
        what = "content hash differs from the manifest"
    else:
        return SAME
    if entry.location.startswith(META_DIR + "/"):
        return Verdict(problem=f"{what}; it is written once under its own name: corrupt")
    if not (unrecorded() if callable(unrecorded) else unrecorded):
        return Verdict(
            problem=f"{what}, and no checkpoint was interrupted since the manifest "
            "recorded it: corrupt"
        )
    if mtime_ns > entry.mtime_ns:
        return NEWER
    return Verdict(problem=f"{what} although its mtime is not later than the recorded one: corrupt")
