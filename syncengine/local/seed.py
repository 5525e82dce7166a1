"""The local index against the durable side: the check at a start, and rebuilding.

Owns the two places a checkpoint reads the durable side's manifest outside
a pass's own writes:

- `check`, at each start: the index must never be ahead of the bucket.  A
  write-back mount (rclone with a VFS cache) acknowledges a close before the
  upload; killed with its cache dropped, it loses what the index already
  records as published, and an unchanged local file is then never published
  again.  So at a start the index is compared with the durable side
  (behind.py: one listing of the manifest folder, plus one stat per object a
  write-back mount did not confirm); when the durable side is behind, this
  says so, rebuilds the index from the durable manifest, forgets the objects
  that are missing, and makes the next manifest object a full base: the pass
  then publishes again what differs.  The same listing shows a fork (an older
  generation wrote after the newest one, `manifestlist`): the next pass writes
  a full base of this index above it (`behind.rebase`), even an idle one.
- `from_manifest`, when the local index is missing, or was dropped because
  the manifest is ahead of it.  Every entry is recorded dirty, so the next
  pass hashes the local file and uploads it only when its content differs:
  nothing unchanged is copied again.

A *start* is a new mount instance (`probe.instance`: boot, mount, and the
process serving it) since the last check, remembered per adapter in
``<state_dir>/checked/<adapter>.json``, so a timer that runs a one-shot
``checkpoint --no-wait`` every 15 s checks once per mount instance, not every
run; a long-running engine (`Runner`, ``syncengine run``) also checks when it
starts, and again whenever the mount instance changes under it.  A pass
between starts does no listing: the idle pass stays at 0 mount operations.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from syncengine.durable import manifest
from syncengine.durable.manifest import Entry
from syncengine.durable.manifest import load as load_manifest
from syncengine.durable.store import MANIFEST_DIR
from syncengine.errors import local_error
from syncengine.fs import savefile
from syncengine.local import behind, chainstate, pending
from syncengine.local.adapter import AdapterState
from syncengine.local.index import DIRTY, Index
from syncengine.local.status import read_json
from syncengine.sqlite.files import matches

log = logging.getLogger("syncengine")


def record_dirty(index: Index, entry: manifest.Entry) -> None:
    """Record a file or link as the manifest has it, dirty: the next pass hashes the
    local path and publishes it only if it differs (a rebuilt index, a kept local file)."""
    index.record(
        entry.path,
        size=entry.size,
        mtime_ns=entry.mtime_ns,
        ctime_ns=DIRTY,
        hash64=entry.hash or 0,
        mode=entry.mode,
        kind=entry.kind,
        target=entry.target,
        extra=entry.index_extra() or {},
    )


def _rebuild(state: AdapterState, old: Index) -> None:
    """A new index from the manifest, keeping the old one's pending paths (a background
    restore's, still to come: local/pending.py)."""
    state.index = Index()
    from_manifest(state)
    pending.carry(old, state.index)


def from_manifest(state: AdapterState) -> None:
    """A missing index is rebuilt from the durable manifest, so nothing is re-uploaded.

    Every entry is recorded dirty: the next pass hashes the local file and
    uploads it only when its content differs.  This is the one time a
    checkpoint lists the durable side (the manifest directory).
    """
    if not state.store.exists():
        return
    manifest_state = load_manifest(state.store)
    for entry in manifest_state.entries.values():
        if entry.kind in ("file", "symlink"):
            record_dirty(state.index, entry)
        elif entry.kind == "segments":
            chainstate.seed(state.index, entry)
        elif entry.kind == "dir":  # compared with the live directory by the next walk
            state.index.record_dir(entry.path, entry.mode)
        elif entry.kind == "sqlite":  # snapshot next pass; published only if it differs
            state.index.record(
                entry.path,
                size=entry.size,
                mtime_ns=entry.mtime_ns,
                ctime_ns=DIRTY,
                hash64=entry.hash or 0,
                mode=entry.mode,
                kind="sqlite",
                extra=_snapshot_extra(entry, state.sqlite_patterns),
            )
    if manifest_state.last_seq:
        state.index.meta.update(
            manifest_seq=manifest_state.last_seq,
            base_seq=manifest_state.base_seq,
            deltas=manifest_state.deltas_since_base,
        )


def checked_path(state_dir: Path, adapter: str) -> Path:
    return state_dir / "checked" / f"{adapter}.json"


