"""An in-memory `Store` that behaves like an object store, for the engine's tests.

`MemoryBucket` holds objects by full key; `MemoryBucket.store(root)` is the
`syncengine.durable.store.Store` of one durable directory in it, so several
stores of the same root (the engine makes one per command) see the same
objects.  It has what an S3 backend has and nothing more: a write is buffered
and becomes visible whole at commit, replacing the object at its key (a single
PUT); put-if-absent; reads whole or by range; HEAD; LIST by prefix; DELETE.
No rename, no links, no directories (a prefix of an object only), no
descriptors, no staging.  An object keeps the mtime given at commit (as rclone
and S3 backends keep it in metadata).

It lives in tests/, not in the package: nothing deploys it, and the engine
takes a store factory (``Engine(config, stores=...)``), so the tests can hand
it in without a configuration key that users would see.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import attrs

from syncengine.durable.lifecycle import AtomicPutStore, DurableStore
from syncengine.durable.store import META_DIR, ObjectInfo, Opened
from syncengine.errors import NameTaken


@attrs.frozen
class _Object:
    data: bytes
    mtime_ns: int
    mode: int


class MemoryBucket:
    """Objects by full key ("<root>/<key>"), shared by the stores made from it."""

    def __init__(self) -> None:
        self.objects: dict[str, _Object] = {}
        self.lock = threading.Lock()
        self.puts = 0  # writes committed (tests assert an idle pass makes none)
        self.gets = 0  # objects opened or read

    def store(self, root: str | Path) -> MemoryStore:
        return MemoryStore(self, root)


class _Writer:
    def __init__(self) -> None:
        self.buffer = io.BytesIO()
        self.object: str | None = None  # always at its key: a PUT replaces in place

    def write(self, data: bytes | memoryview) -> None:
        self.buffer.write(data)


class MemoryStore(AtomicPutStore):
    """One durable directory in a `MemoryBucket` (implements `Store` and `Lifecycle`)."""

    def __init__(self, bucket: MemoryBucket, root: str | Path) -> None:
        self.bucket = bucket
        self.root = str(root).rstrip("/")
        self._before_write: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"MemoryStore({self.root!r})"

    def _full(self, key: str) -> str:
        return f"{self.root}/{key}"

    def describe(self) -> str:
        return f"memory:{self.root}"

    def where(self, key: str) -> str:
        return f"memory:{self._full(key)}"

    def exists(self) -> bool:
        prefix = self.root + "/"
        with self.bucket.lock:
            return any(k.startswith(prefix) for k in self.bucket.objects)

    # -- writing ---------------------------------------------------------
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
        self._writing()
        out = _Writer()
        yield out  # an exception here: nothing was put
        self._put(key, out.buffer.getvalue(), mode, mtime_ns)

    def _put(self, key: str, data: bytes, mode: int, mtime_ns: int | None) -> None:
        obj = _Object(data, time.time_ns() if mtime_ns is None else mtime_ns, mode & 0o7777)
        with self.bucket.lock:
            self.bucket.objects[self._full(key)] = obj
            self.bucket.puts += 1

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool, mode: int = 0o644) -> bool:
        self._writing()
        with self.bucket.lock:  # If-None-Match: *, atomically
            if if_absent and self._full(key) in self.bucket.objects:
                raise NameTaken(
                    f"write {self.where(key)}: an object of that name already "
                    "exists, and this name is written once"
                )
            self.bucket.objects[self._full(key)] = _Object(data, time.time_ns(), mode & 0o7777)
            self.bucket.puts += 1
        return if_absent

    def delete(self, key: str) -> bool:
        self._writing()
        with self.bucket.lock:
            return self.bucket.objects.pop(self._full(key), None) is not None

    def sweep_staging(self) -> int:
        self._writing()
        return 0

    # -- reading ---------------------------------------------------------
    def batch(self) -> AbstractContextManager[None]:
        return nullcontext()

    def _get(self, key: str) -> _Object:
        with self.bucket.lock:
            obj = self.bucket.objects.get(self._full(key))
            self.bucket.gets += 1
        if obj is None:
            raise FileNotFoundError(2, "no such object", self.where(key))
        return obj

    @contextmanager
    def open(self, key: str) -> Iterator[Opened]:
        obj = self._get(key)
        yield Opened(_info(key, obj), io.BytesIO(obj.data))

    def read_bytes(self, key: str) -> bytes:
        return self._get(key).data

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        return self._get(key).data[offset : offset + length]

    def head(self, key: str) -> ObjectInfo | None:
        full = self._full(key)
        with self.bucket.lock:
            obj = self.bucket.objects.get(full)
            is_prefix = obj is None and any(k.startswith(full + "/") for k in self.bucket.objects)
        if obj is not None:
            return _info(key, obj)
        return ObjectInfo(key, 0, 0, 0o755, "dir") if is_prefix else None

    def names(self, prefix: str) -> list[str]:
        start = self._full(prefix) + "/" if prefix else self.root + "/"
        with self.bucket.lock:
            keys = [k[len(start) :] for k in self.bucket.objects if k.startswith(start)]
        return sorted({k.split("/", 1)[0] for k in keys})

    def list(self, top: str = "") -> Iterator[ObjectInfo]:
        start = self._full(top) + "/" if top else self.root + "/"
        with self.bucket.lock:
            found = sorted((k, o) for k, o in self.bucket.objects.items() if k.startswith(start))
        for full, obj in found:
            key = full[len(self.root) + 1 :]
            if not top and (key.startswith(META_DIR + "/")):
                continue
            yield _info(key, obj)


def _info(key: str, obj: _Object) -> ObjectInfo:
    return ObjectInfo(key, len(obj.data), obj.mtime_ns, obj.mode, "file")


def _conforms(bucket: MemoryBucket) -> DurableStore:
    return bucket.store("")  # mypy: MemoryStore implements both Protocols
