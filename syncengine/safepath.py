"""Path safety: relative names from untrusted places, opened without following links.

Owns the rule that restore never writes (and never reads) outside a tree's
root, whatever the durable side or a manifest contains: a name must be
relative, normalised, free of ``..`` and NUL, and every directory on the way is
opened with ``O_NOFOLLOW`` relative to its parent's descriptor, so a symlinked
directory cannot redirect the walk.  Directory descriptors are cached per
run (one open per directory, which matters when every open is a network round
trip on the mount).
"""

from __future__ import annotations

import errno
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from syncengine.errors import SourceError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(SourceError):
    """A name that would leave the tree (absolute, ``..``, or through a symlink)."""


def check_relpath(relpath: str) -> str:
    """Return `relpath` if it is a safe relative name; raise UnsafePath otherwise."""
    if not relpath or "\0" in relpath or relpath.startswith("/"):
        raise UnsafePath(relpath, "check", "not a relative path inside the tree; refused")
    parts = relpath.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise UnsafePath(relpath, "check", "contains '..', '.' or an empty component; refused")
    return relpath


def _default_max_open() -> int:
    """A share of the process's descriptor limit (a restore holds two caches plus copies)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 128
    return max(8, min(128, soft // 8))


class DirCache:
    """Opens directories under one root by relative name, never following symlinks.

    At most `max_open` descriptors stay cached (a restore of 20,000 directories
    once ran out of descriptors: EMFILE).  Callers pin the directory they use
    (`pinned`, `parent`); only unpinned entries are closed, least recently
    used first, so a descriptor is never closed while another thread uses it.
    """

    def __init__(self, root: str | os.PathLike[str], *, create: bool = False,
                 dir_mode: int = 0o700, max_open: int | None = None) -> None:
        self.root = os.fspath(root)
        self.create = create
        self.dir_mode = dir_mode
        self.max_open = max_open or _default_max_open()
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._pins: dict[str, int] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> DirCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._pins.clear()

    @contextmanager
    def pinned(self, reldir: str) -> Iterator[int]:
        """The descriptor of directory `reldir` ('' for the root), open while in use."""
        with self._lock:
            fd = self._acquire(reldir)
        try:
            yield fd
        finally:
            with self._lock:
                self._release(reldir)

    @contextmanager
    def parent(self, relpath: str) -> Iterator[tuple[int, str]]:
        """(descriptor of the parent directory, final name) for a checked relpath."""
        check_relpath(relpath)
        parent, _, name = relpath.rpartition("/")
        with self.pinned(parent) as fd:
            yield fd, name

    def open_file(self, relpath: str) -> int:
        """Open a regular file for reading without following any symlink."""
        with self.parent(relpath) as (dir_fd, name):
            try:
                return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                               dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise UnsafePath(relpath, "open", "is a symlink; refused") from exc
                raise

    # -- under the lock ----------------------------------------------------
    def _acquire(self, reldir: str) -> int:
        fd = self._fds.get(reldir)
        if fd is None:
            fd = self._open(reldir)
            self._fds[reldir] = fd
        else:
            self._fds.move_to_end(reldir)
        self._pins[reldir] = self._pins.get(reldir, 0) + 1
        self._evict()  # after pinning: the entry just opened is never the one closed
        return fd

    def _release(self, reldir: str) -> None:
        left = self._pins[reldir] - 1
        if left:
            self._pins[reldir] = left
        else:
            del self._pins[reldir]
        self._evict()

    def _evict(self) -> None:
        if len(self._fds) <= self.max_open:
            return
        for reldir in [d for d in self._fds if d not in self._pins]:
            os.close(self._fds.pop(reldir))
            if len(self._fds) <= self.max_open:
                return

    def _open(self, reldir: str) -> int:
        if reldir == "":
            if self.create:
                os.makedirs(self.root, mode=self.dir_mode, exist_ok=True)
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        parent, _, name = reldir.rpartition("/")
        parent_fd = self._acquire(parent)  # pinned while the child is opened
        try:
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            except FileNotFoundError:
                if not self.create:
                    raise
                try:
                    os.mkdir(name, self.dir_mode, dir_fd=parent_fd)
                except FileExistsError:
                    pass
                return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            except NotADirectoryError as exc:
                raise UnsafePath(reldir, "open", "a component is a symlink or a file") from exc
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # the component is a symlink
                    raise UnsafePath(reldir, "open", "passes through a symlink; refused") from exc
                raise
        finally:
            self._release(parent)
