"""Deciding what a restore will do, as frozen values.

Owns the restore rules, not the I/O: the manifest (or a walk of an old
durable tree) and the local tree's state become one action per path, among
them invariant 5, never an older durable copy over a newer local file.  The
executor (`syncengine.restore.restorer`) carries the actions out.
"""

from __future__ import annotations

import attrs

from syncengine.durable.manifest import Entry


@attrs.frozen
class LocalState:
    """What is at a path in the live tree right now (lstat), or None."""

    kind: str  # "file", "symlink", "dir", "other"
    size: int
    mtime_ns: int
    mode: int = 0  # permission bits


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


SAME = "same"  # KeepLocal's reason when the local copy is the recorded one


@attrs.frozen
class KeepLocal:
    """The local copy is newer (hot restart), the same, or not a regular file: leave it."""

    entry: Entry
    reason: str

    @property
    def same(self) -> bool:
        """The local copy is the recorded one (same time and size): unchanged, not kept."""
        return self.reason == SAME

    def __str__(self) -> str:
        return f"keep {self.entry.path} ({self.reason})"


@attrs.frozen
class MakeDir:
    """Create a recorded directory missing locally, with its recorded mode.

    The mode is set when the directory is made, unless it would keep restore
    from placing what belongs inside (the owner lacks read, write or search):
    then it is set after every file of the restore is in place.
    """

    entry: Entry
    reason: str

    @property
    def deferred(self) -> bool:
        return self.entry.mode & 0o700 != 0o700

    def __str__(self) -> str:
        when = ", set after its contents" if self.deferred else ""
        return f"mkdir {self.entry.path}/ ({self.reason}, mode {self.entry.mode:04o}{when})"


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
        return (
            f"sqlite {self.entry.path} (keep if the local database is valid, "
            f"else restore the {src})"
        )


RestoreAction = Fetch | MakeLink | KeepLocal | Reject | RestoreDB | MakeDir


def plan_restore_entry(
    entry: Entry,
    local: LocalState | None,
    *,
    unsafe: str | None,
    known_kinds: frozenset[str] = frozenset({"file", "symlink"}),
    walked: bool = False,
) -> RestoreAction:
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
    if entry.kind == "dir":
        return _plan_dir_restore(entry, local)
    if local is None:
        return (
            MakeLink(entry, "missing")
            if entry.kind == "symlink"
            else Fetch(entry, "missing", walked)
        )
    reason = keep_reason(entry, local)
    if reason is not None and entry.kind == "segments" and local.kind in ("file", "symlink"):
        return Fetch(entry, f"{reason} by the manifest; its chain decides")
    if reason is not None:
        return KeepLocal(entry, reason)
    if entry.kind == "symlink":
        return MakeLink(entry, "local copy is older")
    return Fetch(entry, "local copy is older", walked)


def _plan_dir_restore(entry: Entry, local: LocalState | None) -> MakeDir | KeepLocal:
    """A directory is made when missing.  One that exists keeps its mode: nothing tells
    which mode is newer (no time is recorded for directories), and on a hot restart the
    local tree is the newer state (invariant 5); the next checkpoint records it."""
    if local is None:
        return MakeDir(entry, "missing")
    if local.kind != "dir":
        return KeepLocal(entry, "local path is a file, symlink or special file, not a directory")
    if local.mode == entry.mode:
        return KeepLocal(entry, SAME)
    return KeepLocal(entry, f"exists locally with mode {local.mode:04o}; its mode is kept")


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
    if local.kind in ("dir", "other"):
        return "local path is a directory or special file"
    if local.mtime_ns > entry.mtime_ns:
        return "local copy is newer"
    if local.mtime_ns == entry.mtime_ns and (entry.kind == "symlink" or local.size == entry.size):
        return SAME
    if local.mtime_ns == entry.mtime_ns:
        return "same time, different size: local wins"
    return None
