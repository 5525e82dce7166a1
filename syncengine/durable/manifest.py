"""The manifest: what was published, as closed JSON-lines objects on the durable side.

Owns the manifest format and what a reader may conclude from it.  Each
checkpoint that published something writes one new *delta* object with the
entries it changed; every `COMPACT_AFTER` deltas a *base* object with all
entries replaces the chain for readers.  Objects are named
``.syncengine/manifest/<seq>.<base|delta>.jsonl`` with a zero-padded, strictly
increasing sequence number, so a reader lists one directory, takes the newest
readable base and applies the deltas after it in order.  Nothing is ever
rewritten in place; superseded objects are left for ``gc``.  Written under
the durable root's lease, a name also carries the writer's generation
(``<seq>.g<generation>.<kind>.jsonl``): objects of a writer that had lost the
lease are *fenced* by their names alone, and a fenced object above the
chain read makes it not the newest checkpoint, a problem
(`syncengine.durable.manifestlist`: the one rule every reader shares).

Each object opens with a header line and ends with an ``{"end": N}`` trailer.
Entry kinds other than ``file``, ``symlink`` and ``dir`` (SQLite snapshots,
append-only segments) are kept verbatim, so an older reader preserves what a
newer writer recorded.  A ``dir`` entry records a directory of the live tree,
empty or not, with its mode only (``{"path", "kind": "dir", "mode"}``): a
directory's mtime moves whenever an entry is added in it, so recording it
would put an entry in every pass that adds a file, and nothing that agents
keep depends on it.  On a bucket the manifest is a directory's only record
(``mkdir`` on the mount is not stored).

What an unreadable object means (`load`).  A base holds every entry *and*
the changes of the pass that wrote it (that pass writes no delta), so an
object that cannot be read loses what it recorded, whatever its kind.  It is
harmless only when a readable base with a higher sequence number supersedes
it; otherwise it is a *problem*: the restore is incomplete (exit 1, the object
named) until a complete newer base is written.  One exception, a *torn*
newest object: its bytes are a strict prefix of a well-formed object (header,
whole entry lines, no trailer) and it was written under its final name
(header ``"in_place": true``, on a mount without rename; when its own header
was cut, the newest object read says so).  Only there can a checkpoint killed
while writing its manifest leave one; with rename, a killed writer's object
never reaches its name, so a cut object there was cut after it was complete.
A torn object's checkpoint never completed: its versions went to new unique
names nothing refers to, so the manifest as of the object before is the last
completed checkpoint, as if the kill had come a moment earlier; the restore
is complete, with a warning.  The next object written after it is a full base
(`deltas_since_base`), so a torn object never ends up inside the chain.

Entries are validated one by one (entry.py): an entry with a field of the wrong type or
out of range (a negative size, an mtime beyond 64-bit nanoseconds, a mode
outside 0..0o7777, a hash that is not ``xxh3_64:`` and 16 hex digits, a
symlink without a target, NUL in a name) is that path's problem
(`ManifestState.invalid`), replacing what older objects recorded for the
path; the other entries stay usable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import attrs

from syncengine.durable.entry import INVALID, Entry, format_hash, parse_hash, row_entry
from syncengine.durable.manifestlist import Listing, list_objects, listing, object_name
from syncengine.durable.store import MANIFEST_DIR, Store
from syncengine.errors import SyncEngineError

FORMAT = 1
COMPACT_AFTER = 64
_HEADER_START = b'{"syncengine_manifest": '


@attrs.frozen
class ManifestState:
    """The manifest as a reader sees it after applying base and deltas."""

    entries: Mapping[str, Entry]
    last_seq: int
    base_seq: int
    deltas_since_base: int  # COMPACT_AFTER after a torn object: the next one is a base
    problems: tuple[str, ...] = ()  # information was lost: a restore must say incomplete
    warnings: tuple[str, ...] = ()  # a torn newest object, ignored
    invalid: Mapping[str, Entry] = attrs.field(factory=dict)  # INVALID placeholders by path
    readable: bool = False  # at least one object was read
    fenced: tuple[str, ...] = ()  # objects of a writer that had lost the lease: not read
    top_seq: int = 0  # the highest seq listed, fenced or not: a writer continues above it
    forked: bool = False  # fenced objects above the chain read: not the newest checkpoint

    @property
    def fenced_warnings(self) -> tuple[str, ...]:
        why = "written by an instance that had lost the lease: not restored (gc deletes it)"
        return tuple(f"{MANIFEST_DIR}/{name}: {why}" for name in self.fenced)

    @property
    def complete(self) -> bool:
        """Nothing lost and every entry usable (gc deletes nothing otherwise)."""
        return not self.problems and not self.invalid


class Fence(Protocol):
    """A writer's lease (`syncengine.engine.rootlease.AdapterFence`): its generation goes into
    each object's name; `check` raises `LeaseLost` once a newer generation took over."""

    @property
    def generation(self) -> int: ...

    def check(self) -> None: ...


