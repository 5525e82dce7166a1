"""Whether the durable side holds what the local index says was published.

Owns two cheap comparisons that the start-up check (seed.py) and verify share:

- `sequence_problems`: the index records the manifest sequence it last wrote
  or read (``manifest_seq``); one listing of the manifest folder shows whether
  that object and every object after the newest base before it are there.  A
  manifest object is written after the objects it names, so on a mount that
  commits at close (hf-mount, rclone without a VFS cache, a local disk) this
  listing is all it takes.
- The unconfirmed list (``UNCONFIRMED`` in the index's meta): on a write-back
  mount, what a pass published and nothing confirmed reached the bucket (the
  mount could not be asked, or did not answer in time).  Such a mount uploads
  in its own order, so a manifest object may land while an object it names is
  lost.  `after_pass` keeps, per path, the newest object (for a log, the
  chain's segments not yet confirmed), tagged with the mount instance
  (`fuseserver.instance`); a later confirmation on the same instance clears
  them; `audit` looks at each one (one stat, or one listing of a chain).  An
  object seen on a *later* instance was read back from the bucket (or from a
  cache the mount will upload at start): it is settled.  On the instance that
  wrote it, the mount shows its cache, so it stays listed.

And one mark: `rebase`, set wherever an index learns that the manifest forked
(the start-up check, a rebuild from the manifest, a restore), so that the next
pass writes a full base above the fork.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

import attrs

from syncengine.crypt import chunked
from syncengine.crypt.secrets import sealed_with
from syncengine.durable.chain import chain_dir, parse
from syncengine.durable.manifest import COMPACT_AFTER, Entry
from syncengine.durable.store import Store
from syncengine.local.index import Index

UNCONFIRMED = "unconfirmed"  # index meta: path -> the newest unconfirmed object(s)
REBASE = "rebase"  # index meta: write a full base next pass, even one that changed nothing


def rebase(meta: MutableMapping[str, Any], top_seq: int) -> None:
    """After a fork (`manifestlist.Listing.forked`): the next manifest object is a full
    base of this index, numbered above every listed object (`top_seq`), written by the
    next pass even if nothing changed; under a new lease generation, it is the newest
    checkpoint again (`syncengine.checkpoint.record.write_base` clears the mark)."""
    meta["manifest_seq"] = max(int(meta.get("manifest_seq", 0)), top_seq)
    meta["deltas"] = COMPACT_AFTER
    meta[REBASE] = True


def rebase_due(meta: Mapping[str, Any]) -> bool:
    return meta.get(REBASE) is True


def sequence_problems(objects: list[tuple[int, str, str]], seq: int) -> list[str]:
    """What the listing `objects` (manifest.list_objects) lacks of what an index that
    recorded manifest object `seq` relies on: [] when nothing is missing."""
    if seq <= 0:
        return []
    have = {s for s, _, _ in objects}
    newest = max(have, default=0)
    if newest < seq:
        found = f"object {newest:012d}" if newest else "no manifest object"
        return [
            f"the durable manifest has {found}, but the local index recorded object "
            f"{seq:012d} as published"
        ]
    bases = [s for s, kind, _ in objects if kind == "base" and s <= seq]
    lost = [s for s in range(bases[-1] if bases else 1, seq + 1) if s not in have]
    if lost:
        return [
            f"manifest objects {lost[0]:012d} to {lost[-1]:012d} are missing "
            f"({len(lost)} of them), though the local index recorded object {seq:012d}"
        ]
    return []


def pending(meta: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    value = meta.get(UNCONFIRMED)
    return value if isinstance(value, dict) else {}


def after_pass(
    index: Index, published: Iterable[Entry], confirmed: bool, instance: str, *, keeps_mtime: bool
) -> None:
    """Record a pass's objects as unconfirmed, or clear what this instance confirmed."""
    listed = pending(index.meta)
    if confirmed:
        done = [p for p, e in listed.items() if e.get("instance") == instance]
        for path in done:
            del listed[path]
        if done:
            index.changed = True
        return
    for entry in published:
        record = _record(entry, listed.get(entry.path), instance, keeps_mtime)
        if record is not None:
            listed[entry.path] = record
            index.changed = True
    if listed:
        index.meta[UNCONFIRMED] = listed


