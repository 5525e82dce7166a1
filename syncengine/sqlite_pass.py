"""SQLite in a checkpoint pass: which changed paths are databases, snapshotted first.

Owns the order between databases and the files they refer to.  A database
can index a transcript (Codex's ``thread_history_1.sqlite`` stores byte
offsets into the rollout it projects); a durable snapshot newer than the
durable transcript points past its end, and a restore of that pair shows
turns that are not there.  So a pass takes every database snapshot (the
backup into local staging, `sqlite_backup.stage`) before it reads any file
it publishes: each file is then read at least as late as every snapshot,
and every durable snapshot is at most as new as the durable files of the
same pass.  Publishing the staged snapshots happens with the files, later.

Which uploads are databases is decided here, before any file is read: a
path the index knows as a database, a ``-wal``/``-shm``/``-journal`` whose
base is one (its database is snapshotted instead), and a changed file whose
size is a whole number of 512-byte pages and that starts with the SQLite
header.  A database found only while its file was being copied (it was not
page-aligned when the walk saw it) is snapshotted in the next pass, after
that pass's files, except in a final pass, where no writer runs any more.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from syncengine import sqlite
from syncengine.copier import Published, Vanished, in_order
from syncengine.errors import SourceError
from syncengine.plan import Snapshot, Upload

if TYPE_CHECKING:  # checkpoint imports this module
    from syncengine.checkpoint import AdapterState

log = logging.getLogger("syncengine")
PAGE = 512  # the smallest SQLite page: a database file is a whole number of pages


@attrs.frozen
class Database:
    """A database to snapshot in this pass, and the action that named it (for errors)."""

    path: str
    listed: bool
    action: Upload | Snapshot


@attrs.frozen
class Sorted:
    """A pass's uploads split into databases, companions and plain files."""

    databases: tuple[Database, ...]
    companions: tuple[tuple[str, str], ...]  # (companion path, its database)
    files: tuple[Upload, ...]


class Deferred(Exception):
    """A database found while copying a file: snapshotted next pass, after its files."""


def split(state: AdapterState, uploads: Sequence[Upload | Snapshot]) -> Sorted:
    """Sort uploads before anything is read (see the module docstring)."""
    dbs: dict[str, Database] = {}
    companions = []
    files = []
    for action in uploads:
        if isinstance(action, Snapshot):
            dbs[action.path] = Database(action.path, action.listed, action)
        elif state.sqlite is None:
            files.append(action)
        elif (base := sqlite.companion_base(state.live, action.path)) is not None:
            companions.append((action.path, base))
            dbs.setdefault(base, Database(base, False, action))
        elif _is_database(state, action):
            dbs.setdefault(action.path, Database(action.path, False, action))
        else:
            files.append(action)
    return Sorted(tuple(dbs[p] for p in sorted(dbs)), tuple(companions), tuple(files))


def _is_database(state: AdapterState, action: Upload) -> bool:
    rec = state.index.get(action.path)
    if rec is not None and rec.kind == "sqlite" and not state.index.extras.get(
            action.path, {}).get("_local"):
        return True
    return (action.size >= PAGE and action.size % PAGE == 0
            and sqlite.has_header(f"{state.live}/{action.path}"))


def stage_all(state: AdapterState, databases: Sequence[Database], jobs: int
              ) -> dict[str, sqlite.Staged | Exception]:
    """Stage every database's snapshot (in parallel); what failed maps to its error."""
    return {db.path: result for db, result in
            in_order(databases, lambda db: stage(state, db.path, db.listed), jobs=jobs,
                     name="syncengine-sqlite")}


def stage(state: AdapterState, path: str, listed: bool) -> sqlite.Staged | Exception:
    assert state.sqlite is not None
    if not listed:
        state.notices.warn(
            "sqlite.unlisted", state.name, path, "unlisted",
            "sqlite.unlisted adapter=%s path=%s: a SQLite database not listed in the adapter's "
            "`sqlite` key; snapshotting it with the backup API", state.name, path)
    try:
        staged = sqlite.stage(f"{state.live}/{path}", path, state.sqlite)
    except (SourceError, Vanished) as exc:
        return exc
    if not staged.verdict.ok:
        state.notices.warn("sqlite.unchecked", state.name, path, staged.verdict.detail,
                           "sqlite.unchecked adapter=%s %s; publishing it", state.name,
                           staged.verdict.message(path))
    return staged


def publish(state: AdapterState, db: Database, staged: sqlite.Staged | Exception,
            recent: int) -> Published | Exception:
    if isinstance(staged, Exception):
        return staged
    return sqlite.publish(state.store, staged, state.index, listed=db.listed,
                          recent_after_ns=recent)


def discard(staged: dict[str, sqlite.Staged | Exception]) -> None:
    """Remove staged copies a stopped pass did not publish."""
    for item in staged.values():
        if isinstance(item, sqlite.Staged) and os.path.lexists(item.path):
            sqlite.remove_set(item.path)


def found_late(state: AdapterState, path: str, recent: int, final: bool
               ) -> Published | Exception:
    """A database found while its file was being copied (see the module docstring)."""
    if not final:
        log.debug("sqlite.deferred adapter=%s path=%s: found while copying; snapshotted next "
                  "pass, before its files", state.name, path)
        return Deferred(path)
    db = Database(path, False, Upload(path, 0, "found while copying"))
    return publish(state, db, stage(state, path, False), recent)
