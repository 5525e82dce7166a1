"""Recording a checkpoint pass: its outcomes, its manifest object, and the index after it.

Owns what a pass writes once its bytes are durable: the outcome of each
action (a union of small frozen values, one class per kind of thing done),
the entries the pass's manifest object lists (`manifest_entries` decides
whether one is written at all), the object itself (a delta, or every
`manifest.COMPACT_AFTER` a base), and the index updated from the outcomes.
It copies nothing: the executor (`checkpointer`) hands it what was done.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from syncengine.checkpoint import segments
from syncengine.checkpoint.copier import Copied, Published
from syncengine.crypt.secrets import SEALED
from syncengine.durable import manifest
from syncengine.durable.manifest import Entry
from syncengine.fs.stream import link_hash
from syncengine.local import chainstate
from syncengine.local.adapter import AdapterState
from syncengine.local.behind import REBASE, rebase_due
from syncengine.local.index import DIRTY, Index

log = logging.getLogger("syncengine")

# A file whose mtime is this close to the scan start may still change within
# the same timestamp tick: publish it but look again next pass (borg files cache).
GRANULARITY_NS = 2_000_000_000


@attrs.frozen
class FileDone:
    """A whole file copied (or found equal to its published copy)."""

    path: str
    copied: Copied


@attrs.frozen
class LogDone:
    """An append-only log's segment, new chain, compaction or plain copy."""

    path: str
    copied: segments.Logged


@attrs.frozen
class SnapshotDone:
    """A SQLite database's snapshot published (or found equal)."""

    path: str
    published: Published


@attrs.frozen
class LinkDone:
    """A symlink recorded with the stat it was read with."""

    path: str
    target: str
    sig: tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, mode


@attrs.frozen
class DirDone:
    """A directory recorded (nothing copied)."""

    path: str
    mode: int


Done = FileDone | LogDone | SnapshotDone | LinkDone | DirDone


def copied_of(done: Done) -> Copied | None:
    """The upload behind an outcome (None: a link or a directory, nothing copied)."""
    if isinstance(done, FileDone | LogDone):
        return done.copied
    if isinstance(done, SnapshotDone):
        return done.published.copied
    return None


def published(done: Done) -> bool:
    """Whether the outcome put something new on the durable side (or in the manifest)."""
    copied = copied_of(done)
    return copied is None or copied.published


def entry_of(done: Done) -> Entry:
    """The manifest entry an outcome is recorded as."""
    if isinstance(done, SnapshotDone):
        return done.published.entry
    if isinstance(done, LogDone):
        log_ = done.copied
        return Entry(
            done.path,
            "segments",
            log_.size,
            log_.mtime_ns,
            log_.mode & 0o7777,
            log_.hash64,
            extra=chainstate.manifest_extra(log_.extra),
        )
    if isinstance(done, FileDone):
        c = done.copied
        sealed = {SEALED: c.sealed} if c.sealed else {}
        return Entry(
            done.path,
            "file",
            c.size,
            c.mtime_ns,
            c.mode & 0o7777,
            c.hash64,
            object=c.object,
            extra=sealed,
        )
    if isinstance(done, DirDone):
        return Entry(done.path, "dir", mode=done.mode)
    return Entry(done.path, "symlink", mtime_ns=done.sig[1], target=done.target)


def index_entries(index: Index) -> Iterable[Entry]:
    """Every published entry the index knows, for a base manifest (directories last)."""
    for path in index.records:
        entry = index_entry(index, path)
        if entry is not None:
            yield entry
    for path, mode, _absent in index.dir_items():
        yield Entry(path, "dir", mode=mode)


def index_entry(index: Index, path: str) -> Entry | None:
    """The manifest entry for what the index records at `path` (None: nothing published)."""
    rec = index.get(path)
    local = index.extras.get(path, {})
    if rec is None or local.get("_local") is True:
        return None  # a companion of an unlisted database: never published
    extra: dict[str, Any] = {k: v for k, v in local.items() if not k.startswith("_")}
    obj = extra.pop("object", None)
    # a snapshot's size and time differ from the live file's stat kept in the record
    size = extra.pop("size", rec.size)
    mtime = extra.pop("mtime_ns", rec.mtime_ns)
    return Entry(
        path,
        rec.kind,
        size,
        mtime,
        rec.mode & 0o7777,
        rec.hash64,
        target=index.links.get(path),
        object=obj,
        extra=extra,
    )


def manifest_entries(index: Index, done: Sequence[Done], final: bool) -> list[Entry]:
    """The entries this pass's manifest object lists; [] = write none.

    An append to a log needs none: the segment's name places it in its chain
    and restore finds it by listing the chain (chain.py).  Anything else (a
    file, a link, a snapshot, a new chain) does.  When one is written, and in
    a final checkpoint, it also lists every log whose chain grew since the
    manifest last recorded it, so a clean stop leaves the manifest complete.
    """
    behind = chainstate.unrecorded(index)
    needed = any(not _appended(d) for d in done) or (final and (bool(done) or bool(behind)))
    needed = needed or rebase_due(index.meta)  # after a fork: a base, even of an idle pass
    if not needed:
        return []
    entries = {d.path: entry_of(d) for d in done}
    for path in behind:
        if path not in entries:
            entry = index_entry(index, path)
            if entry is not None:
                entries[path] = entry
    return list(entries.values())


