"""The streaming sealed format: any file sealed in 64 KiB chunks, never held whole.

Owns `Sealer` (a sink that seals what it is fed, chunk by chunk, into another
sink), `opener` (a readable of a sealed object's plaintext, either format:
version 1 is `syncengine.crypt.sealed`'s whole object, version 2 this one)
and `sealed_size`.  A version 2 object is a 29-byte header, then chunks:

    "SYNCSEAL" (8) | version 2 (1) | key fingerprint (8) | prefix (8) | chunk size (4, BE)
    chunk i: AES-256-GCM(plaintext[i], nonce = prefix | i (4 bytes, BE)) + 16-byte tag

Every chunk but the last holds exactly `CHUNK` plaintext bytes; the last
holds fewer (zero when the size is a multiple of `CHUNK`).  The prefix is 8
fresh random bytes per object; the counter in the nonce catches reordered
chunks, and the associated data of each chunk (header, a last-chunk flag,
``ADAPTER/PATH``) catches a swap with another object, a chunk cut off at a
boundary (the last full chunk then fails as not-last, or an empty read finds
no last chunk) and anything appended after the last.  Nothing is returned
from a chunk before its tag verified.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable
from typing import Any, BinaryIO

from syncengine.crypt.keys import FINGERPRINT_BYTES, Key, Keyring
from syncengine.crypt.sealed import (
    MAGIC,
    TAG_BYTES,
    SealError,
    _aesgcm,
    key_for,
    unseal,
)
from syncengine.crypt.secrets import Secrets, sealed_with

VERSION = 2
CHUNK = 64 << 10
PREFIX_BYTES = 8
MAX_CHUNKS = 1 << 32
_FIXED = len(MAGIC) + 1 + FINGERPRINT_BYTES  # magic, version, fingerprint: both versions
HEADER2_BYTES = _FIXED + PREFIX_BYTES + 4
_REDO = "checkpoint the file again from a machine that has it"


def sealed_size(plain: int) -> int:
    """The size of a version 2 object holding `plain` bytes."""
    return HEADER2_BYTES + plain + TAG_BYTES * (plain // CHUNK + 1)


def _aad(header: bytes, last: bool, name: bytes) -> bytes:
    return header + (b"\1" if last else b"\0") + name


class Sealer:
    """Feed plaintext with `write`, then `end`: the sealed object goes to `sink`."""

    def __init__(self, key: Key, name: str, sink: Callable[[memoryview], object]) -> None:
        self.fingerprint = key.fingerprint
        self._aead = _aesgcm()(key.raw)
        self._prefix = os.urandom(PREFIX_BYTES)
        self._header = MAGIC + bytes([VERSION]) + key.fp + self._prefix + struct.pack(">I", CHUNK)
        self._name = name.encode()
        self._sink = sink
        self._buf = bytearray()
        self._count = 0
        sink(memoryview(self._header))

    def _chunk(self, data: bytes | bytearray | memoryview, last: bool) -> None:
        if self._count >= MAX_CHUNKS:
            raise ValueError("too large to seal (2**32 chunks)")
        nonce = self._prefix + struct.pack(">I", self._count)
        self._count += 1
        out = self._aead.encrypt(nonce, bytes(data), _aad(self._header, last, self._name))
        self._sink(memoryview(out))

    def write(self, data: memoryview | bytes) -> None:
        self._buf += data
        start = 0
        with memoryview(self._buf) as view:
            while len(view) - start > CHUNK:  # a full chunk is flushed once more follows
                self._chunk(view[start : start + CHUNK], False)
                start += CHUNK
        del self._buf[:start]

    def end(self) -> None:
        if len(self._buf) == CHUNK:
            self._chunk(self._buf, False)
            self._buf.clear()
        self._chunk(self._buf, True)
        self._buf.clear()


def seal_bytes(key: Key, plaintext: bytes, name: str) -> bytes:
    """`plaintext` as one version 2 object (tests, small files)."""
    parts: list[bytes] = []
    sealer = Sealer(key, name, lambda view: parts.append(bytes(view)))
    sealer.write(plaintext)
    sealer.end()
    return b"".join(parts)


def _read_exact(src: BinaryIO | Any, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        part = src.read(n - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


class _Opened(io.RawIOBase):
    """The plaintext of a version 2 object, one verified chunk at a time."""

    def __init__(self, keys: Keyring | None, src: Any, header: bytes, name: str) -> None:
        self._src = src
        self._header = header
        self._name = name.encode()
        self._aead = _aesgcm()(key_for(keys, header[len(MAGIC) + 1 : _FIXED]).raw)
        self._prefix = header[_FIXED : _FIXED + PREFIX_BYTES]
        (self._size,) = struct.unpack(">I", header[_FIXED + PREFIX_BYTES :])
        self._count = 0
        self._plain = memoryview(b"")
        self._done = False

    def readable(self) -> bool:
        return True

    def _next(self) -> None:
        from cryptography.exceptions import InvalidTag

        data = _read_exact(self._src, self._size + TAG_BYTES)
        last = len(data) < self._size + TAG_BYTES
        if last and len(data) < TAG_BYTES:
            raise SealError("the sealed object is truncated (no last chunk)", _REDO)
        nonce = self._prefix + struct.pack(">I", self._count)
        self._count += 1
        try:
            plain = self._aead.decrypt(nonce, data, _aad(self._header, last, self._name))
        except InvalidTag:
            raise SealError(
                "the sealed object fails authentication (tampered, truncated, reordered, "
                "or moved from another path)",
                _REDO,
            ) from None
        self._plain, self._done = memoryview(plain), last

    def readinto(self, buffer: Any) -> int:
        while not self._plain and not self._done:
            self._next()
        n = min(len(buffer), len(self._plain))
        buffer[:n] = self._plain[:n]
        self._plain = self._plain[n:]
        return n


def opener(keys: Keyring | None, src: Any, name: str) -> Any:
    """A readable of the plaintext of the sealed object read from `src` (either version),
    bound to `name`; raise `SealError` at once when it is not sealed or no key opens it
    (before any plaintext is returned), later when a chunk fails authentication."""
    head = _read_exact(src, _FIXED)
    if head[: len(MAGIC)] != MAGIC:
        raise SealError("not a sealed object", "the bucket copy was replaced; checkpoint again")
    version = head[len(MAGIC)] if len(head) > len(MAGIC) else 0
    if version == VERSION:
        header = head + _read_exact(src, HEADER2_BYTES - _FIXED)
        if len(header) < HEADER2_BYTES:
            raise SealError("the sealed object is truncated", _REDO)
        return io.BufferedReader(_Opened(keys, src, header, name), CHUNK)
    if len(head) >= _FIXED:
        key_for(keys, head[len(MAGIC) + 1 : _FIXED])  # the key's error before reading it all
    return io.BytesIO(unseal(keys, head + src.read(), name))  # version 1: small, whole


class _Joined(io.RawIOBase):
    """`head` (already read) then the rest of `file`."""

    def __init__(self, head: bytes, file: Any) -> None:
        self._head = memoryview(head)
        self._file = file

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return int(self._file.readinto(buffer) or 0)


def reader(file: Any, keys: Keyring | None, name: str, *, marked: bool) -> Any:
    """A readable of an object's plaintext: opened (`opener`) when it is `marked` sealed
    (its manifest says so) or starts as a sealed object, else the object as it is."""
    head = _read_exact(file, len(MAGIC))
    joined = io.BufferedReader(_Joined(head, file), CHUNK)
    if not marked and head != MAGIC:
        return joined
    return opener(keys, joined, name)


def of_entry(file: Any, secrets: Secrets | None, path: str, extra: Any) -> Any:
    """`reader` for the object of the manifest entry at `path` (its `extra` says whether
    it is sealed), opened with the adapter's keys, bound to ``ADAPTER/PATH``."""
    keys = secrets.keys if secrets is not None else None
    name = secrets.name(path) if secrets is not None else path
    return reader(file, keys, name, marked=bool(sealed_with(extra)))


__all__ = [
    "CHUNK",
    "HEADER2_BYTES",
    "SealError",
    "Sealer",
    "of_entry",
    "opener",
    "reader",
    "seal_bytes",
    "sealed_size",
]
