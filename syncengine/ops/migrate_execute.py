"""Carrying out `syncengine migrate`'s actions, and recording the copies in a manifest.

Owns what each planned action (migrate_actions.py) does: directories and links on
this machine, copies into a checkpoint (from a legacy directory on disk, or from
objects in the bucket read through its `Store`), renames through `Setup.rename`,
and the manifest object listing what was copied.  It decides nothing: migrate.py
plans, and runs these only outside a dry run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from syncengine.checkpoint.copier import upload
from syncengine.config import AdapterSpec
from syncengine.config.s3location import in_bucket
from syncengine.durable import manifest
from syncengine.durable.manifest import Entry
from syncengine.durable.store import ObjectInfo, Store, with_metadata
from syncengine.errors import DurableError, SourceError, durable_error
from syncengine.fs import savefile
from syncengine.fs.stream import stream
from syncengine.local.status import index_path
from syncengine.ops.migrate_actions import (
    Action,
    Copy,
    Link,
    MakeDir,
    Move,
    Setup,
    Unlink,
)
from syncengine.patterns import Matcher, compile_patterns
from syncengine.restore import openfiles
from syncengine.restore.openfiles import SnapshotOpen
from syncengine.sqlite.files import database_patterns


def db_matcher(spec: AdapterSpec) -> Matcher:
    return compile_patterns(database_patterns(spec.sqlite), where="sqlite")


def link_target(info: ObjectInfo, root: Path) -> str | None:
    """A listed link's target (None: not a link); one that cannot be read stops the step."""
    if info.kind != "link":
        return None
    if info.target is None:
        raise DurableError(f"read the symlink {root / info.key}: it cannot be read")
    return info.target


def listed(ctx: Setup, root: Path) -> Iterator[ObjectInfo]:
    """Every object below `root` with its real mode and mtime: in the bucket, a LIST
    carries no metadata, so each object is asked for them (a HEAD)."""
    return with_metadata(ctx.store(root))


def execute(ctx: Setup, spec: AdapterSpec, action: Action) -> Entry | None:
    """Carry out one action; a copied file's manifest entry (None: nothing to record)."""
    if isinstance(action, MakeDir):
        os.makedirs(action.path, mode=0o700, exist_ok=True)
    elif isinstance(action, Unlink):  # the symlink itself; its target is never touched
        if action.durable:
            ctx.store(action.path.parent).delete(action.path.name)
        else:
            os.unlink(action.path)
        if action.then_mkdir:
            os.makedirs(action.path, mode=0o700, exist_ok=True)
    elif isinstance(action, Link):
        _link(action)
    elif isinstance(action, Move):
        ctx.rename(action.store, action.rel, action.new_rel)
    elif isinstance(action, SnapshotOpen):
        openfiles.snapshot(ctx.store(spec.durable), action, ctx.clock())
    elif isinstance(action, Copy):
        return _copy(ctx, spec, action)
    return None


def _copy(ctx: Setup, spec: AdapterSpec, action: Copy) -> Entry | None:
    if action.link_target is not None:
        return Entry(action.dest, "symlink", mtime_ns=action.mtime_ns, target=action.link_target)
    store = ctx.store(spec.durable)
    if in_bucket(ctx.config.s3, action.src_root):  # read through the store: no local file
        size, h, mode, mtime_ns, obj = _copy_object(ctx.store(action.src_root), store, action)
    else:
        c = upload(
            store,
            os.fspath(action.src_root),
            action.rel,
            known_hash=None,
            known_size=None,
            dest=action.dest,
        )
        size, h, mode, mtime_ns, obj = c.size, c.hash64, c.mode, c.mtime_ns, c.object
    if not action.listed:
        return None
    return Entry(action.dest, "file", size, mtime_ns, mode & 0o7777, h, object=obj)


def _copy_object(src: Store, dst: Store, action: Copy) -> tuple[int, int, int, int, str | None]:
    """Copy one legacy object into the checkpoint with its mode and mtime: (size, hash,
    mode, mtime_ns, object)."""
    with src.open(action.rel) as opened:
        info = opened.info
        with dst.writer(action.dest, mode=info.mode, mtime_ns=info.mtime_ns) as out:
            size, h = stream(
                opened.file,
                None,
                out.write,
                src_name=src.where(action.rel),
                dst_name=dst.where(action.dest),
            )
    if size != info.size:
        raise SourceError(src.where(action.rel), "copy", "changed while it was copied")
    return size, h, info.mode, info.mtime_ns, out.object


def _link(action: Link) -> None:
    """`ln -sfn`, but a real directory or file at the path is never replaced."""
    path = action.path
    if os.path.lexists(path) and not path.is_symlink():
        raise SourceError(
            os.fspath(path),
            "link",
            "a real file or directory is there: not "
            "replaced; move it away (it is the harness's old data) and run "
            "migrate again",
        )
    os.makedirs(path.parent, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        savefile.place_symlink(os.fspath(action.target), path.name, dir_fd=fd)
    finally:
        os.close(fd)


def record(ctx: Setup, spec: AdapterSpec, copied: list[Entry]) -> str:
    """Record migrated files in the checkpoint's manifest; drop the (cached) index."""
    store = ctx.store(spec.durable)
    mstate = manifest.load(store)
    seq = mstate.last_seq + 1
    entries: dict[str, Entry] = {}
    kind = "delta"
    if not mstate.last_seq:  # no manifest yet: the base also lists what was already there
        kind = "base"
        excluded = compile_patterns(spec.exclude, where=f"adapter {spec.name!r} exclude")
        dbs = db_matcher(spec)
        for info in listed(ctx, spec.durable):  # a link is listed with its target
            rel = info.key
            if excluded.excluded(rel, False) or dbs.excluded(rel, False):
                continue
            if info.kind == "link":
                entries[rel] = Entry(
                    rel, "symlink", mtime_ns=info.mtime_ns, target=link_target(info, spec.durable)
                )
            else:
                entries[rel] = Entry(rel, "file", info.size, info.mtime_ns, info.mode)
    entries.update((e.path, e) for e in copied)
    store.barrier()
    name = manifest.write(store, spec.name, seq, kind, entries.values(), created_ns=ctx.clock())
    local = index_path(ctx.config.state_dir, spec.name)
    try:
        local.unlink(missing_ok=True)
    except OSError as exc:
        raise durable_error("remove the local index", local, exc) from exc
    return f"done: recorded {len(copied)} migrated path(s) in {spec.name}:{name}"
