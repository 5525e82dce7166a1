"""Deciding what a checkpoint will do, as frozen values.

Owns the checkpoint rules, not the I/O.  A checkpoint plan turns a scan and
the index into one action per path that names what will really be done (a
whole-file upload, hashed first or not, a segment append or a new chain, a
compaction, a SQLite snapshot, a database companion skipped), so the dry run
tells the truth and the executor (`syncengine.checkpoint.checkpointer`) carries
the plan out instead of deciding again; what the planner must know of a
file's content (a SQLite header) it asks a `Sniffer`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import attrs

from syncengine.local.chainstate import MAX_SEGMENTS
from syncengine.local.index import Index
from syncengine.patterns import Matcher
from syncengine.sqlite.files import is_listed
from syncengine.walk.job import ScanResult, Seen


class Sniffer(Protocol):
    """What the checkpoint planner may learn from a live file's first bytes (one read)."""

    def is_database(self, path: str) -> bool:
        """Whether the file starts with the SQLite header."""

    def database_of(self, path: str) -> str | None:
        """The database a -wal/-shm/-journal file belongs to, if it is one."""


@attrs.frozen
class Upload:
    """Publish a new or changed file as a whole.

    With `hash_first` the executor compares the file's hash with the recorded
    one and writes nothing when they match; without it (a killed pass may
    have left unrecorded versions at the durable paths) it copies the file.
    """

    path: str
    size: int
    reason: str
    hash_first: bool = True

    def __str__(self) -> str:
        return f"upload {self.path} ({self.reason}, {self.size} bytes)"


@attrs.frozen
class AppendSegments:
    """Publish an append-only log's complete new lines as one segment (`start` > 0), or
    start its chain with a base (`start` 0).  The executor checks that the published
    prefix is unchanged first; if it is not, a new chain starts."""

    path: str
    size: int
    start: int  # bytes the chain already covers
    reason: str
    plain: str = ""  # why the whole log is then published at its plain path ("": not)

    def __str__(self) -> str:
        then = f"; then whole at its plain path: {self.plain}" if self.plain else ""
        if not self.start:
            return f"segments {self.path} (new chain: {self.reason}, {self.size} bytes{then})"
        if self.size == self.start:
            return f"append {self.path} (no new bytes; {self.reason}{then})"
        return (
            f"append {self.path} ({self.size - self.start} bytes after {self.start}: "
            f"one segment of complete lines{then})"
        )


@attrs.frozen
class Compact:
    """Rewrite a log's segment chain as a new chain of one base."""

    path: str
    size: int
    reason: str

    def __str__(self) -> str:
        return (
            f"compact {self.path} ({self.reason}: a new chain of one base, {self.size} "
            "bytes; and whole at its plain path unless it is there)"
        )


@attrs.frozen
class PlainCopy:
    """Publish a log's whole content (what its chain holds) at its plain durable path."""

    path: str
    size: int
    reason: str

    def __str__(self) -> str:
        return (
            f"plain {self.path} ({self.reason}: the whole log at its plain path, {self.size} bytes)"
        )


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
    directory: bool = False  # a recorded directory: nothing durable but its manifest entry

    def __str__(self) -> str:
        if self.directory:
            return f"absent {self.path}/ (directory: its manifest entry is kept until gc)"
        return f"absent {self.path} (durable copy kept)"


@attrs.frozen
class RecordDir:
    """Record a directory (empty or not) and its mode in the manifest: nothing is copied."""

    path: str
    mode: int
    reason: str

    def __str__(self) -> str:
        return f"dir {self.path}/ ({self.reason}, mode {self.mode:04o})"


