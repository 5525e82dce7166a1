"""Moving bytes: one file from a live tree to the store, or back, hashing as it goes.

Owns reading sources safely (``O_NOFOLLOW``, ``O_NONBLOCK`` so a FIFO that
appeared is never waited on, regular files only), the streaming copy with
xxh3 hashing, and the checks around it: a file is copied up to the size seen
when it was opened (a writer appending meanwhile is taken again next pass);
a file rewritten in place or truncated during the copy is never published (the
staged copy would mix old and new bytes: it is discarded before the rename,
the previous durable copy stays, `Changed`); one that only grew or was touched
is published but not recorded as clean; a file whose content hash equals the
published one is not copied at all.
`OSError` on the source becomes `SourceError`; on the durable side,
`DurableError`.
"""

from __future__ import annotations

import functools
import os
import stat
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

import attrs
import xxhash

from syncengine.durable.manifest import Entry
from syncengine.durable.store import Store, Stream
from syncengine.errors import DurableError, SourceError, durable_error, source_error

CHUNK = 1 << 20
T = TypeVar("T")
R = TypeVar("R")
_SOURCE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_buffers = threading.local()  # one CHUNK buffer per thread: no 1 MiB allocation per file


class Vanished(Exception):
    """The source disappeared before it could be read: not an error (rsync exit 24)."""


class NotRegular(Exception):
    """The source is no longer a regular file (replaced by a FIFO, socket, directory)."""


