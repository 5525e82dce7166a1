"""SQLite databases on the restore side: keep a valid local one, else the verified snapshot.

Owns the rules of a database restore, with the same check as the checkpoint
(`sqlite.check.check`).  A local database that is not ``corrupt`` is
authoritative (a hot restart may hold committed rows newer than the last
snapshot); one the library could not check (``unchecked``: it uses what this
SQLite lacks) is kept too, with a warning, since replacing a sound database
with an older snapshot loses data.  One that is locked by another process is
left alone and the restore is incomplete.  Otherwise the snapshot is copied
from the durable side into a temp file next to the target, checked (a
``corrupt`` snapshot is refused; an ``unchecked`` one is restored with a
warning: the checkpoint published it with the same verdict), and only then is
the invalid local set (db, ``-wal``, ``-shm``, ``-journal``) moved aside into
``state_dir/sqlite-quarantine`` and the snapshot renamed into place, with no
stale companion left behind.  For one release, a durable tree in the old raw
layout (``<name>`` plus ``<name>-wal``) is restored by letting SQLite recover
the pair.  An invalid local database with nothing durable to replace it is an
error that makes the restore incomplete: it stays where it is.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import attrs

from syncengine.crypt import chunked
from syncengine.crypt.secrets import Secrets
from syncengine.durable import recorded
from syncengine.durable.manifest import Entry
from syncengine.durable.store import ObjectInfo, Store
from syncengine.errors import DurableError, SourceError, source_error
from syncengine.fs import savefile
from syncengine.fs.safepath import DirCache, UnsafePath
from syncengine.fs.stream import stream
from syncengine.local.index import DIRTY, Index
from syncengine.plan import RestoreDB
from syncengine.sqlite.check import CheckFailed, Verdict, check, connect
from syncengine.sqlite.files import COMPANIONS, LISTED, Options, find_databases, matches

log = logging.getLogger("syncengine")


def plan(
    entries: Iterable[Entry], patterns: Sequence[str], live: Path, store: Store
) -> tuple[list[Entry], list[RestoreDB]]:
    """Split durable entries into ordinary ones and one RestoreDB per database.

    Raw copies of listed databases (the old layout, or a file entry written
    before the adapter listed them) become legacy database restores, and their
    companions are never restored as plain files.  Listed local databases
    with no durable entry are checked too.
    """
    entries = list(entries)
    by_path = {e.path: e for e in entries}
    dbs: dict[str, RestoreDB] = {e.path: RestoreDB(e) for e in entries if e.kind == "sqlite"}
    raw = [e.path for e in entries if e.kind == "file" and matches(patterns, e.path)]
    raw += [
        p
        for p in patterns
        if not any(c in p for c in "*?[") and p not in by_path and _is_file(store, p.strip("/"))
    ]
    for path in raw:
        path = path.strip("/")
        if path not in dbs:
            wal = path + "-wal"
            has_wal = wal in by_path or _is_file(store, wal)
            src = by_path.get(path)
            dbs[path] = RestoreDB(
                Entry(
                    path,
                    "sqlite",
                    src.size if src else 0,
                    src.mtime_ns if src else 0,
                    src.mode if src else 0o644,
                    None,
                    object=path,
                    extra={"legacy": True},
                ),
                legacy_wal=wal if has_wal else None,
            )
    for path in find_databases(live, patterns):
        if path not in dbs:
            dbs[path] = RestoreDB(Entry(path, "sqlite", extra={"local_only": True}))
    companions = {p + s for p in dbs for s in COMPANIONS}
    rest = [e for e in entries if e.path not in dbs and e.path not in companions]
    return rest, [dbs[p] for p in sorted(dbs)]


def _is_file(store: Store, key: str) -> bool:
    """Whether a regular file is at `key` (one head, no listing)."""
    info = store.head(key)
    return info is not None and info.kind == "file"


@attrs.frozen
class Outcome:
    kept: bool
    st: os.stat_result
    restored: Entry | None = None  # a snapshot newer than the manifest records: as placed

    @property
    def newer(self) -> bool:
        return self.restored is not None


def restore_db(
    action: RestoreDB, live: DirCache, durable: Store, opts: Options, *, unrecorded: bool = True
) -> Outcome:
    """Carry out one RestoreDB; raise SourceError (per path) or DurableError.

    `unrecorded`: whether a snapshot newer than its manifest entry is possible
    (`recorded.unrecorded_possible`); a copy that differs otherwise is corrupt.
    """
    try:
        with live.parent(action.entry.path) as (dir_fd, name):
            return _restore_in(action, dir_fd, name, durable, opts, unrecorded)
    except (UnsafePath, SourceError, DurableError):
        raise
    except OSError as exc:
        raise source_error("restore", action.entry.path, exc) from exc


def _restore_in(
    action: RestoreDB, dir_fd: int, name: str, durable: Store, opts: Options, unrecorded: bool
) -> Outcome:
    entry = action.entry
    here = f"/proc/self/fd/{dir_fd}"
    local = _lstat(name, dir_fd)
    verdict = None
    if local is not None:
        verdict = _validate(f"{here}/{name}", entry.path, opts.busy_timeout)
        if verdict is None:
            log.info(
                "sqlite.restore-kept path=%s (valid local database)",
                entry.path,
                extra={"event": "sqlite.restore-kept"},
            )
            return Outcome(True, local)
    if entry.extra.get("local_only"):
        raise SourceError(
            entry.path,
            "restore",
            f"the local database is invalid ({verdict}) "
            "and there is no durable snapshot: fix or remove it",
        )
    with savefile.staged(dir_fd=dir_fd, source_mode=entry.mode) as tmp:
        entry = _fetch(
            entry, action.legacy_wal, durable, tmp, f"{here}/{tmp.name}", opts, unrecorded
        )
        moved = _quarantine(dir_fd, name, entry.path, opts.quarantine)
        if moved:
            log.warning(
                "sqlite.quarantined path=%s reason=%s moved_to=%s",
                entry.path,
                verdict or "companions without a database",
                moved,
                extra={"event": "sqlite.quarantined"},
            )
        try:
            tmp.publish(name, target_dir_fd=dir_fd)
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError as exc:
            raise source_error("restore", entry.path, exc) from exc
    log.info(
        "sqlite.restored path=%s from=%s",
        entry.path,
        entry.location,
        extra={"event": "sqlite.restored"},
    )
    return Outcome(False, st, entry if entry is not action.entry else None)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _validate(path: str, relpath: str, timeout: float) -> str | None:
    """None to keep the local database; otherwise what is wrong with it."""
    try:
        verdict = check(path, timeout=timeout, recover=True)
    except CheckFailed as exc:
        if exc.locked:
            raise SourceError(
                relpath,
                "restore",
                f"the local database is {exc}: a process "
                "still uses it; left alone (stop it, then restore again)",
            ) from exc
        return str(exc)
    if verdict.corrupt:
        return verdict.detail
    if not verdict.ok:
        log.warning(
            "sqlite.restore-kept-unchecked %s; the local database is kept",
            verdict.message(relpath),
            extra={"event": "sqlite.restore-kept-unchecked"},
        )
    return None


def _fetch(
    entry: Entry,
    legacy_wal: str | None,
    durable: Store,
    tmp: savefile.Staged,
    tmp_path: str,
    opts: Options,
    unrecorded: bool,
) -> Entry:
    """Copy the durable database (and an old-layout WAL) into `tmp` and verify it.

    Returns the entry as restored: a newer complete snapshot than the manifest
    records carries its own size, mtime and hash (the rule is recorded.judge).
    """
    legacy = bool(entry.extra.get("legacy"))
    size, h, st = _copy(durable, entry, tmp.write, opts.secrets)
    if not legacy:
        entry = _judged(entry, size, st.mtime_ns, h, unrecorded)
    tmp.close(mode=entry.mode | 0o600)
    try:
        if legacy_wal is not None:
            with open(tmp_path + "-wal", "xb") as f:

                def sink(chunk: memoryview) -> None:
                    f.write(chunk)

                _copy(durable, attrs.evolve(entry, object=legacy_wal), sink, None)
            _recover(tmp_path, entry.path, opts.busy_timeout)
        verdict: Verdict | str = check(tmp_path, timeout=opts.busy_timeout)
    except CheckFailed as exc:
        verdict = str(exc)
    except OSError as exc:
        raise source_error("restore", entry.path, exc) from exc
    finally:
        for suffix in COMPANIONS:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_path + suffix)
    if isinstance(verdict, str) or verdict.corrupt:
        what = verdict if isinstance(verdict, str) else f"fails quick_check ({verdict.detail})"
        raise SourceError(
            entry.path,
            "restore",
            f"the durable copy {entry.location} {what}; the local files were left alone",
        )
    if not verdict.ok:
        log.warning(
            "sqlite.restore-unchecked %s; restoring it as the checkpoint published it",
            verdict.message(entry.path),
            extra={"event": "sqlite.restore-unchecked"},
        )
    try:
        os.chmod(tmp_path, entry.mode)
        if entry.mtime_ns:
            os.utime(tmp_path, ns=(entry.mtime_ns, entry.mtime_ns))
    except OSError as exc:
        raise source_error("restore", entry.path, exc) from exc
    return entry


def _judged(entry: Entry, size: int, mtime_ns: int, h: int, unrecorded: bool) -> Entry:
    """The entry to restore by restore's rule (`recorded.judge`): as recorded, or a newer
    complete snapshot with its own size, mtime and hash; SourceError for any other copy."""
    judged = recorded.judge(entry, size, mtime_ns, h, unrecorded=unrecorded)
    if judged.problem is not None:
        raise SourceError(
            entry.path,
            "restore",
            f"the durable snapshot {entry.location} "
            f"{judged.problem}; the local files were left alone",
        )
    if judged.newer:
        log.warning(
            "restore.newer-than-manifest path=%s: the durable snapshot is newer "
            "than the manifest records (a checkpoint was interrupted before "
            "recording it); restoring it after quick_check",
            entry.path,
            extra={"event": "restore.newer-than-manifest"},
        )
        return attrs.evolve(entry, size=size, mtime_ns=mtime_ns, hash=h)
    return entry


def _recover(path: str, relpath: str, timeout: float) -> None:
    """Let SQLite fold an old-layout WAL copied beside `path` into it (legacy restores)."""
    import apsw

    try:
        with connect(path, timeout=timeout, readonly=False) as con:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except apsw.Error as exc:
        log.warning(
            "sqlite.legacy-recovery-failed path=%s error=%s",
            relpath,
            exc,
            extra={"event": "sqlite.legacy-recovery-failed"},
        )


def _copy(
    durable: Store, entry: Entry, write: Callable[[memoryview], None], secrets: Secrets | None
) -> tuple[int, int, ObjectInfo]:
    """(bytes, xxh3, info before reading) of `entry`'s object fed to `write`, opened."""
    location, path = entry.location, entry.path
    try:
        with durable.open(location) as src:
            if src.info.kind != "file":
                raise SourceError(
                    path, "restore", f"durable object {location} is not a regular file"
                )
            try:
                plain = chunked.of_entry(src.file, secrets, path, entry.extra)
                n, h = stream(plain, None, write, src_name=durable.where(location), dst_name=path)
            except DurableError as exc:  # here the "durable" side of stream() is the live file
                raise SourceError(path, "write", str(exc)) from exc
            except chunked.SealError as exc:
                raise SourceError(path, "restore", f"{exc.why}; not restored: {exc.fix}") from None
    except FileNotFoundError as exc:
        where = (
            "found in the durable tree (old raw layout) but gone when read"
            if entry.extra.get("legacy")
            else "listed in the manifest but missing on the durable side"
        )
        raise SourceError(path, "restore", f"{where} ({location})") from exc
    return n, h, src.info


