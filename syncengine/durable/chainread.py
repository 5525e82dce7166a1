"""Reading a resolved segment chain's bytes, and the log's plain copy.

Owns `read` (feed a chain's objects to a sink in order, each checked
against its hash, a torn unrecorded last object ignored), `plain_copy` and
`extend` (the plain copy where it extends the chain), and `export`.  Which
objects make up the chain is `syncengine.durable.chain`'s.

The log's plain copy (its own path in the durable tree: published whole by
segments.py, or left by the old rsync script, also after a rollback to it)
is used only where it *extends* the chain (`plain_copy`, `extend`): longer
than the chain's content, starting with exactly those bytes (their xxh3),
and ending at a complete line.  So a stale or torn plain copy (shorter, or
cut mid-line) never wins over the chain and restore never goes backwards;
a newer one (the old script ran after syncengine) adds what it has beyond.
Nothing here writes to the durable side; objects are read through the
`Store` (which never follows a symlink on the way).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import attrs
import xxhash

from syncengine.durable.chain import Chain, Piece, chain_dir, chain_of, load
from syncengine.durable.manifest import Entry
from syncengine.durable.store import ObjectInfo, Opened, Store
from syncengine.errors import DurableError, SourceError, UnsafePath, durable_error
from syncengine.fs.stream import stream

log = logging.getLogger("syncengine")


def read(
    chain: Chain, durable: Store, sink: Callable[[memoryview], object] | None
) -> tuple[Chain, int]:
    """Feed the log's bytes to `sink` in order; raise SourceError naming any bad object.

    Returns the chain as read (without an ignored torn last object) and the
    xxh3_64 of its whole content.  The manifest's hash is checked when the
    stream reaches the size it records, each newer object against its own
    hash: the caller may only keep what it wrote when this returns.
    """
    entry = chain.entry
    h = xxhash.xxh3_64()
    for i, piece in enumerate(chain.pieces):
        with _open_piece(durable, entry, piece) as obj:
            size = obj.info.size
            if size < piece.length and i == len(chain.pieces) - 1 and i >= chain.recorded:
                log.warning(
                    "segments.torn-ignored path=%s object=%s bytes=%d of %d: an "
                    "unrecorded last segment cut short (a killed publish); the log "
                    "ends before it",
                    entry.path,
                    piece.name,
                    size,
                    piece.length,
                    extra={"event": "segments.torn-ignored"},
                )
                return _trimmed(chain, i), h.intdigest()
            if size != piece.length:
                raise SourceError(
                    entry.path,
                    "restore",
                    f"segment {piece.name} has {size} bytes, its range says "
                    f"{piece.length}: corrupt, refusing to restore",
                )
            own = xxhash.xxh3_64()

            def feed(chunk: memoryview, own: Any = own) -> None:
                own.update(chunk)
                if sink is not None:
                    sink(chunk)

            n, digest = stream(
                obj.file,
                piece.length,
                feed,
                src_name=durable.where(piece.name),
                dst_name=entry.path,
                hasher=h,
            )
        _check_piece(entry, piece, n, own.intdigest(), digest if i == chain.recorded - 1 else None)
    return chain, h.intdigest()


def _check_piece(entry: Entry, piece: Piece, n: int, own: int, prefix: int | None) -> None:
    """Refuse a piece read short or whose hash differs from its name; `prefix`: the hash
    of the log up to the end of the last piece the manifest records, checked against it."""
    if n != piece.length:
        raise SourceError(entry.path, "restore", f"segment {piece.name} is short")
    if piece.hash64 is not None and own != piece.hash64:
        raise SourceError(
            entry.path,
            "restore",
            f"segment {piece.name}: content hash "
            "differs from its name: corrupt, refusing to restore",
        )
    if prefix is not None and entry.hash is not None and prefix != entry.hash:
        raise SourceError(
            entry.path,
            "restore",
            f"content hash differs from the manifest: a segment of "
            f"{chain_dir(entry.path, chain_of(entry)[0])} is corrupt; "
            "refusing to restore",
        )


@contextmanager
def _open_piece(durable: Store, entry: Entry, piece: Piece) -> Iterator[Opened]:
    try:
        with durable.open(piece.name) as obj:
            yield obj
    except FileNotFoundError as exc:
        raise SourceError(
            entry.path,
            "restore",
            f"segment {piece.name} is missing: refusing to restore a shorter file",
        ) from exc


def plain_copy(durable: Store, entry: Entry, chain_size: int) -> ObjectInfo | None:
    """The log's plain copy when it is longer than the chain (only then can it add to
    it), else None.  A plain copy that cannot be read is the chain's loss only."""
    try:
        with durable.open(entry.path) as obj:
            info = obj.info
    except UnsafePath:
        raise
    except (OSError, DurableError) as exc:
        if not isinstance(exc, FileNotFoundError):
            log.warning(
                "segments.plain-unreadable path=%s error=%s: restored from its chain",
                entry.path,
                exc,
                extra={"event": "segments.plain-unreadable"},
            )
        return None
    return info if info.kind == "file" and info.size > chain_size else None


