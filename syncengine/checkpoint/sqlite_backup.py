"""Taking a consistent, checked copy of a live SQLite database into local staging.

Owns the rule that a snapshot never writes into the live tree and never
blocks a writer for longer than ``sqlite_busy_timeout``:

- When a process may be using the database (its ``-wal`` and ``-shm`` both
  exist, or it is in rollback-journal mode), SQLite's own locking makes the
  copy consistent: a read-only connection (``mode=ro``, and
  ``readonly_shm=1`` so it never writes the shared-memory file, not even a
  read mark) copies it with the online backup API in one step (``pages=-1``:
  one read transaction, so a busy writer cannot make it restart forever).
  It opens files through a VFS (`sqlite_vfs`) that opens a ``-wal`` read-only and never
  creates one (SQLite's own read-only open does, with ``O_CREAT``): if the
  writer closed the database between our look and our open, the open fails
  and the next try takes the path below, instead of leaving an empty
  ``-wal`` behind.  Companions that no process holds (a killed writer's, or
  those OpenClaw leaves at exit: an empty ``-wal`` and a ``-shm``) are read
  the same way: SQLite finds nobody serving the ``-shm`` and builds a
  private wal-index from the ``-wal`` in memory, under a read lock that keeps
  a writer starting meanwhile from checkpointing.  Closing, SQLite tries an
  exclusive lock to checkpoint and delete the WAL and ignores the refusal
  (the file is read-only); through apsw's Python VFS that refusal has to be
  answered as "busy", or it comes back from ``close()`` as "disk I/O error".
- A WAL-mode database with a companion missing has no connection open (every
  WAL connection keeps both files).  Opening it, even read-only, would
  create a 0-byte ``-wal`` and a 32 KB ``-shm`` that a read-only connection
  cannot remove.  ``immutable=1`` would not (it also ignores a ``-wal``, and
  trusts that nothing changes the file meanwhile).  So its files (the main
  file, and a ``-wal`` or ``-journal`` left by a crash) are copied as bytes
  into staging, hashing as they go, then read and hashed again: equal
  hashes, and the same companions present before and after, prove nobody
  wrote during the copy (a writer that starts creates ``-wal``/``-shm``
  first; one that also finishes has checkpointed into the main file, and a
  page changed after the first read of it differs in the second; only a
  later write that puts back the exact bytes could hide, which needs two
  whole writer sessions inside one copy).  Without a ``-wal`` or
  ``-journal`` the verified copy is the database; with one, the copy is
  backed up inside staging, where SQLite recovers the WAL or rolls back the
  journal.  If a writer did start, the next try finds its companions and
  uses its locking instead.  The same copy serves a database that a dead
  process left in a state a read-only connection must not repair: a hot
  journal (``SQLITE_READONLY_ROLLBACK``: the main file holds uncommitted
  pages) or a wal-index to rebuild (``SQLITE_READONLY_RECOVERY``,
  ``_CANTINIT``).

Every copy is then checked with `sqlite.check.check`.  A ``corrupt``
verdict is an error (`Refused`: nothing is published, and the caller says
what the durable side keeps); ``unchecked`` is returned to the caller to
decide.  The engine opens nothing else in a live
tree; as root, SQLite's open of an existing ``-wal`` still changes that file's
ctime (it chowns it to the database's owner), never its content or mtime.
"""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path

import attrs

from syncengine.checkpoint.sqlite_vfs import no_create_vfs
from syncengine.errors import DurableError, SourceError, source_error
from syncengine.fs.stream import Vanished, stream
from syncengine.sqlite.check import (
    CheckFailed,
    Verdict,
    check,
    connect,
    is_wal,
    writer_version,
)
from syncengine.sqlite.files import COMPANIONS, Options

_LOGS = ("-wal", "-journal")  # the companions that hold data: copied with the database
QUIET_TRIES = 3  # copies of an unused database that a writer starting meanwhile may spoil


class Refused(SourceError):
    """The database could not be read, or its copy is corrupt: nothing is published for it
    this pass (the caller adds what the durable side keeps: `sqlite_pass.stage`)."""


@attrs.frozen
class Staged:
    """A checked backup of one live database in local staging, not yet published."""

    relpath: str
    path: str  # the backup in staging (remove with `remove_set`)
    st: os.stat_result  # the live database before the backup
    wal: list[int] | None  # (size, mtime_ns) of its -wal before the backup
    raced: bool  # the live files changed meanwhile: look again next pass
    verdict: Verdict


