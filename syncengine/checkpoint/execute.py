"""Doing a checkpoint of one adapter: carry out the plan, then record it.

Owns the order that makes a checkpoint safe: first back up every changed
SQLite database into local staging (`sqlite_pass`: a database snapshot must
never be newer than the transcript it indexes, so it is taken before any
file of the pass is read); then publish every changed file and staged
snapshot as a closed object (in parallel, so per-file latency on the mount
overlaps), flush the durable filesystem once, on a write-back mount wait
until it confirms the uploads (behind.py keeps what it could not confirm),
write one manifest object naming what was published, and only then update
the local index.  A pass that only appended
segments to logs writes no manifest object (`manifest_entries` decides).  A
directory is recorded by its manifest entry alone (nothing is copied; ``mkdir``
on a bucket mount is not stored), in the same object as the pass's files.  If
the durable side fails part-way, the index is not advanced, so the next pass
takes the same files again; nothing already durable is lost.  An idle pass
touches neither the durable side nor the index file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Generator, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from syncengine.checkpoint import segments, sqlite, sqlite_pass
from syncengine.copier import (
    Changed,
    Copied,
    NotRegular,
    Published,
    SQLiteFile,
    Vanished,
    in_order,
    link_hash,
    upload,
)
from syncengine.durable import manifest
from syncengine.durable.manifest import Entry
from syncengine.errors import DurableError, NameTaken, SourceError, local_error
from syncengine.local import behind
from syncengine.local.index import DIRTY, Index
from syncengine.model import AdapterState
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

log = logging.getLogger("syncengine")
Publishing = Upload | AppendSegments | Compact | PlainCopy | Snapshot

# A file whose mtime is this close to the scan start may still change within
# the same timestamp tick: publish it but look again next pass (borg files cache).
GRANULARITY_NS = 2_000_000_000


@attrs.frozen
class LiveContent:
    """The planner's `plan.Sniffer` over a live tree: one small read per question."""

    live: Path

    def is_database(self, path: str) -> bool:
        return sqlite.has_header(f"{self.live}/{path}")

    def database_of(self, path: str) -> str | None:
        return sqlite.companion_base(self.live, path)


@attrs.frozen
class _Done:
    """The outcome of one action, applied to the index after the manifest is durable."""

    path: str
    copied: Copied | None = None
    other: Published | None = None  # an entry of another kind (a SQLite snapshot)
    link_target: str | None = None
    link_sig: tuple[int, int, int, int] | None = None
    dir_mode: int | None = None  # a directory recorded (nothing copied)


