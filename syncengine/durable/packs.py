"""Pack objects: many small files' bytes in one object, so a full restore is a few requests.

Owns the pack format and what a reader may conclude from it (docs/FORMAT.md
"Packs").  A pack is ``.syncengine/packs/<id>.pack``: the packed files' bytes
back to back, nothing else.  Its index ``<id>.index.jsonl`` sits beside it: a
header line, one line per file (path, offset, length, mode, mtime, xxh3 hash)
and an ``{"end": N}`` trailer, so a cut index is told from a whole one.  gc
writes them (`syncengine.ops.packer`), the pack first and the index only once
the pack is closed: an index never names a pack that was not whole.

A pack is only ever a second copy.  Every packed file keeps its plain object
at its path, and a reader uses a record only when its length and hash equal
the manifest entry's (`Catalog.serving`), then hashes the bytes it read again:
a missing, stale, cut or damaged pack costs requests, never a wrong file.
Writes nothing; reads through the `Store` only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs

from syncengine.crypt.secrets import sealed_with
from syncengine.durable.entry import Entry, format_hash, parse_hash
from syncengine.durable.store import META_DIR, Store

PACKS_DIR = f"{META_DIR}/packs"
FORMAT = 1
PACK_SUFFIX = ".pack"
INDEX_SUFFIX = ".index.jsonl"


def pack_key(pack_id: str) -> str:
    return f"{PACKS_DIR}/{pack_id}{PACK_SUFFIX}"


def index_key(pack_id: str) -> str:
    return f"{PACKS_DIR}/{pack_id}{INDEX_SUFFIX}"


def split_name(name: str) -> tuple[str, str] | None:
    """(id, "pack" or "index") of a name in the packs directory; None: not one of ours."""
    for suffix, what in ((INDEX_SUFFIX, "index"), (PACK_SUFFIX, "pack")):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], what
    return None


@attrs.frozen
class Record:
    """One packed file: where its bytes are in the pack and what they were."""

    path: str
    offset: int
    length: int
    mode: int
    mtime_ns: int
    hash: int

    def matches(self, entry: Entry) -> bool:
        """These bytes are the entry's (same length and hash): the record may serve it."""
        return entry.kind == "file" and self.hash == entry.hash and self.length == entry.size


@attrs.frozen
class Pack:
    """A pack whose index was read whole."""

    id: str
    size: int
    records: tuple[Record, ...]

    @property
    def key(self) -> str:
        return pack_key(self.id)


def encode_index(pack_id: str, size: int, records: Sequence[Record], created_ns: int) -> bytes:
    head = {"syncengine_pack": FORMAT, "id": pack_id, "size": size, "created_ns": created_ns}
    lines = [json.dumps(head)]
    lines += (
        json.dumps(
            {
                "path": r.path,
                "offset": r.offset,
                "length": r.length,
                "mode": r.mode,
                "mtime_ns": r.mtime_ns,
                "hash": format_hash(r.hash),
            },
            ensure_ascii=False,
        )
        for r in records
    )
    lines.append(json.dumps({"end": len(records)}))
    return ("\n".join(lines) + "\n").encode()


def decode_index(pack_id: str, data: bytes) -> Pack:
    """The pack an index describes; ValueError when it is cut, malformed or inconsistent."""
    rows = [json.loads(line) for line in data.decode().splitlines() if line]
    if len(rows) < 2 or not isinstance(rows[0], dict) or rows[0].get("syncengine_pack") != FORMAT:
        raise ValueError("not a pack index of format 1")
    head, body, tail = rows[0], rows[1:-1], rows[-1]
    if tail != {"end": len(body)} or head.get("id") != pack_id:
        raise ValueError("cut or misnamed (no matching trailer)")
    size = _whole(head.get("size"))
    records = tuple(_record(row) for row in body)
    if any(r.offset + r.length > size for r in records):
        raise ValueError("a record reaches past the pack's end")
    return Pack(pack_id, size, records)


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not a size")
    return int(value)


def _record(row: Any) -> Record:
    if not isinstance(row, dict) or not isinstance(row.get("path"), str):
        raise ValueError("a record without a path")
    h = parse_hash(row.get("hash"))
    if h is None:
        raise ValueError(f"{row['path']}: no hash")
    return Record(
        row["path"],
        _whole(row.get("offset")),
        _whole(row.get("length")),
        _whole(row.get("mode")) & 0o7777,
        _whole(row.get("mtime_ns")),
        h,
    )


@attrs.frozen
class Catalog:
    """The packs a reader may use (indexes read whole, their packs listed), oldest first."""

    packs: tuple[Pack, ...] = ()
    unreadable: tuple[str, ...] = ()  # "<index key>: why" (ignored by restore)

    def serving(self, entries: Iterable[Entry]) -> dict[str, tuple[Pack, Record]]:
        """Each entry's packed copy: the newest pack with a record matching it.  A sealed
        entry has none (a file that became secret after it was packed: its pack then
        serves it no more, so gc repacks the rest and collects that pack)."""
        wanted = {
            e.path: e
            for e in entries
            if e.kind == "file" and e.hash is not None and sealed_with(e.extra) is None
        }
        out: dict[str, tuple[Pack, Record]] = {}
        for pack in self.packs:  # oldest first: a newer pack's record wins
            for rec in pack.records:
                entry = wanted.get(rec.path)
                if entry is not None and rec.matches(entry):
                    out[rec.path] = (pack, rec)
        return out


def names(store: Store) -> dict[str, set[str]]:
    """id -> {"pack", "index"}: what the packs directory holds (one listing)."""
    found: dict[str, set[str]] = {}
    for name in store.names(PACKS_DIR):
        split = split_name(name)
        if split is not None:
            found.setdefault(split[0], set()).add(split[1])
    return found


def load(store: Store, listed: dict[str, set[str]] | None = None) -> Catalog:
    """Read every index whose pack is listed (a LIST, then a GET per index)."""
    listed = names(store) if listed is None else listed
    packs, unreadable = [], []
    for pack_id in sorted(i for i, kinds in listed.items() if kinds == {"pack", "index"}):
        try:
            packs.append(decode_index(pack_id, store.read_bytes(index_key(pack_id))))
        except FileNotFoundError:  # collected meanwhile
            continue
        except (ValueError, UnicodeDecodeError) as exc:
            unreadable.append(f"{index_key(pack_id)}: {exc}")
    return Catalog(tuple(packs), tuple(unreadable))


def sliced(pack: Pack, data: bytes) -> Iterator[tuple[Record, bytes]]:
    """Each record of `pack` with its bytes from the whole pack `data`."""
    for rec in pack.records:
        yield rec, data[rec.offset : rec.offset + rec.length]


__all__ = [
    "PACKS_DIR",
    "Catalog",
    "Pack",
    "Record",
    "decode_index",
    "encode_index",
    "index_key",
    "load",
    "names",
    "pack_key",
]
