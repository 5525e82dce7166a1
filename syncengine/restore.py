"""Doing a restore of one adapter: fill the live tree from the durable one.

Owns reading the durable side's list of entries (the manifest; a walk of the
tree only for state written by the old rsync layout, which has none) and
carrying out the restore plan: missing or older local files are copied in as
closed temp files renamed into place, with their recorded mode and mtime;
newer local files are kept (a hot restart); nothing is ever written outside
the live root.  Afterwards the index knows every restored file, so the next
checkpoint uploads only what differs.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Generator, Iterable
from contextlib import closing
from typing import Any

from syncengine import chain, forked, manifest, openfiles, savefile, segments, sqlite_restore
from syncengine.checkpoint import AdapterState
from syncengine.copier import in_order, link_hash, stream
from syncengine.errors import DurableError, SourceError, durable_error, source_error
from syncengine.index import DIRTY, Index
from syncengine.manifest import Entry
from syncengine.plan import (
    Fetch,
    KeepLocal,
    LocalState,
    MakeLink,
    Reject,
    RestoreAction,
    RestoreDB,
    keep_reason,
    plan_restore_entry,
)
from syncengine.progress import SILENT, Reporter
from syncengine.report import AdapterReport, PathError
from syncengine.safepath import DirCache, UnsafePath, check_relpath
from syncengine.store import Store

log = logging.getLogger("syncengine")
KINDS = frozenset({"file", "symlink", "segments"})


def durable_entries(store: Store, index: Index) -> tuple[list[Entry], list[str], str]:
    """(entries, problems, source) from the manifest, else from a walk of the tree.

    Also tells the index where the manifest's sequence stands, so the next
    checkpoint continues it instead of reusing a name.
    """
    state = manifest.load(store)
    if state.last_seq > int(index.meta.get("manifest_seq", 0)):
        index.meta.update(manifest_seq=state.last_seq, base_seq=state.base_seq,
                          deltas=state.deltas_since_base)
        index.changed = True
    for warning in state.warnings:
        log.warning("manifest.warning %s", warning)
    if state.entries or state.last_seq:
        return (openfiles.reconcile(store, state.entries.values()), list(state.problems),
                "manifest")
    entries = []
    for rel, st in store.walk():
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(store.root / rel)
            except OSError:
                continue
            entries.append(Entry(rel, "symlink", mtime_ns=st.st_mtime_ns, target=target))
        else:
            entries.append(Entry(rel, "file", st.st_size, st.st_mtime_ns, st.st_mode & 0o7777))
    return openfiles.reconcile(store, entries), list(state.problems), "walk"


def _local_state(live: DirCache, relpath: str) -> LocalState | None:
    try:
        with live.parent(relpath) as (dir_fd, name):
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    else:
        kind = "other"
    return LocalState(kind, st.st_size, st.st_mtime_ns)


def plan(state: AdapterState, entries: Iterable[Entry]) -> list[RestoreAction]:
    """One action per durable entry, decided against the live tree."""
    actions: list[RestoreAction] = []
    entries, databases = sqlite_restore.plan(entries, state.sqlite_patterns, state.live,
                                             state.store)
    paths = {e.path for e in entries}
    empty = _is_empty(os.fspath(state.live))  # a first start: nothing local to compare
    with DirCache(state.live, remember_missing=True) as live:
        for entry in sorted(entries, key=lambda e: e.path):
            unsafe = None
            local = None
            try:
                check_relpath(entry.path)
                if _parent_is_entry(entry.path, paths):
                    # contradictory: restoring both would depend on which copy runs first
                    raise UnsafePath(entry.path, "plan", "a parent is itself a file or "
                                     "symlink in the manifest; refused")
                if entry.object:
                    check_relpath(entry.object)
                local = None if empty else _local_state(live, entry.path)
            except UnsafePath as exc:
                unsafe = exc.reason
            except FileNotFoundError:
                local = None
            except NotADirectoryError:
                unsafe = "a parent in the live tree is a file"
            except OSError as exc:
                unsafe = f"cannot inspect the live path: {exc.strerror}"
            actions.append(plan_restore_entry(entry, local, unsafe=unsafe, known_kinds=KINDS))
    actions.extend(databases)
    return actions


def _is_empty(path: str) -> bool:
    try:
        with os.scandir(path) as it:
            return next(it, None) is None
    except FileNotFoundError:
        return True
    except OSError:
        return False  # let the per-path checks report it


def _parent_is_entry(path: str, paths: set[str]) -> bool:
    parent = path.rpartition("/")[0]
    while parent:
        if parent in paths:
            return True
        parent = parent.rpartition("/")[0]
    return False


def run(state: AdapterState, actions: list[RestoreAction], *, jobs: int,
        progress: Reporter = SILENT) -> AdapterReport:
    """Carry out a restore plan for one adapter."""
    errors: list[PathError] = []
    restored: list[tuple[Entry, os.stat_result, int]] = []
    counts = {"kept": 0, "links": 0}
    fatal = None
    index = state.index
    fetches = [a for a in actions if isinstance(a, (Fetch, MakeLink))]
    databases = [a for a in actions if isinstance(a, RestoreDB)]
    dbs_restored = 0
    meter = progress.start("restore", state.name, len(fetches),
                           sum(a.entry.size or 0 for a in fetches))
    try:
        with DirCache(state.live, create=True) as live, state.store.reader() as durable, \
                closing(_execute(fetches, live, durable, jobs)) as results:
            for action, result in results:
                meter.advance(1, action.entry.size or 0)
                if isinstance(result, tuple):
                    restored.append(result)
                elif isinstance(result, KeepLocal):  # a log: its chain is not newer
                    counts["kept"] += 1
                    _seed(index, result.entry)
                else:
                    _failed(state, action.entry.path, result, errors)
            for db in databases:
                try:
                    if state.sqlite is None:
                        raise SourceError(db.entry.path, "restore", "no SQLite options")
                    outcome = sqlite_restore.restore_db(db, live, durable, state.sqlite)
                except SourceError as exc:
                    _failed(state, db.entry.path, exc, errors)
                    continue
                sqlite_restore.record(index, db, outcome, state.sqlite_patterns)
                counts["kept"] += outcome.kept
                dbs_restored += not outcome.kept
    except DurableError as exc:
        fatal = str(exc)
    meter.finish()
    for other in actions:
        if isinstance(other, KeepLocal):
            counts["kept"] += 1
            _seed(index, other.entry)
        elif isinstance(other, Reject):
            errors.append(PathError(state.name, other.entry.path, "restore", other.reason))
            log.warning("restore.refused adapter=%s path=%s reason=%s", state.name,
                        other.entry.path, other.reason)
    for entry, st, h in restored:
        if entry.kind == "symlink":
            counts["links"] += 1
        if entry.kind == "segments":
            segments.seed(index, entry, ino=st.st_ino, size=st.st_size, mtime_ns=st.st_mtime_ns,
                          ctime_ns=st.st_ctime_ns)
            continue
        copy = openfiles.is_copy(entry)  # not at its canonical path yet: publish it next pass
        index.record(entry.path, size=st.st_size, mtime_ns=st.st_mtime_ns,
                     ctime_ns=DIRTY if copy else st.st_ctime_ns, hash64=0 if copy else h,
                     mode=st.st_mode, kind=entry.kind, target=entry.target,
                     extra=entry.index_extra() or {})
    if index.changed:
        index.save(state.index_path)
    files = [e for e, _, _ in restored if e.kind != "symlink"]
    return AdapterReport(name=state.name, files=len(files) + dbs_restored,
                         bytes=sum(e.size for e in files),
                         kept_local=counts["kept"], links=counts["links"],
                         errors=tuple(errors), fatal=fatal)


def _failed(state: AdapterState, path: str, exc: SourceError, errors: list[PathError]) -> None:
    errors.append(PathError(state.name, path, exc.operation, exc.reason))
    log.warning("restore.failed adapter=%s path=%s error=%s", state.name, path, exc.reason)


def _seed(index: Index, entry: Entry) -> None:
    """Tell the index what the durable side holds for a path restore left alone.

    The record is marked dirty, so the next checkpoint hashes the local file
    and uploads it only if it differs (a newer local file after a hot restart).
    """
    rec = index.get(entry.path)
    if rec is not None and rec.ctime_ns != DIRTY and entry.hash == rec.hash64:
        return
    if entry.kind in ("file", "symlink"):
        index.record(entry.path, size=entry.size, mtime_ns=entry.mtime_ns, ctime_ns=DIRTY,
                     hash64=entry.hash or 0, mode=entry.mode, kind=entry.kind,
                     target=entry.target, extra=entry.index_extra() or {})
    elif entry.kind == "segments":
        segments.seed_kept(index, entry)


Done = tuple[Entry, os.stat_result, int]  # what was placed, its stat, its hash
Outcome = Done | KeepLocal | SourceError  # KeepLocal: a log whose chain is not newer


def _execute(actions: list[Fetch | MakeLink], live: DirCache, durable: DirCache, jobs: int
             ) -> Generator[tuple[Fetch | MakeLink, Outcome], None, None]:
    """Each action's outcome, in order: threads on a mount, processes on a local disk.

    On a mount (`jobs` > 1) copies overlap their round trips in threads.  On a
    local disk a restore is Python per file: a large one from the one-shot CLI
    is split into contiguous shares of the (path-sorted) actions, one per
    core, in forked processes (syncengine.forked).
    """
    def one(action: Fetch | MakeLink) -> Outcome:
        try:
            if isinstance(action, MakeLink):
                return _make_link(action.entry, live)
            if action.entry.kind == "segments":
                return _fetch_log(action.entry, live, durable)
            return _fetch(action.entry, live, durable)
        except SourceError as exc:
            return exc

    n = forked.workers()
    if jobs > 1 or n < 2 or len(actions) < _FORK_MIN or not forked.can_fork():
        return in_order(actions, one, jobs=jobs, name="syncengine-restore")
    return _execute_forked(actions, one, n)


_FORK_MIN = 1000  # fewer actions than this: a fork costs more than it saves
_FILE_COST = 128 << 10  # a file's fixed cost (opens, rename, Python) in bytes copied


def _execute_forked(actions: list[Fetch | MakeLink], one: Callable[[Fetch | MakeLink], Outcome],
                    n: int) -> Generator[tuple[Fetch | MakeLink, Outcome], None, None]:
    def work(share: list[Fetch | MakeLink]) -> tuple[list[tuple[Any, ...]], str | None]:
        out: list[tuple[Any, ...]] = []  # picklable, see below
        for action in share:
            try:
                result = one(action)
            except DurableError as exc:  # stops the run: report it after the rest
                return out, str(exc)
            if isinstance(result, SourceError):
                out.append(("error", result.operation, result.reason))
            elif isinstance(result, KeepLocal):
                out.append(("keep", result))
            else:  # the entry only when it differs (a log rebuilt to its chain's end)
                entry = None if result[0] is action.entry else result[0]
                out.append(("done", entry, result[1], result[2]))
        return out, None

    shares = _split(actions, n)
    fatal = None
    for share, done in zip(shares, forked.fork_map(shares, work), strict=True):
        if done is None:  # its process failed: do that share here
            done = work(share)
        results, fatal = done[0], fatal or done[1]
        for action, result in zip(share, results, strict=False):  # short after a fatal error
            if result[0] == "done":
                yield action, (result[1] or action.entry, result[2], result[3])
            elif result[0] == "keep":
                yield action, result[1]
            else:
                yield action, SourceError(action.entry.path, result[1], result[2])
    if fatal is not None:  # after every share's results: what was placed gets recorded
        raise DurableError(fatal)


def _split(actions: list[Fetch | MakeLink], n: int) -> list[list[Fetch | MakeLink]]:
    """`n` contiguous shares of about equal cost (a file costs its bytes plus a fixed part)."""
    cost = [_FILE_COST + (a.entry.size or 0) for a in actions]
    per_share = sum(cost) / n
    shares: list[list[Fetch | MakeLink]] = [[]]
    acc = 0.0
    for action, c in zip(actions, cost, strict=True):
        if acc >= per_share * len(shares) and len(shares) < n:
            shares.append([])
        shares[-1].append(action)
        acc += c
    return shares


def _fetch(entry: Entry, live: DirCache, durable: DirCache
           ) -> tuple[Entry, os.stat_result, int]:
    try:
        src = durable.open_file(entry.location)
    except UnsafePath:
        raise
    except FileNotFoundError as exc:
        raise SourceError(entry.path, "restore",
                          f"listed in the manifest but missing on the durable side "
                          f"({entry.location})") from exc
    except OSError as exc:
        raise durable_error("open", f"{durable.root}/{entry.location}", exc) from exc
    try:
        src_st = os.fstat(src)
        if not stat.S_ISREG(src_st.st_mode):
            raise SourceError(entry.path, "restore", "durable object is not a regular file")
        with live.parent(entry.path) as (dir_fd, name), \
                savefile.staged(dir_fd=dir_fd, source_mode=entry.mode) as tmp:
            try:
                _, h = stream(src, None, tmp.write, src_name=f"{durable.root}/{entry.location}",
                              dst_name=entry.path)
            except DurableError as exc:  # here the "durable" side of stream() is the live file
                raise SourceError(entry.path, "write", str(exc)) from exc
            mtime = entry.mtime_ns
            if entry.hash is not None and h != entry.hash:
                log.warning("restore.hash-mismatch path=%s: the durable file differs from the "
                            "manifest (a newer version?); restoring it with its own mtime",
                            entry.path)
                mtime = src_st.st_mtime_ns
            tmp.close(mode=entry.mode, mtime_ns=mtime)
            tmp.publish(name, target_dir_fd=dir_fd)
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise source_error("restore", entry.path, exc) from exc
    finally:
        os.close(src)
    return entry, st, h


def _fetch_log(entry: Entry, live: DirCache, durable: DirCache
               ) -> tuple[Entry, os.stat_result, int] | KeepLocal:
    """Rebuild an append-only log from its chain, listed here (in the copy pool, so the
    listings of many logs overlap on a slow mount).

    Returns the log as rebuilt, with the chain state the index needs, or
    KeepLocal when the local copy is as new as the chain; nothing is placed
    unless every object verified.
    """
    resolved = chain.load(durable, entry)
    try:
        keep = _keep_local(entry, resolved, live)
        if keep is not None:
            return keep
        with live.parent(entry.path) as (dir_fd, name), \
                savefile.staged(dir_fd=dir_fd, source_mode=entry.mode) as tmp:
            def write(chunk: memoryview) -> None:
                try:
                    tmp.write(chunk)
                except OSError as exc:  # the live side: this file fails, the run goes on
                    raise source_error("write", entry.path, exc) from exc

            listed = len(resolved.pieces)
            resolved, h = chain.read(resolved, durable, write)
            if len(resolved.pieces) < listed:  # a torn last object was left out: ask again
                keep = _keep_local(entry, resolved, live)
                if keep is not None:
                    return keep
            rebuilt = resolved.as_entry(h)
            tmp.close(mode=entry.mode, mtime_ns=rebuilt.mtime_ns)
            tmp.publish(name, target_dir_fd=dir_fd)
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except UnsafePath:
        raise
    except OSError as exc:
        raise source_error("restore", entry.path, exc) from exc
    return rebuilt, st, h


def _keep_local(entry: Entry, resolved: chain.Chain, live: DirCache) -> KeepLocal | None:
    """KeepLocal when the live copy of a log is as new as its chain (hot restart)."""
    local = _local_state(live, entry.path)
    reason = keep_reason(resolved.as_entry(), local) if local is not None else None
    return KeepLocal(entry, reason) if reason is not None else None


def _make_link(entry: Entry, live: DirCache) -> tuple[Entry, os.stat_result, int]:
    assert entry.target is not None
    try:
        with live.parent(entry.path) as (dir_fd, name):
            savefile.place_symlink(entry.target, name, dir_fd=dir_fd, mtime_ns=entry.mtime_ns)
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except UnsafePath:
        raise
    except OSError as exc:
        raise source_error("symlink", entry.path, exc) from exc
    return entry, st, link_hash(entry.target)