def wal_sig(db_path: str) -> list[int] | None:
    try:
        st = os.lstat(db_path + "-wal")
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def stage(db_path: str, relpath: str, opts: Options) -> Staged:
    """Back up the live database at `db_path` into staging and check the copy.

    Raises Vanished, or SourceError (locked past the busy timeout; `Refused`:
    unreadable, or the copy is corrupt).
    """
    try:
        st = os.lstat(db_path)
    except FileNotFoundError as exc:
        raise Vanished(relpath) from exc
    except OSError as exc:
        raise SourceError(relpath, "stat", exc.strerror or str(exc)) from exc
    wal = wal_sig(db_path)
    os.makedirs(opts.staging, mode=0o700, exist_ok=True)
    dst = os.fspath(opts.staging / f"{os.urandom(8).hex()}.db")
    try:
        _backup(db_path, dst, relpath, opts)
        try:
            verdict = check(dst, timeout=opts.busy_timeout)
        except CheckFailed as exc:
            raise Refused(relpath, "snapshot", f"cannot check the backup copy: {exc}") from exc
        if verdict.corrupt:
            raise Refused(
                relpath,
                "snapshot",
                f"the backup copy fails quick_check "
                f"({verdict.detail}); the live database may be corrupt",
            )
        mtime = max(st.st_mtime_ns, wal[1] if wal else 0)
        os.chmod(dst, st.st_mode & 0o7777 | 0o600)
        os.utime(dst, ns=(mtime, mtime))
    except BaseException as exc:
        remove_set(dst)
        if isinstance(exc, OSError):  # reading the live file or writing staging
            raise source_error("snapshot", relpath, exc) from exc
        raise
    after = os.lstat(db_path) if os.path.lexists(db_path) else None
    raced = (
        after is None
        or (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns)
        or wal_sig(db_path) != wal
    )
    return Staged(relpath, dst, st, wal, raced, verdict)


def _backup(db_path: str, dst: str, relpath: str, opts: Options) -> None:
    last = "its files changed while they were copied"
    for _ in range(QUIET_TRIES):
        try:
            header = _header(db_path)
        except FileNotFoundError as exc:
            raise Vanished(relpath) from exc
        if not is_wal(header) or all(os.path.lexists(db_path + s) for s in ("-wal", "-shm")):
            try:
                _copy_with_sqlite(
                    db_path,
                    dst,
                    relpath,
                    opts.busy_timeout,
                    {"readonly_shm": "1", "vfs": no_create_vfs()} if is_wal(header) else {},
                )
                _keep_writer(dst, writer_version(header))
                return
            except _Closed as exc:
                # the last connection closed meanwhile, or a crash left companions no
                # process uses: copy it as an unused database (the copy proves it)
                last = f"SQLite: {exc}"
        quiet = _quiet_copy(db_path, relpath, opts.staging)
        if quiet is None:
            continue
        try:
            if any(os.path.lexists(quiet + s) for s in _LOGS):
                # a crash left a WAL or a hot journal: SQLite recovers or rolls back here
                _copy_with_sqlite(quiet, dst, relpath, opts.busy_timeout, {}, private=True)
                _keep_writer(dst, writer_version(header))
            else:  # the main file alone is the database, verified unchanged while copied
                os.rename(quiet, dst)
        finally:
            remove_set(quiet)
        return
    raise SourceError(
        relpath,
        "snapshot",
        "the database changed each time it was copied "
        f"while connections to it opened and closed ({last}); retried next pass",
    )


