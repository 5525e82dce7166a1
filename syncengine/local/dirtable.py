"""The directory table: which directories of a live tree changed since the last walk.

Owns the per-adapter ``<state_dir>/index/<adapter>.dirs`` file and the rules
that keep it honest.  A directory's mtime and ctime move whenever an entry is
created, removed or renamed in it, and only then; the content of a file in it
does not.  So a walk that knows each directory's signature from the last pass
need not list a directory whose signature is unchanged: the files it holds are
the index's paths, and each is still ``lstat``-ed, which catches every change
of content.  Listing is skipped, never the per-file check.  On a 100,000-file
tree that removes a third of an idle pass's system calls.

The directories that hold indexed files are in the order derived from the
index's keys (`derive`), and the table stores one 8-byte signature per
directory in that order (8 MB per million directories), and the order itself
(their names in one string), so a walk need not derive it again from every key
(10 ms for 100,000 keys); a table saved without it derives it.
Directories that hold no indexed file (empty, or only excluded files) are kept
by name in ``extras``, so a file created in one is still found.

The table is a cache, bound to one saved index file (its inode, size and mtime)
and to the walk's configuration (root, exclusions).  Anything else that saves
the index (restore, gc, a watcher-driven pass that adds paths) or changes the
exclusions makes it stale, and the next walk lists every directory again and
rebuilds it.  A
directory whose mtime is within the timestamp granularity of the pass start is
stored as UNKNOWN, so a change in the same clock tick is never missed (borg's
files cache and git's "racily clean" index entries do the same).

The same signatures tell when a directory itself must be compared with its
record in the index (its mode, and whether it is there): a chmod moves its
ctime, removing it makes it GONE, so a directory whose signature stands needs
no look (see `tablewalk`).
"""

from __future__ import annotations

import marshal
import os
from array import array
from collections.abc import Callable, Iterable, Sequence

import attrs
import xxhash

from syncengine.fs import savefile

MAGIC = b"SYNCDIR2"  # 2: directories are recorded; a table of 1 never compared them
UNKNOWN = 0  # list this directory on the next walk
GONE = 1  # not a directory any more (removed, or replaced by a file or symlink)


def dir_sig(ino: int, mtime_ns: int, ctime_ns: int, recent_ns: int) -> int:
    """A directory's signature, or UNKNOWN when it changed too recently to trust."""
    if mtime_ns >= recent_ns or ctime_ns >= recent_ns:
        return UNKNOWN
    return xxhash.xxh3_64_intdigest(b"%d:%d:%d" % (ino, mtime_ns, ctime_ns)) | 2


def derive(keys: Iterable[str]) -> list[str]:
    """The directories holding `keys` (ancestors included), root ``""`` first, each once.

    The order depends only on the keys' order, which the saved index keeps:
    the table's signatures are stored in this order.
    """
    out = [""]
    known = {""}
    prev = None
    for key in keys:
        parent = key.rpartition("/")[0]
        if parent == prev:
            continue
        prev = parent
        chain = []
        while parent not in known:
            known.add(parent)
            chain.append(parent)
            parent = parent.rpartition("/")[0]
        out.extend(reversed(chain))
    return out


@attrs.define
class DirTable:
    """Signatures of a tree's directories as of the last walk."""

    index_sig: tuple[int, int, int]  # the index file these signatures belong with
    fingerprint: str  # the walk's root and exclusions
    nkeys: int  # the index's keys the signatures were derived from (a prefix of them)
    sigs: array  # type: ignore[type-arg]  # one per `derive(keys[:nkeys])`, in that order
    extras: dict[str, int] = attrs.field(factory=dict)  # directories holding no indexed path
    unwalked: frozenset[str] = frozenset()  # indexed paths a walk never reports (excluded)
    specials: tuple[str, ...] = ()  # FIFOs, sockets, devices seen when last listed
    order: list[str] | None = None  # `derive(keys[:nkeys])` as saved (None: derive it)


@attrs.define
class DirWalk:
    """What one walk learned about directories (merged across worker processes).

    `fresh` holds the signatures of the table's derived directories, in the
    table's order (an incremental walk); `listed` the signature of every
    directory the walk listed, new ones included (UNKNOWN where listing
    failed, so it is tried again).
    """

    order: list[str] | None = None  # the table's derived directories (incremental walk)
    fresh: array = attrs.field(factory=lambda: array("Q"))  # type: ignore[type-arg]
    listed: dict[str, int] = attrs.field(factory=dict)
    broken: list[str] = attrs.field(factory=list)  # derived directories now a file or symlink

    def merge(self, other: DirWalk) -> None:
        self.fresh.extend(other.fresh)
        self.listed.update(other.listed)
        self.broken.extend(other.broken)


