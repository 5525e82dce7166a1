"""The durable side as one small typed interface: `Store`.

Everything outside ``syncengine/durable/`` reaches the durable side only
through this Protocol; results are plain values (`ObjectInfo`, bytes, a
readable stream), never descriptors, stat results or paths.  Two
implementations: `syncengine.durable.posix.store.PosixStore` (a local
directory or a FUSE mount of a bucket) and ``tests/memstore.py``'s
`MemoryStore` (an object store in memory: no rename, no links, closed writes
only), which the engine's tests also run against.  An object-store backend
(S3: a single PUT replaces an object atomically, If-None-Match for
put-if-absent, GET with Range, HEAD, LIST, DELETE) maps onto it directly.

Keys are relative, ``/``-separated names (``.syncengine/manifest/...``, a live
path, ``.syncengine/segments/<path>.d/<chain>/<piece>``).  The contract:

Writing
  ``with store.writer(key, mode=, mtime_ns=) as w: w.write(b)`` writes one
  object.  On a clean exit it is committed: closed, then visible whole under
  `key`, or, where the backend cannot replace an object in place (a mount
  without rename), under a new unique name, which `w.object` then holds (the
  caller records it as the manifest entry's ``object``; None: under `key`).
  On an exception nothing becomes visible.  `unique`: `key` is a name used
  once already (segments, journal), so it may be written directly; `sync`:
  durable before it is visible (the journal's fsync).  Commit
  raises `CommitRefused` (this object refused: that path's error, the run
  goes on) or `DurableError` (the run stops).

  ``put_bytes(key, data, if_absent=True)`` (manifest objects) never replaces
  an object: one found first raises `NameTaken` (this writer is behind the
  durable side), one that appears meanwhile `SharedRoot` (two writers).

Reading
  ``with store.open(key) as o:`` gives `Opened`: its `ObjectInfo` and a
  seekable binary stream; `read_bytes`, `read_range` read whole or a range.
  A missing object raises `FileNotFoundError`; a key that would pass through
  a link `UnsafePath`; anything else `DurableError`.  Inside
  ``with store.batch():`` a backend may keep what makes many reads cheaper
  (the POSIX store keeps directory descriptors open, one open per directory
  on a mount where each is a round trip); outside it each call stands alone.

Listing
  `names(prefix)` lists one level below a directory-like prefix: names
  only, sorted (cheap: no per-object metadata on a mount).  `list(top)` is
  recursive, in no particular order: every object and link below `top`
  (from the root, the engine's own ``.syncengine/`` is skipped), links
  reported as ``kind="link"`` with their target as a plain string (None:
  it could not be read).  Links
  exist only in durable trees of the old rsync layout; the engine itself
  records links in manifest entries.  `head(key)` is one object's
  `ObjectInfo` (a directory-like prefix: ``kind="dir"``), or None.

Everything else
  `exists` (the directory holds anything yet), `delete`; `writes_in_place`
  (a commit lands under the key directly, so a killed one can leave a torn
  object: manifest objects record it for the readers that judge a differing
  copy); `describe`/`where` for messages.

This is the data interface and all a reader needs.  What the engine does
around the data (adopting the mount probe's findings, the lazy preparation
before the first write, barriers, confirming a write-back mount's uploads,
sweeping a killed run's temp objects) is a durable root's lifecycle, a
separate interface: `syncengine.durable.lifecycle`.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Literal, Protocol

import attrs

META_DIR = ".syncengine"
STAGING_DIR = f"{META_DIR}/staging"
MANIFEST_DIR = f"{META_DIR}/manifest"
OBJECTS_DIR = f"{META_DIR}/objects"

Kind = Literal["file", "dir", "link", "other"]


@attrs.frozen
class ObjectInfo:
    """One durable object (or, from `head`, a directory) as plain values."""

    key: str
    size: int
    mtime_ns: int
    mode: int  # permission bits (0o7777)
    kind: Kind = "file"
    target: str | None = None  # a link's target
    exact: bool = True  # False: mode and mtime are stand-ins (an S3 LIST); `head` has them


def with_metadata(store: Store, top: str = "") -> Iterator[ObjectInfo]:
    """`store.list(top)`, each object with its real mode and mtime: one `head` for each
    one the listing could not describe (`exact` False: an S3 LIST carries no user
    metadata).  For reading an old-layout tree, where nothing else records them."""
    for info in store.list(top):
        yield info if info.exact else (store.head(info.key) or info)


class Stream(Protocol):
    """A durable object's bytes, read from offset 0 (`io.FileIO`, `io.BytesIO`)."""

    def read(self, size: int = -1, /) -> bytes: ...

    def readinto(self, buffer: memoryview, /) -> int | None: ...

    def seek(self, offset: int, whence: int = 0, /) -> int: ...


@attrs.frozen
class Opened:
    """An object open for reading: what it is, and its bytes (seekable)."""

    info: ObjectInfo
    file: Stream


class ObjectWriter(Protocol):
    """What `Store.writer` yields."""

    object: str | None  # after commit: the unique name written instead of the key, or None

    def write(self, data: bytes | memoryview) -> None: ...


class Store(Protocol):
    """One adapter's durable directory (see the module docstring for the contract)."""

    def describe(self) -> str: ...

    def where(self, key: str) -> str: ...

    def exists(self) -> bool: ...

    # -- writing ---------------------------------------------------------
    def writer(
        self,
        key: str,
        *,
        mode: int,
        mtime_ns: int | None = None,
        unique: bool = False,
        sync: bool = False,
    ) -> AbstractContextManager[ObjectWriter]: ...

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool, mode: int = 0o644) -> bool:
        """With `if_absent`: True when the store itself refused any replace (S3's
        If-None-Match, ``RENAME_NOREPLACE``, an exclusive create), False when only a read
        back right after the write checked it (then a replace landing a moment later is
        possible: `lease.create_and_keep` reads once more).  False without `if_absent`."""
        ...

    def delete(self, key: str) -> bool: ...

    def writes_in_place(self) -> bool: ...

    # -- reading ---------------------------------------------------------
    def batch(self) -> AbstractContextManager[None]: ...

    def open(self, key: str) -> AbstractContextManager[Opened]: ...

    def read_bytes(self, key: str) -> bytes: ...

    def read_range(self, key: str, offset: int, length: int) -> bytes: ...

    def head(self, key: str) -> ObjectInfo | None: ...

    def names(self, prefix: str) -> builtins.list[str]: ...

    def list(self, top: str = "") -> Iterator[ObjectInfo]: ...


__all__ = [
    "MANIFEST_DIR",
    "META_DIR",
    "OBJECTS_DIR",
    "STAGING_DIR",
    "ObjectInfo",
    "ObjectWriter",
    "Opened",
    "Store",
    "Stream",
]
