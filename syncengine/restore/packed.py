"""A restore's packed reads: many small files from a few ranged reads of packs.

Owns `reader`, which a restore asks once for the files it is about to fetch:
it lists the packs (`syncengine.durable.packs`), keeps each file whose newest
matching record serves it (`serving`; `run`'s background restore asks that once
for all its files and hands each batch its share, so a batch lists nothing),
and groups those records into *spans*, one ranged
read each: adjacent records coalesce, records at most `MERGE_GAP` apart merge
(reading the dead bytes between costs less than a request), and a span stops
growing at `SPAN_MAX` bytes, which bounds the memory one span holds.  The
`PackedFetch` it returns gives a file's bytes, or None, and then the caller
reads the plain object as before: a file no pack serves (changed since it was
packed), a span whose read failed or came back short (a pack gone or cut),
bytes whose hash is not the manifest entry's (a damaged pack).  A span is
read by the first copy that needs it and dropped when its last file is
handed out.

The restore's copies call it from threads or forked processes alike: a span
has its own lock, and nothing is read before the first call.  A restore of
fewer than `LIST_MIN` files reads them plain and lists nothing: then a LIST
and the index reads cost about what they would save, and a tree gc never
packed costs no request at all there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

import attrs
import xxhash

from syncengine.durable import packs
from syncengine.durable.manifest import Entry
from syncengine.durable.store import Store
from syncengine.errors import DurableError

log = logging.getLogger("syncengine")
LIST_MIN = 32  # fewer small files to fetch: read them plain
MERGE_GAP = 1 << 20  # records at most this far apart share one read
SPAN_MAX = 16 << 20  # a span (one read, held in memory) grows no larger

PackedFetch = Callable[[Entry], bytes | None]
Served = dict[str, tuple[packs.Pack, packs.Record]]  # path -> the pack and record serving it


@attrs.define(eq=False)
class _Span:
    key: str
    offset: int
    length: int
    users: int = 0  # files still to hand out
    data: bytes | None = None
    failed: bool = False
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    def take(self, store: Store, offset: int, length: int) -> bytes | None:
        """One file's bytes (reading the span first if no file did yet)."""
        with self.lock:
            if self.data is None and not self.failed:
                self._read(store)
            data = self.data
            self.users -= 1
            if self.users <= 0:
                self.data = None  # the last file of the span: let it go
        if data is None:
            return None
        start = offset - self.offset
        return data[start : start + length]

    def _read(self, store: Store) -> None:
        try:
            data = store.read_range(self.key, self.offset, self.length)
        except (FileNotFoundError, DurableError) as exc:
            data, why = b"", str(exc)
        else:
            why = f"{len(data)} of {self.length} bytes"
        if len(data) != self.length:
            self.failed = True
            log.warning(
                "restore.pack-unreadable object=%s: %s; its files are read plain",
                self.key,
                why,
                extra={"event": "restore.pack-unreadable"},
            )
            return
        self.data = data


def serving(store: Store, entries: Sequence[Entry]) -> Served:
    """Which of these entries a pack serves (one listing and the packs' index reads);
    none when they are too few to look (`LIST_MIN`) or the packs cannot be listed."""
    small = [e for e in entries if e.kind == "file" and e.hash is not None]
    if len(small) < LIST_MIN:
        return {}
    try:
        return packs.load(store).serving(small)
    except DurableError as exc:
        log.warning(
            "restore.packs-unlisted %s; every file is read plain",
            exc,
            extra={"event": "restore.packs-unlisted"},
        )
        return {}


def reader(
    store: Store, entries: Sequence[Entry], served: Served | None = None
) -> PackedFetch | None:
    """The packed reads for these entries (the files a restore fetches), or None: none
    are packed, or too few to look (`LIST_MIN`).  `served`: what `serving` found for a
    larger set these entries come from (nothing is listed again)."""
    if served is None:
        served = serving(store, entries)
    else:
        served = {e.path: served[e.path] for e in entries if e.path in served}
    if not served:
        return None
    where = _spans(served.values())

    def fetch(entry: Entry) -> bytes | None:
        found = where.get(entry.path)
        if found is None:
            return None
        span, rec = found
        data = span.take(store, rec.offset, rec.length)
        if data is None:
            return None
        if len(data) != entry.size or xxhash.xxh3_64_intdigest(data) != entry.hash:
            log.warning(
                "restore.pack-mismatch path=%s object=%s: the packed copy differs from the "
                "manifest; the plain object is read instead",
                entry.path,
                span.key,
                extra={"event": "restore.pack-mismatch"},
            )
            return None
        return data

    return fetch


def _spans(
    served: Iterable[tuple[packs.Pack, packs.Record]],
) -> dict[str, tuple[_Span, packs.Record]]:
    """path -> (its span, its record): each pack's records in offset order, cut into
    ranged reads (coalesced, merged across gaps up to MERGE_GAP, at most SPAN_MAX)."""
    per_pack: dict[str, list[packs.Record]] = {}
    for pack, rec in served:
        per_pack.setdefault(pack.key, []).append(rec)
    out: dict[str, tuple[_Span, packs.Record]] = {}
    for key, recs in per_pack.items():
        span: _Span | None = None
        for rec in sorted(recs, key=lambda r: r.offset):
            end = rec.offset + rec.length
            if (
                span is None
                or rec.offset - (span.offset + span.length) > MERGE_GAP
                or end - span.offset > SPAN_MAX
            ):
                span = _Span(key, rec.offset, 0)
            span.length = max(span.length, end - span.offset)
            span.users += 1
            out[rec.path] = (span, rec)
    return out