def due(state_dir: Path, adapter: str, instance: str) -> bool:
    """Whether the mount instance changed since this adapter was last checked."""
    return read_json(checked_path(state_dir, adapter)).get("instance") != instance


def remember(state_dir: Path, adapter: str, instance: str, now_ns: int) -> None:
    path = checked_path(state_dir, adapter)
    try:
        savefile.write_file(
            path,
            json.dumps({"instance": instance, "checked_ns": now_ns}).encode(),
            mode=0o600,
            fsync=False,
        )
    except OSError as exc:
        raise local_error("remember the start-up check", path, exc) from exc


def check(state: AdapterState, instance: str, *, rebase: bool = False) -> list[str]:
    """Compare the durable side with what the index says was published (see the module
    docstring); repair and save the index when it is behind.  Returns what was missing.
    A fork is repaired from here (`behind.rebase`) when this index recorded the newest
    object listed (it wrote them: this instance holds the newest local state), or when
    asked (`rebase`: ``checkpoint --check-durable``, the operator's choice)."""
    index = state.index
    seq = int(index.meta.get("manifest_seq", 0))
    if not seq and not behind.pending(index.meta):
        return []
    t0 = time.monotonic()
    listed = manifest.listing(state.store)  # fenced objects are there: only not read
    problems = behind.sequence_problems(sorted(listed.objects + listed.fenced), seq)
    found = behind.audit(state.store, index, instance)
    log.info(
        "durable.checked adapter=%s seq=%d unconfirmed=%d missing=%d seconds=%.3f",
        state.name,
        seq,
        len(behind.pending(index.meta)),
        len(problems) + len(found.missing),
        time.monotonic() - t0,
        extra={"event": "durable.checked"},
    )
    if problems:
        still = {
            p: r
            for p, r in behind.pending(index.meta).items()
            if p not in found.missing and p not in found.settled
        }
        _rebuild(state, index)
        if still:
            state.index.meta[behind.UNCONFIRMED] = still
    behind.forget(state.index.meta, [*found.settled, *found.missing])
    state.index.changed = state.index.changed or bool(found.settled)
    for path in found.missing:
        state.index.forget(path)
    said = problems + [f"{path}: {what}" for path, what in sorted(found.missing.items())]
    if said:
        state.index.meta["deltas"] = manifest.COMPACT_AFTER  # the next object: a full base
        state.index.changed = True
        shown = "; ".join(said[:10]) + (f"; and {len(said) - 10} more" if len(said) > 10 else "")
        log.warning(
            "durable.behind adapter=%s durable=%s: the durable side lacks what the "
            "local index records as published (a write-back mount that lost its "
            "uploads?): %s. %s, and publishing again what differs",
            state.name,
            state.store.describe(),
            shown,
            "Rebuilding the index from the durable manifest"
            if problems
            else f"Forgetting {len(found.missing)} path(s) in the index",
            extra={"event": "durable.behind"},
        )
    fork = listed.fork_problem(state.store.where(MANIFEST_DIR))
    if fork is not None:
        _forked(state, fork, listed.top_seq, rebase=rebase or seq >= listed.top_seq)
    if state.index.changed:
        state.index.save(state.index_path)
    return said + ([fork] if fork else [])


def _forked(state: AdapterState, fork: str, top_seq: int, *, rebase: bool) -> None:
    if rebase:
        behind.rebase(state.index.meta, top_seq)
        state.index.changed = True
    log.warning(
        "durable.forked adapter=%s: %s. %s",
        state.name,
        fork,
        "This instance writes that base at its next checkpoint"
        if rebase
        else "This index is older than those objects: nothing is repaired from here "
        "unless asked (`--check-durable`)",
        extra={"event": "durable.forked"},
    )


def _snapshot_extra(entry: Entry, patterns: Sequence[str]) -> dict[str, Any]:
    """Index extras for a snapshot known only from the manifest (a rebuilt index).

    The same record `checkpoint.sqlite` writes after publishing one, with no WAL
    signature, so the next pass snapshots the database and publishes it if it differs.
    """
    return {
        "object": entry.location,
        "size": entry.size,
        "mtime_ns": entry.mtime_ns,
        "snapshot_ns": entry.extra.get("snapshot_ns"),
        "_wal": None,
        "_listed": matches(patterns, entry.path),
    }
