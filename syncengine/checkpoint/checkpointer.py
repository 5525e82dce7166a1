"""Doing a checkpoint of one adapter: carry out the plan, then record it.

Owns the order that makes a checkpoint safe: first back up every changed
SQLite database into local staging (`sqlite_pass`: a database snapshot must
never be newer than the transcript it indexes, so it is taken before any
file of the pass is read); then publish every changed file and staged
snapshot as a closed object (in parallel, so per-file latency on the mount
overlaps), flush the durable filesystem once, on a write-back mount wait
until it confirms the uploads (behind.py keeps what it could not confirm),
write one manifest object naming what was published, and only then update
the local index (`record`).  A pass that only appended segments to logs
writes no manifest object (`record.manifest_entries` decides).  A directory
is recorded by its manifest entry alone (nothing is copied; ``mkdir`` on a
bucket mount is not stored), in the same object as the pass's files.  If the
durable side fails part-way, the index is not advanced, so the next pass
takes the same files again; nothing already durable is lost.  An idle pass
touches neither the durable side nor the index file.

Each action says what to do (`syncengine.plan`); what the executor learns only by
doing it is reported, never turned into another action of the same pass
(`syncengine.checkpoint.publish` publishes the items and reads their results).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import attrs

from syncengine.checkpoint import record, segments, sqlite, sqlite_pass
from syncengine.checkpoint.copier import Copied
from syncengine.checkpoint.publish import Pass, collect, publish_all
from syncengine.checkpoint.record import GRANULARITY_NS
from syncengine.checkpoint.record import (
    write_base as write_base,  # gc writes its base manifest with it
)
from syncengine.durable import manifest
from syncengine.durable.manifest import Entry
from syncengine.errors import DurableError, NameTaken, local_error
from syncengine.fs.stream import link_hash
from syncengine.local import behind, chainstate
from syncengine.local.adapter import AdapterState
from syncengine.plan import (
    PUBLISHING,
    AppendSegments,
    CheckpointAction,
    Compact,
    MarkAbsent,
    PlainCopy,
    RecordDir,
    RecordLink,
    SkipCompanion,
    SkipSpecial,
    Snapshot,
    Upload,
)
from syncengine.progress import SILENT, Reporter
from syncengine.report import AdapterReport, PathError
from syncengine.sqlite import files

log = logging.getLogger("syncengine")
Publishing = Upload | AppendSegments | Compact | PlainCopy | Snapshot


@attrs.frozen
class LiveContent:
    """The planner's `plan.Sniffer` over a live tree: one small read per question."""

    live: Path

    def is_database(self, path: str) -> bool:
        return files.has_header(f"{self.live}/{path}")

    def database_of(self, path: str) -> str | None:
        return files.companion_base(self.live, path)


def run(
    state: AdapterState,
    actions: Sequence[CheckpointAction],
    *,
    started_ns: int,
    jobs: int,
    final: bool = False,
    progress: Reporter = SILENT,
) -> AdapterReport:
    """Carry out a checkpoint plan for one adapter and return what happened.

    Raises NameTaken, after dropping the index file, when the durable manifest
    already holds the object this index would write next (the caller rebuilds
    the index from the manifest).
    """
    p = Pass()
    uploads: list[Publishing] = [a for a in actions if isinstance(a, PUBLISHING)]
    # A run that was killed (or stopped by the durable side) may have renamed new versions
    # into place without recording them (the plan then trusts no recorded hash).
    clean_start = not state.staging_marker.exists()
    if uploads:
        _prepare_staging(state)
        if state.sqlite is not None:
            sqlite.sweep_staging(state.sqlite)
    recent = started_ns - GRANULARITY_NS
    _copy_all(state, uploads, p, jobs, recent, final, progress)
    for action in actions:
        _record_other(state, action, started_ns, p)
    done = [d for d in p.done if record.published(d)]
    name, recorded, confirmed = _write_manifest(state, done, started_ns, final, p, clean_start)
    if p.fatal is None:
        record.apply(state.index, p.done, started_ns)  # verified-equal ones too
        chainstate.mark_recorded(state.index, recorded)
        behind.after_pass(
            state.index,
            (record.entry_of(d) for d in done),
            confirmed,
            state.store.instance,
            keeps_mtime=state.store.keeps_mtime,
        )
        failed = {e.path for e in p.errors}
        record.record_companions(
            state,
            [a.path for a in actions if isinstance(a, SkipCompanion) and a.database not in failed],
            recent,
        )
    else:  # keep verified-equal results; published ones are taken again next pass
        record.apply(state.index, [d for d in p.done if not record.published(d)], started_ns)
    if state.index.changed:  # LocalError when the state dir is full: the marker stays, so
        state.index.save(state.index_path)  # the next pass trusts no hash it did not record
    if p.fatal is None and uploads:  # after the index knows the manifest object (recorded.py)
        _finish_staging(state)
    return _report(state.name, done, p, name)


def _report(
    name: str, done: list[record.Done], p: Pass, manifest_name: str | None
) -> AdapterReport:
    ok = p.fatal is None
    copied = [c for c in map(record.copied_of, done) if c is not None]
    logged = [c for c in copied if isinstance(c, segments.Logged)]
    only_plain = sum(c.why == "plain" for c in logged)
    return AdapterReport(
        name=name,
        files=len(copied) - only_plain if ok else 0,
        plain_copies=sum(c.plain_written for c in logged) if ok else 0,
        bytes=sum(_written(c) for c in copied) if ok else 0,
        unchanged=p.unchanged,
        skipped=p.skipped,
        changed=p.changed,
        links=sum(isinstance(d, record.LinkDone) for d in done) if ok else 0,
        dirs=sum(isinstance(d, record.DirDone) for d in done) if ok else 0,
        manifest=manifest_name,
        errors=tuple(p.errors),
        fatal=p.fatal,
    )