def extend(
    durable: Store,
    entry: Entry,
    chain_size: int,
    chain_hash: int,
    sink: Callable[[memoryview], object],
) -> tuple[int, int, int] | None:
    """Feed `sink` what the plain copy holds after the chain's `chain_size` bytes, if it
    extends the chain (module doc); return (its size, its mtime_ns, the xxh3 of it whole),
    or None with nothing fed."""
    name = durable.where(entry.path)
    try:
        with durable.open(entry.path) as obj:
            return _extend(obj, name, entry, chain_size, chain_hash, sink)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise durable_error("read", name, exc) from exc


def _extend(
    obj: Opened,
    name: str,
    entry: Entry,
    chain_size: int,
    chain_hash: int,
    sink: Callable[[memoryview], object],
) -> tuple[int, int, int] | None:
    size, f = obj.info.size, obj.file
    if size <= chain_size:
        return None
    why = None
    f.seek(size - 1)
    if f.read(1) != b"\n":
        why = "does not end at a complete line (torn?)"
    else:
        f.seek(0)
        h = xxhash.xxh3_64()
        n, digest = stream(f, chain_size, None, src_name=name, hasher=h)
        if n != chain_size or digest != chain_hash:
            why = "does not start with the chain's content"
    if why is not None:
        log.warning(
            "segments.plain-ignored path=%s: the plain copy (%d bytes) is longer "
            "than the chain (%d) but %s; restored from the chain",
            entry.path,
            size,
            chain_size,
            why,
            extra={"event": "segments.plain-ignored"},
        )
        return None
    n, digest = stream(f, size - chain_size, sink, src_name=name, dst_name=entry.path, hasher=h)
    if n != size - chain_size:
        raise SourceError(
            entry.path, "restore", f"the plain copy {name} changed while it was read: restore again"
        )
    log.info(
        "segments.plain-newer path=%s bytes=%d: the plain copy extends the chain (%d "
        "bytes); restored with its %d more",
        entry.path,
        size,
        chain_size,
        size - chain_size,
        extra={"event": "segments.plain-newer"},
    )
    return size, obj.info.mtime_ns, digest


def _trimmed(chain: Chain, n: int) -> Chain:
    return attrs.evolve(chain, pieces=chain.pieces[:n])


def export(store: Store, entry: Entry, out: BinaryIO) -> int:
    """Write the durable content of one entry (a log or a plain file) to `out`, verified.

    The bytes go through a local temp file first, so nothing reaches `out`
    unless the whole content checked out.  Returns the number of bytes.
    """
    import shutil  # export only
    import tempfile

    with tempfile.TemporaryFile() as tmp, store.batch():
        if entry.kind == "segments":
            resolved, h = read(load(store, entry), store, tmp.write)
            extend(store, entry, resolved.size, h, tmp.write)
        elif entry.kind == "file":
            try:
                with store.open(entry.location) as obj:
                    n, digest = stream(
                        obj.file, None, tmp.write, src_name=entry.location, dst_name="export"
                    )
            except FileNotFoundError as exc:
                raise SourceError(
                    entry.path, "export", f"{entry.location} is missing on the durable side"
                ) from exc
            if entry.hash is not None and (digest != entry.hash or n != entry.size):
                raise SourceError(
                    entry.path,
                    "export",
                    "the durable file differs from the manifest (corrupt or newer)",
                )
        else:
            raise SourceError(entry.path, "export", f"a {entry.kind} entry is not a file")
        size = tmp.tell()
        tmp.seek(0)
        shutil.copyfileobj(tmp, out, 1 << 20)
    return size
