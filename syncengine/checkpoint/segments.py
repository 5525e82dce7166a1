"""Append-only logs (agent transcripts) stored as immutable complete-line segments.

Owns publishing a log and its chain state in the index.  A log at live path
P is a *chain*: a base object (the whole file at some point, maybe empty)
followed by numbered segments, each holding the bytes [start, end) of the
file and ending at a newline, each named after its place in the chain and
its own hash (names, and reading a chain back: chain.py).  Objects are
closed once and never rewritten.

A checkpoint reads the live file from the start to check that the published
prefix is unchanged (same inode, not shorter, same hash), then publishes the
complete lines after it as one new segment; a trailing partial line waits,
except in a final checkpoint.  The new bytes are read twice (hashed, then
copied and compared), and the prefix is hashed again after them unless the
file's stat proves that nothing was written meanwhile: a beginning
overwritten in place while the segment was copied would otherwise pair the
old published beginning with bytes the new one came with, and a restore
before the next pass would bring back a file that never existed.  Such a
copy is discarded before it is closed (`Changed`); the next pass sees the
rewrite and starts a new chain.  Such an append needs no manifest object: the
segment's name places it (`record.manifest_entries` decides when a manifest object is
written, and then records the chain).  Anything but a pure append starts a
new chain with a fresh base, as does compaction (a chain longer than
`chainstate.MAX_SEGMENTS`, or idle for `chainstate.IDLE_NS` with more than one object); a new
chain is always recorded in the manifest.  Superseded chains stay for ``gc``.

The log's *plain copy*: so that anything reading the bucket directly (a
person, another tool, the old rsync script after a rollback) finds each
transcript whole at its plain durable path, the chain's whole content is
also published there, as one closed object renamed into place, when the log
has been quiet for ``plain_after`` seconds (`plain_wanted`), at compaction,
when its first chain replaces a plain copy (the path was a whole file), and
after a final checkpoint (in a phase of its own, once every log's new bytes
are durable and recorded: the engine runs it).  What the plain path holds is
recorded as `PLAIN` in the chain state (and so in the manifest): an idle log
whose plain copy is current costs nothing.  Restore reads the plain copy only
where it extends the chain (chain.py); on a mount without rename it is not
written (it could only be a unique object under ``objects/``, which nothing
reads).

The chain state in the index (``chain``, ``lens``, `PLAIN`, and local-only
state under `LOCAL`), and which logs are due for compaction or a plain copy,
are `syncengine.local.chainstate`'s.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import attrs
import xxhash

from syncengine.checkpoint.copier import Changed, Copied, unwritten
from syncengine.durable.chain import LOCAL, PLAIN, SEG_DIR, chain_dir, object_name
from syncengine.durable.store import Store
from syncengine.errors import SourceError
from syncengine.fs.stream import hash_file, open_source, stream
from syncengine.local.chainstate import MAX_SEGMENTS, local_state, plain_current
from syncengine.local.index import Index, Record

log = logging.getLogger("syncengine")
_TAIL_SCAN = 1 << 16


class Waiting(Exception):
    """Nothing publishable yet (no complete line in a new file, or it moved under us)."""


@attrs.frozen
class Logged(Copied):
    """What one log checkpoint did; `extra` is the chain state for index and manifest."""

    extra: dict[str, Any] = attrs.field(factory=dict)
    written: int = 0  # bytes written to the durable side
    why: str = ""  # "append", or why a new chain started ("plain": only the plain copy)
    plain_written: bool = False  # the whole log was published at its plain path

    @property
    def appended(self) -> bool:
        """One more segment on a chain already recorded: needs no manifest object."""
        return self.published and self.why == "append"


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


def publish(
    store: Store,
    live_root: str,
    relpath: str,
    index: Index,
    *,
    final: bool,
    compact: bool,
    recent_ns: int | None = None,
    plain: bool = False,
) -> Logged:
    """Checkpoint one log: a new segment, a new chain, or nothing (see module doc); with
    `plain`, then its whole content at its plain path unless that is current.

    `recent_ns`: the time after which a write may share a timestamp tick with
    this pass (`copier.unwritten`).  Raises `Changed` when the published prefix
    was rewritten in place while the new segment was copied.
    """
    src = f"{live_root}/{relpath}"
    fd, st = open_source(src)
    try:
        logged = _publish(
            store, fd, st, src, relpath, index, final=final, compact=compact, recent_ns=recent_ns
        )
        if plain and not plain_current(logged.extra, logged.hash64):
            try:
                logged = _publish_plain(store, fd, st, src, relpath, logged)
            except Waiting as exc:  # the chain's part stands; the plain copy waits
                log.debug(
                    "segments.plain-waiting path=%s (%s)",
                    relpath,
                    exc,
                    extra={"event": "segments.plain-waiting"},
                )
        return logged
    except OSError as exc:
        raise SourceError(relpath, "read", exc.strerror or str(exc)) from exc
    finally:
        os.close(fd)


def _publish(
    store: Store,
    fd: int,
    st: os.stat_result,
    src: str,
    relpath: str,
    index: Index,
    *,
    final: bool,
    compact: bool,
    recent_ns: int | None,
) -> Logged:
    rec = index.get(relpath)
    old = index.extras.get(relpath, {}) if rec is not None and rec.kind == "segments" else {}
    lens: list[int] = list(old.get("lens", ()))
    chain = str(old.get("chain", ""))
    local = local_state(old)
    covered = sum(lens)
    h = xxhash.xxh3_64()
    why = _new_chain_why(fd, st, src, rec, lens, chain, local, compact, h)
    start = 0 if why else covered
    cut = st.st_size if final else _last_newline_end(fd, start, st.st_size)
    recorded = int(local.get("recorded", len(lens)))
    if why:
        if cut == 0 and st.st_size > 0:
            raise Waiting("no complete line yet")
        number = int(chain.split("-")[0]) + 1 if chain[:1].isdigit() else 1
        chain = f"{number:06d}-{os.urandom(4).hex()}"
        lens = []
        recorded = 0  # until the manifest object of this pass names the new chain
        h = xxhash.xxh3_64()
    elif cut == covered:  # nothing new (a partial line may be waiting)
        extra = {**old, LOCAL: {**local, "ino": st.st_ino}}
        return Logged(
            False, covered, rec.hash64 if rec else 0, *_attrs(st), raced=False, extra=extra
        )
    prefix = (covered, rec.hash64) if not why and rec is not None else None
    span = (start, cut)
    digest = _write_segment(
        store, fd, st, src, relpath, chain, len(lens), span, h, prefix, recent_ns
    )
    after = os.fstat(fd)
    lens.append(cut - start)
    extra = {
        "chain": chain,
        "lens": lens,
        LOCAL: {"ino": st.st_ino, "recorded": recorded},
        **({PLAIN: old[PLAIN]} if PLAIN in old else {}),
    }
    return Logged(
        True,
        cut,
        digest,
        *_attrs(st),
        raced=_sig(after) != _sig(st) or after.st_ino != st.st_ino,
        extra=extra,
        written=cut - start,
        why=why or "append",
    )


def _attrs(st: os.stat_result) -> tuple[int, int, tuple[int, int, int]]:
    """A `Logged`'s mode, mtime_ns and stat signature, from the live file's stat."""
    return st.st_mode, st.st_mtime_ns, _sig(st)


def _new_chain_why(
    fd: int,
    st: os.stat_result,
    src: str,
    rec: Record | None,
    lens: list[int],
    chain: str,
    local: dict[str, Any],
    compact: bool,
    h: xxhash.xxh3_64,
) -> str:
    """Why this pass starts a new chain ("": it appends to the current one, and `h` then
    holds the published prefix's hash)."""
    if not lens or not chain or rec is None:
        return "new chain"
    why = _chain_break(fd, st, src, local, sum(lens), rec.hash64, h)
    if not why and (len(lens) >= MAX_SEGMENTS or (compact and len(lens) > 1)):
        return "compact"
    return why


def _write_segment(
    store: Store,
    fd: int,
    st: os.stat_result,
    src: str,
    relpath: str,
    chain: str,
    seq: int,
    span: tuple[int, int],
    h: xxhash.xxh3_64,
    prefix: tuple[int, int] | None,
    recent_ns: int | None,
) -> int:
    """Publish the log's bytes [start, end) (`span`) as object `seq` of `chain`; returns
    the xxh3 of the log up to its end (`h` holds the hash of the bytes before it).

    `prefix` (the published length and its hash; None for a new chain): the published
    beginning is hashed again after the copy unless the file's stat proves that nothing
    was written meanwhile.
    """
    start, cut = span
    # The name carries the object's hash, and a mount without rename writes the object
    # under its final name: hash the new bytes first, then copy them and compare.
    own = xxhash.xxh3_64()
    os.lseek(fd, start, os.SEEK_SET)
    n, digest = stream(fd, cut - start, own.update, src_name=src, hasher=h)
    if n != cut - start:
        raise Waiting("shrank while reading")
    name = object_name(relpath, chain, seq, start, cut, own.intdigest(), st.st_mtime_ns)
    os.lseek(fd, start, os.SEEK_SET)
    with store.writer(name, mode=st.st_mode, mtime_ns=st.st_mtime_ns, unique=True) as out:
        n, again = stream(fd, cut - start, out.write, src_name=src, dst_name=store.where(name))
        if n != cut - start or again != own.intdigest():
            raise Waiting("changed while reading")
        if (
            prefix is not None
            and not unwritten(st, os.fstat(fd), recent_ns)
            and hash_file(fd, prefix[0], name=src) != prefix[1]
        ):
            raise Changed(
                relpath,
                "its published beginning was rewritten in place while the new segment was copied",
            )
    return digest


def _chain_break(
    fd: int,
    st: os.stat_result,
    src: str,
    local: dict[str, Any],
    covered: int,
    published_hash: int,
    h: xxhash.xxh3_64,
) -> str:
    """Why the live file no longer extends its published prefix ("": it does; `h` then
    holds the prefix's hash, to be continued over the new bytes)."""
    if local.get("ino") not in (None, st.st_ino):
        return "replaced"
    if st.st_size < covered:
        return "shrank"
    os.lseek(fd, 0, os.SEEK_SET)
    n, digest = stream(fd, covered, None, src_name=src, hasher=h)
    if n != covered:
        return "shrank"
    return "rewritten" if digest != published_hash else ""


def _publish_plain(
    store: Store, fd: int, st: os.stat_result, src: str, relpath: str, logged: Logged
) -> Logged:
    """Publish the chain's content (`logged`: bytes [0, size) with their hash) whole at the
    plain path; the bytes are read again and must hash the same, else Waiting."""
    size = sum(logged.extra.get("lens", ()))
    state = {"size": size, "hash": f"{logged.hash64:016x}"}
    if store.writes_in_place():  # no rename: it would be a unique object nothing reads
        return attrs.evolve(logged, extra={**logged.extra, PLAIN: {**state, "skipped": True}})
    os.lseek(fd, 0, os.SEEK_SET)
    with store.writer(relpath, mode=st.st_mode, mtime_ns=st.st_mtime_ns) as out:
        n, digest = stream(fd, size, out.write, src_name=src, dst_name=store.where(relpath))
        if n != size or digest != logged.hash64:
            raise Waiting("changed while its plain copy was read")
    return attrs.evolve(
        logged,
        published=True,
        extra={**logged.extra, PLAIN: state},
        written=logged.written + size,
        plain_written=True,
        why=logged.why if logged.published else "plain",
    )


def complete_lines_end(fd: int, size: int) -> int:
    """Length of the complete lines among the first `size` bytes of an open file."""
    return _last_newline_end(fd, 0, size)


__all__ = [
    "LOCAL",
    "PLAIN",
    "SEG_DIR",
    "Logged",
    "Waiting",
    "chain_dir",
    "complete_lines_end",
    "publish",
]