def _record(
    entry: Entry, old: Mapping[str, Any] | None, instance: str, keeps_mtime: bool
) -> dict[str, Any] | None:
    if entry.kind == "segments":
        chain, lens = str(entry.extra.get("chain", "")), list(entry.extra.get("lens", ()))
        if not chain or not lens:
            return None
        first = len(lens) - 1  # a pass adds one object to a chain (or starts one)
        if old is not None and old.get("chain") == chain:
            first = min(first, int(old.get("first", first)))
        return {
            "kind": "segments",
            "chain": chain,
            "lens": lens,
            "first": first,
            "instance": instance,
        }
    if entry.kind in ("file", "sqlite"):
        return {
            "kind": entry.kind,
            "object": entry.location,
            "size": chunked.sealed_size(entry.size) if sealed_with(entry.extra) else entry.size,
            "mtime_ns": entry.mtime_ns if keeps_mtime else None,
            "instance": instance,
        }
    return None  # a symlink lives in the manifest only


@attrs.frozen
class Audit:
    """What `audit` found: objects missing from the durable side, and settled paths."""

    missing: dict[str, str] = attrs.field(factory=dict)  # path -> what is missing
    settled: tuple[str, ...] = ()


def audit(store: Store, index: Index, instance: str | None) -> Audit:
    """Look at every unconfirmed object the index lists.  `instance`: the mount instance
    now (None: report only, settle nothing)."""
    missing: dict[str, str] = {}
    settled = []
    for path, record in sorted(pending(index.meta).items()):
        if path not in index.records:
            settled.append(path)  # forgotten since (gc): nothing to vouch for
            continue
        problem = (
            _segments(store, path, record)
            if record.get("kind") == "segments"
            else _object(store, record)
        )
        if problem is not None:
            missing[path] = problem
        elif instance is not None and record.get("instance") != instance:
            settled.append(path)
    return Audit(missing, tuple(settled))


def _object(store: Store, record: Mapping[str, Any]) -> str | None:
    location = str(record.get("object"))
    st = store.head(location)
    if st is None or st.kind != "file":
        return f"{location} is missing"
    if st.size != record.get("size"):
        return f"{location} has {st.size} bytes, not the {record.get('size')} published"
    mtime = record.get("mtime_ns")
    if mtime is not None and st.mtime_ns != mtime:
        return f"{location} is an older version (its mtime is not the one published)"
    return None


def _segments(store: Store, path: str, record: Mapping[str, Any]) -> str | None:
    lens = [int(n) for n in record.get("lens", ())]
    reldir = chain_dir(path, str(record.get("chain")))
    found = {}
    for name in store.names(reldir):
        piece = parse(reldir, name)
        if piece is not None:
            found[(piece.seq, piece.start, piece.end)] = piece
    start = sum(lens[: int(record.get("first", 0))])
    for seq in range(int(record.get("first", 0)), len(lens)):
        piece = found.get((seq, start, start + lens[seq]))
        st = store.head(piece.name) if piece is not None else None
        if piece is None or st is None or st.size != lens[seq]:
            return f"segment {seq} of chain {reldir} is missing"
        start += lens[seq]
    return None


def forget(meta: MutableMapping[str, Any], paths: Iterable[str]) -> None:
    listed = pending(meta)
    for path in paths:
        listed.pop(path, None)
    if not listed:
        meta.pop(UNCONFIRMED, None)


__all__ = [
    "REBASE",
    "UNCONFIRMED",
    "Audit",
    "after_pass",
    "audit",
    "forget",
    "pending",
    "rebase",
    "rebase_due",
    "sequence_problems",
]