def _appended(done: Done) -> bool:
    return isinstance(done, LogDone) and done.copied.appended


def write_base(state: AdapterState, entries: Iterable[Entry], now_ns: int) -> str:
    """Publish a base manifest object of `entries` as the next sequence number.

    The caller has flushed what the entries point at; the index's meta is
    advanced (save the index afterwards).  Also used by gc after deletions.
    """
    meta = state.index.meta
    seq = int(meta.get("manifest_seq", 0)) + 1
    name = manifest.write(
        state.store, state.name, seq, "base", entries, created_ns=now_ns, fence=state.fence
    )
    meta.update(manifest_seq=seq, base_seq=seq, deltas=0, written_seq=seq)
    meta.pop(REBASE, None)
    state.index.changed = True
    return name


def write_manifest(
    state: AdapterState, entries: list[Entry], now_ns: int
) -> tuple[str, list[Entry]]:
    """Write a delta (or, every `manifest.COMPACT_AFTER`, a base); return its name and what it
    lists (a base: every entry).  The caller has flushed what the entries point at."""
    meta = state.index.meta
    seq = int(meta.get("manifest_seq", 0)) + 1
    compact = not meta.get("base_seq") or int(meta.get("deltas", 0)) >= manifest.COMPACT_AFTER
    if compact:
        merged = {e.path: e for e in index_entries(state.index)}
        merged.update((e.path, e) for e in entries)
        entries = list(merged.values())
        name = write_base(state, entries, now_ns)
    else:
        name = manifest.write(
            state.store, state.name, seq, "delta", entries, created_ns=now_ns, fence=state.fence
        )
        meta.update(manifest_seq=seq, deltas=int(meta.get("deltas", 0)) + 1, written_seq=seq)
    state.index.changed = True
    log.info(
        "checkpoint.manifest adapter=%s object=%s entries=%d",
        state.name,
        name,
        len(entries),
        extra={"event": "checkpoint.manifest"},
    )
    return name, entries


def apply(index: Index, done: Iterable[Done], started_ns: int) -> None:
    """Record each outcome in the index (after the manifest that lists it is durable)."""
    for d in done:
        if isinstance(d, SnapshotDone):
            e = d.published.entry
            size, mtime, ctime = d.published.sig
            index.record(
                d.path,
                size=size,
                mtime_ns=mtime,
                ctime_ns=ctime,
                hash64=e.hash or 0,
                mode=e.mode,
                kind=e.kind,
                extra=d.published.extra,
            )
        elif isinstance(d, FileDone | LogDone):
            _apply_copy(index, d, started_ns)
        elif isinstance(d, DirDone):
            index.record_dir(d.path, d.mode)
        else:
            size, mtime, ctime, mode = d.sig
            index.record(
                d.path,
                size=size,
                mtime_ns=mtime,
                ctime_ns=ctime,
                hash64=link_hash(d.target),
                mode=mode,
                kind="symlink",
                target=d.target,
            )


def _apply_copy(index: Index, d: FileDone | LogDone, started_ns: int) -> None:
    c = d.copied
    size, mtime, ctime = c.stat_before
    too_recent = mtime >= started_ns - GRANULARITY_NS
    extra: dict[str, Any] | None = None  # unchanged content: keep what is recorded
    if isinstance(d, LogDone):
        extra = d.copied.extra
    elif c.published:  # a new whole-file version: at its path, or a unique object; sealed?
        extra = {"object": c.object} if c.object else {}
        if c.sealed:
            extra[SEALED] = c.sealed
    index.record(
        d.path,
        size=c.size,
        mtime_ns=c.mtime_ns,
        ctime_ns=DIRTY if c.raced or too_recent or size != c.size else ctime,
        hash64=c.hash64,
        mode=c.mode,
        kind="segments" if isinstance(d, LogDone) else "file",
        extra=extra,
    )
    if extra == {}:
        index.extras.pop(d.path, None)


def record_companions(state: AdapterState, paths: list[str], recent: int) -> None:
    """Remember the stat of unlisted databases' companions (local only, not in the manifest),
    so an idle WAL does not trigger a snapshot every pass."""
    for path in paths:
        try:
            st = os.lstat(state.live / path)
        except OSError:
            continue
        state.index.record(
            path,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            ctime_ns=DIRTY if st.st_mtime_ns >= recent else st.st_ctime_ns,
            hash64=0,
            mode=st.st_mode,
            kind="sqlite",
            extra={"_local": True},
        )
