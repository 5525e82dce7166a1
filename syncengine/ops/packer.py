"""gc's packing: small files that stopped changing go into pack objects, old packs go.

Owns deciding (`plan`, pure: facts, the ``[gc]`` settings, the time and a
`may_pack` predicate in, actions out) and doing (`write`) for packs
(format: `syncengine.durable.packs`).  A file qualifies when its manifest
entry is a plain file with a hash, at most ``pack_max_file_bytes``, with an
mtime at least ``pack_after_seconds`` old, `may_pack(path)` allows it, and no
*dense* pack (one that still serves at least half its records) holds it
already; when at least ``pack_min_files`` qualify, they are packed in path
order into packs of about ``pack_bytes``.  The live files of a pack that went
sparse are packed again the same way, and the sparse pack then serves nothing.

Collected (after ``grace_seconds``, like every other gc deletion): packs that
serve no manifest entry, packs without a readable index (a killed gc's), and
indexes whose pack is gone; the index goes first, so no index ever names a
deleted pack for long (and a reader falls back to plain objects if one does).

Packing never touches a plain object, a manifest or a checkpoint: it reads
plain objects and writes two new, uniquely named closed objects through the
Store, the pack and then its index.  A kill at any point leaves at most a
pack without an index or a cut index, which readers ignore.
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs
import xxhash

from syncengine.config import GcConfig
from syncengine.durable import packs
from syncengine.durable.manifest import Entry
from syncengine.durable.store import Store
from syncengine.fs.stream import in_order
from syncengine.ops.gcplan import DeleteObjects

log = logging.getLogger("syncengine")
NS = 10**9
DENSE = 0.5  # a pack serving fewer than this share of its records has its files repacked
READ_JOBS = 8  # plain objects read at once while packing (round trips overlap)


@attrs.frozen
class PackFacts:
    """What gc observed of the packs directory."""

    catalog: packs.Catalog
    objects: tuple[tuple[str, str, int, int], ...]  # (pack id, key, bytes, mtime_ns)


@attrs.frozen
class PackFiles:
    """Write one new pack (and then its index) holding these files."""

    entries: tuple[Entry, ...]
    bytes: int

    def __str__(self) -> str:
        return f"pack {len(self.entries)} small file(s) ({self.bytes} bytes) into a new pack"


def gather(store: Store) -> PackFacts:
    """One listing of the packs directory, its indexes read, each object's size and mtime."""
    listed = packs.names(store)
    objects = []
    for pack_id, kinds in sorted(listed.items()):
        for kind in sorted(kinds):
            key = packs.pack_key(pack_id) if kind == "pack" else packs.index_key(pack_id)
            st = store.head(key)
            if st is not None:
                objects.append((pack_id, key, st.size, st.mtime_ns))
    return PackFacts(packs.load(store, listed), tuple(objects))


def plan(
    facts: PackFacts,
    entries: Mapping[str, Entry],
    cfg: GcConfig,
    now_ns: int,
    may_pack: Callable[[str], bool],
) -> list[PackFiles | DeleteObjects]:
    """New packs to write, then the packs to collect."""
    serving = facts.catalog.serving(entries.values())
    served = Counter(pack.id for pack, _ in serving.values())
    dense = {p.id for p in facts.catalog.packs if served[p.id] >= DENSE * len(p.records)}
    cutoff = now_ns - int(cfg.pack_after_seconds * NS)
    todo = [
        e
        for path, e in sorted(entries.items())
        if e.kind == "file"
        and e.hash is not None
        and e.size <= cfg.pack_max_file_bytes
        and e.mtime_ns <= cutoff
        and not (path in serving and serving[path][0].id in dense)
        and may_pack(path)
    ]
    out: list[PackFiles | DeleteObjects] = []
    if cfg.pack_min_files and len(todo) >= cfg.pack_min_files:
        out.extend(_groups(todo, cfg.pack_bytes))
    out.extend(_collectable(facts, set(served), now_ns - int(cfg.grace_seconds * NS)))
    return out


def _groups(todo: Sequence[Entry], pack_bytes: int) -> Iterable[PackFiles]:
    group: list[Entry] = []
    size = 0
    for entry in todo:
        if group and size + entry.size > pack_bytes:
            yield PackFiles(tuple(group), size)
            group, size = [], 0
        group.append(entry)
        size += entry.size
    if group:
        yield PackFiles(tuple(group), size)


def _collectable(facts: PackFacts, serving: set[str], before_ns: int) -> Iterable[DeleteObjects]:
    """Packs serving nothing, packs without a readable index, indexes without a pack:
    once all of an id's objects are older than the grace period (index first)."""
    per_id: dict[str, list[tuple[str, int, int]]] = {}
    for pack_id, key, size, mtime in facts.objects:
        per_id.setdefault(pack_id, []).append((key, size, mtime))
    for pack_id, objs in sorted(per_id.items()):
        if pack_id in serving or max(m for _, _, m in objs) > before_ns:
            continue
        keys = sorted((k for k, _, _ in objs), key=lambda k: not k.endswith(packs.INDEX_SUFFIX))
        yield DeleteObjects(f"unreferenced pack {pack_id}", tuple(keys), sum(s for _, s, _ in objs))


def write(store: Store, action: PackFiles, now_ns: int) -> str | None:
    """Write one pack and then its index; the pack's id, or None when no file could be
    packed (a plain object that no longer matches its entry is left out, logged)."""
    pack_id = f"{now_ns:020d}-{secrets.token_hex(4)}"
    records: list[packs.Record] = []
    offset = 0
    with store.writer(packs.pack_key(pack_id), mode=0o600, unique=True) as out:
        for entry, data in in_order(action.entries, _read(store), jobs=READ_JOBS, name="pack"):
            if (
                data is None
                or len(data) != entry.size
                or xxhash.xxh3_64_intdigest(data) != entry.hash
            ):
                log.info(
                    "gc.pack-skipped path=%s: its plain object no longer matches the manifest",
                    entry.path,
                    extra={"event": "gc.pack-skipped"},
                )
                continue
            out.write(data)
            records.append(
                packs.Record(
                    entry.path, offset, len(data), entry.mode, entry.mtime_ns, entry.hash or 0
                )
            )
            offset += len(data)
    if not records:
        store.delete(packs.pack_key(pack_id))
        return None
    with store.writer(packs.index_key(pack_id), mode=0o600, unique=True) as out:
        out.write(packs.encode_index(pack_id, offset, records, now_ns))
    log.info(
        "gc.packed id=%s files=%d bytes=%d",
        pack_id,
        len(records),
        offset,
        extra={"event": "gc.packed"},
    )
    return pack_id


def _read(store: Store) -> Callable[[Entry], bytes | None]:
    def read(entry: Entry) -> bytes | None:
        try:
            return store.read_bytes(entry.location)
        except FileNotFoundError:
            return None

    return read
