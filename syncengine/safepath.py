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

import os
import threading

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


class DirCache:
    """Opens directories under one root by relative name, never following symlinks."""

    def __init__(self, root: str | os.PathLike[str], *, create: bool = False,
                 dir_mode: int = 0o700) -> None:
        self.root = os.fspath(root)
        self.create = create
        self.dir_mode = dir_mode
        self._fds: dict[str, int] = {}
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

    def dir_fd(self, reldir: str) -> int:
        """Descriptor of directory `reldir` ('' for the root), created if allowed."""
        with self._lock:
            return self._open(reldir)

    def _open(self, reldir: str) -> int:
        fd = self._fds.get(reldir)
        if fd is not None:
            return fd
        if reldir == "":
            if self.create:
                os.makedirs(self.root, mode=self.dir_mode, exist_ok=True)
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        else:
            parent, _, name = reldir.rpartition("/")
            parent_fd = self._open(parent)
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            except FileNotFoundError:
                if not self.create:
                    raise
                try:
                    os.mkdir(name, self.dir_mode, dir_fd=parent_fd)
                except FileExistsError:
                    pass
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            except NotADirectoryError as exc:
                raise UnsafePath(reldir, "open", "a component is a symlink or a file") from exc
            except OSError as exc:
                if exc.errno == 40:  # ELOOP: the component is a symlink
                    raise UnsafePath(reldir, "open", "passes through a symlink; refused") from exc
                raise
        self._fds[reldir] = fd
        return fd

    def split(self, relpath: str) -> tuple[int, str]:
        """(descriptor of the parent directory, final name) for a checked relpath."""
        check_relpath(relpath)
        parent, _, name = relpath.rpartition("/")
        return self.dir_fd(parent), name

    def open_file(self, relpath: str) -> int:
        """Open a regular file for reading without following any symlink."""
        dir_fd, name = self.split(relpath)
        try:
            return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                           dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == 40:
                raise UnsafePath(relpath, "open", "is a symlink; refused") from exc
            raise