def _header(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(100)


def _keep_writer(path: str, source: int | None) -> None:
    """Record in the copy's header the newer SQLite that wrote its content, if newer.

    The backup stamps the copy with this library's version (offset 96); a
    database from a newer SQLite must still say so, so that restore and verify
    tell a schema they cannot parse from a damaged one (`sqlite.check`).
    """
    with open(path, "r+b") as f:
        header = f.read(100)
        ours = writer_version(header)
        if source is not None and ours is not None and source > ours:
            f.seek(92)
            f.write(header[24:28] + struct.pack(">I", source))


class _Closed(Exception):
    """No process serves the database the way SQLite's locking expects.

    Its -wal or -shm went away between looking and opening, or it is left as a
    process that died left it: a hot journal to roll back, a wal-index to
    rebuild.  A read-only connection can do neither (SQLITE_READONLY_ROLLBACK,
    _RECOVERY, _CANTINIT); the verified byte copy can, in staging.
    """


def _unserved(exc: Exception) -> bool:
    import apsw

    return getattr(exc, "extendedresult", None) in (
        apsw.SQLITE_READONLY_ROLLBACK,
        apsw.SQLITE_READONLY_RECOVERY,
        apsw.SQLITE_READONLY_CANTINIT,
    )


def _reason(exc: Exception) -> str:
    """SQLite's message with its extended result code's name (a backup step that failed
    on its source says "not an error": the message is the destination's)."""
    import apsw

    code = getattr(exc, "extendedresult", None)
    codes = (apsw.mapping_extended_result_codes, apsw.mapping_result_codes)  # 26: primary only
    name = next((str(m[code]) for m in codes if code in m), "") if code is not None else ""
    text = str(exc)
    if isinstance(exc, apsw.NotADBError):
        text = "not a SQLite database, though its name matches the adapter's sqlite patterns"
    if not name:
        return text
    return name if text in ("", "not an error") else f"{text} ({name})"


def _copy_with_sqlite(
    src_path: str,
    dst: str,
    relpath: str,
    timeout: float,
    params: dict[str, str],
    *,
    private: bool = False,
) -> None:
    """One-step online backup of `src_path` (opened read-only) into a new file `dst`.

    `private`: `src_path` is our own copy in staging, opened read-write so that
    SQLite can roll back its hot journal or rebuild its wal-index there.
    """
    import apsw

    try:
        with (
            connect(src_path, timeout=timeout, params=params, readonly=not private) as src,
            connect(dst, timeout=timeout, readonly=False) as out,
        ):
            # a staging copy needs no crash safety of its own: the store makes what it
            # publishes durable, and a killed run's copies are swept
            out.execute("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF")
            with out.backup("main", src, "main") as job:
                job.step(-1)
    except (apsw.BusyError, apsw.LockedError):
        raise SourceError(
            relpath,
            "snapshot",
            f"database stayed locked for {timeout:g}s (sqlite_busy_timeout); retried next pass",
        ) from None
    except apsw.FullError as exc:
        raise SourceError(
            relpath,
            "snapshot",
            f"no space left for the copy in {dst}; free space on the local disk",
        ) from exc
    except apsw.Error as exc:
        if not os.path.lexists(src_path):
            raise Vanished(relpath) from exc
        gone = "vfs" in params and isinstance(exc, (apsw.CantOpenError, apsw.IOError))
        if not private and (gone or _unserved(exc)):
            # its -wal or -shm was removed after we looked (opening or locking the -shm of
            # a writer that is closing fails), or a dead process left it to be recovered
            raise _Closed(_reason(exc)) from exc
        raise Refused(relpath, "snapshot", f"cannot read the database: {_reason(exc)}") from exc


def _quiet_copy(db_path: str, relpath: str, staging: Path) -> str | None:
    """Byte copies of an unused database's files in staging; None if one changed meanwhile."""
    present = {s: os.path.lexists(db_path + s) for s in COMPANIONS}
    base = os.fspath(staging / f"{os.urandom(8).hex()}.quiet.db")
    try:
        same = all(
            _copy_and_compare(db_path + s, base + s, relpath)
            for s in ("", *_LOGS)
            if not s or present[s]
        )
        if same and {s: os.path.lexists(db_path + s) for s in COMPANIONS} == present:
            return base
    except BaseException:
        remove_set(base)
        raise
    remove_set(base)  # written meanwhile, or a connection opened (or closed)
    return None


def _copy_and_compare(src: str, dst: str, relpath: str) -> bool:
    """Copy `src` to `dst` hashing, then hash `src` again: False if it changed."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(src, flags)
        try:
            with open(dst, "xb") as out:
                os.fchmod(out.fileno(), 0o600)
                first = stream(fd, None, out.write, src_name=relpath, dst_name=dst)
        finally:
            os.close(fd)
        fd = os.open(src, flags)
        try:
            second = stream(fd, None, None, src_name=relpath)
        finally:
            os.close(fd)
    except FileNotFoundError:
        if src.endswith(_LOGS):
            return False  # a writer closed (or rolled back) meanwhile
        raise Vanished(relpath) from None
    except DurableError as exc:  # stream() names its sink "durable": here it is staging
        raise SourceError(relpath, "snapshot", f"cannot write the staging copy: {exc}") from exc
    return first == second


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
