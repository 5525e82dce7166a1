"""A log's segment chain as this machine's index knows it.

Owns the chain state kept in an index record's extras for a log published
as segments (`syncengine.checkpoint.segments`): ``chain`` and ``lens`` (as
the manifest records them, `manifest_extra`), `PLAIN` (what the log's plain
durable path holds) and, under `LOCAL`, local-only state: the inode, and
``recorded``, how many objects of the chain a manifest object lists
(`unrecorded` names the logs it is behind for, `mark_recorded` advances it).
Also when a chain is compacted (`MAX_SEGMENTS` objects, or `IDLE_NS` idle: the
planner and the segment publisher read the same numbers), which logs are due
for compaction (`idle_chains`) or a plain copy (`plain_wanted`), and recording
a durable chain in the index after a restore or an index rebuild (`seed`,
`seed_kept`).  Pure bookkeeping on the `Index`:
reads and writes nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from syncengine.durable.chain import LOCAL, PLAIN
from syncengine.durable.manifest import Entry
from syncengine.local.index import DIRTY, Index

IDLE_NS = 300 * 10**9  # a log unchanged this long with >1 object is compacted
MAX_SEGMENTS = 256  # objects in a chain before it is compacted into a new base


def manifest_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """The part of the index's chain state that the manifest carries."""
    return {k: v for k, v in extra.items() if k != LOCAL}


def plain_current(extra: dict[str, Any], hash64: int) -> bool:
    """Whether the plain path holds the chain's whole content (or needs none)."""
    state = extra.get(PLAIN)
    return (
        isinstance(state, dict)
        and state.get("size") == sum(extra.get("lens", ()))
        and state.get("hash") == f"{hash64:016x}"
    )


def plain_wanted(
    index: Index, now_ns: int, quiet_ns: int, *, final: bool = False
) -> frozenset[str]:
    """Logs whose plain copy is behind their chain and that have been quiet for
    `quiet_ns` (with `final`: every such log, writers having stopped)."""
    out = set()
    for path, extra in index.extras.items():
        rec = index.get(path)
        if (
            rec is None
            or rec.kind != "segments"
            or rec.absent
            or not extra.get("lens")
            or plain_current(extra, rec.hash64)
        ):
            continue
        if final or rec.mtime_ns < now_ns - quiet_ns:
            out.add(path)
    return frozenset(out)


def local_state(extra: dict[str, Any]) -> dict[str, Any]:
    local = extra.get(LOCAL)
    return local if isinstance(local, dict) else {}


def idle_chains(index: Index, now_ns: int) -> frozenset[str]:
    """Logs with more than one object whose file has not changed for `IDLE_NS`."""
    out = set()
    for path, extra in index.extras.items():
        if len(extra.get("lens", ())) > 1:
            rec = index.get(path)
            if (
                rec is not None
                and rec.kind == "segments"
                and not rec.absent
                and rec.mtime_ns < now_ns - IDLE_NS
            ):
                out.add(path)
    return frozenset(out)


def seed(
    index: Index,
    entry: Entry,
    *,
    ino: int | None = None,
    size: int | None = None,
    mtime_ns: int | None = None,
    ctime_ns: int = DIRTY,
) -> None:
    """Record a durable chain in the index (after a restore, or for a kept local file).

    A chain resolved by restore (`chain.Chain.as_entry`) says how many of its
    objects the manifest records; a manifest entry records them all.
    """
    extra = manifest_extra(dict(entry.extra))
    recorded = local_state(dict(entry.extra)).get("recorded")
    if not isinstance(recorded, int):
        recorded = len(extra.get("lens", ()))
    if size is not None and size > sum(extra.get("lens", ())):
        ctime_ns = DIRTY  # bytes the chain lacks (from its plain copy): the next pass looks
    index.record(
        entry.path,
        size=entry.size if size is None else size,
        mtime_ns=entry.mtime_ns if mtime_ns is None else mtime_ns,
        ctime_ns=ctime_ns,
        hash64=entry.hash or 0,
        mode=entry.mode,
        kind="segments",
        extra={**extra, LOCAL: {"ino": ino, "recorded": recorded}},
    )


def seed_kept(index: Index, entry: Entry) -> None:
    """Seed a log whose local copy restore kept, unless the index holds its chain already.

    After a hot restart the index is usually ahead of the manifest (appends
    are recorded by their segments' names): it stays, so the next checkpoint
    appends to the same chain instead of publishing those bytes again.
    """
    rec = index.get(entry.path)
    have = index.extras.get(entry.path, {})
    lens = entry.extra.get("lens")
    if (
        rec is not None
        and rec.kind == "segments"
        and isinstance(lens, list)
        and have.get("chain") == entry.extra.get("chain")
        and list(have.get("lens", ()))[: len(lens)] == lens
    ):
        return
    seed(index, entry)


def unrecorded(index: Index) -> list[str]:
    """Logs whose chain has objects that no manifest object lists yet."""
    out = []
    for path, extra in index.extras.items():
        local = local_state(extra)
        if "recorded" in local and len(extra.get("lens", ())) > local["recorded"]:
            out.append(path)
    return sorted(out)


def mark_recorded(index: Index, entries: Iterable[Entry]) -> None:
    """A manifest object now lists these entries: their chains are recorded that far."""
    for e in entries:
        extra = index.extras.get(e.path)
        if e.kind != "segments" or not extra or extra.get("chain") != e.extra.get("chain"):
            continue
        local = local_state(extra)
        n = len(e.extra.get("lens", ()))
        if local.get("recorded") != n:
            index.extras[e.path] = {**extra, LOCAL: {**local, "recorded": n}}
            index.changed = True
