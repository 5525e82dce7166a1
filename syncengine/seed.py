"""Rebuilding a lost (or dropped) change index from the durable manifest.

Owns the one place a checkpoint reads the durable side's manifest: when the
local index is missing, or was dropped because the manifest is ahead of it.
Every entry is recorded dirty, so the next pass hashes the local file and
uploads it only when its content differs: nothing unchanged is copied again.
"""

from __future__ import annotations

from syncengine import segments, sqlite
from syncengine.checkpoint import AdapterState
from syncengine.index import DIRTY
from syncengine.manifest import load as load_manifest


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
            state.index.record(entry.path, size=entry.size, mtime_ns=entry.mtime_ns,
                               ctime_ns=DIRTY, hash64=entry.hash or 0, mode=entry.mode,
                               kind=entry.kind, target=entry.target, extra=entry.index_extra())
        elif entry.kind == "segments":
            segments.seed(state.index, entry)
        elif entry.kind == "dir":  # compared with the live directory by the next walk
            state.index.record_dir(entry.path, entry.mode)
        elif entry.kind == "sqlite":  # snapshot next pass; published only if it differs
            state.index.record(entry.path, size=entry.size, mtime_ns=entry.mtime_ns,
                               ctime_ns=DIRTY, hash64=entry.hash or 0, mode=entry.mode,
                               kind="sqlite", extra=sqlite.seed_extra(entry, state.sqlite_patterns))
    if manifest_state.last_seq:
        state.index.meta.update(manifest_seq=manifest_state.last_seq,
                                base_seq=manifest_state.base_seq,
                                deltas=manifest_state.deltas_since_base)