def run(state: AdapterState, actions: Sequence[CheckpointAction], *, started_ns: int,
        jobs: int, final: bool = False, progress: Reporter = SILENT) -> AdapterReport:
    """Carry out a checkpoint plan for one adapter and return what happened.

    Raises NameTaken, after dropping the index file, when the durable manifest
    already holds the object this index would write next (the caller rebuilds
    the index from the manifest).
    """
    done: list[_Done] = []
    errors: list[PathError] = []
    counts = {"unchanged": 0, "skipped": 0, "changed": 0}
    fatal: str | None = None
    uploads = [a for a in actions if isinstance(a, PUBLISHING)]
    # A run that was killed (or stopped by the durable side) may have renamed new versions
    # into place without recording them: the index's hashes are then not what the durable
    # paths hold, so this run copies every changed file instead of trusting them.
    trust_hashes = not state.staging_marker.exists()
    if uploads:
        _prepare_staging(state)
        if state.sqlite is not None:
            sqlite.sweep_staging(state.sqlite)
    recent = started_ns - GRANULARITY_NS
    work = sqlite_pass.split(uploads)
    staged = sqlite_pass.stage_all(state, work.databases, jobs)  # before any file is read
    results = _execute(state, work, staged, jobs, recent, final, trust_hashes)
    meter = progress.start("checkpoint", state.name, len(uploads),
                           sum(getattr(a, "size", 0) for a in uploads)) if uploads else None
    try:
        for item, result in results:
            _collect(state, item, result, done, errors, counts)
            assert meter is not None
            meter.advance(1, getattr(item, "size", 0))
    except DurableError as exc:
        fatal = str(exc)
        log.error("checkpoint.durable-failed adapter=%s error=%s", state.name, exc)
    finally:
        results.close()  # cancel queued copies, wait for running ones
        sqlite_pass.discard(staged)
        if meter is not None:
            meter.finish()
    for other in actions:
        if isinstance(other, RecordLink):
            _record_link(state, other.path, done, errors, counts)
        elif isinstance(other, RecordDir):  # unless the manifest has it (an index rebuilt
            if state.index.dir_record(other.path) != (other.mode, 0):  # from it since the plan)
                done.append(_Done(other.path, dir_mode=other.mode))
        elif isinstance(other, MarkAbsent):
            state.index.mark_absent(other.path, started_ns)
        elif isinstance(other, SkipSpecial):
            counts["skipped"] += 1
            log.info("scan.skip-special adapter=%s path=%s", state.name, other.path)
    published = [d for d in done if d.copied is None or d.copied.published]
    name = None
    entries = manifest_entries(state.index, published, final) if fatal is None else []
    recorded: list[Entry] = []
    confirmed = True
    if fatal is None and (published or entries):
        try:
            state.store.barrier()  # what the index records next must survive a power loss
            confirmed = state.store.confirm()  # a write-back mount: in the bucket now?
            if entries:
                name, recorded = _write_manifest(state, entries, started_ns)
                if final and confirmed:  # the container stops next: its manifest too
                    state.store.confirm()
        except NameTaken:  # the manifest is ahead of this index: never continue from it
            state.index_path.unlink(missing_ok=True)
            if trust_hashes:
                # Only this pass renamed versions into place unrecorded, and their local
                # files still hold what was copied: against an index rebuilt from the
                # manifest they differ (taken again) or match (durable is that content).
                # Hashes stay trustworthy; no need to copy every file again.
                _finish_staging(state)
            raise
        except DurableError as exc:
            fatal = str(exc)
            log.error("checkpoint.manifest-failed adapter=%s error=%s", state.name, exc)
    if fatal is None:
        _apply(state.index, done, started_ns)
        segments.mark_recorded(state.index, recorded)
        behind.after_pass(state.index, (_entry(d) for d in published), confirmed,
                          state.store.instance, keeps_mtime=state.store.keeps_mtime)
        failed = {e.path for e in errors}
        _record_companions(state, [a.path for a in actions if isinstance(a, SkipCompanion)
                                   and a.database not in failed], recent)
    else:  # keep verified-equal results; published ones are taken again next pass
        _apply(state.index, [d for d in done if d.copied and not d.copied.published], started_ns)
    if state.index.changed:  # LocalError when the state dir is full: the marker stays, so
        state.index.save(state.index_path)  # the next pass trusts no hash it did not record
    if fatal is None and uploads:  # after the index knows the manifest object (recorded.py)
        _finish_staging(state)
    copied = [d.copied for d in published if d.copied is not None]
    plain = sum(isinstance(c, segments.Logged) and c.plain_written for c in copied)
    only_plain = sum(isinstance(c, segments.Logged) and c.why == "plain" for c in copied)
    return AdapterReport(
        name=state.name, files=len(copied) - only_plain if fatal is None else 0,
        plain_copies=plain if fatal is None else 0,
        bytes=sum(_written(c) for c in copied) if fatal is None else 0,
        unchanged=counts["unchanged"], skipped=counts["skipped"], changed=counts["changed"],
        links=sum(1 for d in published if d.link_target is not None) if fatal is None else 0,
        dirs=sum(1 for d in published if d.dir_mode is not None) if fatal is None else 0,
        manifest=name, errors=tuple(errors), fatal=fatal,
    )


def _written(c: Copied) -> int:
    return c.written if isinstance(c, segments.Logged) else c.size


_Result = Copied | Published | Exception
_Item = Upload | AppendSegments | Compact | PlainCopy | sqlite_pass.Database


def _execute(state: AdapterState, work: sqlite_pass.Sorted,
             staged: dict[str, sqlite.Staged | Exception], jobs: int, recent: int,
             final: bool, trust_hashes: bool) -> Generator[tuple[_Item, _Result], None, None]:
    """Publish the staged snapshots and carry out each planned copy (in parallel up to
    `jobs`), results in order: the snapshots first."""
    sniff = state.sqlite is not None

    def one(item: _Item) -> _Result:
        if isinstance(item, sqlite_pass.Database):
            return sqlite_pass.publish(state, item, staged[item.path], recent)
        try:
            if isinstance(item, AppendSegments | Compact | PlainCopy):
                return segments.publish(state.store, os.fspath(state.live), item.path,
                                        state.index, final=final,
                                        compact=isinstance(item, Compact), recent_ns=recent,
                                        plain=not isinstance(item, AppendSegments) or
                                        bool(item.plain))
            rec = state.index.get(item.path)
            known = trust_hashes and rec is not None and rec.kind == "file"
            return upload(state.store, os.fspath(state.live), item.path,
                          known_hash=rec.hash64 if known and rec else None,
                          known_size=rec.size if known and rec else None, sniff_sqlite=sniff,
                          recent_ns=recent)
        except SQLiteFile:  # it became a database since it was planned: never copy it raw
            log.info("checkpoint.plan-changed adapter=%s path=%s: now a SQLite database",
                     state.name, item.path)
            return sqlite_pass.found_late(state, item.path, recent, final)
        except (SourceError, Vanished, NotRegular, Changed, segments.Waiting) as exc:
            return exc

    items: list[_Item] = [*work.databases, *work.files]
    return in_order(items, one, jobs=jobs, name="syncengine-copy")


