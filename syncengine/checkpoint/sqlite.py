"""SQLite databases on the checkpoint side: decide, publish.

Owns the rule that a live SQLite database is never copied as files (its
``-wal`` and ``-shm`` are read at different transaction boundaries): a
database listed by an adapter's ``sqlite`` globs, or found by its header in a
tree (both `syncengine.sqlite.files`), is copied with the online backup API
into a local staging file and checked (`sqlite_backup`, `sqlite.check`), then
published through the copier as one closed object at ``checkpoints/<relpath>``,
only when its hash differs from the last published snapshot.

Change detection compares size and mtime_ns of the database and of its WAL
with what the index recorded (never ctime: a connection opened as root
changes the WAL's ctime).  Restoring lives in `sqlite_restore`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# apsw and tempfile are imported in the functions that use them (here and in the
# sqlite_* modules): most checkpoint passes never open a database, and every CLI call
# pays for imports.
from syncengine.checkpoint.copier import Published, upload
from syncengine.checkpoint.sqlite_backup import (
    Staged,
    remove_set,
    stage,
    sweep_staging,
    wal_sig,
)
from syncengine.crypt import chunked
from syncengine.crypt.keys import Key
from syncengine.crypt.sealed import SealError
from syncengine.crypt.secrets import SEALED, Secrets, sealed_with
from syncengine.durable.manifest import Entry
from syncengine.durable.store import Store
from syncengine.fs.stream import stream
from syncengine.local.index import DIRTY, Index
from syncengine.plan import Snapshot
from syncengine.sqlite.check import CheckFailed, Verdict, check
from syncengine.sqlite.files import LISTED, find_databases

Seal = tuple[Key, str] | None  # a key and the ``ADAPTER/PATH`` name: sealed, else plain
log = logging.getLogger("syncengine")

CHECKPOINT_DIR = "checkpoints"


def object_name(relpath: str) -> str:
    """Where the snapshot of the database at `relpath` is published, in the store."""
    return f"{CHECKPOINT_DIR}/{relpath}"


# -- deciding -----------------------------------------------------------


def plan_databases(live: Path, patterns: Sequence[str], index: Index) -> list[Snapshot]:
    """A Snapshot action for each listed database whose file or WAL changed."""
    actions = []
    for rel in find_databases(live, patterns):
        path = f"{live}/{rel}"
        try:
            st = os.lstat(path)
        except OSError:
            continue
        rec = index.get(rel)
        if rec is None or rec.kind != "sqlite":
            reason = "new"
        elif rec.absent:
            reason = "reappeared"
        elif rec.ctime_ns == DIRTY:
            reason = "changed recently or not yet checked: look again"
        elif (rec.size, rec.mtime_ns) != (st.st_size, st.st_mtime_ns):
            reason = "database changed"
        elif index.extras.get(rel, {}).get("_wal") != wal_sig(path):
            reason = "WAL changed"
        else:
            continue
        actions.append(Snapshot(rel, reason))
    return actions


# -- doing --------------------------------------------------------------


def check_durable_copy(
    durable: Store,
    relpath: str,
    scratch: Path,
    entry: Entry | None = None,
    secrets: Secrets | None = None,
    timeout: float = 2.0,
) -> tuple[int, int, Verdict]:
    """(bytes, xxh3_64, verdict) of a durable snapshot, checked on a local temp copy.

    SQLite is never opened on the mount: the snapshot is streamed into a temp
    file under `scratch` (local disk) and checked there.  Raises CheckFailed.
    """
    import tempfile

    scratch.mkdir(parents=True, exist_ok=True)
    with durable.open(relpath) as src, tempfile.TemporaryDirectory(dir=scratch) as tmpdir:
        local = os.path.join(tmpdir, "snapshot.db")
        try:
            path, extra = (entry.path, entry.extra) if entry is not None else (relpath, None)
            plain = chunked.of_entry(src.file, secrets, path, extra)
            with open(local, "wb") as out:
                n, h = stream(plain, None, out.write, src_name=relpath, dst_name=local)
        except SealError as exc:
            raise CheckFailed(str(exc)) from None
        return n, h, check(local, timeout=timeout)


def _before(index: Index, relpath: str, seal: Seal) -> tuple[Any, dict[str, Any]]:
    """The index record and extras of the last snapshot (no extras: publish it again, as
    when it is plain and is sealed now, or sealed with another key)."""
    rec = index.get(relpath)
    extra = index.extras.get(relpath, {}) if rec and rec.kind == "sqlite" else {}
    if sealed_with(extra) != (seal[0].fingerprint if seal else None):
        extra = {}
    return rec, extra


def publish(
    store: Store, staged: Staged, index: Index, *, listed: bool, recent_after_ns: int, seal: Seal
) -> Published:
    """Publish a staged snapshot unless equal to the last one (sealed with `seal`: a key
    and the ``ADAPTER/PATH`` name); the staged copy is removed."""
    relpath, st, wal = staged.relpath, staged.st, staged.wal
    rec, extra_before = _before(index, relpath, seal)
    mtime = max(st.st_mtime_ns, wal[1] if wal else 0)
    try:
        copied = upload(
            store,
            os.path.dirname(staged.path),
            os.path.basename(staged.path),
            known_hash=rec.hash64 if extra_before and rec else None,
            known_size=extra_before.get("size"),
            dest=object_name(relpath),
            seal=seal,
        )
    finally:
        remove_set(staged.path)
    mark = {SEALED: copied.sealed} if copied.sealed else {}
    dirty = staged.raced or mtime >= recent_after_ns
    now = time.time_ns()
    snapshot_ns = now if copied.published else extra_before.get("snapshot_ns", now)
    if not copied.published:
        mtime = extra_before.get("mtime_ns", mtime)
    # a mount without rename stores each snapshot as a new unique object
    obj = (copied.object if copied.published else extra_before.get("object")) or object_name(
        relpath
    )
    extra = {
        "object": obj,
        "size": copied.size,
        "mtime_ns": mtime,
        "snapshot_ns": snapshot_ns,
        "_wal": wal,
        LISTED: listed,
        **mark,
    }
    entry = Entry(
        relpath,
        "sqlite",
        copied.size,
        mtime,
        st.st_mode & 0o7777,
        copied.hash64,
        object=obj,
        extra={"snapshot_ns": snapshot_ns, **mark},
    )
    if copied.published:
        log.info(
            "sqlite.published path=%s object=%s bytes=%d",
            relpath,
            entry.object,
            copied.size,
            extra={"event": "sqlite.published"},
        )
    return Published(
        entry, copied, (st.st_size, st.st_mtime_ns, DIRTY if dirty else st.st_ctime_ns), extra
    )


__all__ = [
    "CHECKPOINT_DIR",
    "Staged",
    "check_durable_copy",
    "object_name",
    "plan_databases",
    "publish",
    "remove_set",
    "stage",
    "sweep_staging",
]
