"""Publishing one live file to the store, checked against the writer that may be changing it.

Owns the upload of a live file (read through `syncengine.fs.stream`): a file
is copied up to the size seen when it was opened (a writer appending
meanwhile is taken again next pass); a file rewritten in place or truncated
during the copy is never published (the staged copy would mix old and new
bytes: it is discarded before the rename, the previous durable copy stays,
`Changed`); one that only grew or was touched is published but not recorded
as clean; a file whose content hash equals the published one is not copied
at all.  A file that starts with the SQLite header is refused when asked
(`SQLiteFile`: snapshot it instead).  `OSError` on the source becomes
`SourceError`; on the durable side, `DurableError`.  With `seal` (a key and the
``ADAPTER/PATH`` name) the bytes go through `syncengine.crypt.chunked.Sealer`
on their way: sealed in 64 KiB chunks, never held whole (docs/SECRETS.md).
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from syncengine.crypt.chunked import Sealer
from syncengine.crypt.keys import Key
from syncengine.durable.manifest import Entry
from syncengine.durable.store import Store
from syncengine.fs.stream import hash_file, open_source, stream
from syncengine.sqlite import files


class Changed(Exception):
    """The source changed while it was copied (rewritten in place, truncated): the staged
    copy was discarded, the previous durable copy stays, and the next pass takes it again."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


class SQLiteFile(Exception):
    """The source starts with the SQLite header: snapshot it, never copy it raw."""


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
    sealed: str | None = None  # a secret file: the fingerprint of the key it is sealed with


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


def sig(st: os.stat_result) -> tuple[int, int, int]:
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
    seal: tuple[Key, str] | None = None,
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
    fp = seal[0].fingerprint if seal is not None else None
    fd, st = open_source(src)
    try:
        if sniff_sqlite and st.st_size >= files.MIN_SIZE and files.starts_with_header(fd):
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
                    sig(st),
                    raced=sig(after) != sig(st),
                    sealed=fp,
                )
            os.lseek(fd, 0, os.SEEK_SET)
        # committed with the source's mode and mtime (CommitRefused: not written)
        with store.writer(dest, mode=st.st_mode, mtime_ns=st.st_mtime_ns) as out:
            sealer = Sealer(*seal, out.write) if seal is not None else None
            sink = sealer.write if sealer is not None else out.write
            size, h = stream(fd, st.st_size, sink, src_name=src, dst_name=store.where(dest))
            if sealer is not None:
                sealer.end()
            raced = _check_copy(fd, st, size, h, recent_ns, relpath=relpath, src=src)
        obj = out.object
    finally:
        os.close(fd)
    return Copied(
        True, size, h, st.st_mode, st.st_mtime_ns, sig(st), raced=raced, object=obj, sealed=fp
    )


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
    return sig(after) != sig(st)


def unwritten(st: os.stat_result, after: os.stat_result, recent_ns: int | None) -> bool:
    """Whether two stats of an open file prove that nothing was written between them.

    Only when size, mtime and ctime are equal and the last change (ctime, which
    no one can set) is older than `recent_ns`: a write in the same timestamp
    tick leaves them all equal.
    """
    return sig(after) == sig(st) and (recent_ns is None or st.st_ctime_ns < recent_ns)


__all__ = [
    "Changed",
    "Copied",
    "Published",
    "SQLiteFile",
    "sig",
    "unwritten",
    "upload",
]
