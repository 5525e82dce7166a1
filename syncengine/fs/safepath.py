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

from syncengine.errors import UnsafePath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def check_relpath(relpath: str) -> str:
    """Return `relpath` if it is a safe relative name; raise UnsafePath otherwise."""
    if not relpath or "\0" in relpath or relpath[0] == "/":
        raise UnsafePath(relpath, "check", "not a relative path inside the tree; refused")
    parts = relpath.split("/")
    if "" in parts or "." in parts or ".." in parts:
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

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        create: bool = False,
        dir_mode: int = 0o700,
        max_open: int | None = None,
        remember_missing: bool = False,
    ) -> None:
        self.root = os.fspath(root)
        self.create = create
        # A read-only pass over a tree that does not change meanwhile (planning a
        # restore) can trust a missing directory to stay missing: no lookup per file.
        self._missing: set[str] | None = set() if remember_missing and not create else None
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

    def pinned(self, reldir: str) -> _Pinned:
        """The descriptor of directory `reldir` ('' for the root), open while in use.

        A context manager: ``with cache.pinned("a/b") as fd: ...``.
        """
        return _Pinned(self, reldir)

    def parent(self, relpath: str) -> _Parent:
        """(descriptor of the parent directory, final name) for a checked relpath.

        A context manager: ``with cache.parent("a/b/f") as (dir_fd, name): ...``.
        """
        return _Parent(self, check_relpath(relpath))

    def listdir(self, reldir: str) -> list[str]:
        """Names in directory `reldir`, reached without following symlinks ([] if missing).

        The listing reads through the cached descriptor's offset: two threads must
        not list the same directory at once (each log lists only its own chain).
        """
        try:
            with self.pinned(check_relpath(reldir)) as fd:
                return os.listdir(fd)
        except FileNotFoundError:
            return []

    def open_file(self, relpath: str) -> int:
        """Open a regular file for reading without following any symlink."""
        with self.parent(relpath) as (dir_fd, name):
            try:
                return os.open(
                    name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise UnsafePath(relpath, "open", "is a symlink; refused") from exc
                raise

    # -- under the lock ----------------------------------------------------
    def _acquire(self, reldir: str) -> int:
        fd = self._fds.get(reldir)
        if fd is None:
            if self._missing is not None and reldir in self._missing:
                raise FileNotFoundError(errno.ENOENT, "no such directory", reldir)
            try:
                fd = self._open(reldir)
            except FileNotFoundError:
                if self._missing is not None:
                    self._missing.add(reldir)
                raise
            self._fds[reldir] = fd
        else:
            self._fds.move_to_end(reldir)
        self._pins[reldir] = self._pins.get(reldir, 0) + 1
        if len(self._fds) > self.max_open:  # tested here: this runs per file in a restore
            self._evict()  # after pinning: the entry just opened is never the one closed
        return fd

    def _release(self, reldir: str) -> None:
        left = self._pins[reldir] - 1
        if left:
            self._pins[reldir] = left
        else:
            del self._pins[reldir]
        if len(self._fds) > self.max_open:
            self._evict()

    def _evict(self) -> None:
        while len(self._fds) > self.max_open:
            victim = next((d for d in self._fds if d not in self._pins), None)  # oldest first
            if victim is None:
                return
            os.close(self._fds.pop(victim))

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


class _Pinned:
    """`DirCache.pinned`: a class, not a generator, because restore enters one per file."""

    __slots__ = ("_cache", "_dir")

    def __init__(self, cache: DirCache, reldir: str) -> None:
        self._cache, self._dir = cache, reldir

    def __enter__(self) -> int:
        with self._cache._lock:
            return self._cache._acquire(self._dir)

    def __exit__(self, *exc: object) -> None:
        with self._cache._lock:
            self._cache._release(self._dir)


class _Parent(_Pinned):
    """`DirCache.parent`: the parent directory pinned, and the final name."""

    __slots__ = ("_name",)

    def __init__(self, cache: DirCache, relpath: str) -> None:
        self._cache = cache
        self._dir, _, self._name = relpath.rpartition("/")

    def __enter__(self) -> tuple[int, str]:  # type: ignore[override]
        return super().__enter__(), self._name


__all__ = ["DirCache", "UnsafePath", "check_relpath"]
