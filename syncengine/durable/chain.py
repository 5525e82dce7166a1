"""An append-only log's segment chain: object names and resolution.

Owns the durable names of a log's objects and the one place that decides
which objects make up a log: restore, export and verify all call `load`
(one listing of the chain directory, then `resolve`, a pure function),
then `chainread.read`.  A chain directory holds closed objects, never rewritten::

    .syncengine/segments/<P>.d/<chain>/<seq:08d>-<start:012d>-<end:012d>-<xxh3:016x>-<mtime_ns>.seg

(``<seq>-<start>-<end>.seg`` in chains written by earlier versions: no hash, no
mtime).  Each holds the bytes [start, end) of the log; ``xxh3`` is the hash
of the object's own bytes and ``mtime_ns`` the live file's mtime when it was
published.  The manifest entry (kind ``segments``) vouches for a prefix: the
chain and each object's length (``lens``), with the xxh3 of that whole
prefix.  Appends published after it (a checkpoint that only appends writes
no manifest object) are found by the listing: each continues the previous
object (next seq, start = previous end) and is checked against its own hash.

Resolution rules (`resolve`):
- every object the manifest lists must be there with its range, else the
  log is refused (missing);
- an object that does not continue any object before it means one in the
  middle is missing: refused, naming the gap;
- two objects with the same seq come from a run killed after publishing and
  before recording it (the next run published that seq again): of all the
  ways to continue, the one whose last object was published last (live
  mtime, then end) wins: that is the newest state of the file;
- the last object, if the manifest does not vouch for it, may be shorter
  than its name says: a mount without rename that commits a killed writer's
  partial object.  It was never a completed checkpoint: `chainread.read` ignores it
  with a warning and the log ends at the object before.  Any other wrong
  size or hash refuses the log.

A lost newest object published after the last manifest record cannot be
told from one never written: the log is then restored as of the object
before (Litestream has the same limit).

Reading the bytes of a resolved chain, and its plain copy, is
`syncengine.durable.chainread`'s.  Nothing here writes to the durable side.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

import attrs

from syncengine.durable.manifest import Entry
from syncengine.durable.store import META_DIR, Store
from syncengine.errors import SourceError

log = logging.getLogger("syncengine")
SEG_DIR = f"{META_DIR}/segments"
LOCAL = "_local"  # index.extras key for local-only chain state (never in the manifest)
PLAIN = "plain"  # chain state: {"size", "hash"} of the content at the plain path (segments.py)
_NAME = re.compile(r"(\d{8,})-(\d{12,})-(\d{12,})(?:-([0-9a-f]{16})-(-?\d+))?\.seg\Z")


def chain_dir(relpath: str, chain: str) -> str:
    return f"{SEG_DIR}/{relpath}.d/{chain}"


def object_name(
    relpath: str, chain: str, seq: int, start: int, end: int, hash64: int, mtime_ns: int
) -> str:
    return (
        f"{chain_dir(relpath, chain)}/{seq:08d}-{start:012d}-{end:012d}-"
        f"{hash64:016x}-{mtime_ns}.seg"
    )


@attrs.frozen
class Piece:
    """One object of a chain, as its name describes it."""

    name: str  # relative to the store
    seq: int
    start: int
    end: int
    hash64: int | None = None  # None: an old name (covered by the manifest's hash only)
    mtime_ns: int | None = None

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def label(self) -> str:
        return self.name.rpartition("/")[2]


def parse(reldir: str, name: str) -> Piece | None:
    m = _NAME.match(name)
    if m is None or int(m[3]) < int(m[2]):
        return None
    return Piece(
        f"{reldir}/{name}",
        int(m[1]),
        int(m[2]),
        int(m[3]),
        int(m[4], 16) if m[4] else None,
        int(m[5]) if m[5] else None,
    )


@attrs.frozen
class Chain:
    """The objects that make up one log: the first `recorded` are the manifest's."""

    entry: Entry  # the manifest entry
    pieces: tuple[Piece, ...]
    recorded: int

    @property
    def size(self) -> int:
        return self.pieces[-1].end

    @property
    def mtime_ns(self) -> int:
        last = self.pieces[-1]
        if len(self.pieces) > self.recorded and last.mtime_ns is not None:
            return last.mtime_ns
        return self.entry.mtime_ns

    def as_entry(self, hash64: int | None = None) -> Entry:
        """The log as this chain has it (`hash64`: of the whole content, once read).

        `extra` carries the chain state for the index (`chainstate.seed`),
        including how many objects the manifest records.
        """
        e = self.entry
        plain = {PLAIN: e.extra[PLAIN]} if PLAIN in e.extra else {}
        return Entry(
            e.path,
            "segments",
            self.size,
            self.mtime_ns,
            e.mode,
            e.hash if hash64 is None and len(self.pieces) == self.recorded else hash64,
            extra={
                "chain": e.extra["chain"],
                "lens": [p.length for p in self.pieces],
                LOCAL: {"recorded": self.recorded},
                **plain,
            },
        )