@attrs.frozen
class SkipDir:
    """A directory not recorded this pass, and why (it is looked at again next pass)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"skip {self.path}/ ({self.reason})"


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


@attrs.frozen
class SkipCompanion:
    """A changed -wal/-shm/-journal of an unlisted database: never copied raw (its
    database is snapshotted instead); its stat is remembered so an idle WAL stays idle."""

    path: str
    database: str

    def __str__(self) -> str:
        return f"skip {self.path} (companion of SQLite database {self.database}: snapshotted)"


CheckpointAction = (
    Upload
    | AppendSegments
    | Compact
    | PlainCopy
    | RecordLink
    | MarkAbsent
    | SkipSpecial
    | Snapshot
    | SkipCompanion
    | RecordDir
    | SkipDir
)
PUBLISHING = (Upload, AppendSegments, Compact, PlainCopy, Snapshot)  # actions that copy bytes


def plan_checkpoint(
    scan: ScanResult,
    index: Index,
    missing: Iterable[str] = (),
    compact: frozenset[str] = frozenset(),
    *,
    logs: Matcher | None = None,
    sniff: Sniffer | None = None,
    plain: frozenset[str] = frozenset(),
    plain_why: str = "quiet",
    missing_dirs: Iterable[str] = (),
    trust_hashes: bool = True,
    seals: Callable[[str], bool] | None = None,
    reseal: frozenset[str] = frozenset(),
) -> tuple[CheckpointAction, ...]:
    """One action per changed, new, vanished or special path, naming what will be done.

    `logs` matches append-only logs (segments); `compact` names idle logs whose
    chain is rewritten as one base (whether or not they changed); `plain` names
    logs whose whole content is published at their plain path (segments.py;
    `plain_why` says why) unless they changed in this pass; `sniff` tells
    SQLite databases and their companions from plain files (none: all plain).
    Directories the scan reports are recorded (`RecordDir`), those in
    `missing_dirs` counted absent.  Without `trust_hashes` (the staging marker
    of a killed pass is there) no upload is skipped by its recorded hash.
    `seals`, `reseal`: secret files (`_sealing`).
    """
    compact, plain = _not_secret(compact, seals), _not_secret(plain, seals)
    actions: list[CheckpointAction] = []
    changed = set()
    databases: set[str] = set()  # of changed companions
    for seen in sorted(scan.changed):
        secret = seals is not None and seals(seen.path)
        action = _plan_seen(
            seen, index, None if secret else logs, sniff, seen.path in compact, trust_hashes
        )
        if secret and isinstance(action, Upload):
            action = attrs.evolve(action, reason=f"{action.reason}, sealed")
        if isinstance(action, SkipCompanion):
            databases.add(action.database)
        actions.append(action)  # a changed log is not quiet: `plain` is for unchanged ones
        changed.add(seen.path)
    for path in sorted(compact - changed):
        rec = index.get(path)
        actions.append(Compact(path, rec.size if rec else 0, "idle log"))
    for path in sorted(plain - changed - compact):
        rec = index.get(path)
        actions.append(PlainCopy(path, rec.size if rec else 0, plain_why))
    missing = tuple(missing)
    actions.extend(_sealing(reseal - changed - set(missing), index))
    snapshotted = {a.path for a in actions if isinstance(a, Snapshot)}
    actions.extend(
        Snapshot(p, "unlisted database: its WAL or journal changed", listed=False)
        for p in sorted(databases - snapshotted)
    )
    actions.extend(MarkAbsent(p) for p in sorted(missing))
    actions.extend(_plan_dir(d.path, d.mode, index) for d in sorted(scan.dirs))
    actions.extend(MarkAbsent(p, directory=True) for p in sorted(missing_dirs))
    actions.extend(SkipSpecial(p) for p in sorted(scan.specials))
    return tuple(actions)


def _not_secret(paths: frozenset[str], seals: Callable[[str], bool] | None) -> frozenset[str]:
    """`paths` without the sealed secret files: a secret is never a log (no compaction, no
    plain copy), it is uploaded whole, sealed (`reseal`)."""
    return paths if seals is None else frozenset(p for p in paths if not seals(p))


def _sealing(reseal: set[str] | frozenset[str], index: Index) -> list[Upload | Snapshot]:
    """Secret files (docs/SECRETS.md; `seals` says which are sealed) are uploaded whole,
    never as a log's segments; `reseal` names unchanged ones whose published copy is
    plain or sealed with an older key: they are uploaded again (a database: snapshotted
    again), sealed."""
    out: list[Upload | Snapshot] = []
    why = "published plain or with an older key, sealed"
    for path in sorted(reseal):
        rec = index.get(path)
        if rec is not None and rec.kind == "sqlite":
            out.append(Snapshot(path, why, listed=is_listed(index.extras.get(path, {}))))
        else:
            out.append(Upload(path, rec.size if rec else 0, why, hash_first=False))
    return out


def _plan_dir(path: str, mode: int, index: Index) -> RecordDir | SkipDir:
    if path in index.records:  # its tombstone must reach gc first (see Index.record_dir)
        return SkipDir(
            path,
            "a file of that name is still recorded; the directory is "
            "recorded once gc has dropped it",
        )
    rec = index.dir_record(path)
    if rec is None:
        return RecordDir(path, mode, "new")
    if rec[1]:
        return RecordDir(path, mode, "reappeared")
    return RecordDir(path, mode, f"mode was {rec[0]:04o}")


_HEADER_MIN = 512  # the smallest SQLite database (one page)


def _plan_seen(
    seen: Seen,
    index: Index,
    logs: Matcher | None,
    sniff: Sniffer | None,
    compact: bool,
    trust_hashes: bool,
) -> CheckpointAction:
    if seen.is_link:
        return RecordLink(seen.path)
    if sniff is not None:
        database = sniff.database_of(seen.path)
        if database is not None:
            return SkipCompanion(seen.path, database)
        if seen.size >= _HEADER_MIN and sniff.is_database(seen.path):
            return Snapshot(seen.path, f"unlisted database, {_reason(seen, index)}", listed=False)
    if logs is not None and logs.excluded(seen.path, False):
        return _plan_log(seen, index, compact)
    return Upload(seen.path, seen.size, _reason(seen, index, trust_hashes), hash_first=trust_hashes)


def _reason(seen: Seen, index: Index, trust_hashes: bool = True) -> str:
    rec = index.get(seen.path)
    if rec is None:
        return "new"
    if rec.absent:
        return "reappeared"
    if rec.size == seen.size:
        return (
            "same size: hash first"
            if trust_hashes
            else ("same size, copied whole: a killed pass may have left versions unrecorded")
        )
    return f"size {rec.size} -> {seen.size}"


def _plan_log(seen: Seen, index: Index, compact: bool) -> AppendSegments | Compact:
    rec = index.get(seen.path)
    extra = index.extras.get(seen.path, {}) if rec is not None and rec.kind == "segments" else {}
    lens = list(extra.get("lens", ()))
    covered = sum(lens)
    if rec is None or not lens or not extra.get("chain"):
        over = rec is not None and rec.kind == "file"  # its plain copy is that old content
        return AppendSegments(
            seen.path,
            seen.size,
            0,
            "new log" if rec is None else "not a segment chain yet",
            plain="first chain over its plain copy" if over else "",
        )
    if seen.size < covered:
        return AppendSegments(
            seen.path, seen.size, 0, f"shrank below the {covered} bytes published"
        )
    if len(lens) >= MAX_SEGMENTS:
        return Compact(seen.path, seen.size, f"{len(lens)} objects")
    if compact and len(lens) > 1:
        return Compact(seen.path, seen.size, "idle log")
    return AppendSegments(seen.path, seen.size, covered, "metadata changed")