def _written(c: Copied) -> int:
    return c.written if isinstance(c, segments.Logged) else c.size


def _copy_all(
    state: AdapterState,
    uploads: Sequence[Publishing],
    p: Pass,
    jobs: int,
    recent: int,
    final: bool,
    progress: Reporter,
) -> None:
    """Snapshot the databases (staged before any file is read), then publish everything."""
    work = sqlite_pass.split(uploads)
    staged = sqlite_pass.stage_all(state, work.databases, jobs)  # before any file is read
    results = publish_all(state, work, staged, jobs, recent, final)
    meter = (
        progress.start(
            "checkpoint", state.name, len(uploads), sum(getattr(a, "size", 0) for a in uploads)
        )
        if uploads
        else None
    )
    try:
        for item, result in results:
            collect(state, item, result, p)
            assert meter is not None
            meter.advance(1, getattr(item, "size", 0))
    except DurableError as exc:
        p.fatal = str(exc)
        log.error(
            "checkpoint.durable-failed adapter=%s error=%s",
            state.name,
            exc,
            extra={"event": "checkpoint.durable-failed"},
        )
    finally:
        results.close()  # cancel queued copies, wait for running ones
        sqlite_pass.discard(staged)
        if meter is not None:
            meter.finish()


def _record_other(state: AdapterState, action: CheckpointAction, started_ns: int, p: Pass) -> None:
    """Carry out an action that copies nothing (a link, a directory, an absence, a skip)."""
    if isinstance(action, RecordLink):
        _record_link(state, action.path, p)
    elif isinstance(action, RecordDir):  # unless the manifest has it (an index rebuilt
        if state.index.dir_record(action.path) != (action.mode, 0):  # from it since the plan)
            p.done.append(record.DirDone(action.path, action.mode))
    elif isinstance(action, MarkAbsent):
        state.index.mark_absent(action.path, started_ns)
    elif isinstance(action, SkipSpecial):
        p.skipped += 1
        log.info(
            "scan.skip-special adapter=%s path=%s",
            state.name,
            action.path,
            extra={"event": "scan.skip-special"},
        )


def _write_manifest(
    state: AdapterState,
    done: list[record.Done],
    started_ns: int,
    final: bool,
    p: Pass,
    clean_start: bool,
) -> tuple[str | None, list[Entry], bool]:
    """Flush, confirm, and write the pass's manifest object (if it needs one): its name,
    what it lists, and whether a write-back mount confirmed the uploads."""
    entries = record.manifest_entries(state.index, done, final) if p.fatal is None else []
    rebase = behind.rebase_due(state.index.meta)  # a full base even of nothing (a fork)
    if p.fatal is not None or not (done or entries or rebase):
        return None, [], True
    confirmed = True
    try:
        state.store.barrier()  # what the index records next must survive a power loss
        confirmed = state.store.confirm()  # a write-back mount: in the bucket now?
        if not (entries or rebase):
            return None, [], confirmed
        name, recorded = record.write_manifest(state, entries, started_ns)
        if final and confirmed:  # the container stops next: its manifest too
            state.store.confirm()
        return name, recorded, confirmed
    except NameTaken:  # the manifest is ahead of this index: never continue from it
        state.index_path.unlink(missing_ok=True)
        if clean_start:
            # Only this pass renamed versions into place unrecorded, and their local
            # files still hold what was copied: against an index rebuilt from the
            # manifest they differ (taken again) or match (durable is that content).
            # Hashes stay trustworthy; no need to copy every file again.
            _finish_staging(state)
        raise
    except DurableError as exc:
        p.fatal = str(exc)
        log.error(
            "checkpoint.manifest-failed adapter=%s error=%s",
            state.name,
            exc,
            extra={"event": "checkpoint.manifest-failed"},
        )
        return None, [], confirmed


def _record_link(state: AdapterState, path: str, p: Pass) -> None:
    full = state.live / path
    try:
        st = os.lstat(full)
        target = os.readlink(full)
    except FileNotFoundError:
        p.skipped += 1
        return
    except OSError as exc:
        p.errors.append(PathError(state.name, path, "readlink", exc.strerror or str(exc)))
        return
    if state.index.links.get(path) == target:
        state.index.record(
            path,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            ctime_ns=st.st_ctime_ns,
            hash64=link_hash(target),
            mode=st.st_mode,
            kind="symlink",
            target=target,
        )
        p.unchanged += 1
        return
    p.done.append(
        record.LinkDone(path, target, (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode))
    )


def _prepare_staging(state: AdapterState) -> None:
    """Sweep temp objects of a killed run, known from a local marker (no listing otherwise).

    The next manifest object is then a full base, so nothing a killed run may
    have left half-written on a mount without atomic rename is still needed.
    """
    if state.staging_marker.exists():
        state.index.meta["deltas"] = manifest.COMPACT_AFTER
        removed = state.store.sweep_staging()
        if removed:
            log.info(
                "checkpoint.swept-staging adapter=%s files=%d",
                state.name,
                removed,
                extra={"event": "checkpoint.swept-staging"},
            )
    else:
        mark_unrecorded(state)


def mark_unrecorded(state: AdapterState) -> None:
    """Say that the durable side may hold versions the manifest does not record (a pass
    about to rename, or a restore that found newer ones): the next pass that publishes
    copies changed files instead of trusting hashes and writes a full base."""
    try:
        state.staging_marker.parent.mkdir(parents=True, exist_ok=True)
        state.staging_marker.touch()
    except OSError as exc:
        raise local_error("create the staging marker", state.staging_marker, exc) from exc


def _finish_staging(state: AdapterState) -> None:
    state.staging_marker.unlink(missing_ok=True)
