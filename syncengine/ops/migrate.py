"""Migration from the old rsync layout, described per harness by ``[[migrate]]`` steps.

Owns `syncengine migrate`, which does what the design's container entrypoint
did before its first ``restore``: it creates every adapter's live and durable
directory, then runs each adapter's steps (config.MigrateStep; README
"Migrating from the rsync layout").  Each step is *planned* by looking at the
disk, giving frozen actions with a readable line each; a dry run prints them,
a real run executes them under the state lock.  Nothing is ever deleted:
legacy directories are copied and kept (or renamed to a rollback name that is
free), cache files are moved into quarantine, only a symlink is unlinked or
replaced (``ln -sfn``: never a real directory or file).  When an action of a
step fails, the step's later renames and links are not done, so the next run
copies again from the same place.  Copies follow
restore's rule (`plan.plan_restore_entry`): an equal or newer destination is
left alone, which is also what makes a second run a no-op.  Files copied into
a checkpoint are recorded in its manifest (a base including what was already
there when the checkpoint had no manifest, else a delta), and the adapter's
local index is dropped so it is rebuilt from that manifest.

Open files (``snapshot_open``) are copied by `syncengine.restore.openfiles`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from syncengine.config import AdapterSpec, Config, MigrateStep
from syncengine.copier import upload
from syncengine.durable import manifest
from syncengine.durable.manifest import Entry
from syncengine.durable.store import ObjectInfo, Store
from syncengine.errors import DurableError, SourceError, durable_error
from syncengine.fs import savefile
from syncengine.local.lock import StateLock
from syncengine.local.status import index_path
from syncengine.ops.migrate_actions import (
    Action,
    Copy,
    Link,
    MakeDir,
    MigrateReport,
    Move,
    Note,
    Unlink,
)
from syncengine.patterns import Matcher, compile_patterns, database_patterns
from syncengine.plan import Fetch, LocalState, MakeLink, plan_restore_entry
from syncengine.restore import openfiles
from syncengine.restore.openfiles import SnapshotOpen


@attrs.frozen
class Setup:
    """What migrate works with, given explicitly by its caller (the engine)."""

    config: Config
    clock: Callable[[], int]
    store: Callable[[Path], Store]  # the durable directory at a path (probed before a write)
    rename: Callable[[Path, str, str], None]  # (dir, name, new name): old-layout renames


# -- planning ---------------------------------------------------------------


class _NoHome(Exception):
    """A step names {home} and HOME is not set."""


def _expand(text: str, ctx: Setup, spec: AdapterSpec, source: Path | None = None) -> Path:
    cfg = ctx.config
    if "{home}" in text and cfg.home is None:
        raise _NoHome(text)
    for key, value in (
        ("{durable_root}", cfg.durable_root),
        ("{local_root}", cfg.local_root),
        ("{durable}", spec.durable),
        ("{live}", spec.live),
        ("{home}", cfg.home or ""),
        ("{from}", source or ""),
    ):
        text = text.replace(key, os.fspath(value))
    return Path(os.path.normpath(text))


def plan_dirs(spec: AdapterSpec) -> list[Action]:
    """The design entrypoint's first step: every live and durable directory exists."""
    return [MakeDir(p) for p in (spec.live, spec.durable) if not os.path.isdir(p)]


def plan_step(ctx: Setup, spec: AdapterSpec, step: MigrateStep, now_ns: int) -> list[Action]:
    """The actions of one step, decided against the disk as it is now."""
    try:
        if step.action == "unlink_symlink":
            return _plan_unlink(ctx, spec, step)
        if step.action == "copy_tree":
            return _plan_copy_tree(ctx, spec, step, now_ns)
    except _NoHome as exc:
        return [
            Note(
                f"{spec.name}: {step.action} {exc}: HOME is not set (environment "
                "variable HOME or config key home): skipped"
            )
        ]
    store = ctx.store(spec.durable)
    if step.action == "quarantine":
        return _plan_quarantine(store, spec, step, now_ns)
    return [Note(a) if isinstance(a, str) else a for a in openfiles.plan(spec, step, store)]


