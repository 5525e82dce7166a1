"""Paths a background restore has still to bring back, kept in the adapter's index.

Owns the *pending* set (``meta["restore_pending"]`` of the index, saved with
it): `run`'s restore records there every file it leaves for the background
(`syncengine.restore.later`), each batch removes the files it placed or found
written locally meanwhile, and every restore starts the set over.  The index
also holds each pending path's durable entry, so a base manifest still lists
it; a checkpoint pass never marks a pending path absent and never plans a
plain copy or a chain's end for it (`Passes._plan`): the file is not missing,
only not back yet.  Because the set lives in the index, a checkpoint run by
another process, or after a crash during the background part, keeps the
same promise until a restore completes; an index rebuilt or reloaded in the
meantime takes the set over from the one it replaces (`carry`).
"""

from __future__ import annotations

from collections.abc import Iterable

from syncengine.local.index import Index

KEY = "restore_pending"


def paths(index: Index) -> frozenset[str]:
    """The pending paths (empty when no background restore is unfinished)."""
    found = index.meta.get(KEY)
    return frozenset(found) if found else frozenset()


def count(index: Index) -> int:
    return len(index.meta.get(KEY) or ())


def reset(index: Index, waiting: Iterable[str]) -> None:
    """A restore's plan: exactly these paths are pending now (none: the key goes)."""
    new = set(waiting)
    if new:
        index.meta[KEY] = new
        index.changed = True
    elif index.meta.pop(KEY, None) is not None:
        index.changed = True


def settle(index: Index, done: Iterable[str]) -> None:
    """These paths are back (or were written locally meanwhile): no longer pending."""
    found = index.meta.get(KEY)
    if not found:
        return
    found.difference_update(done)
    if not found:
        del index.meta[KEY]
    index.changed = True


def carry(old: Index, new: Index) -> None:
    """`new` (an index rebuilt or reloaded while a background restore runs) takes over
    `old`'s pending paths it lacks, each with `old`'s record: the seeded durable entry a
    batch checks (`restore.later`), or what a pass recorded there since."""
    found = old.meta.get(KEY)
    have = new.meta.get(KEY) or set()
    moved = [p for p in found or () if p not in have and p in old.records]
    if not moved:
        return
    for path in moved:
        raw = old.records[path]
        new.forget(path)
        new.records[path] = raw
        new.absent += 1 if raw[-1] else 0
        if path in old.links:
            new.links[path] = old.links[path]
        if path in old.extras:
            new.extras[path] = old.extras[path]
    new.meta[KEY] = set(have) | set(moved)
    new.changed = True


def without(pending: frozenset[str], found: Iterable[str]) -> list[str]:
    """`found` (paths a pass would act on as missing) less the pending ones."""
    return [p for p in found if p not in pending] if pending else list(found)
