"""The manifest: what was published, as closed JSON-lines objects on the durable side.

Owns the manifest format.  Each checkpoint that published something writes one
new *delta* object with the entries it changed; every `COMPACT_AFTER` deltas a
*base* object with all entries replaces the chain for readers.  Objects are
named ``.syncengine/manifest/<seq>.<base|delta>.jsonl`` with a zero-padded,
strictly increasing sequence number, so a reader lists one directory, takes
the newest base and applies the deltas after it in order.  Nothing is ever
rewritten in place; superseded objects are left for ``gc``.

Each object opens with a header line and ends with an ``{"end": N}`` trailer:
an object without its trailer (a truncated write on a mount that commits a
killed writer's bytes) is reported and ignored.  Entry kinds other than
``file`` and ``symlink`` (SQLite snapshots, append-only segments) are kept
verbatim, so an older reader preserves what a newer writer recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from syncengine.safepath import DirCache
from syncengine.store import MANIFEST_DIR, Store

FORMAT = 1
COMPACT_AFTER = 64
_NAME = re.compile(r"^(\d{12})\.(base|delta)\.jsonl$")


def format_hash(h: int) -> str:
    return f"xxh3_64:{h:016x}"


def parse_hash(text: str | None) -> int | None:
    if not text or not text.startswith("xxh3_64:"):
        return None
    try:
        return int(text[8:], 16)
    except ValueError:
        return None


@attrs.frozen
class Entry:
    """One published path.  `object` is where its bytes are, relative to the store."""

    path: str
    kind: str = "file"
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0o644
    hash: int | None = None
    target: str | None = None
    object: str | None = None
    extra: Mapping[str, Any] = attrs.field(factory=dict, eq=False)

    @property
    def location(self) -> str:
        return self.object or self.path

    def index_extra(self) -> dict[str, Any] | None:
        """What the local index keeps beside the record (`Index.extras`) for this entry."""
        extra = dict(self.extra)
        if self.object:
            extra["object"] = self.object
        return extra or None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update(path=self.path, kind=self.kind, mtime_ns=self.mtime_ns)
        if self.kind == "symlink":
            out["target"] = self.target
        else:
            out.update(size=self.size, mode=self.mode)
            if self.hash is not None:
                out["hash"] = format_hash(self.hash)
        if self.object:
            out["object"] = self.object
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Entry:
        extra = {} if data.keys() <= _KNOWN else {k: v for k, v in data.items()
                                                  if k not in _KNOWN}
        return cls(
            path=str(data["path"]),
            kind=str(data.get("kind", "file")),
            size=int(data.get("size", 0)),
            mtime_ns=int(data.get("mtime_ns", 0)),
            mode=int(data.get("mode", 0o644)),
            hash=parse_hash(data.get("hash")),
            target=data.get("target"),
            object=data.get("object"),
            extra=extra,
        )


_KNOWN = frozenset({"path", "kind", "size", "mtime_ns", "mode", "hash", "target", "object"})


@attrs.frozen
class ManifestState:
    """The manifest as a reader sees it after applying base and deltas."""

    entries: Mapping[str, Entry]
    last_seq: int
    base_seq: int
    deltas_since_base: int
    problems: tuple[str, ...] = ()  # information was lost: a restore must say incomplete
    warnings: tuple[str, ...] = ()  # unreadable objects whose content is covered by others


def object_name(seq: int, kind: str) -> str:
    return f"{MANIFEST_DIR}/{seq:012d}.{kind}.jsonl"


def list_objects(store: Store) -> list[tuple[int, str, str]]:
    """(seq, kind, name) of every manifest object, oldest first."""
    out = []
    for name in store.listdir(MANIFEST_DIR):
        m = _NAME.match(name)
        if m:
            out.append((int(m.group(1)), m.group(2), name))
    return sorted(out)


def encode(adapter: str, seq: int, kind: str, entries: Iterable[Entry], *,
           created_ns: int) -> bytes:
    lines = [json.dumps({"syncengine_manifest": FORMAT, "adapter": adapter, "seq": seq,
                         "type": kind, "created_ns": created_ns})]
    count = 0
    for entry in entries:
        lines.append(json.dumps(entry.to_json(), separators=(",", ":")))
        count += 1
    lines.append(json.dumps({"end": count}))
    return ("\n".join(lines) + "\n").encode()


def decode(data: bytes) -> tuple[dict[str, Any], list[Entry]]:
    """Parse one object; raise ValueError when it is truncated or malformed."""
    lines = data.decode("utf-8").splitlines()
    if len(lines) < 2:
        raise ValueError("too short")
    header = json.loads(lines[0])
    if header.get("syncengine_manifest") != FORMAT:
        raise ValueError(f"unknown format {header.get('syncengine_manifest')!r}")
    trailer = json.loads(lines[-1])
    body = lines[1:-1]
    if not isinstance(trailer, dict) or trailer.get("end") != len(body):
        raise ValueError("missing or wrong end marker (truncated object)")
    rows = json.loads("[" + ",".join(body) + "]") if body else []  # one parse, not one per line
    if len(rows) != len(body) or not all(isinstance(row, dict) for row in rows):
        raise ValueError("an entry line is not one JSON object")
    return header, [Entry.from_json(row) for row in rows]


def write(store: Store, adapter: str, seq: int, kind: str, entries: Iterable[Entry], *,
          created_ns: int) -> str:
    """Publish one manifest object; return its name."""
    name = object_name(seq, kind)
    store.put_bytes(name, encode(adapter, seq, kind, entries, created_ns=created_ns), mode=0o600)
    return name


def load(store: Store) -> ManifestState:
    """Read the newest readable base and the deltas after it (one listing, a few reads).

    `problems` lists what makes the result lose information: a delta after
    the base that cannot be read, or a gap in the sequence.  A broken base is
    only a warning when an older base and every delta since it are readable.
    """
    objects = list_objects(store)
    if not objects:
        return ManifestState(entries={}, last_seq=0, base_seq=0, deltas_since_base=0)
    with store.reader() as dirs:  # every object is in one directory: open it once
        return _load(store, objects, dirs)


def _load(store: Store, objects: list[tuple[int, str, str]], dirs: DirCache) -> ManifestState:
    problems: list[str] = []
    warnings: list[str] = []
    entries: dict[str, Entry] = {}
    base_seq = 0
    chain = objects
    for seq, _kind, name in reversed([o for o in objects if o[1] == "base"]):
        try:
            _, base_entries = decode(store.read_bytes(f"{MANIFEST_DIR}/{name}", dirs=dirs))
        except (ValueError, OSError, KeyError) as exc:
            warnings.append(f"{store.root}/{MANIFEST_DIR}/{name}: unreadable base ({exc})")
            continue
        entries = {e.path: e for e in base_entries}
        base_seq = seq
        chain = [o for o in objects if o[0] > seq]
        break
    deltas = 0
    expected = base_seq + 1
    for seq, kind, name in chain:
        if seq > expected:
            problems.append(f"{store.root}/{MANIFEST_DIR}: objects {expected:012d} to "
                            f"{seq - 1:012d} are missing (a gap in the manifest)")
        expected = seq + 1
        if kind != "delta":
            continue  # a base newer than the one used could not be read: deltas cover it
        try:
            _, delta = decode(store.read_bytes(f"{MANIFEST_DIR}/{name}", dirs=dirs))
        except (ValueError, OSError, KeyError) as exc:
            problems.append(f"{store.root}/{MANIFEST_DIR}/{name}: unreadable delta ({exc}); "
                            "the paths it recorded may restore older or not at all")
            continue
        deltas += 1
        for e in delta:
            entries[e.path] = e
    if problems:
        problems.extend(warnings)
    return ManifestState(entries=entries, last_seq=objects[-1][0], base_seq=base_seq,
                         deltas_since_base=deltas, problems=tuple(problems),
                         warnings=tuple(warnings))