def _quarantine(dir_fd: int, name: str, relpath: str, root: Path) -> str | None:
    """Move the local db and companions aside for diagnosis; return where, if anything moved."""
    present = [
        name + s for s in ("", *COMPANIONS) if os.path.lexists(f"/proc/self/fd/{dir_fd}/{name}{s}")
    ]
    if not present:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%S") + f"-{time.time_ns() % 1_000_000_000:09d}"
    dest = root / stamp / os.path.dirname(relpath)
    os.makedirs(dest, mode=0o700, exist_ok=True)
    for n in present:
        try:
            os.rename(n, dest / n, src_dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise source_error("move aside", relpath, exc) from exc
            shutil.copy2(f"/proc/self/fd/{dir_fd}/{n}", dest / n)
            os.unlink(n, dir_fd=dir_fd)
    return os.fspath(dest)


def record(index: Index, action: RestoreDB, outcome: Outcome, patterns: Sequence[str]) -> None:
    """Tell the index what is local now, so the next checkpoint publishes only a change."""
    entry, st = outcome.restored or action.entry, outcome.st
    snapshot = not entry.extra.get("legacy") and entry.hash is not None
    clean = snapshot and not outcome.kept
    extra = (
        {
            "object": entry.location,
            "size": entry.size,
            "mtime_ns": entry.mtime_ns,
            "snapshot_ns": entry.extra.get("snapshot_ns"),
            "_wal": None,
            LISTED: matches(patterns, entry.path),
        }
        if snapshot
        else {}
    )
    if not snapshot and index.get(entry.path) is None:
        index.record(
            entry.path,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            ctime_ns=DIRTY,
            hash64=0,
            mode=st.st_mode,
            kind="sqlite",
            extra={LISTED: matches(patterns, entry.path)},
        )
        return
    if snapshot:
        index.record(
            entry.path,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            ctime_ns=st.st_ctime_ns if clean else DIRTY,
            hash64=entry.hash or 0,
            mode=st.st_mode,
            kind="sqlite",
            extra=extra,
        )
