"""The POSIX implementation of the durable `Store` and its `Lifecycle` (a directory or a mount).

`PosixStore` is one adapter's durable directory: it publishes closed objects
(staged in a dedicated ``.syncengine/staging`` directory, then renamed into
place), opens objects for reading through a `DirCache` (never following a
symlink), lists directories, and walks the tree only for durable trees of the
old rsync layout.  Descriptors, stat results and paths stay in this package:
callers get the plain values of `syncengine.durable.store`.

Where the mount cannot rename (the probe says so: `configure`), a new version
is written once under a new, unique name in ``.syncengine/objects/<path>/``
and the writer reports that name (`ObjectWriter.object`): the caller records
it as the manifest entry's ``object``, so the previous version stays
authoritative until the manifest naming the new one is complete.  Manifest
objects, already uniquely named, are then written directly under their final
name.  Where attributes set on an open handle are lost at close, mode and
mtime are set by name after close.  The fallbacks live here only: callers do
not branch on them.  Errors become `DurableError` here, with the operation
and the path.

On a write-back mount (writeback.py: close returns before the bucket has the
object), `confirm` asks the mount, through the `Uploads` the engine gives
`configure`, whether everything closed so far reached the bucket.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from syncengine.durable.lifecycle import Target, Uploads
from syncengine.durable.posix.reading import PosixReader
from syncengine.durable.store import (
    MANIFEST_DIR,
    META_DIR,
    OBJECTS_DIR,
    STAGING_DIR,
)
from syncengine.errors import (
    CommitRefused,
    DurableError,
    NameTaken,
    SharedRoot,
    commit_error,
    durable_error,
    publish_error,
)
from syncengine.fs import savefile

__all__ = [
    "MANIFEST_DIR",
    "META_DIR",
    "OBJECTS_DIR",
    "STAGING_DIR",
    "PosixStore",
    "Store",
    "new_object_name",
    "rename_new",
]


class PosixStore(PosixReader):
    """One adapter's durable directory (a local path or a FUSE mount): implements `Store`
    and, from the mount probe (`configure`), `Lifecycle`."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__(root)
        self._staging = self.root / STAGING_DIR
        self._staging_ready = False
        self.rename_supported = True
        self.attrs_after_close = False
        self._keeps_mtime = False  # an object's mtime is the one given at close
        self.uploads: Uploads | None = None  # None: close is the upload (no write-back)
        self._last_write = 0.0  # time.monotonic() of the last object closed or renamed
        self._before_write: Callable[[], None] | None = None

    def configure(self, target: Target) -> None:
        """Adopt what the mount probe found (see syncengine.durable.posix.probe)."""
        self.rename_supported = target.rename_supported
        self.attrs_after_close = target.attrs_after_close
        self._keeps_mtime = target.keeps_mtime
        self.uploads = target.uploads

    @property
    def keeps_mtime(self) -> bool:
        return self._keeps_mtime

    @property
    def instance(self) -> str:
        """The write-back mount instance objects are recorded under ("" without one)."""
        return self.uploads.instance if self.uploads is not None else ""

    def describe(self) -> str:
        return str(self.root)

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
        return f"PosixStore({str(self.root)!r})"

    # -- writing --------------------------------------------------------
    def _ensure_staging(self) -> None:
        if not self._staging_ready:
            try:
                os.makedirs(self._staging, mode=0o700, exist_ok=True)
            except OSError as exc:
                raise durable_error("create staging directory", self._staging, exc) from exc
            self._staging_ready = True

    @contextmanager
    def _staged(
        self,
        source_mode: int = 0o600,
        relpath: str | None = None,
        *,
        unique: bool = False,
        exclusive: bool = False,
    ) -> Iterator[savefile.Staged]:
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
            try:
                tmp = create(source_mode=source_mode)
            except FileNotFoundError:  # a new mount instance lost it (a write-back mount)
                if where != self._staging:
                    raise
                self._staging_ready = False
                self._ensure_staging()
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

    @contextmanager
    def writer(
        self,
        key: str,
        *,
        mode: int,
        mtime_ns: int | None = None,
        unique: bool = False,
        sync: bool = False,
    ) -> Iterator[_Writer]:
        """One new object for `key`, committed on a clean exit (the `Store` contract).

        Staged and renamed into place, or, without rename, written once under a
        unique name (`unique`: `key` is one already), which `object` reports.
        `sync`: fsync before it becomes visible (the journal).
        """
        with self._staged(mode, key, unique=unique) as tmp:
            out = _Writer(tmp)
            yield out
            self._close(tmp, key, mode=mode, mtime_ns=mtime_ns, sync=sync)
            out.object = self._publish(tmp, key)

    def _close(
        self,
        tmp: savefile.Staged,
        relpath: str | None = None,
        *,
        mode: int | None = None,
        mtime_ns: int | None = None,
        sync: bool = False,
    ) -> None:
        """Close (= commit on a mount) the new object for `relpath`, with mode and mtime.

        An error at close means the object was not written; `_staged` then
        discards it and the previous version stays.  Raises `CommitRefused`
        (the mount refused this object: that path's error, the run goes on) or
        `DurableError` (the mount is gone, read-only or full: the run stops).
        """
        try:
            tmp.close(mode=mode, mtime_ns=mtime_ns, fsync=sync)
            self._last_write = time.monotonic()
            if self.attrs_after_close:
                tmp.set_attrs(mode=mode, mtime_ns=mtime_ns)
        except OSError as exc:
            target = self.root / relpath if relpath else tmp.name
            raise commit_error(relpath or tmp.name, target, exc) from exc

    def _publish(self, tmp: savefile.Staged, relpath: str) -> str | None:
        """Make a closed object the new version of `relpath`.

        Returns None when it was renamed to `relpath` itself, or the store
        name of the unique object written instead (record it in the manifest).
        """
        if tmp.in_place:
            tmp.keep()
            return os.path.relpath(tmp.name, self.root)
        target = f"{self._root_str}/{relpath}"  # a string: this runs once per object
        try:
            try:
                tmp.publish(target)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                tmp.publish(target)
        except OSError as exc:
            raise publish_error(relpath, target, exc) from exc
        self._last_write = time.monotonic()  # a mount may queue the upload under the new name
        return None

    def put_bytes(self, relpath: str, data: bytes, *, if_absent: bool, mode: int = 0o644) -> bool:
        """Publish `data` as one closed object at `relpath`; with `if_absent`, a name used
        once (manifests, the lease), and True when the rename refused any replace itself.
        An object already there is never replaced.  Found by the lookup first:
        `NameTaken` (this writer is behind the durable side).  Appearing after
        that lookup: `SharedRoot`, another process writes to this root; the
        rename refuses to replace it (``RENAME_NOREPLACE``; an exclusive create
        where the mount cannot rename), or, where the mount cannot refuse, the
        object read back right after the rename is not ours.
        """
        if not if_absent:
            with self.writer(relpath, mode=mode) as w:
                w.write(data)
            return False
        if self.head(relpath) is not None:
            raise NameTaken(
                f"write {self.root / relpath}: an object of that name already "
                "exists, and this name is written once"
            )
        try:
            with self._staged(mode, relpath, unique=True, exclusive=True) as tmp:
                try:
                    tmp.write(data)
                except OSError as exc:
                    raise durable_error("write", self.root / relpath, exc) from exc
                try:
                    self._close(tmp, relpath, mode=mode)
                except CommitRefused as exc:  # nothing can be recorded without this object
                    raise DurableError(f"write {self.root / relpath}: {exc.reason}") from exc
                guarded = self._publish_new(tmp, relpath)
                self._last_write = time.monotonic()
        except FileExistsError as exc:
            raise self._shared(relpath) from exc
        if not guarded and self._read_back(relpath) != data:
            raise self._shared(relpath)
        return guarded

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

    def _shared(self, relpath: str) -> SharedRoot:
        return SharedRoot(
            f"{self.root / relpath}: another process wrote this object between this writer's "
            f"check and its rename: two writers share the durable root {self.root}. Run one "
            "checkpoint writer per durable root; nothing was replaced, and the next pass "
            "continues after the other writer's manifest"
        )

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


class _Writer:
    """What `PosixStore.writer` yields: the staged object's `write`, and where it went."""

    def __init__(self, tmp: savefile.Staged) -> None:
        self._tmp = tmp
        self.object: str | None = None

    def write(self, data: bytes | memoryview) -> None:
        self._tmp.write(data)


Store = PosixStore  # the name tests and embedders constructed before the Protocol


def rename_new(root: Path, relpath: str, new_relpath: str) -> None:
    """Rename within a durable directory to a name that is free (migrate's old layout)."""
    PosixStore(root).rename_new(relpath, new_relpath)


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
