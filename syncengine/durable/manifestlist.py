"""The manifest directory as a list of names: which objects form the newest checkpoint.

Owns the object names (``<seq>.g<generation>.<base|delta>.jsonl``) and the
one rule that restore, verify, gc and the start-up check share for "the
newest checkpoint" (`listing`).  Ordered by seq, then newest generation
first, an object of an older generation than one already seen was written by
an instance that had lost the lease: *fenced*, never read.  A fenced object
whose seq is above the last object of the chain read is a *fork*: an
instance of an older generation went on writing after the newest
generation's last object (the lease objects were lost on a write-back mount,
or two mounts each held uploads the other could not see), so the chain read
is not the newest checkpoint.  Readers say so (`Listing.fork_problem`); a
writer's next object after a fork is a full base numbered above every listed
object (`Listing.top_seq`), under a generation above every listed one
(`Listing.generation`, the floor `syncengine.durable.leasing` takes the next
generation above).  Reads names only, never an object's bytes.
"""

from __future__ import annotations

import re

import attrs

from syncengine.durable.store import MANIFEST_DIR, Store

_NAME = re.compile(r"^(\d{12})(?:\.g(\d{12}))?\.(base|delta)\.jsonl$")


def object_name(seq: int, kind: str, generation: int = 0) -> str:
    """``<seq>.<kind>.jsonl``; written under a lease, ``<seq>.g<generation>.<kind>.jsonl``."""
    gen = f".g{generation:012d}" if generation else ""
    return f"{MANIFEST_DIR}/{seq:012d}{gen}.{kind}.jsonl"


@attrs.frozen
class Listing:
    """The manifest directory: the objects of the chain read, the fenced ones, and the
    highest generation and seq any object names."""

    objects: list[tuple[int, str, str]]  # (seq, kind, name), oldest first
    fenced: list[tuple[int, str, str]]
    generation: int = 0  # the newest lease generation any object names (0: none)
    chain_generation: int = 0  # the generation of the chain's last object

    @property
    def top_seq(self) -> int:
        """The highest seq of any object, fenced or not: a writer continues above it."""
        return max((seq for seq, _k, _n in self.objects + self.fenced), default=0)

    @property
    def forked(self) -> list[tuple[int, str, str]]:
        """Fenced objects written after the chain's last object (see the module
        docstring): the chain read is not the newest checkpoint."""
        last = self.objects[-1][0] if self.objects else 0
        return [o for o in self.fenced if o[0] > last]

    def fork_problem(self, where: str) -> str | None:
        """What a reader says of a fork (restore incomplete, verify fails), naming the
        repair; None when the chain read is the newest checkpoint."""
        forked = self.forked
        if not forked:
            return None
        last = self.objects[-1][0] if self.objects else 0
        names = ", ".join(name for _s, _k, name in forked[:4])
        more = f" and {len(forked) - 4} more" if len(forked) > 4 else ""
        return (
            f"{where}: the chain read (generation {self.chain_generation}, up to object "
            f"{last:012d}) is not the newest checkpoint: {names}{more}, of older "
            "generations, were written after it (lease objects lost on a write-back "
            "mount?). Run `syncengine checkpoint --check-durable` on the instance that "
            "holds the newest local state: it writes a full base above them under a new "
            "generation; then restore again"
        )


def listing(store: Store) -> Listing:
    """One listing, split by lease generation (see the module docstring).  Objects
    without one in their names (written before leases) are generation 0."""
    parsed = []
    for name in store.names(MANIFEST_DIR):
        m = _NAME.match(name)
        if m:
            parsed.append((int(m.group(1)), -int(m.group(2) or 0), m.group(3), name))
    parsed.sort()
    objects, fenced, newest = [], [], 0
    for seq, neg_gen, kind, name in parsed:
        if -neg_gen < newest:
            fenced.append((seq, kind, name))
            continue
        newest = -neg_gen
        objects.append((seq, kind, name))
    top = max((-neg_gen for _s, neg_gen, _k, _n in parsed), default=0)
    return Listing(objects, fenced, generation=top, chain_generation=newest)


def list_objects(store: Store) -> list[tuple[int, str, str]]:
    """(seq, kind, name) of the current chain's objects (not fenced), oldest first."""
    return listing(store).objects


__all__ = ["Listing", "list_objects", "listing", "object_name"]