def encode(
    adapter: str,
    seq: int,
    kind: str,
    entries: Iterable[Entry],
    *,
    created_ns: int,
    in_place: bool = False,
    generation: int = 0,
) -> bytes:
    """One object's bytes.  `in_place`: written under its final name (a mount without
    rename), so a killed writer may leave it cut short (see the module docstring)."""
    header = {
        "syncengine_manifest": FORMAT,
        "adapter": adapter,
        "seq": seq,
        "type": kind,
        "created_ns": created_ns,
    }
    if in_place:
        header["in_place"] = True
    if generation:
        header["lease"] = generation
    lines = [json.dumps(header)]
    count = 0
    for entry in entries:
        lines.append(json.dumps(entry.to_json(), separators=(",", ":")))
        count += 1
    lines.append(json.dumps({"end": count}))
    return ("\n".join(lines) + "\n").encode()


def decode(data: bytes, name: str = "manifest") -> tuple[dict[str, Any], list[Entry]]:
    """Parse one object; raise ValueError when it is truncated or malformed as a whole.

    An entry line that is not a valid entry becomes an `INVALID` placeholder,
    named by its path or, without a usable one, by `name` and its line number.
    """
    lines = data.decode("utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise ValueError("too short")
    header = _json(lines[0])
    if not isinstance(header, dict) or header.get("syncengine_manifest") != FORMAT:
        got = header.get("syncengine_manifest") if isinstance(header, dict) else header
        raise ValueError(f"unknown format {got!r}")
    trailer = _json(lines[-1])
    body = lines[1:-1]
    if not isinstance(trailer, dict) or trailer.get("end") != len(body):
        raise ValueError("missing or wrong end marker (truncated object)")
    try:  # one parse, not one per line
        rows = json.loads("[" + ",".join(body) + "]") if body else []
    except (ValueError, RecursionError):
        rows = []
    if len(rows) != len(body):  # a line that is not one JSON value: find it
        rows = [_json(line, default=None) for line in body]
    return header, [row_entry(row, f"{name} line {i + 2}") for i, row in enumerate(rows)]


def _json(line: str, default: Any = ValueError) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as exc:
        if default is ValueError:
            raise ValueError(f"not JSON ({exc})") from None
        return default


def is_torn(data: bytes) -> bool:
    """Whether `data` is a strict prefix of a well-formed object: what a mount that
    commits a killed writer's bytes leaves (the header and whole entry lines, no
    trailer).  Garbage, another format or a complete trailer is not torn."""
    whole, newline, _cut = data.rpartition(b"\n")
    if not newline:  # not even the header line is whole
        return _HEADER_START.startswith(data) or data.startswith(_HEADER_START)
    lines = whole.split(b"\n")
    try:
        header = json.loads(lines[0])
        rows = [json.loads(line) for line in lines[1:]]
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(header, dict)
        and header.get("syncengine_manifest") == FORMAT
        and all(isinstance(r, dict) and ("end" not in r or "path" in r) for r in rows)
    )


def write(
    store: Store,
    adapter: str,
    seq: int,
    kind: str,
    entries: Iterable[Entry],
    *,
    created_ns: int,
    fence: Fence | None = None,
) -> str:
    """Publish one manifest object; return its name.  With a `fence`, its lease is
    checked first (`LeaseLost`: nothing is written) and its generation named."""
    generation = 0
    if fence is not None:
        fence.check()
        generation = fence.generation
    name = object_name(seq, kind, generation)
    data = encode(
        adapter,
        seq,
        kind,
        entries,
        created_ns=created_ns,
        in_place=store.writes_in_place(),
        generation=generation,
    )
    store.put_bytes(name, data, if_absent=True, mode=0o600)
    return name


