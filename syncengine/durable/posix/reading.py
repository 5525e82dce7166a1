"""The read side of the POSIX store: objects opened without following a symlink.

Owns turning a durable directory's files into the plain values of
`syncengine.durable.store` (`ObjectInfo`, `Opened`): an object is opened
through a `DirCache` (every directory on the way with ``O_NOFOLLOW``), and
inside `batch` the directory descriptors stay open, so a restore of many
objects opens each directory once (each open is a round trip on a mount).
Writes are `syncengine.durable.posix.store.PosixStore`'s; nothing here
changes the durable side.
"""

from __future__ import annotations

import builtins
import io
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from syncengine.durable.store import META_DIR, Kind, ObjectInfo, Opened
from syncengine.errors import DurableError, durable_error
from syncengine.fs.safepath import DirCache


class PosixReader:
    """Reads, lists and heads the objects of one durable directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._root_str = str(self.root)
        self._dirs: DirCache | None = None  # inside `batch`
        self._batch_depth = 0
        self._batch_lock = threading.Lock()

    def where(self, key: str) -> str:
        return f"{self._root_str}/{key}" if key else self._root_str

    def exists(self) -> bool:
        try:
            return stat.S_ISDIR(os.stat(self.root).st_mode)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise durable_error("stat", self.root, exc) from exc

    def head(self, relpath: str) -> ObjectInfo | None:
        """One object (lstat: a link is reported, not followed), or None.  Never on the
        periodic loop's idle path."""
        path = self.root / relpath
        try:
            st = os.stat(path, follow_symlinks=False)
            target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise durable_error("stat", path, exc) from exc
        return _info(relpath, st, target)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Keep directory descriptors open for the reads inside (one open per directory,
        not one per object); nested batches share the outermost one's."""
        with self._batch_lock:
            if self._dirs is None:
                self._dirs = DirCache(self.root)
            self._batch_depth += 1
        try:
            yield
        finally:
            with self._batch_lock:
                self._batch_depth -= 1
                if not self._batch_depth and self._dirs is not None:
                    self._dirs.close()
                    self._dirs = None

    def _open_fd(self, relpath: str) -> int:
        """A descriptor of one object, opened without following any symlink (through the
        batch's directory descriptors when inside one; no context manager per object:
        restore calls this once per file)."""
        try:
            dirs = self._dirs
            if dirs is not None:
                return dirs.open_file(relpath)
            with DirCache(self.root) as own:
                return own.open_file(relpath)
        except NotADirectoryError as exc:
            raise FileNotFoundError(*exc.args) from exc
        except (FileNotFoundError, DurableError):
            raise
        except OSError as exc:
            raise durable_error("open", self.root / relpath, exc) from exc

    def open(self, relpath: str) -> _Open:
        """One object open for reading (`Opened`: its info and an unbuffered stream).

        Something else at `relpath` (a directory) comes with its kind and no bytes:
        callers refuse it by `info.kind`.  (A small class, not a generator-based context
        manager: restore opens every object once, and the per-object cost shows there.)
        """
        fd = self._open_fd(relpath)
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise durable_error("stat", self.where(relpath), exc) from exc
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return _Open(Opened(_info(relpath, st, None), io.BytesIO()), None)
        f = io.FileIO(fd, "rb", closefd=True)
        info = ObjectInfo(relpath, st.st_size, st.st_mtime_ns, st.st_mode & 0o7777, "file", None)
        return _Open(Opened(info, f), f)

    def read_bytes(self, relpath: str) -> bytes:
        """One object's bytes (inside `batch`, the directories on the way are opened once)."""
        with self.open(relpath) as o:
            if o.info.kind != "file":
                raise DurableError(f"read {self.where(relpath)}: not a regular file")
            try:
                return o.file.read()
            except OSError as exc:
                raise durable_error("read", self.root / relpath, exc) from exc

    def read_range(self, relpath: str, offset: int, length: int) -> bytes:
        fd = self._open_fd(relpath)
        try:
            return os.pread(fd, length, offset)
        except OSError as exc:
            raise durable_error("read", self.root / relpath, exc) from exc
        finally:
            os.close(fd)

    def names(self, reldir: str) -> builtins.list[str]:
        """Names in a durable directory, sorted ([] when it does not exist).

        Inside `batch` through the cached descriptors (never through a symlink;
        the directories stay open for the reads that follow); outside it one
        listing by path (one round trip on a mount, where opening each directory
        on the way would be one per component)."""
        try:
            dirs = self._dirs
            if dirs is None or not reldir:
                return sorted(os.listdir(self.root / reldir))
            return sorted(dirs.listdir(reldir))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise durable_error("list", self.where(reldir), exc) from exc

    def list(self, top: str = "") -> Iterator[ObjectInfo]:
        """Every file and symlink below the root (or `top`), without following links.

        Only for durable trees that have no manifest (the old rsync layout),
        verify, gc and migrate: the periodic checkpoint never calls this.  From
        the root, ``.syncengine/`` is skipped.
        """
        stack = [top]
        while stack:
            reldir = stack.pop()
            path = self.root / reldir if reldir else self.root
            try:
                entries = builtins.list(os.scandir(path))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                raise durable_error("list", path, exc) from exc
            for entry in entries:
                rel = f"{reldir}/{entry.name}" if reldir else entry.name
                if rel == META_DIR:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed since the listing (rsync's exit 24)
                    continue
                except OSError as exc:
                    raise durable_error("stat", path / entry.name, exc) from exc
                target = None
                if stat.S_ISLNK(st.st_mode):
                    try:
                        target = os.readlink(entry.path)
                    except FileNotFoundError:
                        continue
                    except OSError:  # listed without a target: that path's problem
                        target = None
                if stat.S_ISDIR(st.st_mode):
                    stack.append(rel)
                elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                    yield _info(rel, st, target)


def _kind(mode: int) -> Kind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
    return "dir" if stat.S_ISDIR(mode) else "other"


def _info(key: str, st: os.stat_result, target: str | None) -> ObjectInfo:
    return ObjectInfo(
        key, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), _kind(st.st_mode), target
    )


class _Open:
    """`PosixStore.open`'s context manager: the object open, closed on exit."""

    __slots__ = ("_file", "_opened")

    def __init__(self, opened: Opened, file: io.FileIO | None) -> None:
        self._opened, self._file = opened, file

    def __enter__(self) -> Opened:
        return self._opened

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()
