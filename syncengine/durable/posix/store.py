"""The durable side behind one narrow interface.

A `Store` is one adapter's durable directory: it publishes closed objects
(staged in a dedicated ``.syncengine/staging`` directory, then renamed into
place), opens objects for reading without following symlinks, lists the
manifest directory, and walks the tree only for restores of state written
before manifests existed.  Restore, verify and GC go through this interface
and never build durable paths themselves.

Where the mount cannot rename (the probe says so: `configure`), a new version
is written once under a new, unique name in ``.syncengine/objects/<path>/``
and `publish` returns that name: the caller records it as the manifest
entry's ``object``, so the previous version stays authoritative until the
manifest naming the new one is complete.  Manifest objects, already uniquely
named, are then written directly under their final name.  Where attributes
set on an open handle are lost at commit, mode and mtime are set by name
after close.  The fallbacks live here only: callers do not branch on them.
Errors become `DurableError` here, with the operation and the path.

On a write-back mount (writeback.py: close returns before the bucket has the
object), `confirm` asks the mount, through the `Uploads` the engine gives
`configure`, whether everything closed so far reached the bucket.
"""

from __future__ import annotations

import functools
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from syncengine.durable.posix import savefile
from syncengine.durable.posix.safepath import DirCache
from syncengine.durable.posix.writeback import Uploads
from syncengine.errors import (
    CommitRefused,
    DurableError,
    NameTaken,
    SharedRoot,
    commit_error,
    durable_error,
    publish_error,
)

META_DIR = ".syncengine"
STAGING_DIR = f"{META_DIR}/staging"
MANIFEST_DIR = f"{META_DIR}/manifest"
OBJECTS_DIR = f"{META_DIR}/objects"


