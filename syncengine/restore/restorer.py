"""Doing a restore of one adapter: fill the live tree from the durable one.

Owns reading the durable side's list of entries (the manifest; a walk of the
tree only for state written by the old rsync layout, which has none) and
carrying out the restore plan: missing or older local files are copied in as
closed temp files renamed into place, with their recorded mode and mtime
(fetch.py places each one, parallel.py runs them in threads or forked processes,
packed.py reads packed small files a span of a pack at a time); newer local files
are kept (a hot restart); nothing is ever written outside the live root.  A
restore reports success only when it can vouch for the result: an unreadable
manifest object (manifest.py), an invalid entry, a copy that differs from its
record and is not a newer complete version (recorded.py), a database it cannot
validate, each makes it incomplete.  Afterwards the index knows every restored
file, so the next checkpoint uploads only what differs.

Directories recorded in the manifest (``dir`` entries, empty or not) that are
missing locally are made first, with their recorded mode, except a mode that
would keep restore out (the owner lacks read, write or search, e.g. 0500):
that one is set last, deepest first, after everything inside is placed.  A
mode is never wider than recorded and never setuid, setgid or sticky (the
plan drops those bits, logging ``restore.mode-dropped``).  A directory that
exists locally keeps its mode (invariant 5: on a hot restart the local tree is
the newer state; nothing records when a directory's mode changed), and the
next checkpoint records it.  Parents that no entry names (an older manifest)
are made owner-only, as before.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterable
from contextlib import closing

from syncengine.checkpoint import checkpointer as checkpoint
from syncengine.durable import manifest, recorded
from syncengine.durable.manifest import Entry
from syncengine.durable.store import Store, with_metadata
from syncengine.errors import DurableError, SourceError
from syncengine.fs.safepath import DirCache, UnsafePath, check_relpath
from syncengine.fs.stream import Vanished
from syncengine.local import chainstate, pending, seed
from syncengine.local.adapter import AdapterState
from syncengine.local.index import DIRTY, Index
from syncengine.plan import (
    Fetch,
    KeepLocal,
    MakeDir,
    MakeLink,
    Reject,
    RestoreAction,
    RestoreDB,
    plan_restore_entry,
    without_special_bits,
)
from syncengine.progress import SILENT, Reporter
from syncengine.report import AdapterReport, PathError
from syncengine.restore import openfiles, packed
from syncengine.restore import sqlite as sqlite_restore
from syncengine.restore.dirs import dirs_around, failed
from syncengine.restore.fetch import Done, local_state
from syncengine.restore.parallel import Outcome, execute_all

log = logging.getLogger("syncengine")
KINDS = frozenset({"file", "symlink", "segments", "dir"})


def durable_entries(store: Store, index: Index) -> tuple[list[Entry], list[str], str]:
    """(entries, problems, source) from the manifest, else from a walk of the tree.

    Entries the manifest holds but cannot use come back as `manifest.INVALID`
    placeholders (the plan refuses each, naming it).  Also tells the index
    where the manifest's sequence stands, so the next checkpoint continues it
    instead of reusing a name (a full base after a torn object).
    """
    state = manifest.load(store)
    if state.last_seq > int(index.meta.get("manifest_seq", 0)):
        index.meta.update(
            manifest_seq=state.last_seq, base_seq=state.base_seq, deltas=state.deltas_since_base
        )
        index.changed = True
    for warning in state.warnings + state.fenced_warnings:
        log.warning("manifest.warning %s", warning, extra={"event": "manifest.warning"})
    if state.readable or state.problems:
        entries = openfiles.reconcile(store, state.entries.values())
        return entries + list(state.invalid.values()), list(state.problems), "manifest"
    entries = []
    for info in with_metadata(store):  # a link is listed with its target (durable.store)
        if info.kind == "link" and info.target is None:
            entries.append(Entry.invalid(info.key, "cannot read the durable symlink"))
        elif info.kind == "link":
            entries.append(Entry(info.key, "symlink", mtime_ns=info.mtime_ns, target=info.target))
        else:
            entries.append(Entry(info.key, "file", info.size, info.mtime_ns, info.mode))
    return openfiles.reconcile(store, entries), list(state.problems), "walk"


def plan(
    state: AdapterState, entries: Iterable[Entry], source: str = "manifest"
) -> list[RestoreAction]:
    """One action per durable entry, decided against the live tree.

    `source` "walk": the entries come from listing an old-layout tree.
    """
    actions: list[RestoreAction] = []
    entries = [_restorable_mode(e) for e in entries]
    actions.extend(Reject(e, e.problem) for e in entries if e.problem is not None)
    entries = [e for e in entries if e.problem is None]
    entries, databases = sqlite_restore.plan(
        entries, state.sqlite_patterns, state.live, state.store
    )
    paths = {e.path for e in entries if e.kind != "dir"}  # a recorded directory is a parent
    empty = _is_empty(os.fspath(state.live))  # a first start: nothing local to compare
    with DirCache(state.live, remember_missing=True) as live:
        for entry in sorted(entries, key=lambda e: e.path):
            unsafe = None
            local = None
            try:
                check_relpath(entry.path)
                if _parent_is_entry(entry.path, paths):
                    # contradictory: restoring both would depend on which copy runs first
                    raise UnsafePath(
                        entry.path,
                        "plan",
                        "a parent is itself a file or symlink in the manifest; refused",
                    )
                if entry.object:
                    check_relpath(entry.object)
                local = None if empty else local_state(live, entry.path)
            except UnsafePath as exc:
                unsafe = exc.reason
            except FileNotFoundError:
                local = None
            except NotADirectoryError:
                unsafe = "a parent in the live tree is a file"
            except OSError as exc:
                unsafe = f"cannot inspect the live path: {exc.strerror}"
            actions.append(
                plan_restore_entry(
                    entry, local, unsafe=unsafe, known_kinds=KINDS, walked=source == "walk"
                )
            )
    actions.extend(databases)
    return actions


def _restorable_mode(entry: Entry) -> Entry:
    safe = without_special_bits(entry)
    if safe is not entry:
        log.warning(
            "restore.mode-dropped path=%s mode=%04o restored=%04o: setuid, setgid and "
            "sticky bits from the durable side are never restored",
            entry.path,
            entry.mode,
            safe.mode,
            extra={"event": "restore.mode-dropped"},
        )
    return safe


def _is_empty(path: str) -> bool:
    try:
        with os.scandir(path) as it:
            return next(it, None) is None
    except FileNotFoundError:
        return True
    except OSError:
        return False  # let the per-path checks report it


def _parent_is_entry(path: str, paths: set[str]) -> bool:
    parts = path.split("/")
    return any("/".join(parts[:i]) in paths for i in range(1, len(parts)))


def run(
    state: AdapterState,
    actions: list[RestoreAction],
    *,
    jobs: int,
    progress: Reporter = SILENT,
    new_only: bool = False,
    save: bool = True,
    served: packed.Served | None = None,
) -> AdapterReport:
    """Carry out a restore plan for one adapter; `new_only`: a background batch (later.py,
    which says what it means); `save`: the index too (a batch leaves it to the last one);
    `served`: a batch's packed files (`packed.serving`, asked once for all batches)."""
    errors: list[PathError] = []
    restored: list[Done] = []
    counts: Counter[str] = Counter()  # kept, unchanged, links, skipped, newer, dbs, db_bytes
    fatal = None
    index = state.index
    fetches = [a for a in actions if isinstance(a, (Fetch, MakeLink))]
    databases = [a for a in actions if isinstance(a, RestoreDB)]
    dirs = [a for a in actions if isinstance(a, MakeDir)]
    made: dict[str, int] = {}
    reached: list[str] = []
    unrecorded = recorded.unrecorded_possible(
        state.staging_marker, lambda: index.meta, int(index.meta.get("manifest_seq", 0))
    )
    # A background batch lists no packs: `served` is what `later.arrange` found once for
    # the whole background part (which puts the packed files last, in pack order).
    entries = [a.entry for a in fetches]
    if new_only:
        packs = packed.reader(state.store, entries, served) if served else None
    else:
        packs = packed.reader(state.store, entries)
    meter = progress.start(
        "restore", state.name, len(fetches), sum(a.entry.size or 0 for a in fetches)
    )
    try:
        with (
            DirCache(state.live, create=True) as live,
            state.store.batch(),
            dirs_around(state, dirs, live, made, errors),
            closing(
                execute_all(fetches, live, state, jobs, unrecorded, packs, new_only)
            ) as results,
        ):
            for action, result in results:
                meter.advance(1, action.entry.size or 0)
                reached.append(action.entry.path)
                if new_only and isinstance(result, KeepLocal):
                    counts["kept"] += 1  # written meanwhile: its pending record stays dirty
                    continue
                _collect(state, action, result, restored, errors, counts)
            for db in databases:
                _restore_db(state, db, live, unrecorded, errors, counts)
    except DurableError as exc:
        fatal = str(exc)
    meter.finish()
    _keep(state, actions, restored, made, errors, counts, reached if new_only else None, save)
    return _report(state.name, restored, made, errors, counts, fatal)


