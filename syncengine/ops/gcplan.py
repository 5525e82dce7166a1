"""Garbage collection's deciding: facts in, a plan of deletions out.

Owns `Facts` (what `gc.gather` observed of one adapter), the actions
(`DeletePath`, `DeleteObjects`, `Wait`, each with a readable `__str__`),
`refusal` (why gc must not run for this adapter at all) and `plan`, a pure
function of the facts, the ``[gc]`` settings and the time, so tests assert
on the plan as text.  Observes and deletes nothing: that is `syncengine.ops.gc`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import attrs

from syncengine.config import GcConfig
from syncengine.durable.chain import chain_dir
from syncengine.durable.manifest import Entry

NS = 10**9


FENCED = "fenced manifest objects"  # gc.apply deletes these whatever their seq


@attrs.frozen
class Facts:
    """What gc observed for one adapter; `plan` decides from this alone."""

    adapter: str
    entries: Mapping[str, Entry]
    last_seq: int
    base_seq: int  # newest readable base (0: none)
    manifest_objects: tuple[tuple[int, str, int], ...]  # (seq, name, bytes)
    absent: Mapping[str, tuple[int, int | None]]  # path -> (passes, first absent ns)
    missing_locally: frozenset[str]  # manifest paths not in the live tree (lstat)
    live_exists: bool
    staging: tuple[tuple[str, int, int], ...]  # (object name, bytes, mtime_ns)
    chain_objects: tuple[tuple[str, str, str, int, int], ...]  # (path, chain, name, bytes, mtime)
    unusable: tuple[str, ...] = ()  # manifest problems and invalid entries (manifest.py)
    fenced: tuple[str, ...] = ()  # manifest objects of a writer that had lost the lease
    versions: tuple[tuple[str, int, int], ...] = ()  # .syncengine/objects/: (name, bytes, mtime)


@attrs.frozen
class DeletePath:
    """A tombstone: remove the path from the manifest and delete its objects."""

    path: str
    objects: tuple[str, ...]
    bytes: int
    absent_since_ns: int

    def __str__(self) -> str:
        return (
            f"delete {self.path} (tombstone: gone locally since {_when(self.absent_since_ns)}"
            f"; {len(self.objects)} object(s), {self.bytes} bytes)"
        )


@attrs.frozen
class DeleteObjects:
    """Objects no manifest entry needs: superseded manifests, old chains, staging leftovers."""

    what: str
    objects: tuple[str, ...]
    bytes: int

    def __str__(self) -> str:
        return f"delete {self.what} ({len(self.objects)} object(s), {self.bytes} bytes)"


@attrs.frozen
class Wait:
    """A path missing locally that is not (yet) to be deleted, and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"keep {self.path} ({self.reason})"


GcAction = DeletePath | DeleteObjects | Wait


def _when(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / NS))


def refusal(facts: Facts, cfg: GcConfig) -> str | None:
    """Why this adapter's local view cannot be trusted for gc, or None."""
    if facts.unusable:  # an object or entry nobody can read may name what gc would delete
        return (
            f"the manifest is not whole ({len(facts.unusable)} unreadable object(s) or "
            f"invalid entries, first: {facts.unusable[0]}); run `syncengine verify`"
        )
    if not facts.entries:
        return None
    if not facts.live_exists:
        return "the live tree does not exist: is local storage mounted and restored?"
    total = len(facts.entries)
    present = total - len(facts.missing_locally)
    if present == 0:
        return f"the live tree is empty but the manifest lists {total} paths: restore first"
    if present < cfg.min_present_ratio * total:
        return (
            f"only {present} of {total} manifest paths exist locally (below "
            f"min_present_ratio {cfg.min_present_ratio}): a partial or wrong local view"
        )
    return None


def _objects_of(entry: Entry, chains: Mapping[str, list[tuple[str, int]]]) -> list[tuple[str, int]]:
    if entry.kind == "segments":  # every chain, and the plain copy at the path (segments.py)
        plain = entry.extra.get("plain")
        size = plain.get("size", 0) if isinstance(plain, dict) else 0
        return [*chains.get(entry.path, []), (entry.path, size if isinstance(size, int) else 0)]
    if entry.kind in ("file", "sqlite"):
        return [(entry.location, entry.size)]
    return []  # a symlink or a directory lives in the manifest only