class Changed(Exception):
    """The source changed while it was copied (rewritten in place, truncated): the staged
    copy was discarded, the previous durable copy stays, and the next pass takes it again."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


class SQLiteFile(Exception):
    """The source starts with the SQLite header: snapshot it, never copy it raw."""


SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_MIN_SIZE = 512  # a SQLite database is at least one 512-byte page


def open_source(path: str) -> tuple[int, os.stat_result]:
    """Open a live file for reading; raise Vanished, NotRegular or SourceError."""
    try:
        fd = os.open(path, _SOURCE_FLAGS)
    except FileNotFoundError as exc:
        raise Vanished(path) from exc
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: it became a symlink
            raise NotRegular(path) from exc
        raise source_error("open", path, exc) from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegular(path)
    return fd, st


def stream(
    src: int | Stream,
    limit: int | None,
    sink: Callable[[memoryview], object] | None,
    *,
    src_name: str,
    dst_name: str = "",
    hasher: xxhash.xxh3_64 | None = None,
) -> tuple[int, int]:
    """Read up to `limit` bytes (None: to EOF) of a descriptor or a durable object's stream
    (`Store.open`), feed `sink`; return (bytes, xxh3_64).

    With `hasher`, the bytes extend that running hash (the digest returned is
    of everything it has seen).  `sink` must consume each view before it
    returns: the buffer is reused.
    """
    h = hasher if hasher is not None else xxhash.xxh3_64()
    size = CHUNK if limit is None else max(1, min(CHUNK, limit))
    view: memoryview | None = getattr(_buffers, "view", None)
    if view is None:
        view = _buffers.view = memoryview(bytearray(CHUNK))
    readinto = src.readinto if not isinstance(src, int) else functools.partial(_readv, src)
    total = 0
    while limit is None or total < limit:
        want = size if limit is None else min(size, limit - total)
        try:
            n = readinto(view[:want]) or 0
        except OSError as exc:
            raise source_error("read", src_name, exc) from exc
        if n == 0:
            break
        chunk = view[:n]
        h.update(chunk)
        if sink is not None:
            try:
                sink(chunk)
            except OSError as exc:
                raise durable_error("write", dst_name, exc) from exc
        total += n
    return total, h.intdigest()


def _readv(fd: int, view: memoryview) -> int:
    return os.readv(fd, [view])


def in_order(
    items: Sequence[T], work: Callable[[T], R], *, jobs: int, name: str
) -> Generator[tuple[T, R], None, None]:
    """`work` applied to each item, up to `jobs` at once, results yielded in item order.

    One item, or one job, runs inline (no thread).  Closing the generator early
    (a durable failure) cancels what has not started and waits for what has.
    """
    if len(items) <= 1 or jobs <= 1:
        for item in items:
            yield item, work(item)
        return
    from concurrent.futures import ThreadPoolExecutor  # only where copies overlap

    with ThreadPoolExecutor(max_workers=min(jobs, len(items)), thread_name_prefix=name) as pool:
        futures = [(item, pool.submit(work, item)) for item in items]
        try:
            for item, fut in futures:
                yield item, fut.result()
        finally:
            for _, fut in futures:
                fut.cancel()


def link_hash(target: str) -> int:
    """The hash recorded for a symlink: xxh3_64 of its target."""
    return int(xxhash.xxh3_64_intdigest(os.fsencode(target)))


def hash_file(fd: int, limit: int | None, *, name: str) -> int:
    """xxh3_64 of the first `limit` bytes of an open file (from offset 0)."""
    os.lseek(fd, 0, os.SEEK_SET)
    return stream(fd, limit, None, src_name=name)[1]


@attrs.frozen
class Copied:
    """What one upload did."""

    published: bool  # False: content equal to the published copy, nothing written
    size: int
    hash64: int
    mode: int
    mtime_ns: int
    stat_before: tuple[int, int, int]
    raced: bool  # the file changed while it was read: do not record it as clean
    object: str | None = None  # where the bytes went when not at the path (no-rename mounts)


@attrs.frozen
class Published:
    """An entry published by another route than a plain file copy (a SQLite snapshot).

    `copied` is the upload of its bytes (``published`` False: equal to the last
    published object); `sig` is the index signature (size, mtime_ns, ctime_ns)
    of the live source; `extra` is stored in ``index.extras``.
    """

    entry: Entry
    copied: Copied
    sig: tuple[int, int, int]
    extra: dict[str, Any]


def _sig(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


def upload(
    store: Store,
    live_root: str,
    relpath: str,
    *,
    known_hash: int | None,
    known_size: int | None,
    dest: str | None = None,
    sniff_sqlite: bool = False,
    recent_ns: int | None = None,
) -> Copied:
    """Publish one live file to the store unless its content is already there.

    `dest` names the object (default: `relpath`).  With `sniff_sqlite`, a file
    that starts with the SQLite header raises `SQLiteFile` instead (one small
    read of a file that changed anyway).  A file that changed while it was
    copied raises `Changed` before anything is renamed into place (see
    `_check_copy`; `recent_ns`: the time after which a change may share a
    timestamp tick with the copy, so the stat alone proves nothing).
    """
    src = f"{live_root}/{relpath}"
    dest = dest or relpath
    fd, st = open_source(src)
    try:
        if sniff_sqlite and st.st_size >= SQLITE_MIN_SIZE and _starts_with_header(fd):
            raise SQLiteFile(relpath)
        if known_hash is not None and known_size == st.st_size:
            if hash_file(fd, st.st_size, name=src) == known_hash:
                after = os.fstat(fd)
                return Copied(
                    False,
                    st.st_size,
                    known_hash,
                    st.st_mode,
                    st.st_mtime_ns,
                    _sig(st),
                    raced=_sig(after) != _sig(st),
                )
            os.lseek(fd, 0, os.SEEK_SET)
        # committed with the source's mode and mtime (CommitRefused: not written)
        with store.writer(dest, mode=st.st_mode, mtime_ns=st.st_mtime_ns) as out:
            size, h = stream(fd, st.st_size, out.write, src_name=src, dst_name=store.where(dest))
            raced = _check_copy(fd, st, size, h, recent_ns, relpath=relpath, src=src)
        obj = out.object
    finally:
        os.close(fd)
    return Copied(True, size, h, st.st_mode, st.st_mtime_ns, _sig(st), raced=raced, object=obj)


def _check_copy(
    fd: int,
    st: os.stat_result,
    size: int,
    digest: int,
    recent_ns: int | None,
    *,
    relpath: str,
    src: str,
) -> bool:
    """Whether the copy of `size` bytes (hash `digest`) is a content the file really held.

    Raise `Changed` when it is not (a writer overwrote part of the file in place
    or truncated it during the copy: the copy mixes old and new bytes).  Return
    True when the file moved on harmlessly (appended past the copy, touched):
    publish it, but do not record it as clean.  Unless the stats prove that
    nothing was written (`unwritten`), the copied range is read again and its
    hash compared (borg re-stats; this also catches the timestamp tick).
    """
    after = os.fstat(fd)
    if size != st.st_size or after.st_size < size:
        raise Changed(relpath, "truncated while it was copied")
    if unwritten(st, after, recent_ns):
        return False
    if hash_file(fd, size, name=src) != digest:
        raise Changed(relpath, "rewritten in place while it was copied")
    return _sig(after) != _sig(st)


def unwritten(st: os.stat_result, after: os.stat_result, recent_ns: int | None) -> bool:
    """Whether two stats of an open file prove that nothing was written between them.

    Only when size, mtime and ctime are equal and the last change (ctime, which
    no one can set) is older than `recent_ns`: a write in the same timestamp
    tick leaves them all equal.
    """
    return _sig(after) == _sig(st) and (recent_ns is None or st.st_ctime_ns < recent_ns)


def _starts_with_header(fd: int) -> bool:
    try:
        return os.pread(fd, len(SQLITE_HEADER), 0) == SQLITE_HEADER
    except OSError:
        return False  # the copy that follows reports the read error


__all__ = [
    "SQLITE_HEADER",
    "Changed",
    "Copied",
    "DurableError",
    "NotRegular",
    "Published",
    "SQLiteFile",
    "SourceError",
    "Vanished",
    "hash_file",
    "link_hash",
    "open_source",
    "stream",
    "unwritten",
    "upload",
]
