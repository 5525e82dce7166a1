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

Which changed paths are databases the plan decides (`plan.Snapshot`: a
listed database, a file that starts with the SQLite header, the database of
a changed ``-wal``/``-shm``/``-journal``).  A database found only while its
file was being copied (it had no header yet when the plan was made) is
snapshotted in the next pass, after that pass's files, except in a final
pass, where no writer runs any more.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import attrs

from syncengine.checkpoint import sqlite
from syncengine.checkpoint.copier import Published
from syncengine.checkpoint.sqlite_backup import Refused
from syncengine.errors import SourceError
from syncengine.fs.stream import Vanished, in_order
from syncengine.local.adapter import AdapterState
from syncengine.plan import AppendSegments, Compact, PlainCopy, Snapshot, Upload

log = logging.getLogger("syncengine")
PAGE = 512  # the smallest SQLite page: a database file is a whole number of pages


@attrs.frozen
class Database:
    """A database to snapshot in this pass."""

    path: str
    listed: bool


@attrs.frozen
class Sorted:
    """A pass's copies split into databases (snapshotted first) and everything else."""

    databases: tuple[Database, ...]
    files: tuple[Upload | AppendSegments | Compact | PlainCopy, ...]


class Deferred(Exception):
    """A database found while copying a file: snapshotted next pass, after its files."""


def split(actions: Sequence[Upload | AppendSegments | Compact | PlainCopy | Snapshot]) -> Sorted:
    """Databases first, in path order; the plan already named them (`plan.Snapshot`)."""
    dbs = {a.path: Database(a.path, a.listed) for a in actions if isinstance(a, Snapshot)}
    files = tuple(a for a in actions if not isinstance(a, Snapshot))
    return Sorted(tuple(dbs[p] for p in sorted(dbs)), files)


def stage_all(
    state: AdapterState, databases: Sequence[Database], jobs: int
) -> dict[str, sqlite.Staged | Exception]:
    """Stage every database's snapshot (in parallel); what failed maps to its error."""
    return {
        db.path: result
        for db, result in in_order(
            databases,
            lambda db: stage(state, db.path, db.listed),
            jobs=jobs,
            name="syncengine-sqlite",
        )
    }


def stage(state: AdapterState, path: str, listed: bool) -> sqlite.Staged | Exception:
    assert state.sqlite is not None
    if not listed:
        state.notices.warn(
            "sqlite.unlisted",
            state.name,
            path,
            "unlisted",
            "sqlite.unlisted adapter=%s path=%s: a SQLite database not listed in the adapter's "
            "`sqlite` key; snapshotting it with the backup API",
            state.name,
            path,
        )
    try:
        staged = sqlite.stage(f"{state.live}/{path}", path, state.sqlite)
    except Refused as exc:
        refused = SourceError(path, exc.operation, f"{exc.reason}; {_kept(state, path)}")
        refused.__cause__ = exc
        return refused
    except (SourceError, Vanished) as exc:
        return exc
    if not staged.verdict.ok:
        state.notices.warn(
            "sqlite.unchecked",
            state.name,
            path,
            staged.verdict.detail,
            "sqlite.unchecked adapter=%s %s; publishing it",
            state.name,
            staged.verdict.message(path),
        )
    return staged


def _kept(state: AdapterState, path: str) -> str:
    """What the durable side keeps of a database whose snapshot failed this pass."""
    rec = state.index.get(path)
    if rec is None or rec.absent:
        return "nothing is published for it (it has no snapshot yet)"
    if rec.kind == "sqlite":
        return "the previous snapshot is kept"
    return "its earlier copy is kept"


def publish(
    state: AdapterState, db: Database, staged: sqlite.Staged | Exception, recent: int
) -> Published | Exception:
    if isinstance(staged, Exception):
        return staged
    secrets = state.secrets
    seal = None
    if secrets is not None and secrets.keys is not None and secrets.seals(db.path):
        seal = (secrets.keys.writer, secrets.name(db.path))
    return sqlite.publish(
        state.store, staged, state.index, listed=db.listed, recent_after_ns=recent, seal=seal
    )


def discard(staged: dict[str, sqlite.Staged | Exception]) -> None:
    """Remove staged copies a stopped pass did not publish."""
    for item in staged.values():
        if isinstance(item, sqlite.Staged) and os.path.lexists(item.path):
            sqlite.remove_set(item.path)


def found_late(state: AdapterState, path: str, recent: int, final: bool) -> Published | Exception:
    """A database found while its file was being copied (see the module docstring)."""
    if not final:
        log.debug(
            "sqlite.deferred adapter=%s path=%s: found while copying; snapshotted next "
            "pass, before its files",
            state.name,
            path,
            extra={"event": "sqlite.deferred"},
        )
        return Deferred(path)
    db = Database(path, False)
    return publish(state, db, stage(state, path, False), recent)
