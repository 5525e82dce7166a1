"""SQLite databases on the checkpoint side: find, decide, snapshot, validate, publish.

Owns the rule that a live SQLite database is never copied as files (its
``-wal`` and ``-shm`` are read at different transaction boundaries): a
database listed by an adapter's ``sqlite`` globs, or found by its header in a
tree, is copied with the online backup API into a local staging file, checked
with ``PRAGMA quick_check``, and published through the copier as one closed
object at ``checkpoints/<relpath>``, only when its hash differs from the last
published snapshot.

Change detection compares size and mtime_ns of the database and of its WAL
with what the index recorded (never ctime: a connection opened as root
changes the WAL's ctime).  The source is opened read-only; the copy is one
backup step (``pages=-1``), so a busy writer cannot make it restart forever,
and a database that stays locked longer than ``sqlite_busy_timeout`` is a
per-path error retried next pass.  Restoring lives in `sqlite_restore`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import stat
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

# sqlite3, tempfile and urllib.parse are imported in the functions that use them:
# most checkpoint passes never open a database, and every CLI call pays for imports.
from syncengine.copier import SQLITE_HEADER, Published, Vanished, stream, upload
from syncengine.errors import SourceError
from syncengine.index import DIRTY, Index
from syncengine.manifest import Entry
from syncengine.patterns import COMPANIONS
from syncengine.plan import Snapshot
from syncengine.safepath import DirCache
from syncengine.savefile import TEMP_SUFFIX
from syncengine.store import Store

log = logging.getLogger("syncengine")

CHECKPOINT_DIR = "checkpoints"
WAL_RESET_BUG = ((3, 7, 0), (3, 51, 2))  # fixed in 3.51.3
_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED


@attrs.frozen
class Options:
    """Where snapshots are staged and invalid databases quarantined; the lock wait."""

    staging: Path
    quarantine: Path
    busy_timeout: float = 2.0


def object_name(relpath: str) -> str:
    """Where the snapshot of the database at `relpath` is published, in the store."""
    return f"{CHECKPOINT_DIR}/{relpath}"


def library_version() -> dict[str, Any]:
    """The SQLite library in use, and whether it has the WAL-reset bug."""
    import sqlite3
    version = sqlite3.sqlite_version
    parts = tuple(int(p) for p in version.split(".")[:3])
    low, high = WAL_RESET_BUG
    bug = low <= parts <= high
    return {"version": version, "wal_reset_bug": bug,
            "warning": (f"SQLite {version} has the WAL-reset corruption bug (3.7.0 to 3.51.2, "
                        "fixed in 3.51.3): use a Python linked with a newer SQLite")
            if bug else None}


# -- finding ------------------------------------------------------------


def find_databases(live: Path, patterns: Sequence[str]) -> list[str]:
    """Relative paths of regular files matching the globs (``*`` never crosses ``/``).

    Exclusions do not apply: a listed database is always snapshotted.
    Symlinks are not followed; companions and temp files never match.
    """
    out: set[str] = set()
    for pattern in patterns:
        parts = [p for p in pattern.strip("/").split("/") if p]
        if parts:
            _glob(os.fspath(live), "", parts, out)
    return sorted(out)


def _glob(root: str, rel: str, parts: list[str], out: set[str]) -> None:
    head, rest = parts[0], parts[1:]
    if any(c in head for c in "*?["):
        try:
            with os.scandir(f"{root}/{rel}" if rel else root) as it:
                names = [e.name for e in it if fnmatch.fnmatchcase(e.name, head)]
        except OSError:
            return
    else:
        names = [head]
    for name in names:
        child = f"{rel}/{name}" if rel else name
        try:
            mode = os.lstat(f"{root}/{child}").st_mode
        except OSError:
            continue
        if rest:
            if stat.S_ISDIR(mode):
                _glob(root, child, rest, out)
        elif stat.S_ISREG(mode) and not name.endswith((*COMPANIONS, TEMP_SUFFIX)):
            out.add(child)


def matches(patterns: Sequence[str], relpath: str) -> bool:
    """Whether `relpath` is one of the databases the globs list."""
    parts = relpath.split("/")
    for pattern in patterns:
        globs = [p for p in pattern.strip("/").split("/") if p]
        if len(globs) == len(parts) and all(map(fnmatch.fnmatchcase, parts, globs)):
            return True
    return False


def seed_extra(entry: Entry, patterns: Sequence[str]) -> dict[str, Any]:
    """Index extras for a snapshot known only from the manifest (a rebuilt index)."""
    return {"object": entry.location, "size": entry.size, "mtime_ns": entry.mtime_ns,
            "snapshot_ns": entry.extra.get("snapshot_ns"), "_wal": None,
            "_listed": matches(patterns, entry.path)}


def companion_base(live: Path, relpath: str) -> str | None:
    """The database `relpath` belongs to, if it is a -wal/-shm/-journal of a SQLite file."""
    for suffix in COMPANIONS:
        if relpath.endswith(suffix) and len(relpath) > len(suffix):
            base = relpath[: -len(suffix)]
            return base if has_header(f"{live}/{base}") else None
    return None


def has_header(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return os.pread(fd, len(SQLITE_HEADER), 0) == SQLITE_HEADER
    except OSError:
        return False
    finally:
        os.close(fd)


# -- deciding -----------------------------------------------------------


def _wal_sig(db_path: str) -> list[int] | None:
    try:
        st = os.lstat(db_path + "-wal")
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def plan_databases(live: Path, patterns: Sequence[str], index: Index) -> list[Snapshot]:
    """A Snapshot action for each listed database whose file or WAL changed."""
    actions = []
    for rel in find_databases(live, patterns):
        path = f"{live}/{rel}"
        try:
            st = os.lstat(path)
        except OSError:
            continue
        rec = index.get(rel)
        if rec is None or rec.kind != "sqlite":
            reason = "new"
        elif rec.absent:
            reason = "reappeared"
        elif rec.ctime_ns == DIRTY:
            reason = "changed recently or not yet checked: look again"
        elif (rec.size, rec.mtime_ns) != (st.st_size, st.st_mtime_ns):
            reason = "database changed"
        elif index.extras.get(rel, {}).get("_wal") != _wal_sig(path):
            reason = "WAL changed"
        else:
            continue
        actions.append(Snapshot(rel, reason))
    return actions


def is_listed(index: Index, path: str) -> bool:
    """A database the adapter lists (not scanned as a file: the sqlite module watches it)."""
    return bool(index.extras.get(path, {}).get("_listed"))


# -- doing --------------------------------------------------------------


class _Locked(Exception):
    pass


def ro_uri(path: str) -> str:
    import urllib.parse
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"


def quick_check(path: str, *, readonly: bool = True, timeout: float = 2.0) -> str:
    """``PRAGMA quick_check`` of the database at `path` ("ok" when it is sound).

    Raises sqlite3.Error when the file cannot be opened or is not a database.
    """
    import sqlite3
    target = ro_uri(path) if readonly else path
    with contextlib.closing(sqlite3.connect(target, uri=readonly, timeout=timeout)) as con:
        rows = con.execute("PRAGMA quick_check").fetchall()
    return "; ".join(str(r[0]) for r in rows[:5])


def check_durable_copy(durable: DirCache, relpath: str, scratch: Path
                       ) -> tuple[int, int, str | None]:
    """(bytes, xxh3_64, problem) of a durable snapshot, checked on a local temp copy.

    SQLite is never opened on the mount: the snapshot is streamed into a temp
    file under `scratch` (local disk) and ``PRAGMA quick_check`` runs there.
    """
    import sqlite3
    import tempfile
    scratch.mkdir(parents=True, exist_ok=True)
    fd = durable.open_file(relpath)
    with os.fdopen(fd, "rb") as src, tempfile.TemporaryDirectory(dir=scratch) as tmpdir:
        local = os.path.join(tmpdir, "snapshot.db")
        with open(local, "wb") as out:
            n, h = stream(src.fileno(), None, out.write, src_name=relpath, dst_name=local)
        try:
            result = quick_check(local)
        except sqlite3.Error as exc:
            return n, h, f"not a usable SQLite database ({exc})"
        return n, h, None if result == "ok" else f"quick_check failed: {result}"


@contextlib.contextmanager
def staged_snapshot(db_path: str, relpath: str, opts: Options) -> Iterator[str]:
    """A validated backup of `db_path` in the local staging directory, removed afterwards."""
    import sqlite3

    os.makedirs(opts.staging, mode=0o700, exist_ok=True)
    dst_path = os.fspath(opts.staging / f"{os.urandom(8).hex()}.db")
    try:
        _backup(db_path, dst_path, relpath, opts.busy_timeout)
        try:
            result = quick_check(dst_path, readonly=False, timeout=opts.busy_timeout)
        except sqlite3.Error as exc:
            result = str(exc)
        if result != "ok":
            raise SourceError(relpath, "snapshot",
                              f"the backup copy fails quick_check ({result}); the live database "
                              "may be corrupt; the previous snapshot is kept")
        yield dst_path
    finally:
        remove_set(dst_path)


def _backup(db_path: str, dst_path: str, relpath: str, timeout: float) -> None:
    import sqlite3
    def progress(status: int, remaining: int, total: int) -> None:
        if status in _BUSY_CODES:  # the busy handler already waited `timeout`
            raise _Locked

    if not os.path.lexists(db_path):
        raise Vanished(relpath)
    try:
        with contextlib.closing(sqlite3.connect(ro_uri(db_path), uri=True, timeout=timeout)
                                ) as src, contextlib.closing(sqlite3.connect(dst_path)) as dst:
            src.backup(dst, pages=-1, progress=progress)
    except _Locked:
        raise SourceError(relpath, "snapshot", f"database stayed locked for {timeout:g}s "
                          "(sqlite_busy_timeout); retried next pass") from None
    except sqlite3.Error as exc:
        if not os.path.lexists(db_path):
            raise Vanished(relpath) from exc
        raise SourceError(relpath, "snapshot", f"cannot read the database: {exc}; the "
                          "previous snapshot is kept") from exc


def remove_set(db_path: str) -> None:
    """Remove a database file and its companions (staging and temp copies only)."""
    for suffix in ("", *COMPANIONS):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(db_path + suffix)


def sweep_staging(opts: Options) -> None:
    """Remove snapshot copies a killed run left in the local staging directory."""
    try:
        names = os.listdir(opts.staging)
    except FileNotFoundError:
        return
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(opts.staging / name)


def snapshot_and_publish(store: Store, live: Path, relpath: str, opts: Options, index: Index,
                         *, listed: bool, recent_after_ns: int) -> Published:
    """Back up one database, check it, publish it unless equal to the last snapshot."""
    db_path = f"{live}/{relpath}"
    try:
        st = os.lstat(db_path)
    except FileNotFoundError as exc:
        raise Vanished(relpath) from exc
    except OSError as exc:
        raise SourceError(relpath, "stat", exc.strerror or str(exc)) from exc
    wal = _wal_sig(db_path)
    rec = index.get(relpath)
    extra_before = index.extras.get(relpath, {}) if rec and rec.kind == "sqlite" else {}
    mtime = max(st.st_mtime_ns, wal[1] if wal else 0)
    with staged_snapshot(db_path, relpath, opts) as staged:
        os.chmod(staged, st.st_mode & 0o7777 | 0o600)
        os.utime(staged, ns=(mtime, mtime))
        copied = upload(store, os.fspath(opts.staging), os.path.basename(staged),
                        known_hash=rec.hash64 if extra_before and rec else None,
                        known_size=extra_before.get("size"), dest=object_name(relpath))
    after = os.lstat(db_path) if os.path.lexists(db_path) else None
    raced = (after is None or (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns)
             or _wal_sig(db_path) != wal)
    dirty = raced or mtime >= recent_after_ns
    now = time.time_ns()
    snapshot_ns = now if copied.published else extra_before.get("snapshot_ns", now)
    if not copied.published:
        mtime = extra_before.get("mtime_ns", mtime)
    # a mount without rename stores each snapshot as a new unique object
    obj = (copied.object if copied.published else extra_before.get("object")) \
        or object_name(relpath)
    extra = {"object": obj, "size": copied.size, "mtime_ns": mtime,
             "snapshot_ns": snapshot_ns, "_wal": wal, "_listed": listed}
    entry = Entry(relpath, "sqlite", copied.size, mtime, st.st_mode & 0o7777, copied.hash64,
                  object=obj, extra={"snapshot_ns": snapshot_ns})
    if copied.published:
        log.info("sqlite.published path=%s object=%s bytes=%d", relpath, entry.object,
                 copied.size)
    return Published(entry, copied, (st.st_size, st.st_mtime_ns,
                                     DIRTY if dirty else st.st_ctime_ns), extra)


__all__ = ["CHECKPOINT_DIR", "COMPANIONS", "Options", "companion_base", "find_databases",
           "library_version", "object_name", "plan_databases", "quick_check",
           "snapshot_and_publish", "staged_snapshot"]