def _report(
    name: str,
    restored: list[Done],
    made: dict[str, int],
    errors: list[PathError],
    counts: Counter[str],
    fatal: str | None,
) -> AdapterReport:
    files = [e for e, _, _ in restored if e.kind != "symlink"]
    return AdapterReport(
        name=name,
        files=len(files) + counts["dbs"],
        bytes=sum(e.size for e in files) + counts["db_bytes"],
        unchanged=counts["unchanged"],
        kept_local=counts["kept"],
        links=len(restored) - len(files),
        dirs=len(made),
        skipped=counts["skipped"],
        errors=tuple(errors),
        fatal=fatal,
    )


def _keep(
    state: AdapterState,
    actions: list[RestoreAction],
    restored: list[Done],
    made: dict[str, int],
    errors: list[PathError],
    counts: Counter[str],
    settled: list[str] | None,
    save: bool,
) -> None:
    """What the restore did goes into the index (`settled`: paths no longer pending)."""
    index = state.index
    if counts["newer"]:  # the manifest is behind the durable side: the next pass writes a base
        checkpoint.mark_unrecorded(state)
    _settle_unplaced(state, actions, errors, counts)
    _record(index, restored)
    if settled is not None:
        pending.settle(index, set(settled) - {e.path for e in errors})
    for path, mode in made.items():  # as they are now: a mode that could not be set is
        index.record_dir(path, mode)  # not recorded as the manifest's, so it is kept there
    if index.changed and save:
        index.save(state.index_path)