def fingerprint(root: str, patterns: Sequence[str], skip_dirs: Iterable[str]) -> str:
    """Identity of a walk's configuration: a table taken under another one is stale."""
    text = repr((1, root, tuple(patterns), tuple(sorted(skip_dirs))))
    return xxhash.xxh3_64_hexdigest(text.encode("utf-8", "surrogateescape"))


def rebase(
    old: DirTable | None,
    walk: DirWalk,
    keys: Sequence[str],
    hidden: Callable[[str], bool],
    specials: Sequence[str],
    index_sig: tuple[int, int, int],
    fp: str,
    unwalked: Iterable[str] = (),
    unwalked_upto: int = 0,
) -> DirTable:
    """The table to keep after a pass, for the index as saved now (`keys`, `index_sig`).

    `old` is the table the pass's walk started from, and `walk` (with its
    ``order``) what that walk learned; or `old` is None after a full listing,
    whose `walk` holds every directory and whose `unwalked` (for the keys
    before `unwalked_upto`) the caller decided.  Keys are only ever appended
    during a pass, so the keys past those are the new ones: those `hidden` says
    a walk would not report join `unwalked`.  `specials` are the special files
    the walk reported.
    """
    if old is not None and len(keys) == old.nkeys:
        return _same_keys(old, walk, specials, index_sig, fp)
    by_dir: dict[str, int] = {}
    if old is not None:
        assert walk.order is not None, "a walk from a table knows the table's order"
        by_dir.update(zip(walk.order, walk.fresh, strict=True))
        by_dir.update(old.extras)
        skip, start = set(old.unwalked), old.nkeys
    else:
        skip, start = set(unwalked), unwalked_upto
    by_dir.update(walk.listed)
    skip.update(k for k in keys[start:] if hidden(k))
    order = derive(keys)
    new = array("Q", (by_dir.pop(d, UNKNOWN) for d in order))
    extras = {d: s for d, s in by_dir.items() if s != GONE}
    return DirTable(index_sig, fp, len(keys), new, extras, frozenset(skip), tuple(specials), order)


def _same_keys(
    old: DirTable, walk: DirWalk, specials: Sequence[str], index_sig: tuple[int, int, int], fp: str
) -> DirTable:
    """`rebase` when the pass added no path (files only changed): the order stands."""
    assert walk.order is not None
    sigs = array("Q", walk.fresh)
    extras = dict(old.extras)
    if walk.listed:
        pos = {d: i for i, d in enumerate(walk.order)}
        for d, s in walk.listed.items():
            i = pos.get(d)
            if i is not None:
                sigs[i] = s
            elif s == GONE:
                extras.pop(d, None)
            else:
                extras[d] = s
    return DirTable(
        index_sig, fp, old.nkeys, sigs, extras, old.unwalked, tuple(specials), walk.order
    )


def load(
    path: str | os.PathLike[str], index_sig: tuple[int, int, int] | None, fp: str
) -> DirTable | None:
    """The saved table if it belongs with this index file and configuration, else None."""
    if index_sig is None:
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
        if not data.startswith(MAGIC):
            return None
        digest, payload = data[len(MAGIC) : len(MAGIC) + 8], data[len(MAGIC) + 8 :]
        if xxhash.xxh3_64_digest(payload) != digest:
            return None  # torn or damaged (it is written without fsync)
        p = marshal.loads(payload)
        if tuple(p["index_sig"]) != tuple(index_sig) or p["fp"] != fp:
            return None
        sigs = array("Q")
        sigs.frombytes(p["sigs"])
        order = p["order"].split("\0") if "order" in p else None  # an older table: derived
        if order is not None and len(order) != len(sigs):
            return None
        return DirTable(
            index_sig,
            fp,
            p["nkeys"],
            sigs,
            p["extras"],
            frozenset(p["unwalked"]),
            tuple(p["specials"]),
            order,
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, EOFError, TypeError, KeyError):
        return None


def save(path: str | os.PathLike[str], table: DirTable) -> None:
    """Write the table (a cache: no fsync; a torn file fails its checksum and is rebuilt)."""
    payload = marshal.dumps(
        {
            "index_sig": list(table.index_sig),
            "fp": table.fingerprint,
            "nkeys": table.nkeys,
            "sigs": table.sigs.tobytes(),
            "extras": table.extras,
            "unwalked": sorted(table.unwalked),
            "specials": list(table.specials),
            **({} if table.order is None else {"order": "\0".join(table.order)}),
        }
    )
    savefile.write_file(
        path, MAGIC + xxhash.xxh3_64_digest(payload) + payload, mode=0o600, fsync=False
    )
