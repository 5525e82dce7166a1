"""Append-only logs (agent transcripts) stored as immutable complete-line segments.

Owns the durable layout of a log file and its chain state.  A log at live
path P is a *chain*: a base object (the whole file at some point, maybe
empty) followed by numbered segments, each holding the bytes [start, end) of
the file and ending at a newline.  Objects are closed once and never
rewritten::

    .syncengine/segments/<P>.d/<chain>/<seq:08d>-<start:012d>-<end:012d>.seg

``seq`` 0 is the base (start 0).  The manifest entry (kind ``segments``)
names the chain and the length of each object (``lens``); the names follow
from it, so restore proves there is no gap (each start is the previous end,
each object has exactly its length) and checks the xxh3_64 of the whole
reconstructed file before placing it.  A checkpoint reads the live file
from the start to check that the published prefix is unchanged (same inode,
not shorter, same hash), then publishes the complete lines after it as one
new segment; a trailing partial line waits, except in a final checkpoint.
Anything but a pure append starts a new chain with a fresh base, as does
compaction (a chain longer than `MAX_SEGMENTS`, or idle for `IDLE_NS` with
more than one object).  Superseded chains stay for ``gc``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any, BinaryIO

import attrs
import xxhash

from syncengine.copier import Copied, _close, open_source, stream
from syncengine.errors import SourceError, durable_error
from syncengine.index import DIRTY, Index
from syncengine.manifest import Entry
from syncengine.safepath import DirCache, UnsafePath
from syncengine.store import META_DIR, Store

SEG_DIR = f"{META_DIR}/segments"
MAX_SEGMENTS = 256  # objects in a chain before it is compacted into a new base
IDLE_NS = 300 * 10**9  # a log unchanged this long with >1 object is compacted
LOCAL = "_local"  # index.extras key for local-only state (never in the manifest)
_TAIL_SCAN = 1 << 16


class Waiting(Exception):
    """Nothing publishable yet (no complete line in a new file, or it moved under us)."""


@attrs.frozen
class Logged(Copied):
    """What one log checkpoint did; `extra` is the chain state for index and manifest."""

    extra: dict[str, Any] = attrs.field(factory=dict)
    written: int = 0  # bytes written to the durable side
    why: str = ""


def chain_dir(relpath: str, chain: str) -> str:
    return f"{SEG_DIR}/{relpath}.d/{chain}"


def object_name(relpath: str, chain: str, seq: int, start: int, end: int) -> str:
    return f"{chain_dir(relpath, chain)}/{seq:08d}-{start:012d}-{end:012d}.seg"


def manifest_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """The part of the index's chain state that the manifest carries."""
    return {k: v for k, v in extra.items() if k != LOCAL}


