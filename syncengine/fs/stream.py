"""Moving bytes: reading a live file safely, streaming it with its hash, copies in parallel.

Owns reading a source (``O_NOFOLLOW``, ``O_NONBLOCK`` so a FIFO that
appeared is never waited on, regular files only: `open_source`, `Vanished`,
`NotRegular`), the streaming copy with xxh3 hashing from a descriptor or a
durable object's stream into any sink (`stream`, `hash_file`, `link_hash`),
and running copies side by side with their results in order (`in_order`).
It knows neither tree: the checkpoint's upload (`syncengine.checkpoint.copier`),
restore, verify, export and chain reading all stream through it.
A sparse source is read by its data extents (`syncengine.fs.sparse`).
`OSError` on the source becomes `SourceError`; in the sink, `DurableError`.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Protocol, TypeVar

import xxhash

from syncengine.errors import durable_error, source_error
from syncengine.fs import sparse

CHUNK = 1 << 20
T = TypeVar("T")
R = TypeVar("R")
_SOURCE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_buffers = threading.local()  # one CHUNK buffer per thread: no 1 MiB allocation per file


class Readable(Protocol):
    """What `stream` reads besides a descriptor (a durable object's `Stream`)."""

    def readinto(self, buffer: memoryview, /) -> int | None: ...


class Vanished(Exception):
    """The source disappeared before it could be read: not an error (rsync exit 24)."""


class NotRegular(Exception):
    """The source is no longer a regular file (replaced by a FIFO, socket, directory)."""


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
    src: int | Readable,
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
    readinto = src.readinto if not isinstance(src, int) else sparse.reader(src)
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
