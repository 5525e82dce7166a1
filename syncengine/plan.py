"""Deciding: what a checkpoint or a restore will do, as frozen values.

Owns the rules, not the I/O.  A checkpoint plan turns a scan and the index
into one action per path; a restore plan turns the manifest (or a walk of an
old durable tree) and the local tree's state into one action per path.  Each
action prints as one readable line, so a dry run is "plan, then print", and
tests assert on the plan as text.  The executors in `checkpoint` and
`restore` carry the actions out.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from syncengine.index import Index
from syncengine.manifest import Entry
from syncengine.scan import ScanResult, Seen


@attrs.frozen
class Upload:
    """Publish a new or changed file (hash first when the size did not change)."""

    path: str
    size: int
    reason: str
    compact: bool = False  # an append-only log: rewrite its chain as one base

    def __str__(self) -> str:
        return f"upload {self.path} ({self.reason}, {self.size} bytes)"


@attrs.frozen
class RecordLink:
    """Record a symlink in the manifest (links are never followed)."""

    path: str

    def __str__(self) -> str:
        return f"link {self.path}"


@attrs.frozen
class MarkAbsent:
    """A published path is gone locally: keep the durable copy, count the pass."""

    path: str

    def __str__(self) -> str:
        return f"absent {self.path} (durable copy kept)"


@attrs.frozen
class SkipSpecial:
    """A FIFO, socket or device: never opened."""

    path: str

    def __str__(self) -> str:
        return f"skip {self.path} (not a regular file or symlink)"


@attrs.frozen
class Snapshot:
    """Copy a SQLite database with the online backup API; publish it if it differs."""

    path: str
    reason: str
    listed: bool = True  # False: an unlisted database found by its header in a tree

    def __str__(self) -> str:
        return f"snapshot {self.path} ({self.reason})"


CheckpointAction = Upload | RecordLink | MarkAbsent | SkipSpecial | Snapshot


def plan_checkpoint(scan: ScanResult, index: Index, missing: Iterable[str] = (),
                    compact: frozenset[str] = frozenset()) -> tuple[CheckpointAction, ...]:
    """One action per changed, new, vanished or special path.

    `compact` names idle append-only logs whose segment chain is rewritten as
    one base (whether or not they changed).
    """
    actions: list[CheckpointAction] = []
    changed = set()
    for seen in sorted(scan.changed):
        action = _plan_seen(seen, index)
        if isinstance(action, Upload) and seen.path in compact:
            action = attrs.evolve(action, compact=True)
        actions.append(action)
        changed.add(seen.path)
    for path in sorted(compact - changed):
        rec = index.get(path)
        actions.append(Upload(path, rec.size if rec else 0, "idle log: compact", compact=True))
    actions.extend(MarkAbsent(p) for p in sorted(missing))
    actions.extend(SkipSpecial(p) for p in sorted(scan.specials))
    return tuple(actions)


def _plan_seen(seen: Seen, index: Index) -> CheckpointAction:
    if seen.is_link:
        return RecordLink(seen.path)
    rec = index.get(seen.path)
    if rec is None:
        reason = "new"
    elif rec.absent:
        reason = "reappeared"
    elif rec.size == seen.size:
        reason = "same size: hash first"
    else:
        reason = f"size {rec.size} -> {seen.size}"
    return Upload(seen.path, seen.size, reason)


# -- restore ------------------------------------------------------------


@attrs.frozen
class LocalState:
    """What is at a path in the live tree right now (lstat), or None."""

    kind: str  # "file", "symlink", "other"
    size: int
    mtime_ns: int


@attrs.frozen
class Fetch:
    """Copy a durable file into the live tree.

    `walked`: found by listing an old-layout tree (no manifest).  Such a file
    that vanishes before it is copied is skipped, as rsync's exit 24 (a
    harness pruned scratch); nothing vouches for its content, so nothing is
    compared.  A manifest entry is checked against its record (recorded.py).
    """

    entry: Entry
    reason: str
    walked: bool = False

    def __str__(self) -> str:
        return f"restore {self.entry.path} ({self.reason}, {self.entry.size} bytes)"


@attrs.frozen
class MakeLink:
    """Recreate a recorded symlink (the link itself; nothing is followed)."""

    entry: Entry
    reason: str

    def __str__(self) -> str:
        return f"link {self.entry.path} -> {self.entry.target} ({self.reason})"


@attrs.frozen
class KeepLocal:
    """The local copy is newer (hot restart) or is not a regular file: leave it."""

    entry: Entry
    reason: str

    def __str__(self) -> str:
        return f"keep {self.entry.path} ({self.reason})"


@attrs.frozen
class Reject:
    """An entry that cannot be restored safely or is of an unknown kind."""

    entry: Entry
    reason: str

    def __str__(self) -> str:
        return f"refuse {self.entry.path} ({self.reason})"


@attrs.frozen
class RestoreDB:
    """A SQLite database: keep a valid local one, else restore the verified snapshot."""

    entry: Entry
    legacy_wal: str | None = None  # old raw layout: the durable -wal to replay, if any

    def __str__(self) -> str:
        src = "raw db+wal (old layout)" if self.entry.extra.get("legacy") else "snapshot"
        return (f"sqlite {self.entry.path} (keep if the local database is valid, "
                f"else restore the {src})")


RestoreAction = Fetch | MakeLink | KeepLocal | Reject | RestoreDB


def plan_restore_entry(entry: Entry, local: LocalState | None, *, unsafe: str | None,
                       known_kinds: frozenset[str] = frozenset({"file", "symlink"}),
                       walked: bool = False) -> RestoreAction:
    """Decide one durable entry against the live tree.

    The rule of invariant 5: a local file that is newer than (or as new as) the
    durable copy is never overwritten; missing or older local files are filled.
    A log's manifest entry may be behind its chain (appends are recorded by
    their segments' names): a local copy that looks as new is compared again
    with the chain when the restore lists it (`keep_reason` there).
    """
    if entry.problem is not None:
        return Reject(entry, entry.problem)
    if unsafe:
        return Reject(entry, unsafe)
    if entry.kind not in known_kinds:
        return Reject(entry, f"unknown entry kind {entry.kind!r}: written by a newer syncengine?")
    if local is None:
        return (MakeLink(entry, "missing") if entry.kind == "symlink"
                else Fetch(entry, "missing", walked))
    reason = keep_reason(entry, local)
    if reason is not None and entry.kind == "segments" and local.kind != "other":
        return Fetch(entry, f"{reason} by the manifest; its chain decides")
    if reason is not None:
        return KeepLocal(entry, reason)
    if entry.kind == "symlink":
        return MakeLink(entry, "local copy is older")
    return Fetch(entry, "local copy is older", walked)


SPECIAL_BITS = 0o7000  # setuid, setgid, sticky


def without_special_bits(entry: Entry) -> Entry:
    """The entry with the mode restore applies: never setuid, setgid or sticky.

    The manifest is data from the bucket: anyone who can write it could
    otherwise plant a setuid file owned by the restoring user (root).
    """
    if not entry.mode & SPECIAL_BITS:
        return entry
    return attrs.evolve(entry, mode=entry.mode & ~SPECIAL_BITS)


def keep_reason(entry: Entry, local: LocalState) -> str | None:
    """Why the local copy must stay instead of `entry` (invariant 5), or None."""
    if local.kind == "other":
        return "local path is a directory or special file"
    if local.mtime_ns > entry.mtime_ns:
        return "local copy is newer"
    if local.mtime_ns == entry.mtime_ns and (entry.kind == "symlink" or local.size == entry.size):
        return "same"
    if local.mtime_ns == entry.mtime_ns:
        return "same time, different size: local wins"
    return None