def _plan_unlink(ctx: Setup, spec: AdapterSpec, step: MigrateStep) -> list[Action]:
    path = spec.live / step.path
    try:
        target = os.readlink(path)
    except (FileNotFoundError, OSError):
        return [Note(f"{spec.name}: {path} is not a symlink: nothing to unlink")]
    if step.target:
        want = _expand(step.target, ctx, spec)
        if Path(os.path.normpath(path.parent / target)) != want:
            return [
                Note(f"{spec.name}: {path} -> {target} is not the old link to {want}: left alone")
            ]
    return [Unlink(path, target, then_mkdir=True)]


def _db_matcher(spec: AdapterSpec) -> Matcher:
    return compile_patterns(database_patterns(spec.sqlite), where="sqlite")


def _plan_copy_tree(ctx: Setup, spec: AdapterSpec, step: MigrateStep, now_ns: int) -> list[Action]:
    src = _expand(step.source, ctx, spec)
    link_to = _expand(step.link_to, ctx, spec, src) if step.link_to else None
    found = ctx.store(src.parent).head(src.name)  # the legacy tree, on the durable side
    if found is None:
        return [
            Note(f"{spec.name}: nothing at {src}: nothing to copy"),
            *([Link(src, link_to)] if link_to else []),
        ]
    if found.kind == "link":
        if link_to:
            return [_relink(spec, src, link_to)]
        if step.if_symlink == "unlink":
            return [Unlink(src, found.target or "", durable=True)]
        return [Note(f"{spec.name}: {src} is a symlink: skipped")]
    if found.kind != "dir":
        return [Note(f"{spec.name}: {src} is not a directory: skipped")]
    actions = _plan_copies(ctx, spec, step, src)
    if step.rename_to:
        new = _expand(step.rename_to, ctx, spec, src)
        if new.parent != src.parent:
            return [*actions, Note(f"{spec.name}: rename_to {new} must stay beside {src}")]
        if os.path.lexists(new):  # the rollback name is taken: a timestamped one
            stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(now_ns / 1e9))
            new = new.with_name(f"{new.name}.{stamp}")
        actions.append(Move(src.parent, src.name, new.name))
        if link_to:
            actions.append(Link(src, link_to))
    return actions or [Note(f"{spec.name}: {src} already copied: nothing to do")]


def _relink(spec: AdapterSpec, path: Path, target: Path) -> Action:
    old = os.readlink(path)
    if Path(os.path.normpath(path.parent / old)) == target:
        return Note(f"{spec.name}: {path} -> {target} already linked: nothing to do")
    return Link(path, target, replaces=old)


def _plan_copies(ctx: Setup, spec: AdapterSpec, step: MigrateStep, src: Path) -> list[Action]:
    """A Copy per legacy file or link under `src` that restore's rule would take."""
    store = ctx.store(spec.durable)
    entries = manifest.load(store).entries if store.exists() else {}
    excluded = compile_patterns(spec.exclude, where=f"adapter {spec.name!r} exclude")
    dbs = _db_matcher(spec)
    actions: list[Action] = []
    for info in sorted(ctx.store(src).list(), key=lambda i: i.key):
        rel = info.key
        dest = f"{step.to.strip('/')}/{rel}" if step.to.strip("/") else rel
        raw_db = dbs.excluded(dest, False)
        if not raw_db and excluded.excluded(dest, False):
            continue
        link = _target(info, src)
        if link is not None and raw_db:
            continue
        kind = "symlink" if link is not None else "file"
        entry = Entry(dest, kind, info.size, info.mtime_ns, info.mode, target=link)
        decision = plan_restore_entry(
            entry, _dest_state(store, entries.get(dest), dest), unsafe=None
        )
        if isinstance(decision, (Fetch, MakeLink)):
            actions.append(
                Copy(spec.name, src, rel, dest, not raw_db, decision.reason, link, info.mtime_ns)
            )
    return actions


def _target(info: ObjectInfo, root: Path) -> str | None:
    """A listed link's target (None: not a link); one that cannot be read stops the step."""
    if info.kind != "link":
        return None
    if info.target is None:
        raise DurableError(f"read the symlink {root / info.key}: it cannot be read")
    return info.target


def _dest_state(store: Store, entry: Entry | None, dest: str) -> LocalState | None:
    """The destination as restore's rule sees it: the manifest entry, else the object."""
    if entry is not None:
        return LocalState(
            entry.kind if entry.kind == "symlink" else "file", entry.size, entry.mtime_ns
        )
    st = store.head(dest)
    if st is None:
        return None
    return LocalState("file" if st.kind == "file" else "other", st.size, st.mtime_ns)