def plan(facts: Facts, cfg: GcConfig, now_ns: int) -> tuple[GcAction, ...]:
    """What gc does for one adapter (call `refusal` first)."""
    grace_ns = int(cfg.grace_seconds * NS)
    actions: list[GcAction] = []
    per_path: dict[str, list[tuple[str, int]]] = {}
    for path, _chain, name, size, _mtime in facts.chain_objects:
        per_path.setdefault(path, []).append((name, size))
    tombstones: set[str] = set()
    for path in sorted(facts.missing_locally):
        entry = facts.entries[path]
        passes, since = facts.absent.get(path, (0, None))
        if passes < cfg.absent_passes:
            actions.append(Wait(path, f"missing in {passes} of {cfg.absent_passes} checkpoints"))
        elif since is None:
            actions.append(
                Wait(
                    path,
                    "no record of when it went missing; the next "
                    "checkpoint starts its grace period",
                )
            )
        elif now_ns - since < grace_ns:
            actions.append(Wait(path, f"tombstone; grace period ends {_when(since + grace_ns)}"))
        else:
            objs = _objects_of(entry, per_path)
            tombstones.add(path)
            actions.append(
                DeletePath(path, tuple(n for n, _ in objs), sum(s for _, s in objs), since)
            )
    # Superseded manifest objects: older than the newest readable base (the new base,
    # when tombstones make one).  Never the only readable base.
    keep_from = facts.last_seq + 1 if tombstones else facts.base_seq
    superseded = [(name, size) for seq, name, size in facts.manifest_objects if seq < keep_from]
    if facts.fenced:  # never read by a restore (manifest.listing): nothing refers to them
        actions.append(DeleteObjects(FENCED, facts.fenced, 0))
    if superseded:
        actions.append(
            DeleteObjects(
                "superseded manifest objects",
                tuple(n for n, _ in superseded),
                sum(s for _, s in superseded),
            )
        )
    actions.extend(_superseded_chains(facts, tombstones, now_ns, grace_ns))
    old = _superseded_versions(facts, now_ns, grace_ns)
    if old:
        actions.append(
            DeleteObjects("superseded versions", tuple(n for n, _ in old), sum(s for _, s in old))
        )
    stale = [(n, s) for n, s, m in facts.staging if now_ns - m >= cfg.staging_seconds * NS]
    if stale:
        actions.append(
            DeleteObjects(
                "staging leftovers", tuple(n for n, _s in stale), sum(s for _n, s in stale)
            )
        )
    return tuple(actions)


def _superseded_versions(facts: Facts, now_ns: int, grace_ns: int) -> list[tuple[str, int]]:
    """Versions of files on a mount without rename (`.syncengine/objects/`) that no entry
    names, once older than the grace period: the older versions of changed files, and
    the plain copies of secret files sealed since (docs/SECRETS.md)."""
    named = {e.location for e in facts.entries.values()}
    return [
        (name, size)
        for name, size, mtime in facts.versions
        if name not in named and now_ns - mtime >= grace_ns
    ]


def _superseded_chains(
    facts: Facts, tombstones: set[str], now_ns: int, grace_ns: int
) -> list[DeleteObjects]:
    """Segment chains no manifest entry names (a tombstoned path's go with it), once
    their newest object is older than the grace period."""
    current = {
        (e.path, str(e.extra.get("chain"))) for e in facts.entries.values() if e.kind == "segments"
    }
    chains: dict[tuple[str, str], list[tuple[str, int, int]]] = {}
    for path, chain, name, size, mtime in facts.chain_objects:
        if path not in tombstones and (path, chain) not in current:
            chains.setdefault((path, chain), []).append((name, size, mtime))
    return [
        DeleteObjects(
            f"superseded chain {chain_dir(path, chain)}",
            tuple(n for n, _, _ in chain_objs),
            sum(s for _, s, _ in chain_objs),
        )
        for (path, chain), chain_objs in sorted(chains.items())
        if now_ns - max(m for _, _, m in chain_objs) >= grace_ns
    ]
