"""The SQLite VFS that opens a live database's ``-wal`` read-only, never creating it.

Owns `no_create_vfs`, registered once per process: SQLite's own read-only
open asks for a ``-wal`` read-write with ``O_CREAT``, so a writer that closed
the database between our look and our open would leave an empty ``-wal``
behind.  Through this VFS that open fails instead, and `sqlite_backup` takes
its path for an unused database.  apsw is imported only when a database is
opened, as everywhere on the checkpoint side.
"""

from __future__ import annotations

import threading

NO_CREATE_VFS = "syncengine-no-create"


_vfs: list[object] = []  # the registered VFS, kept alive for the process


_vfs_lock = threading.Lock()


def no_create_vfs() -> str:
    """The name of a VFS like the default one that opens a -wal read-only, never creating it.

    Through apsw's Python VFS an error that SQLite itself ignores still
    reaches the caller as an exception (apsw clears only "busy"), hence the
    lock translation below.  The -shm is opened by SQLite (``readonly_shm``:
    read-only), below this layer.
    """
    import apsw

    class File(apsw.VFSFile):
        def xLock(self, level: int) -> None:
            try:
                super().xLock(level)
            except apsw.IOError:
                if level != apsw.SQLITE_LOCK_EXCLUSIVE:
                    raise
                # A read-only file cannot take a write lock (EBADF). SQLite tries it when
                # the last connection closes, to checkpoint, and ignores the failure; here
                # it would surface as an error from close(): say "busy", what it means.
                raise apsw.BusyError("read-only: no exclusive lock") from None

    class NoCreate(apsw.VFS):
        def __init__(self) -> None:
            super().__init__(NO_CREATE_VFS, base="")

        def xOpen(self, name: str | apsw.URIFilename | None, flags: list[int]) -> apsw.VFSFile:
            if flags[0] & apsw.SQLITE_OPEN_WAL:  # SQLite asks read-write and create
                flags[0] &= ~(apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_READWRITE)
                flags[0] |= apsw.SQLITE_OPEN_READONLY  # so the kernel refuses any write too
            return File("", name, flags)

    with _vfs_lock:
        if not _vfs:
            _vfs.append(NoCreate())
    return NO_CREATE_VFS