def _plan_quarantine(
    store: Store, spec: AdapterSpec, step: MigrateStep, now_ns: int
) -> list[Action]:
    import fnmatch

    to = step.to.strip("/")
    actions: list[Action] = []
    for name in store.names(""):
        st = store.head(name)
        if st is None or st.kind != "file":
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in step.patterns):
            new = f"{to}/{name}"
            if store.head(new) is not None:
                new = f"{new}.{now_ns}"
            actions.append(Move(spec.durable, name, new))
    return actions or [
        Note(f"{spec.name}: no {' '.join(step.patterns)} in {spec.durable}: nothing to quarantine")
    ]


# -- doing --------------------------------------------------------------------


def run(ctx: Setup, *, dry_run: bool) -> MigrateReport:
    """Plan every adapter's steps; unless `dry_run`, execute them under the state lock."""
    lines: list[str] = []
    errors: list[str] = []
    changes = 0
    lock = StateLock(ctx.config.state_dir, wait=True)
    if not dry_run:
        lock.acquire()
    try:
        for spec in ctx.config.adapters:
            copied: list[Entry] = []
            for step in (None, *spec.migrate):
                try:
                    actions = (
                        plan_dirs(spec) if step is None else plan_step(ctx, spec, step, ctx.clock())
                    )
                except DurableError as exc:
                    errors.append(f"{spec.name}: {getattr(step, 'action', 'mkdir')}: {exc}")
                    continue
                failed = False
                for action in actions:
                    if isinstance(action, Note):
                        lines.append(str(action))
                        continue
                    changes += 1
                    if dry_run:
                        lines.append(f"would {action}")
                        continue
                    if failed and isinstance(action, Move | Link):
                        errors.append(
                            f"not done: {action}: an earlier action of this step "
                            "failed (the next run copies again from there)"
                        )
                        continue
                    try:
                        entry = _execute(ctx, spec, action)
                    except (DurableError, SourceError, OSError) as exc:
                        errors.append(f"{action}: {exc}")
                        failed = True
                        continue
                    lines.append(f"done: {action}")
                    if entry is not None:
                        copied.append(entry)
            if copied:
                try:
                    lines.append(_record(ctx, spec, copied))
                except DurableError as exc:
                    errors.append(f"{spec.name}: manifest: {exc}")
    finally:
        lock.release()
    if not changes:
        lines.append("migrate: nothing to do (already migrated)")
    else:
        lines.append(f"migrate: {changes} change(s){' planned (dry run)' if dry_run else ''}")
    return MigrateReport(tuple(lines), changes, tuple(errors), dry_run)


def _execute(ctx: Setup, spec: AdapterSpec, action: Action) -> Entry | None:
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
        if action.link_target is not None:
            return Entry(
                action.dest, "symlink", mtime_ns=action.mtime_ns, target=action.link_target
            )
        c = upload(
            ctx.store(spec.durable),
            os.fspath(action.src_root),
            action.rel,
            known_hash=None,
            known_size=None,
            dest=action.dest,
        )
        if action.listed:
            return Entry(
                action.dest, "file", c.size, c.mtime_ns, c.mode & 0o7777, c.hash64, object=c.object
            )
    return None


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


def _record(ctx: Setup, spec: AdapterSpec, copied: list[Entry]) -> str:
    """Record migrated files in the checkpoint's manifest; drop the (cached) index."""
    store = ctx.store(spec.durable)
    mstate = manifest.load(store)
    seq = mstate.last_seq + 1
    entries: dict[str, Entry] = {}
    kind = "delta"
    if not mstate.last_seq:  # no manifest yet: the base also lists what was already there
        kind = "base"
        excluded = compile_patterns(spec.exclude, where=f"adapter {spec.name!r} exclude")
        dbs = _db_matcher(spec)
        for info in store.list():  # a link is listed with its target
            rel = info.key
            if excluded.excluded(rel, False) or dbs.excluded(rel, False):
                continue
            if info.kind == "link":
                entries[rel] = Entry(
                    rel, "symlink", mtime_ns=info.mtime_ns, target=_target(info, spec.durable)
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


__all__ = ["Action", "MigrateReport", "Setup", "plan_dirs", "plan_step", "run"]