def load(store: Store) -> ManifestState:
    """Read the newest readable base and the deltas after it (one listing, a few reads).

    See the module docstring for what makes the result incomplete
    (`problems`) and what is only a warning.
    """
    with store.batch():  # every object is in one directory: open it once
        listed = listing(store)
        fenced = tuple(name for _s, _k, name in listed.fenced)
        if not listed.objects:
            return ManifestState(
                entries={}, last_seq=0, base_seq=0, deltas_since_base=0, fenced=fenced
            )
        state = _Loader(store, listed.objects).run()
        fork = listed.fork_problem(store.where(MANIFEST_DIR))
        return attrs.evolve(
            state,
            fenced=fenced,
            top_seq=listed.top_seq,
            forked=fork is not None,
            problems=state.problems + ((fork,) if fork else ()),
        )


class _Loader:
    """One `load`: reads objects, applies them, and judges the unreadable ones."""

    def __init__(self, store: Store, objects: list[tuple[int, str, str]]) -> None:
        self.store, self.objects = store, objects
        self.newest = objects[-1][0]
        self.entries: dict[str, Entry] = {}
        self.invalid: dict[str, Entry] = {}
        self.problems: list[str] = []
        self.warnings: list[str] = []
        self.cut: tuple[str, str, bytes] | None = None  # the newest object, if torn
        self.in_place = False  # the newest object read was written under its final name

    def run(self) -> ManifestState:
        base_seq = 0
        for seq, kind, name in reversed([o for o in self.objects if o[1] == "base"]):
            got = self._read(seq, kind, name)
            if got is not None:
                self._apply(got)
                base_seq = seq
                break
        deltas = 0
        expected = base_seq + 1
        for seq, kind, name in (o for o in self.objects if o[0] > base_seq):
            if seq > expected:
                self.problems.append(
                    f"{self._dir()}: objects {expected:012d} to "
                    f"{seq - 1:012d} are missing (a gap in the manifest)"
                )
            expected = seq + 1
            if kind == "delta":  # an unreadable base after the one used was judged above
                got = self._read(seq, kind, name)
                if got is not None:
                    self._apply(got)
                    deltas += 1
        torn = self.cut is not None and self._judge_cut(*self.cut)
        return ManifestState(
            entries=self.entries,
            last_seq=self.newest,
            base_seq=base_seq,
            deltas_since_base=COMPACT_AFTER if torn else deltas,
            problems=tuple(self.problems),
            warnings=tuple(self.warnings),
            invalid=self.invalid,
            readable=bool(base_seq or deltas),
        )

    def _dir(self) -> str:
        return self.store.where(MANIFEST_DIR)

    def _read(self, seq: int, kind: str, name: str) -> list[Entry] | None:
        data = None
        try:
            data = self.store.read_bytes(f"{MANIFEST_DIR}/{name}")
            header, entries = decode(data, name)
            self.in_place = header.get("in_place") is True
            return entries
        except (ValueError, OSError, SyncEngineError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if seq == self.newest and data is not None and is_torn(data):
            self.cut = (name, kind, data)  # judged once the objects before it are read
        else:
            self._lost(name, kind, why)
        return None

    def _judge_cut(self, name: str, kind: str, data: bytes) -> bool:
        """A torn newest object is a killed writer's only where objects are written under
        their final name: its own header says so, or, when that was cut too, the newest
        object read."""
        first, newline, _ = data.partition(b"\n")
        in_place = json.loads(first).get("in_place") is True if newline else self.in_place
        if not in_place:
            self._lost(
                name,
                kind,
                f"cut short at {len(data)} bytes, but written by rename, "
                "so it was cut after it was complete",
            )
            return False
        self.warnings.append(
            f"{self._dir()}/{name}: cut short ({len(data)} bytes, no end marker): a checkpoint "
            "killed while writing it never completed; the manifest is as of the object before"
        )
        return True

    def _lost(self, name: str, kind: str, why: str) -> None:
        self.problems.append(
            f"{self._dir()}/{name}: unreadable {kind} ({why}); what it recorded is lost, so "
            "the restore is incomplete until a newer complete base replaces it"
        )

    def _apply(self, entries: list[Entry]) -> None:
        for e in entries:
            if e.kind == INVALID:
                self.entries.pop(e.path, None)
                self.invalid[e.path] = e
            else:
                self.invalid.pop(e.path, None)
                self.entries[e.path] = e


__all__ = [
    "COMPACT_AFTER",
    "FORMAT",
    "INVALID",
    "Entry",
    "Fence",
    "Listing",
    "ManifestState",
    "decode",
    "encode",
    "format_hash",
    "is_torn",
    "list_objects",
    "listing",
    "load",
    "object_name",
    "parse_hash",
    "write",
]