def _collect(state: AdapterState, item: _Item, result: _Result, done: list[_Done],
             errors: list[PathError], counts: dict[str, int]) -> None:
    path = item.path
    if isinstance(result, (Published, Copied)):
        state.notices.settled("copy.failed", state.name, path)
    if isinstance(result, Published):
        done.append(_Done(result.entry.path, copied=result.copied, other=result))
        if not result.copied.published:
            counts["unchanged"] += 1
    elif isinstance(result, Copied):
        done.append(_Done(path, copied=result))
        if not result.published:
            counts["unchanged"] += 1
        else:
            log.debug("copy.published adapter=%s path=%s bytes=%d", state.name, path,
                      result.size)
    elif isinstance(result, Vanished):
        counts["skipped"] += 1
        log.info("copy.vanished adapter=%s path=%s", state.name, path)
    elif isinstance(result, Changed):
        counts["changed"] += 1
        log.info("copy.changed adapter=%s path=%s: %s; the previous durable copy is kept and "
                 "the file is taken again next pass", state.name, path, result.why)
    elif isinstance(result, segments.Waiting):
        counts["unchanged"] += 1
        log.debug("segments.waiting adapter=%s path=%s (%s)", state.name, path, result)
    elif isinstance(result, sqlite_pass.Deferred):
        counts["unchanged"] += 1
    elif isinstance(result, NotRegular):
        counts["skipped"] += 1
        log.info("copy.not-regular adapter=%s path=%s", state.name, path)
    elif isinstance(result, SourceError):
        errors.append(PathError(state.name, path, result.operation, result.reason))
        state.notices.warn("copy.failed", state.name, path, result.reason,
                           "copy.failed adapter=%s path=%s error=%s", state.name, path,
                           result.reason)


def _record_link(state: AdapterState, path: str, done: list[_Done],
                 errors: list[PathError], counts: dict[str, int]) -> None:
    full = state.live / path
    try:
        st = os.lstat(full)
        target = os.readlink(full)
    except FileNotFoundError:
        counts["skipped"] += 1
        return
    except OSError as exc:
        errors.append(PathError(state.name, path, "readlink", exc.strerror or str(exc)))
        return
    if state.index.links.get(path) == target:
        state.index.record(path, size=st.st_size, mtime_ns=st.st_mtime_ns,
                           ctime_ns=st.st_ctime_ns, hash64=link_hash(target),
                           mode=st.st_mode, kind="symlink", target=target)
        counts["unchanged"] += 1
        return
    done.append(_Done(path, link_target=target,
                      link_sig=(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)))


def _entry(done: _Done) -> Entry:
    if done.other is not None:
        return done.other.entry
    if done.copied is not None:
        c = done.copied
        if isinstance(c, segments.Logged):
            return Entry(done.path, "segments", c.size, c.mtime_ns, c.mode & 0o7777, c.hash64,
                         extra=segments.manifest_extra(c.extra))
        return Entry(done.path, "file", c.size, c.mtime_ns, c.mode & 0o7777, c.hash64,
                     object=c.object)
    if done.dir_mode is not None:
        return Entry(done.path, "dir", mode=done.dir_mode)
    assert done.link_sig is not None
    return Entry(done.path, "symlink", mtime_ns=done.link_sig[1], target=done.link_target)


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
    return Entry(path, rec.kind, size, mtime, rec.mode & 0o7777, rec.hash64,
                 target=index.links.get(path), object=obj, extra=extra)


def manifest_entries(index: Index, published: Sequence[_Done], final: bool) -> list[Entry]:
    """Deciding: the entries this pass's manifest object lists; [] = write none.

    An append to a log needs none: the segment's name places it in its chain
    and restore finds it by listing the chain (chain.py).  Anything else (a
    file, a link, a snapshot, a new chain) does.  When one is written, and in
    a final checkpoint, it also lists every log whose chain grew since the
    manifest last recorded it, so a clean stop leaves the manifest complete.
    """
    behind = segments.unrecorded(index)
    needed = any(not _appended(d) for d in published) or (final and (published or behind))
    if not needed:
        return []
    entries = {d.path: _entry(d) for d in published}
    for path in behind:
        if path not in entries:
            entry = index_entry(index, path)
            if entry is not None:
                entries[path] = entry
    return list(entries.values())