def _sig(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _last_newline_end(fd: int, start: int, size: int) -> int:
    """Offset just past the last b"\\n" in [start, size), or `start` if there is none."""
    pos = size
    while pos > start:
        n = min(_TAIL_SCAN, pos - start)
        data = os.pread(fd, n, pos - n)
        if len(data) < n:
            raise Waiting("shrank while reading")
        i = data.rfind(b"\n")
        if i >= 0:
            return pos - n + i + 1
        pos -= n
    return start


def publish(store: Store, live_root: str, relpath: str, index: Index, *, final: bool,
            compact: bool) -> Logged:
    """Checkpoint one log: a new segment, a new chain, or nothing (see module doc)."""
    src = f"{live_root}/{relpath}"
    fd, st = open_source(src)
    try:
        return _publish(store, fd, st, src, relpath, index, final=final, compact=compact)
    except OSError as exc:
        raise SourceError(relpath, "read", exc.strerror or str(exc)) from exc
    finally:
        os.close(fd)


def _publish(store: Store, fd: int, st: os.stat_result, src: str, relpath: str, index: Index,
             *, final: bool, compact: bool) -> Logged:
    rec = index.get(relpath)
    old = index.extras.get(relpath, {}) if rec is not None and rec.kind == "segments" else {}
    lens: list[int] = list(old.get("lens", ()))
    chain = str(old.get("chain", ""))
    covered = sum(lens)
    h = xxhash.xxh3_64()
    why = ""
    if not lens or not chain or rec is None:
        why = "new chain"
    elif old.get(LOCAL, {}).get("ino") not in (None, st.st_ino):
        why = "replaced"
    elif st.st_size < covered:
        why = "shrank"
    else:
        os.lseek(fd, 0, os.SEEK_SET)
        n, digest = stream(fd, covered, None, src_name=src, hasher=h)
        if n != covered:
            why = "shrank"
        elif digest != rec.hash64:
            why = "rewritten"
    if not why and (len(lens) >= MAX_SEGMENTS or (compact and len(lens) > 1)):
        why = "compact"
    start = 0 if why else covered
    cut = st.st_size if final else _last_newline_end(fd, start, st.st_size)
    if why:
        if cut == 0 and st.st_size > 0:
            raise Waiting("no complete line yet")
        number = int(chain.split("-")[0]) + 1 if chain[:1].isdigit() else 1
        chain = f"{number:06d}-{os.urandom(4).hex()}"
        lens = []
        h = xxhash.xxh3_64()
    elif cut == covered:  # nothing new (a partial line may be waiting)
        extra = dict(old)
        extra[LOCAL] = {"ino": st.st_ino}
        return Logged(False, covered, rec.hash64 if rec else 0, st.st_mode, st.st_mtime_ns,
                      _sig(st), raced=False, extra=extra)
    name = object_name(relpath, chain, len(lens), start, cut)
    os.lseek(fd, start, os.SEEK_SET)
    with store.staged(st.st_mode, name, unique=True) as tmp:
        n, digest = stream(fd, cut - start, tmp.write, src_name=src,
                           dst_name=f"{store.root}/{name}", hasher=h)
        if n != cut - start:
            raise Waiting("shrank while reading")
        _close(tmp, st, store, name)
        store.publish(tmp, name)
    after = os.fstat(fd)
    lens.append(cut - start)
    extra = {"chain": chain, "lens": lens, LOCAL: {"ino": st.st_ino}}
    return Logged(True, cut, digest, st.st_mode, st.st_mtime_ns, _sig(st),
                  raced=_sig(after) != _sig(st) or after.st_ino != st.st_ino, extra=extra,
                  written=cut - start, why=why or "append")


def idle_chains(index: Index, now_ns: int) -> frozenset[str]:
    """Logs with more than one object whose file has not changed for `IDLE_NS`."""
    out = set()
    for path, extra in index.extras.items():
        if len(extra.get("lens", ())) > 1:
            rec = index.get(path)
            if (rec is not None and rec.kind == "segments" and not rec.absent
                    and rec.mtime_ns < now_ns - IDLE_NS):
                out.add(path)
    return frozenset(out)


def _chain_of(entry: Entry) -> tuple[str, list[int]]:
    chain = entry.extra.get("chain")
    lens = entry.extra.get("lens")
    if (not isinstance(chain, str) or "/" in chain or chain in ("", ".", "..")
            or not isinstance(lens, list) or not lens
            or not all(isinstance(n, int) and n >= 0 for n in lens)):
        raise SourceError(entry.path, "restore", "manifest entry has no valid segment chain")
    return chain, lens


def complete_lines_end(fd: int, size: int) -> int:
    """Length of the complete lines among the first `size` bytes of an open file."""
    return _last_newline_end(fd, 0, size)


def chain_objects(entry: Entry) -> list[tuple[str, int]]:
    """(object name, length) of every object of a log's chain, in order (verify, gc)."""
    chain, lens = _chain_of(entry)
    out = []
    pos = 0
    for seq, length in enumerate(lens):
        out.append((object_name(entry.path, chain, seq, pos, pos + length), length))
        pos += length
    return out


def reconstruct(entry: Entry, durable: DirCache, sink: Callable[[memoryview], object] | None
                ) -> int:
    """Feed the log's bytes to `sink` in order; raise SourceError naming any bad object.

    Returns the xxh3_64 of the content, already checked against the manifest:
    the caller may only keep what it wrote when this returns.
    """
    chain, lens = _chain_of(entry)
    h = xxhash.xxh3_64()
    pos = 0
    for seq, length in enumerate(lens):
        name = object_name(entry.path, chain, seq, pos, pos + length)
        try:
            fd = durable.open_file(name)
        except UnsafePath:
            raise
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise SourceError(entry.path, "restore",
                              f"segment {name} is missing: refusing to restore a shorter "
                              "file") from exc
        except OSError as exc:
            raise durable_error("open", f"{durable.root}/{name}", exc) from exc
        try:
            size = os.fstat(fd).st_size
            if size != length:
                raise SourceError(entry.path, "restore",
                                  f"segment {name} has {size} bytes, the manifest says "
                                  f"{length}: corrupt, refusing to restore")
            n, _ = stream(fd, length, sink, src_name=f"{durable.root}/{name}",
                          dst_name=entry.path, hasher=h)
            if n != length:
                raise SourceError(entry.path, "restore", f"segment {name} is short")
        finally:
            os.close(fd)
        pos += length
    digest = h.intdigest()
    if pos != entry.size:
        raise SourceError(entry.path, "restore",
                          f"segments cover {pos} bytes, the manifest says {entry.size}")
    if entry.hash is not None and digest != entry.hash:
        raise SourceError(entry.path, "restore",
                          f"content hash differs from the manifest: a segment of chain "
                          f"{chain_dir(entry.path, chain)} is corrupt; refusing to restore")
    return int(digest)


def seed(index: Index, entry: Entry, *, ino: int | None = None, size: int | None = None,
         mtime_ns: int | None = None, ctime_ns: int = DIRTY) -> None:
    """Record a durable chain in the index (after a restore, or for a kept local file)."""
    index.record(entry.path, size=entry.size if size is None else size,
                 mtime_ns=entry.mtime_ns if mtime_ns is None else mtime_ns, ctime_ns=ctime_ns,
                 hash64=entry.hash or 0, mode=entry.mode, kind="segments",
                 extra={**dict(entry.extra), LOCAL: {"ino": ino}})


def export(store: Store, entry: Entry, out: BinaryIO) -> int:
    """Write the durable content of one entry (a log or a plain file) to `out`, verified.

    The bytes go through a local temp file first, so nothing reaches `out`
    unless the whole content checked out.  Returns the number of bytes.
    """
    with tempfile.TemporaryFile() as tmp, store.reader() as durable:
        if entry.kind == "segments":
            reconstruct(entry, durable, tmp.write)
        elif entry.kind == "file":
            try:
                fd = durable.open_file(entry.location)
            except FileNotFoundError as exc:
                raise SourceError(entry.path, "export", f"{entry.location} is missing on the "
                                  "durable side") from exc
            try:
                n, digest = stream(fd, None, tmp.write, src_name=entry.location,
                                   dst_name="export")
            finally:
                os.close(fd)
            if entry.hash is not None and (digest != entry.hash or n != entry.size):
                raise SourceError(entry.path, "export", "the durable file differs from the "
                                  "manifest (corrupt or newer)")
        else:
            raise SourceError(entry.path, "export", f"a {entry.kind} entry is not a file")
        size = tmp.tell()
        tmp.seek(0)
        shutil.copyfileobj(tmp, out, 1 << 20)
    return size
