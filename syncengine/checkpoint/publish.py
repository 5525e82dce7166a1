"""Publishing one checkpoint pass's items, and what each result means.

Owns `publish_all` (the staged SQLite snapshots, then every planned copy,
log append, compaction and plain copy, in parallel up to ``jobs``, results
in order) and `collect`, which turns each result into a done item, a count or
a path error on the pass's `Pass` tally.  What the executor learns only by
doing (a file vanished or changed while copied, a log rewritten in place, a
file that became a database since it was planned) is reported here, never
turned into another action.  The order of a pass and recording it are
`syncengine.checkpoint.checkpointer`'s.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Generator

import attrs

from syncengine.checkpoint import record, segments, sqlite, sqlite_pass
from syncengine.checkpoint.copier import Changed, Copied, Published, SQLiteFile, upload
from syncengine.checkpoint.sealing import upload_sealed
from syncengine.errors import SourceError
from syncengine.fs.stream import NotRegular, Vanished, in_order
from syncengine.local.adapter import AdapterState
from syncengine.plan import AppendSegments, Compact, PlainCopy, Upload
from syncengine.report import PathError

log = logging.getLogger("syncengine")


@attrs.define
class Pass:
    """What one pass has done so far."""

    done: list[record.Done] = attrs.field(factory=list)
    errors: list[PathError] = attrs.field(factory=list)
    unchanged: int = 0
    skipped: int = 0
    changed: int = 0
    fatal: str | None = None


Result = Copied | Published | Exception


Item = Upload | AppendSegments | Compact | PlainCopy | sqlite_pass.Database


def publish_all(
    state: AdapterState,
    work: sqlite_pass.Sorted,
    staged: dict[str, sqlite.Staged | Exception],
    jobs: int,
    recent: int,
    final: bool,
) -> Generator[tuple[Item, Result], None, None]:
    """Publish the staged snapshots and carry out each planned copy (in parallel up to
    `jobs`), results in order: the snapshots first."""
    sniff = state.sqlite is not None

    def one(item: Item) -> Result:
        if isinstance(item, sqlite_pass.Database):
            return sqlite_pass.publish(state, item, staged[item.path], recent)
        try:
            if isinstance(item, AppendSegments | Compact | PlainCopy):
                return segments.publish(
                    state.store,
                    os.fspath(state.live),
                    item.path,
                    state.index,
                    final=final,
                    compact=isinstance(item, Compact),
                    recent_ns=recent,
                    plain=not isinstance(item, AppendSegments) or bool(item.plain),
                )
            return _upload(state, item, sniff, recent)
        except SQLiteFile:  # it became a database since it was planned: never copy it raw
            log.info(
                "checkpoint.plan-changed adapter=%s path=%s: now a SQLite database",
                state.name,
                item.path,
                extra={"event": "checkpoint.plan-changed"},
            )
            return sqlite_pass.found_late(state, item.path, recent, final)
        except (SourceError, Vanished, NotRegular, Changed, segments.Waiting) as exc:
            return exc

    items: list[Item] = [*work.databases, *work.files]
    return in_order(items, one, jobs=jobs, name="syncengine-copy")


def _upload(state: AdapterState, item: Upload, sniff: bool, recent: int) -> Copied:
    """One planned whole-file upload: sealed when it is a secret file and a key is set."""
    rec = state.index.get(item.path) if item.hash_first else None
    known = rec if rec is not None and rec.kind == "file" else None
    secrets = state.secrets
    if secrets is not None and secrets.seals(item.path):
        stale = secrets.stale(item.path, state.index.extras.get(item.path))
        return upload_sealed(
            state.store,
            os.fspath(state.live),
            item.path,
            secrets,
            known_hash=known.hash64 if known and not stale else None,
            known_size=known.size if known else None,
            sniff_sqlite=sniff,
            recent_ns=recent,
        )
    return upload(
        state.store,
        os.fspath(state.live),
        item.path,
        known_hash=known.hash64 if known else None,
        known_size=known.size if known else None,
        sniff_sqlite=sniff,
        recent_ns=recent,
    )


def collect(state: AdapterState, item: Item, result: Result, p: Pass) -> None:
    """Turn one copy's result into an outcome, a count, or an error."""
    path = item.path
    if isinstance(result, (Published, Copied)):
        state.notices.settled("copy.failed", state.name, path)
    if isinstance(result, Published):
        p.done.append(record.SnapshotDone(result.entry.path, result))
        p.unchanged += not result.copied.published
    elif isinstance(result, Copied):
        p.done.append(
            record.LogDone(path, result)
            if isinstance(result, segments.Logged)
            else record.FileDone(path, result)
        )
        p.unchanged += not result.published
        if result.published:
            log.debug(
                "copy.published adapter=%s path=%s bytes=%d",
                state.name,
                path,
                result.size,
                extra={"event": "copy.published"},
            )
    else:
        _not_published(state, path, result, p)


def _not_published(state: AdapterState, path: str, result: Result, p: Pass) -> None:
    """Count or report a result that published nothing (vanished, changed while
    copied, waiting for a complete line, not a regular file, or failed)."""
    if isinstance(result, Vanished):
        p.skipped += 1
        log.info(
            "copy.vanished adapter=%s path=%s", state.name, path, extra={"event": "copy.vanished"}
        )
    elif isinstance(result, Changed):
        p.changed += 1
        log.info(
            "copy.changed adapter=%s path=%s: %s; the previous durable copy is kept and "
            "the file is taken again next pass",
            state.name,
            path,
            result.why,
            extra={"event": "copy.changed"},
        )
    elif isinstance(result, segments.Waiting | sqlite_pass.Deferred):
        p.unchanged += 1
        if isinstance(result, segments.Waiting):
            log.debug(
                "segments.waiting adapter=%s path=%s (%s)",
                state.name,
                path,
                result,
                extra={"event": "segments.waiting"},
            )
    elif isinstance(result, NotRegular):
        p.skipped += 1
        log.info(
            "copy.not-regular adapter=%s path=%s",
            state.name,
            path,
            extra={"event": "copy.not-regular"},
        )
    elif isinstance(result, SourceError):
        p.errors.append(PathError(state.name, path, result.operation, result.reason))
        state.notices.warn(
            "copy.failed",
            state.name,
            path,
            result.reason,
            "copy.failed adapter=%s path=%s error=%s",
            state.name,
            path,
            result.reason,
        )