def _appended(done: _Done) -> bool:
    return isinstance(done.copied, segments.Logged) and done.other is None and done.copied.appended


def write_base(state: AdapterState, entries: Iterable[Entry], now_ns: int) -> str:
    """Publish a base manifest object of `entries` as the next sequence number.

    The caller has flushed what the entries point at; the index's meta is
    advanced (save the index afterwards).  Also used by gc after deletions.
    """
    meta = state.index.meta
    seq = int(meta.get("manifest_seq", 0)) + 1
    name = manifest.write(state.store, state.name, seq, "base", entries, created_ns=now_ns)
    meta.update(manifest_seq=seq, base_seq=seq, deltas=0, written_seq=seq)
    state.index.changed = True
    return name


def _write_manifest(state: AdapterState, entries: list[Entry], now_ns: int
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
        name = manifest.write(state.store, state.name, seq, "delta", entries, created_ns=now_ns)
        meta.update(manifest_seq=seq, deltas=int(meta.get("deltas", 0)) + 1, written_seq=seq)
    state.index.changed = True
    log.info("checkpoint.manifest adapter=%s object=%s entries=%d", state.name, name,
             len(entries))
    return name, entries


def _apply(index: Index, done: Iterable[_Done], started_ns: int) -> None:
    for d in done:
        if d.other is not None:
            e = d.other.entry
            size, mtime, ctime = d.other.sig
            index.record(d.path, size=size, mtime_ns=mtime, ctime_ns=ctime,
                         hash64=e.hash or 0, mode=e.mode, kind=e.kind, extra=d.other.extra)
        elif d.copied is not None:
            c = d.copied
            size, mtime, ctime = c.stat_before
            too_recent = mtime >= started_ns - GRANULARITY_NS
            logged = isinstance(c, segments.Logged)
            extra: dict[str, Any] | None = None  # unchanged content: keep what is recorded
            if isinstance(c, segments.Logged):
                extra = c.extra
            elif c.published:  # a new whole-file version: at its path, or a unique object
                extra = {"object": c.object} if c.object else {}
            index.record(d.path, size=c.size, mtime_ns=c.mtime_ns,
                         ctime_ns=DIRTY if c.raced or too_recent or size != c.size else ctime,
                         hash64=c.hash64, mode=c.mode, kind="segments" if logged else "file",
                         extra=extra)
            if extra == {}:
                index.extras.pop(d.path, None)
        elif d.dir_mode is not None:
            index.record_dir(d.path, d.dir_mode)
        elif d.link_sig is not None and d.link_target is not None:
            size, mtime, ctime, mode = d.link_sig
            index.record(d.path, size=size, mtime_ns=mtime, ctime_ns=ctime,
                         hash64=link_hash(d.link_target), mode=mode, kind="symlink",
                         target=d.link_target)


def _record_companions(state: AdapterState, paths: list[str], recent: int) -> None:
    """Remember the stat of unlisted databases' companions (local only, not in the manifest),
    so an idle WAL does not trigger a snapshot every pass."""
    for path in paths:
        try:
            st = os.lstat(state.live / path)
        except OSError:
            continue
        state.index.record(path, size=st.st_size, mtime_ns=st.st_mtime_ns,
                           ctime_ns=DIRTY if st.st_mtime_ns >= recent else st.st_ctime_ns,
                           hash64=0, mode=st.st_mode, kind="sqlite", extra={"_local": True})


def _prepare_staging(state: AdapterState) -> None:
    """Sweep temp objects of a killed run, known from a local marker (no listing otherwise).

    The next manifest object is then a full base, so nothing a killed run may
    have left half-written on a mount without atomic rename is still needed.
    """
    if state.staging_marker.exists():
        state.index.meta["deltas"] = manifest.COMPACT_AFTER
        removed = state.store.sweep_staging()
        if removed:
            log.info("checkpoint.swept-staging adapter=%s files=%d", state.name, removed)
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


def staging_marker(state_dir: Path, adapter: str) -> Path:
    """Where an adapter's staging marker lives (see `mark_unrecorded`)."""
    return state_dir / "staging" / f"{adapter}.pending"


def _finish_staging(state: AdapterState) -> None:
    state.staging_marker.unlink(missing_ok=True)