def chain_of(entry: Entry, operation: str = "restore") -> tuple[str, list[int]]:
    """(chain, lens) of a manifest entry of kind ``segments``, checked."""
    chain = entry.extra.get("chain")
    lens = entry.extra.get("lens")
    if (
        not isinstance(chain, str)
        or "/" in chain
        or chain in ("", ".", "..")
        or not isinstance(lens, list)
        or not lens
        or not all(isinstance(n, int) and n >= 0 for n in lens)
    ):
        raise SourceError(entry.path, operation, "manifest entry has no valid segment chain")
    if sum(lens) != entry.size:
        raise SourceError(
            entry.path,
            operation,
            f"the manifest's segments cover {sum(lens)} bytes, its size says {entry.size}",
        )
    return chain, lens


# -- observing ---------------------------------------------------------------


def list_pieces(durable: Store, entry: Entry) -> list[Piece]:
    """The parsed names in the entry's chain directory (one listing; [] if there is none)."""
    reldir = chain_dir(entry.path, chain_of(entry)[0])
    return [p for p in (parse(reldir, n) for n in durable.names(reldir)) if p is not None]


def load(durable: Store, entry: Entry) -> Chain:
    """List the entry's chain directory and resolve it (raises SourceError)."""
    return resolve(entry, list_pieces(durable, entry))


# -- deciding ----------------------------------------------------------------


def _newest(p: Piece) -> tuple[int, int]:
    return (-1 if p.mtime_ns is None else p.mtime_ns, p.end)


def resolve(entry: Entry, pieces: Iterable[Piece]) -> Chain:
    """The chain of a log from its manifest entry and the names listed (see module doc)."""
    chain, lens = chain_of(entry)
    by_seq: dict[int, list[Piece]] = {}
    for p in pieces:
        by_seq.setdefault(p.seq, []).append(p)
    path: list[Piece] = []
    pos = 0
    for seq, length in enumerate(lens):
        same = [p for p in by_seq.get(seq, ()) if p.start == pos and p.end == pos + length]
        if not same:
            raise SourceError(
                entry.path,
                "restore",
                f"segment {seq:08d}-{pos:012d}-{pos + length:012d} of "
                f"{chain_dir(entry.path, chain)} is missing: refusing to "
                "restore a shorter file",
            )
        path.append(max(same, key=_newest))
        pos += length
    _refuse_gaps(entry, by_seq)
    best = _best_continuations(by_seq, len(lens))
    nxt = best.get((len(lens), pos))
    while nxt is not None:
        path.append(nxt)
        nxt = best.get((nxt.seq + 1, nxt.end))
    return Chain(entry, tuple(path), len(lens))


def _refuse_gaps(entry: Entry, by_seq: dict[int, list[Piece]]) -> None:
    """Refuse when an object continues none before it: one in between is missing."""
    ends = {seq: {p.end for p in here} for seq, here in by_seq.items()}
    for seq in sorted(by_seq):
        before = {0} if seq == 0 else ends.get(seq - 1, set())  # seq 0 starts at 0
        orphans = sorted((p for p in by_seq[seq] if p.start not in before), key=lambda p: p.start)
        if orphans:
            p = orphans[0]
            raise SourceError(
                entry.path,
                "restore",
                f"segment {seq - 1:08d}-...-{p.start:012d} is missing (found "
                f"{p.label} after it): refusing to restore a file with a gap",
            )


def _best_continuations(by_seq: dict[int, list[Piece]], first: int) -> dict[tuple[int, int], Piece]:
    """For each (seq, start) from `first` on: the object to take there.

    The winner leads to the object published last (its live mtime, then its
    end); ties go to the newer, longer object itself.  Computed from the
    highest seq down, so a chain of any length needs no recursion.
    """
    best: dict[tuple[int, int], Piece] = {}
    rank: dict[str, tuple[int, int, int, int]] = {}
    for seq in sorted((s for s in by_seq if s >= first), reverse=True):
        for p in by_seq[seq]:
            nxt = best.get((seq + 1, p.end))
            tail = rank[nxt.name][:2] if nxt is not None else _newest(p)
            rank[p.name] = (*tail, *_newest(p))
        for p in by_seq[seq]:
            key = (seq, p.start)
            if key not in best or rank[p.name] > rank[best[key].name]:
                best[key] = p
    return best