def _restore_db(
    state: AdapterState,
    db: RestoreDB,
    live: DirCache,
    unrecorded: bool,
    errors: list[PathError],
    counts: dict[str, int],
) -> None:
    """Restore one SQLite snapshot (a problem with it is that path's error) and record it."""
    try:
        if state.sqlite is None:
            raise SourceError(db.entry.path, "restore", "no SQLite options")
        outcome = sqlite_restore.restore_db(
            db, live, state.store, state.sqlite, unrecorded=unrecorded
        )
    except SourceError as exc:
        failed(state, db.entry.path, exc, errors)
        return
    sqlite_restore.record(state.index, db, outcome, state.sqlite_patterns)
    counts["kept"] += outcome.kept
    counts["dbs"] += not outcome.kept
    counts["db_bytes"] += 0 if outcome.kept else outcome.st.st_size
    counts["newer"] += outcome.newer


def _settle_unplaced(
    state: AdapterState,
    actions: list[RestoreAction],
    errors: list[PathError],
    counts: dict[str, int],
) -> None:
    """The actions that place nothing: a kept local copy is seeded, a refusal reported."""
    for other in actions:
        if isinstance(other, KeepLocal):
            counts["unchanged" if other.same else "kept"] += other.entry.kind != "dir"
            seed_entry(state.index, other.entry)
        elif isinstance(other, Reject):
            errors.append(PathError(state.name, other.entry.path, "restore", other.reason))
            log.warning(
                "restore.refused adapter=%s path=%s reason=%s",
                state.name,
                other.entry.path,
                other.reason,
                extra={"event": "restore.refused"},
            )


def _collect(
    state: AdapterState,
    action: Fetch | MakeLink,
    result: Outcome,
    restored: list[Done],
    errors: list[PathError],
    counts: dict[str, int],
) -> None:
    if isinstance(result, tuple):
        restored.append(result)
        counts["newer"] += result[0] is not action.entry and result[0].kind == "file"
    elif isinstance(result, KeepLocal):  # a log: its chain is not newer
        counts["unchanged" if result.same else "kept"] += 1
        seed_entry(state.index, result.entry)
    elif isinstance(result, Vanished):
        counts["skipped"] += 1
    else:
        failed(state, action.entry.path, result, errors)


def _record(index: Index, restored: list[Done]) -> None:
    """The index learns every placed file, so the next checkpoint uploads none of them."""
    for entry, st, h in restored:
        if entry.kind == "segments":
            chainstate.seed(
                index,
                entry,
                ino=st.st_ino,
                size=st.st_size,
                mtime_ns=st.st_mtime_ns,
                ctime_ns=st.st_ctime_ns,
            )
            continue
        copy = openfiles.is_copy(entry)  # not at its canonical path yet: publish it next pass
        index.record(
            entry.path,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            ctime_ns=DIRTY if copy else st.st_ctime_ns,
            hash64=0 if copy else h,
            mode=st.st_mode,
            kind=entry.kind,
            target=entry.target,
            extra=entry.index_extra() or {},
        )


def seed_entry(index: Index, entry: Entry) -> None:
    """Tell the index what the durable side holds for a path restore left alone.

    The record is marked dirty, so the next checkpoint hashes the local file
    and uploads it only if it differs (a newer local file after a hot restart).
    """
    rec = index.get(entry.path)
    if rec is not None and rec.ctime_ns != DIRTY and entry.hash == rec.hash64:
        return
    if entry.kind == "dir":  # the durable mode: a different local one is recorded next pass
        index.record_dir(entry.path, entry.mode)
    elif entry.kind in ("file", "symlink"):
        seed.record_dirty(index, entry)
    elif entry.kind == "segments":
        chainstate.seed_kept(index, entry)
