"""Garbage collection: the only place that deletes from the durable side.

Owns retention, kept out of the checkpoint loop.  `gather` observes one
adapter (manifest, index absence counters, the live tree by ``lstat``, the
staging directory, the segment chains, the manifest objects), `gcplan.plan`
decides from those facts alone (pure, so tests assert on its text: the rules
below live there), and `execute` carries the plan out, only with ``--apply``
and under the state lock.

A locally deleted path becomes a *tombstone* once the checkpoint counted it
missing in ``[gc] absent_passes`` consecutive passes; its durable copy goes
``grace_seconds`` after the first of those passes (``index.meta
["absent_since"]``).  Then a new base manifest without it is written first
(a restore never asks for a deleted object) and its objects are deleted,
each re-checked with ``lstat`` locally just before: a path that exists
locally is never deleted (a directory where a file was recorded does not count
as the file: that file is gone).  Also removed: staging temp files older than
``staging_seconds``, manifest objects older than the newest readable base,
and segment chains and file versions (`.syncengine/objects/`, a mount without
rename; the plain copies of secret files sealed since) no manifest entry names,
once older than the grace period.  Packing small files that stopped changing,
and collecting old packs, is `syncengine.ops.packer`'s; its actions join the plan
(new packs are written before anything is deleted).  SQLite snapshots are
replaced in place (one name per database), so none are superseded.  A recorded
directory removed locally is tombstoned the
same way; only its manifest entry goes (nothing durable holds it).

Refuses (exit 1, with the reason) while the last restore is incomplete, and
per adapter when the manifest has an unreadable object or an invalid entry
(what it names is unknown, so nothing may look unreferenced), or the live
tree is missing or holds fewer than ``min_present_ratio`` of the manifest's
paths (a bad mount or a partial restore must never look like mass deletion).
A path `run`'s background restore has still to bring back (pending in the index)
is not missing: it is neither counted against that ratio nor waited on.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from syncengine.checkpoint import checkpointer, segments
from syncengine.config import AdapterSpec, GcConfig
from syncengine.crypt import secrets as secret_rules
from syncengine.durable import manifest
from syncengine.durable.store import MANIFEST_DIR, OBJECTS_DIR, STAGING_DIR
from syncengine.errors import DurableError, LockBusy
from syncengine.fs.savefile import TEMP_SUFFIX
from syncengine.local import pending
from syncengine.local.index import ABSENT_SINCE
from syncengine.local.lock import StateLock
from syncengine.local.status import restore_refusal
from syncengine.ops import packer
from syncengine.ops.gcplan import FENCED, DeleteObjects, DeletePath, Facts, GcAction, plan, refusal
from syncengine.ops.packer import PackFiles

if TYPE_CHECKING:
    from syncengine.local.adapter import AdapterState

log = logging.getLogger("syncengine")


@attrs.frozen
class AdapterGc:
    name: str
    actions: tuple[str, ...] = ()
    refused: str | None = None
    objects: int = 0  # deleted (apply) or to delete (dry run)
    bytes: int = 0
    manifest: str | None = None  # the base manifest written without the tombstones
    kept: tuple[str, ...] = ()  # tombstones that reappeared locally before deletion
    fatal: str | None = None

    @property
    def idle(self) -> bool:
        """Nothing to say: no action, nothing deleted or kept, no failure."""
        return not (self.actions or self.refused or self.objects or self.manifest) and not (
            self.kept or self.fatal
        )


@attrs.frozen
class GcReport:
    adapters: tuple[AdapterGc, ...]
    apply: bool
    refused: str | None = None

    @property
    def ok(self) -> bool:
        return self.refused is None and all(
            a.refused is None and a.fatal is None for a in self.adapters
        )

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def lines(self) -> list[str]:
        if self.refused:
            return [f"gc refused: {self.refused}"]
        out = []
        idle = [a.name for a in self.adapters if a.idle]
        for a in self.adapters:
            if a.name in idle:  # all of them in one line below
                continue
            if a.refused:
                out.append(f"{a.name}: gc refused: {a.refused}")
                continue
            out.extend(f"  {line}" for line in a.actions)
            out.extend(f"  kept {p} (exists locally again)" for p in a.kept)
            if a.fatal:
                out.append(f"{a.name}: gc stopped: {a.fatal}")
            verb = "deleted" if self.apply else "would delete"
            out.append(
                f"{a.name}: {verb} {a.objects} object(s), {a.bytes} bytes"
                + (f"; wrote {a.manifest}" if a.manifest else "")
            )
        if idle:
            out.append(f"nothing to delete: {', '.join(idle)}")
        if not self.apply and len(idle) < len(self.adapters):
            out.append("dry run: nothing deleted; run `syncengine gc --apply` to delete")
        return out


# -- observing --------------------------------------------------------------


def gather(state: AdapterState) -> Facts:
    """Observe one adapter: durable listings (gc only), the index, the live tree."""
    store = state.store
    mstate = manifest.load(store)
    objects = []
    for seq, _kind, name in manifest.list_objects(store):
        rel = f"{MANIFEST_DIR}/{name}"
        st = store.head(rel)
        objects.append((seq, rel, st.size if st else 0))
    since = state.index.meta.get(ABSENT_SINCE, {})
    absent = {}
    for path, rec in state.index.items():
        if rec.absent:
            absent[path] = (rec.absent, since.get(path))
    for path, _mode, passes in state.index.dir_items():
        if passes:
            absent[path] = (passes, since.get(path))
    coming = pending.paths(state.index)  # `run`'s background restore brings them back
    missing = frozenset(
        p
        for p, e in mstate.entries.items()
        if p not in coming and not _exists_locally(state, p, e.kind)
    )
    staging = []
    for name in store.names(STAGING_DIR):
        st = store.head(f"{STAGING_DIR}/{name}")
        if name.endswith(TEMP_SUFFIX) and st is not None:
            staging.append((f"{STAGING_DIR}/{name}", st.size, st.mtime_ns))
    chain_objs = []
    prefix = segments.SEG_DIR + "/"
    for info in store.list(segments.SEG_DIR):
        head, _, _name = info.key[len(prefix) :].rpartition("/")
        path_d, _, chain = head.rpartition("/")
        if path_d.endswith(".d") and chain:
            chain_objs.append((path_d[:-2], chain, info.key, info.size, info.mtime_ns))
    unusable = mstate.problems + tuple(f"{e.path}: {e.problem}" for e in mstate.invalid.values())
    return Facts(
        state.name,
        mstate.entries,
        mstate.last_seq,
        mstate.base_seq,
        tuple(objects),
        absent,
        missing,
        state.live.is_dir(),
        tuple(staging),
        tuple(chain_objs),
        unusable,
        tuple(f"{MANIFEST_DIR}/{name}" for name in mstate.fenced),
        tuple((i.key, i.size, i.mtime_ns) for i in store.list(OBJECTS_DIR)),
    )


def _exists_locally(state: AdapterState, path: str, kind: str) -> bool:
    """Whether what the entry records is there: a directory for a ``dir`` entry, anything
    else for the other kinds (a file replaced by a directory is gone, and its durable copy
    keeps the directory from being recorded, see `plan.SkipDir`)."""
    try:
        return stat.S_ISDIR(os.lstat(state.live / path).st_mode) == (kind == "dir")
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False
    except OSError:
        return True  # unknown: treat as present, never delete on doubt


# -- doing ------------------------------------------------------------------


def execute(
    state: AdapterState, facts: Facts, actions: Sequence[GcAction | PackFiles], now_ns: int
) -> AdapterGc:
    """Carry out a plan under the state lock: new packs and base first, then deletions."""
    store = state.store
    for action in actions:
        if isinstance(action, PackFiles):
            packer.write(store, action, now_ns)
    tombs = [a for a in actions if isinstance(a, DeletePath)]
    kept = tuple(
        a.path for a in tombs if _exists_locally(state, a.path, facts.entries[a.path].kind)
    )
    tombs = [a for a in tombs if a.path not in kept]
    count = size = 0
    manifest_name = _write_base_without(state, facts, {a.path for a in tombs}, now_ns)
    # Without a new base, only objects older than the newest readable base may go.
    manifest_limit = 1 << 62 if manifest_name else facts.base_seq
    for action in actions:
        if isinstance(action, DeletePath):
            if action.path in kept or _exists_locally(
                state, action.path, facts.entries[action.path].kind
            ):
                continue  # reappeared: never delete a file that exists locally
            names: Sequence[str] = action.objects
        elif isinstance(action, DeleteObjects):
            names = [
                n
                for n in action.objects
                if not n.startswith(MANIFEST_DIR + "/")
                or _seq(n) < manifest_limit
                or action.what == FENCED
            ]
        else:
            continue
        for name in names:
            st = store.head(name)
            if store.delete(name):
                count += 1
                size += st.size if st else 0
                log.info(
                    "gc.deleted adapter=%s object=%s",
                    state.name,
                    name,
                    extra={"event": "gc.deleted"},
                )
    return AdapterGc(
        state.name,
        tuple(map(str, actions)),
        objects=count,
        bytes=size,
        manifest=manifest_name,
        kept=kept,
    )


def _write_base_without(
    state: AdapterState, facts: Facts, gone: set[str], now_ns: int
) -> str | None:
    """A new base manifest without the tombstoned paths, before anything is deleted (a
    restore never asks for a deleted object); the index forgets them.  None: none gone."""
    if not gone:
        return None
    index = state.index
    if facts.last_seq > int(index.meta.get("manifest_seq", 0)):
        index.meta["manifest_seq"] = facts.last_seq
    state.store.barrier()
    manifest_name = checkpointer.write_base(
        state, (e for p, e in sorted(facts.entries.items()) if p not in gone), now_ns
    )
    for path in gone:
        index.forget(path)
    index.save(state.index_path)
    log.info(
        "gc.manifest adapter=%s object=%s removed=%d",
        state.name,
        manifest_name,
        len(gone),
        extra={"event": "gc.manifest"},
    )
    return manifest_name


def _seq(name: str) -> int:
    base = name.rsplit("/", 1)[-1]
    return int(base.split(".", 1)[0]) if base[:1].isdigit() else 1 << 62


def run(
    specs: Sequence[AdapterSpec],
    adapter_state: Callable[[AdapterSpec], AdapterState],
    cfg: GcConfig,
    state_dir: Path,
    *,
    clock: Callable[[], int],
    apply: bool,
    may_pack: Callable[[str], bool] = lambda _path: True,
) -> GcReport:
    """Plan gc for each adapter (its store and index from `adapter_state`); with `apply`,
    execute it under the state lock.  `may_pack(path)`: whether a file may go into a
    pack (packer.py; a secret file must not)."""
    why = restore_refusal(state_dir)
    if why:
        return GcReport((), apply, refused=why)
    lock = StateLock(state_dir, wait=False)
    if apply:
        try:
            lock.acquire()
        except LockBusy:
            return GcReport((), apply, refused="a checkpoint or restore is running: try again")
    try:
        return GcReport(
            tuple(_one(spec, adapter_state, cfg, clock, apply, may_pack) for spec in specs),
            apply,
        )
    finally:
        lock.release()


def _one(
    spec: AdapterSpec,
    adapter_state: Callable[[AdapterSpec], AdapterState],
    cfg: GcConfig,
    clock: Callable[[], int],
    apply: bool,
    may_pack: Callable[[str], bool],
) -> AdapterGc:
    now = clock()
    try:
        state = adapter_state(spec)
        if not state.store.exists():
            return AdapterGc(spec.name)
        facts = gather(state)
        why = refusal(facts, cfg)
        if why:
            return AdapterGc(spec.name, refused=why)
        entries, secrets = facts.entries, state.secrets

        def packable(path: str) -> bool:  # never a secret file, sealed or plain (crypt/)
            return may_pack(path) and secret_rules.may_pack(path, entries[path].extra, secrets)

        packing = packer.plan(packer.gather(state.store), entries, cfg, now, packable)
        actions = (*plan(facts, cfg, now), *packing)
        if apply:
            return execute(state, facts, actions, now)
    except DurableError as exc:
        return AdapterGc(spec.name, fatal=str(exc))
    deletions = [a for a in actions if isinstance(a, DeletePath | DeleteObjects)]
    return AdapterGc(
        spec.name,
        tuple(map(str, actions)),
        objects=sum(len(a.objects) for a in deletions),
        bytes=sum(a.bytes for a in deletions),
    )
