"""Durability primitives: the one module that publishes files with ``os.replace``.

(The mount probe, probe.py, also calls it, on its own probe files only, to
learn whether the mount can rename at all.)

A new version of a file is written to a uniquely named temporary file in a
staging directory (never a sibling of the target: on hf-mount a name that is a
prefix of another key showed up as a phantom directory), closed, then renamed
over the target.  Closing is where an object-store mount commits the object, so
a close error is a failed write.  Until the rename, the previous version stays
authoritative; a temp file of a failed or interrupted write is unlinked, and
stale ones are swept by `sweep_staging` on the next run.

Where the durable mount cannot rename (Mountpoint for S3), `create_object`
writes a file under a final, unique name instead: nothing refers to it until a
manifest names it, so it needs no rename (`Staged.keep`).

Temp files are created ``0600``-or-tighter so a secret is never more readable
in transit than its source.  Directory fsync ignores EINVAL/ENOTSUP, which
network filesystems return (borg ``platform.base.sync_dir``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs

TEMP_SUFFIX = ".syncengine-tmp"
_IGNORED_SYNC_ERRORS = (errno.EINVAL, errno.ENOTSUP, errno.EBADF, errno.EROFS, errno.ENOSYS)
_IGNORED_SETATTR_ERRORS = (errno.EPERM, errno.ENOSYS, errno.ENOTSUP, errno.EINVAL, errno.EACCES)


def temp_mode(mode: int) -> int:
    """Permission bits for a temp file: owner read/write at most, never more than the source."""
    return 0o200 | (mode & 0o400)


def fsync_dir(path: str | os.PathLike[str] | None = None, *, dir_fd: int | None = None) -> None:
    """fsync a directory so a rename in it survives power loss; ignore what mounts refuse."""
    fd = (
        os.open(path if path is not None else ".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd)
        if dir_fd is None or path is not None
        else dir_fd
    )
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _IGNORED_SYNC_ERRORS:
            raise
    finally:
        if fd != dir_fd:
            os.close(fd)


_libc: Any = None
_RENAME_NOREPLACE = 1  # renameat2(2)
_AT_FDCWD = -100
_NO_RENAME_FLAGS = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP)


def _c() -> Any:
    import ctypes  # lazily: only passes that publish something pay for it
    import ctypes.util

    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return _libc


def syncfs(path: str | os.PathLike[str]) -> None:
    """Flush the whole filesystem holding `path` (one barrier per checkpoint pass).

    Per-file fsync on local disk would make a full checkpoint of 100,000 files
    take minutes; on the object-store mount fsync does nothing at all.
    """
    import ctypes

    libc = _c()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            if err not in _IGNORED_SYNC_ERRORS:
                raise OSError(err, os.strerror(err), os.fspath(path))
    finally:
        os.close(fd)


@attrs.define
class Staged:
    """An open temporary file: `close` commits it (on a mount), `publish` renames it into
    place, `keep` keeps it under its final name, `discard` removes it."""

    fd: int
    name: str
    dir_fd: int | None
    closed: bool = False
    published: bool = False
    in_place: bool = False  # created under its final name (create_object): keep(), no rename

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]

    def close(
        self, *, mode: int | None = None, mtime_ns: int | None = None, fsync: bool = False
    ) -> None:
        """Set mode and mtime (best effort: mounts may refuse), then close (= commit)."""
        if self.closed:
            return
        try:
            if mode is not None:
                _best_effort(os.fchmod, self.fd, mode & 0o7777)
            if mtime_ns is not None:
                _best_effort(os.utime, self.fd, ns=(mtime_ns, mtime_ns))
            if fsync:
                try:
                    os.fsync(self.fd)
                except OSError as exc:
                    if exc.errno not in _IGNORED_SYNC_ERRORS:
                        raise
        finally:
            self.closed = True
            os.close(self.fd)

    def set_attrs(self, *, mode: int | None = None, mtime_ns: int | None = None) -> None:
        """Set mode and mtime by name after close (best effort).

        Object-store mounts drop attributes set on a handle that is not yet
        committed; a closed object takes them.
        """
        assert self.closed, "set_attrs() is for a closed file"
        if mode is not None:
            _best_effort(os.chmod, self.name, mode & 0o7777, dir_fd=self.dir_fd)
        if mtime_ns is not None:
            _best_effort(os.utime, self.name, ns=(mtime_ns, mtime_ns), dir_fd=self.dir_fd)

    def publish(self, target: str, *, target_dir_fd: int | None = None) -> None:
        """Rename the closed temp file over `target` (atomic where the filesystem is)."""
        assert self.closed, "publish() needs a closed file: closing is the commit"
        assert not self.in_place, "an object written under its final name is kept, not renamed"
        os.replace(self.name, target, src_dir_fd=self.dir_fd, dst_dir_fd=target_dir_fd)
        self.published = True

    def publish_new(self, target: str, *, target_dir_fd: int | None = None) -> bool:
        """Rename the closed temp file to `target` only if no entry has that name.

        Raises FileExistsError when one has (nothing is replaced).  Returns False
        where the filesystem cannot refuse a replace (no ``RENAME_NOREPLACE``): it
        was renamed with ``os.replace``, and only reading `target` back can tell
        whether another writer's rename landed there too.
        """
        assert self.closed, "publish_new() needs a closed file: closing is the commit"
        assert not self.in_place, "an object written under its final name is kept, not renamed"
        guarded = _rename_noreplace(self.name, target, self.dir_fd, target_dir_fd)
        if not guarded:
            os.replace(self.name, target, src_dir_fd=self.dir_fd, dst_dir_fd=target_dir_fd)
        self.published = True
        return guarded

    def publish_absent(self, target: str, *, target_dir_fd: int | None = None) -> None:
        """Rename the closed temp file to `target` only while nothing has that name, with
        no window: ``RENAME_NOREPLACE``, else a hard link and an unlink of the temp name.
        FileExistsError when a file is there (it stays; the temp file is left to the
        caller's discard)."""
        assert self.closed and not self.in_place, "publish_absent() needs a closed temp file"
        if not _rename_noreplace(self.name, target, self.dir_fd, target_dir_fd):
            os.link(self.name, target, src_dir_fd=self.dir_fd, dst_dir_fd=target_dir_fd)
            _best_effort(os.unlink, self.name, dir_fd=self.dir_fd)
        self.published = True

    def keep(self) -> None:
        """Keep a closed file written under its final name (no rename)."""
        assert self.closed and self.in_place, "keep() is for a closed create_object() file"
        self.published = True

    def discard(self) -> None:
        """Close and remove the temp file; failures are left to `sweep_staging`."""
        if not self.closed:
            self.closed = True
            try:
                os.close(self.fd)
            except OSError:
                pass
        try:
            os.unlink(self.name, dir_fd=self.dir_fd)
        except OSError:
            pass


def _rename_noreplace(src: str, dst: str, src_dir_fd: int | None, dst_dir_fd: int | None) -> bool:
    """renameat2(RENAME_NOREPLACE): True when done, False when the filesystem (or libc)
    has no such rename and nothing was done; FileExistsError when `dst` exists."""
    import ctypes

    rename2 = getattr(_c(), "renameat2", None)
    if rename2 is None:
        return False
    if (
        rename2(
            _AT_FDCWD if src_dir_fd is None else src_dir_fd,
            os.fsencode(src),
            _AT_FDCWD if dst_dir_fd is None else dst_dir_fd,
            os.fsencode(dst),
            _RENAME_NOREPLACE,
        )
        == 0
    ):
        return True
    err = ctypes.get_errno()
    if err in _NO_RENAME_FLAGS:
        return False
    raise OSError(err, os.strerror(err), dst)  # EEXIST becomes FileExistsError


def _best_effort(func: object, *args: object, **kwargs: object) -> None:
    try:
        func(*args, **kwargs)  # type: ignore[operator]
    except OSError as exc:
        if exc.errno not in _IGNORED_SETATTR_ERRORS:
            raise


def create_temp(
    directory: str | None = None, *, dir_fd: int | None = None, source_mode: int = 0o600
) -> Staged:
    """Create a new, empty, exclusively owned temp file in `directory` (or `dir_fd`)."""
    base = os.urandom(8).hex() + TEMP_SUFFIX
    name = base if directory is None else os.path.join(directory, base)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(name, flags, temp_mode(source_mode), dir_fd=dir_fd)
    return Staged(fd=fd, name=name, dir_fd=dir_fd)


def create_object(
    path: str | os.PathLike[str], *, source_mode: int = 0o600, replace: bool = False
) -> Staged:
    """Create the file `path` to be written once and kept under that name.

    For names that are unique already (a new object, a manifest with a new
    sequence number). `replace` truncates a leftover of a killed run instead
    of failing with EEXIST: such a leftover was never referenced.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    flags |= os.O_TRUNC if replace else os.O_EXCL
    fd = os.open(path, flags, temp_mode(source_mode))
    return Staged(fd=fd, name=os.fspath(path), dir_fd=None, in_place=True)


@contextmanager
def staged(
    directory: str | None = None, *, dir_fd: int | None = None, source_mode: int = 0o600
) -> Iterator[Staged]:
    """A temp file that is discarded unless the body published it."""
    tmp = create_temp(directory, dir_fd=dir_fd, source_mode=source_mode)
    try:
        yield tmp
    finally:
        if not tmp.published:
            tmp.discard()


def write_file(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    staging_dir: str | None = None,
    mode: int = 0o600,
    fsync: bool = True,
) -> None:
    """Replace `path` with `data` as one closed file (local state and manifests)."""
    path = os.fspath(path)
    directory = staging_dir or os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    with staged(directory, source_mode=mode) as tmp:
        tmp.write(data)
        tmp.close(mode=mode, fsync=fsync)
        tmp.publish(path)
    if fsync:
        fsync_dir(os.path.dirname(path) or ".")


def rename_new(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Rename `src` to `dst`, refusing (FileExistsError) when `dst` already exists.

    For migration moves (a legacy directory to its rollback name, a cache file
    into quarantine): nothing that exists is ever replaced.  The check and the
    rename are two steps; migrate runs under the state lock.
    """
    if os.path.lexists(dst):
        raise FileExistsError(17, "File exists", os.fspath(dst))
    os.makedirs(os.path.dirname(os.fspath(dst)) or ".", exist_ok=True)
    os.rename(src, dst)


def place_symlink(target: str, name: str, *, dir_fd: int, mtime_ns: int | None = None) -> None:
    """Create or replace the symlink `name` (in `dir_fd`) pointing at `target`."""
    tmp = os.urandom(8).hex() + TEMP_SUFFIX
    os.symlink(target, tmp, dir_fd=dir_fd)
    try:
        if mtime_ns is not None:
            _best_effort(
                os.utime, tmp, ns=(mtime_ns, mtime_ns), dir_fd=dir_fd, follow_symlinks=False
            )
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def sweep_staging(directory: str | os.PathLike[str]) -> int:
    """Remove temp files a killed run left in a staging directory; return how many."""
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if entry.name.endswith(TEMP_SUFFIX) and entry.is_file(follow_symlinks=False):
            try:
                os.unlink(entry.path)
                removed += 1
            except FileNotFoundError:
                pass
    return removed