class Store:
    """One adapter's durable directory (a local path or a FUSE mount)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._staging = self.root / STAGING_DIR
        self._staging_ready = False
        self._reader: DirCache | None = None
        self.rename_supported = True
        self.attrs_after_close = False
        self.keeps_mtime = False  # an object's mtime is the one given at close
        self.uploads: Uploads | None = None  # None: close is the upload (no write-back)
        self._last_write = 0.0  # time.monotonic() of the last object closed or renamed
        self._before_write: Callable[[], None] | None = None

    def configure(self, *, rename_supported: bool, attrs_after_close: bool,
                  keeps_mtime: bool = False, uploads: Uploads | None = None) -> None:
        """Adopt what the mount probe found (see syncengine.durable.posix.probe)."""
        self.rename_supported = rename_supported
        self.attrs_after_close = attrs_after_close
        self.keeps_mtime = keeps_mtime
        self.uploads = uploads

    @property
    def instance(self) -> str:
        """The write-back mount instance objects are recorded under ("" without one)."""
        return self.uploads.instance if self.uploads is not None else ""

    def before_first_write(self, prepare: Callable[[], None]) -> None:
        """Run `prepare` once, just before this store's first write (health check, probe).

        A pass that only re-checks files (hashes equal: nothing to publish) then
        does no operation on the mount at all.  If `prepare` raises, it runs
        again before the next write.
        """
        self._before_write = prepare

    def _writing(self) -> None:
        prepare = self._before_write
        if prepare is not None:
            prepare()
            self._before_write = None

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # -- writing --------------------------------------------------------
    def _ensure_staging(self) -> None:
        if not self._staging_ready:
            try:
                os.makedirs(self._staging, mode=0o700, exist_ok=True)
            except OSError as exc:
                raise durable_error("create staging directory", self._staging, exc) from exc
            self._staging_ready = True

    @contextmanager
    def staged(self, source_mode: int = 0o600, relpath: str | None = None, *,
               unique: bool = False, exclusive: bool = False) -> Iterator[savefile.Staged]:
        """A new object for `relpath`, discarded unless published.

        A temp file in the staging directory; without rename support, the new
        unique object itself (`unique`: `relpath` is a unique name already; a
        leftover of a killed run there is replaced, unless `exclusive`: then
        FileExistsError).
        """
        self._writing()
        if self.rename_supported or relpath is None:
            self._ensure_staging()
            where = self._staging
            create = functools.partial(savefile.create_temp, os.fspath(self._staging))
        else:
            where = self.root / (relpath if unique else new_object_name(relpath))
            create = functools.partial(_create_object, where, replace=not exclusive)
        try:
            tmp = create(source_mode=source_mode)
        except OSError as exc:
            if exclusive and isinstance(exc, FileExistsError):
                raise  # the caller tells a taken name from a failure
            raise durable_error("create a new object", where, exc) from exc
        try:
            yield tmp
        finally:
            if not tmp.published:
                tmp.discard()

    def close(self, tmp: savefile.Staged, relpath: str | None = None, *,
              mode: int | None = None, mtime_ns: int | None = None) -> None:
        """Close (= commit on a mount) the new object for `relpath`, with mode and mtime.

        An error at close means the object was not written; `staged` then
        discards it and the previous version stays.  Raises `CommitRefused`
        (the mount refused this object: that path's error, the run goes on) or
        `DurableError` (the mount is gone, read-only or full: the run stops).
        """
        try:
            tmp.close(mode=mode, mtime_ns=mtime_ns)
            self._last_write = time.monotonic()
            if self.attrs_after_close:
                tmp.set_attrs(mode=mode, mtime_ns=mtime_ns)
        except OSError as exc:
            target = self.root / relpath if relpath else tmp.name
            raise commit_error(relpath or tmp.name, target, exc) from exc

    def publish(self, tmp: savefile.Staged, relpath: str) -> str | None:
        """Make a closed object the new version of `relpath`.

        Returns None when it was renamed to `relpath` itself, or the store
        name of the unique object written instead (record it in the manifest).
        """
        if tmp.in_place:
            tmp.keep()
            return os.path.relpath(tmp.name, self.root)
        target = self.root / relpath
        try:
            try:
                tmp.publish(os.fspath(target))
            except FileNotFoundError:
                os.makedirs(target.parent, mode=0o755, exist_ok=True)
                tmp.publish(os.fspath(target))
        except OSError as exc:
            raise publish_error(relpath, target, exc) from exc
        self._last_write = time.monotonic()  # a mount may queue the upload under the new name
        return None

    def put_bytes(self, relpath: str, data: bytes, *, mode: int = 0o644) -> None:
        """Publish `data` as one closed object at `relpath`, a name used once (manifests).

        An object already there is never replaced.  Found by the lookup first:
        `NameTaken` (this writer is behind the durable side).  Appearing after
        that lookup: `SharedRoot`, another process writes to this root; the
        rename refuses to replace it (``RENAME_NOREPLACE``; an exclusive create
        where the mount cannot rename), or, where the mount cannot refuse, the
        object read back right after the rename is not ours.
        """
        if self.stat(relpath) is not None:
            raise NameTaken(f"write {self.root / relpath}: an object of that name already "
                            "exists, and this name is written once")
        try:
            with self.staged(mode, relpath, unique=True, exclusive=True) as tmp:
                try:
                    tmp.write(data)
                except OSError as exc:
                    raise durable_error("write", self.root / relpath, exc) from exc
                try:
                    self.close(tmp, relpath, mode=mode)
                except CommitRefused as exc:  # nothing can be recorded without this object
                    raise DurableError(f"write {self.root / relpath}: {exc.reason}") from exc
                guarded = self._publish_new(tmp, relpath)
                self._last_write = time.monotonic()
        except FileExistsError as exc:
            raise self._shared(relpath) from exc
        if not guarded and self._read_back(relpath) != data:
            raise self._shared(relpath)

    def _publish_new(self, tmp: savefile.Staged, relpath: str) -> bool:
        """`publish` that never replaces: True when the filesystem guaranteed it."""
        if tmp.in_place:  # created exclusively under its final name
            tmp.keep()
            return True
        target = self.root / relpath
        try:
            try:
                return tmp.publish_new(os.fspath(target))
            except FileNotFoundError:
                os.makedirs(target.parent, mode=0o755, exist_ok=True)
                return tmp.publish_new(os.fspath(target))
        except FileExistsError:
            raise
        except OSError as exc:
            raise publish_error(relpath, target, exc) from exc

    def _read_back(self, relpath: str) -> bytes | None:
        try:
            return self.read_bytes(relpath)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise durable_error("read back", self.root / relpath, exc) from exc

    def _shared(self, relpath: str) -> SharedRoot:
        return SharedRoot(
            f"{self.root / relpath}: another process wrote this object between this writer's "
            f"check and its rename: two writers share the durable root {self.root}. Run one "
            "checkpoint writer per durable root; nothing was replaced, and the next pass "
            "continues after the other writer's manifest")

    def writes_in_place(self) -> bool:
        """Whether `put_bytes` writes under the final name (no rename on this mount).

        Runs the first-write preparation (the probe) so the answer is known.
        """
        self._writing()
        return not self.rename_supported

    def barrier(self) -> None:
        """Make everything published so far survive a power loss (local disks)."""
        self._writing()
        try:
            savefile.syncfs(self.root)
        except OSError as exc:
            raise durable_error("sync", self.root, exc) from exc

    def confirm(self) -> bool:
        """Whether everything this store closed is in the bucket: True at once where
        close is the upload; on a write-back mount, what the mount reports (waiting for
        it, bounded: `writeback.Uploads.confirm`); False where it cannot be asked."""
        if self.uploads is None:
            return True
        return self.uploads.confirm(self._last_write)

    def delete(self, relpath: str) -> bool:
        """Remove one object (gc only); prune directories it leaves empty.  False: gone."""
        self._writing()
        target = self.root / relpath
        try:
            os.unlink(target)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise durable_error("delete", target, exc) from exc
        parent = target.parent
        while parent != self.root and self.root in parent.parents:
            try:
                os.rmdir(parent)
            except OSError:  # not empty (or the mount keeps no directories): stop
                break
            parent = parent.parent
        return True

    def rename_new(self, relpath: str, new_relpath: str) -> None:
        """Move an object (or a legacy directory: migrate only) to a name that is free."""
        self._writing()
        try:
            savefile.rename_new(self.root / relpath, self.root / new_relpath)
        except OSError as exc:
            raise durable_error(f"rename to {new_relpath}", self.root / relpath, exc) from exc

    def sweep_staging(self) -> int:
        """Remove temp objects a killed run left behind."""
        self._writing()
        try:
            return savefile.sweep_staging(self._staging)
        except OSError as exc:
            raise durable_error("clean staging directory", self._staging, exc) from exc

    # -- reading --------------------------------------------------------
    def exists(self) -> bool:
        try:
            return stat.S_ISDIR(os.stat(self.root).st_mode)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise durable_error("stat", self.root, exc) from exc

    def stat(self, relpath: str) -> os.stat_result | None:
        """lstat of one object (verify, gc, migrate; never the periodic loop), or None."""
        try:
            return os.stat(self.root / relpath, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise durable_error("stat", self.root / relpath, exc) from exc

    def is_file(self, relpath: str) -> bool:
        """Whether a regular file is at `relpath` (restore only: one stat, no listing)."""
        st = self.stat(relpath)
        return st is not None and stat.S_ISREG(st.st_mode)

    def reader(self) -> DirCache:
        """A cache of directory descriptors for safe reads; close it when done."""
        return DirCache(self.root)

    def read_bytes(self, relpath: str, *, dirs: DirCache | None = None) -> bytes:
        """One object's bytes; pass `dirs` (from `reader()`) when reading several, so
        the directories on the way are opened once, not once per object."""
        if dirs is not None:
            fd = dirs.open_file(relpath)
        else:
            with self.reader() as own:
                fd = own.open_file(relpath)
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def listdir(self, reldir: str) -> list[str]:
        """Names in a durable directory ([] when it does not exist)."""
        path = self.root / reldir
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise durable_error("list", path, exc) from exc

    def walk(self, top: str = "") -> Iterator[tuple[str, os.stat_result]]:
        """Every file and symlink below the root (or `top`), without following links.

        Only for durable trees that have no manifest (the old rsync layout),
        verify and gc: the periodic checkpoint never calls this.  From the
        root, ``.syncengine/`` is skipped.
        """
        stack = [top]
        while stack:
            reldir = stack.pop()
            path = self.root / reldir if reldir else self.root
            try:
                entries = list(os.scandir(path))
            except FileNotFoundError:
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
                if stat.S_ISDIR(st.st_mode):
                    stack.append(rel)
                elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                    yield rel, st


def new_object_name(relpath: str) -> str:
    """A new, unique store name for a version of `relpath` (no-rename mounts).

    Each object is a leaf named by a random token in a directory named after
    the path, in a tree of its own: never a sibling of a published file, and
    never a string prefix of another object (hf-mount's phantom directories).
    """
    return f"{OBJECTS_DIR}/{relpath}/{os.urandom(8).hex()}"


def _create_object(path: Path, *, source_mode: int, replace: bool = True) -> savefile.Staged:
    try:
        return savefile.create_object(path, source_mode=source_mode, replace=replace)
    except FileNotFoundError:
        os.makedirs(path.parent, mode=0o755, exist_ok=True)
        return savefile.create_object(path, source_mode=source_mode, replace=replace)
