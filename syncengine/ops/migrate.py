"""Migration from the old rsync layout, described per harness by ``[[migrate]]`` steps.

Owns `syncengine migrate`, which does what the design's container entrypoint
did before its first ``restore``: it creates every adapter's live and durable
directory, then runs each adapter's steps (config.MigrateStep; docs/MIGRATING.md
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

Open files (``snapshot_open``) are copied by `syncengine.restore.openfiles`;
migrate_execute.py carries the actions out.

On an ``s3://`` durable root the legacy trees are prefixes in the bucket (config
``home = "s3://..."``), read through their `Store` with each object's mode and
mtime (`migrate_execute.listed`); a durable directory needs no creating; a rename
is a copy and a delete per object (`Setup.rename`), not atomic, so a name that
holds a rename a killed run left half done is chosen again and the rename
completed (`Setup.unfinished`); the bucket holds no links, so a link into it is a
note.  Messages name ``s3://`` URLs, never the config's placeholder paths.
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from pathlib import Path

from syncengine.config import AdapterSpec, MigrateStep
from syncengine.config.s3location import in_bucket, shown
from syncengine.durable import manifest
from syncengine.durable.manifest import Entry
from syncengine.durable.store import Store
from syncengine.errors import DurableError, SourceError
from syncengine.local.lock import StateLock
from syncengine.ops.migrate_actions import (
    Action,
    Copy,
    Link,
    MakeDir,
    MigrateReport,
    Move,
    Note,
    Setup,
    Unlink,
)
from syncengine.ops.migrate_execute import db_matcher, execute, link_target, listed, record
from syncengine.patterns import compile_patterns
from syncengine.plan import Fetch, LocalState, MakeLink, plan_restore_entry
from syncengine.restore import openfiles

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


def plan_dirs(ctx: Setup, spec: AdapterSpec) -> list[Action]:
    """The design entrypoint's first step: every live and durable directory exists (in a
    bucket a directory is only a prefix: nothing to create)."""
    return [
        MakeDir(p)
        for p in (spec.live, spec.durable)
        if not in_bucket(ctx.config.s3, p) and not os.path.isdir(p)
    ]


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
        return _plan_quarantine(ctx, store, spec, step, now_ns)
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


def _plan_copy_tree(ctx: Setup, spec: AdapterSpec, step: MigrateStep, now_ns: int) -> list[Action]:
    src = _expand(step.source, ctx, spec)
    link_to = _expand(step.link_to, ctx, spec, src) if step.link_to else None
    found = ctx.store(src.parent).head(src.name)  # the legacy tree, on the durable side
    if found is None:
        return [
            Note(f"{spec.name}: nothing at {src}: nothing to copy"),
            *([_link(ctx, spec, src, link_to)] if link_to else []),
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
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(now_ns / 1e9))
        actions.append(_move(ctx, src.parent, src.name, new.name, stamp))
        if link_to:
            actions.append(_link(ctx, spec, src, link_to))
    return actions or [Note(f"{spec.name}: {src} already copied: nothing to do")]


def _move(ctx: Setup, root: Path, rel: str, new_rel: str, stamp: str) -> Move:
    """A rename of `rel` to `new_rel`, or (the name is taken) to ``new_rel.<stamp>``; in a
    bucket, to a name a killed run's rename of `rel` half filled, to complete it."""
    if in_bucket(ctx.config.s3, root):
        if ctx.store(root).head(new_rel) is None:
            return Move(root, rel, new_rel)
        head, _, base = new_rel.rpartition("/")
        pattern = re.compile(re.escape(base) + r"\.\d+")
        stamped = [n for n in ctx.store(root).names(head) if pattern.fullmatch(n)]
        for name in [base, *stamped]:
            candidate = f"{head}/{name}" if head else name
            if ctx.unfinished(root, rel, candidate):
                return Move(root, rel, candidate, resume=True)
    elif not os.path.lexists(root / new_rel):
        return Move(root, rel, new_rel)
    return Move(root, rel, f"{new_rel}.{stamp}")


def _link(ctx: Setup, spec: AdapterSpec, path: Path, target: Path) -> Action:
    """`Link`, but not in a bucket: it holds no links, and no harness has its home there."""
    if in_bucket(ctx.config.s3, path):
        return Note(
            f"{spec.name}: {path} is in the bucket: no link to {target} there (the S3 API "
            "has no links; point the harness's home at the live tree)"
        )
    return Link(path, target)


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
    dbs = db_matcher(spec)
    actions: list[Action] = []
    for info in sorted(listed(ctx, src), key=lambda i: i.key):
        rel = info.key
        dest = f"{step.to.strip('/')}/{rel}" if step.to.strip("/") else rel
        raw_db = dbs.excluded(dest, False)
        if not raw_db and excluded.excluded(dest, False):
            continue
        link = link_target(info, src)
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
    ctx: Setup, store: Store, spec: AdapterSpec, step: MigrateStep, now_ns: int
) -> list[Action]:
    to = step.to.strip("/")
    actions: list[Action] = []
    for name in store.names(""):
        if not any(fnmatch.fnmatchcase(name, p) for p in step.patterns):
            continue
        st = store.head(name)
        if st is not None and st.kind == "file":
            actions.append(_move(ctx, spec.durable, name, f"{to}/{name}", str(now_ns)))
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
            changes += _run_adapter(ctx, spec, dry_run, lines, errors)
    finally:
        lock.release()
    return _report(ctx, lines, changes, errors, dry_run)


def _run_adapter(
    ctx: Setup, spec: AdapterSpec, dry_run: bool, lines: list[str], errors: list[str]
) -> int:
    """One adapter's steps in order, then its copies recorded; returns the changes."""
    copied: list[Entry] = []
    renamed = False  # a copied legacy directory renamed: its copies are all in place
    changes = 0
    for step in (None, *spec.migrate):
        try:
            actions = (
                plan_dirs(ctx, spec) if step is None else plan_step(ctx, spec, step, ctx.clock())
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
                entry = execute(ctx, spec, action)
            except (DurableError, SourceError, OSError) as exc:
                errors.append(f"{action}: {exc}")
                failed = True
                continue
            lines.append(f"done: {action}")
            renamed |= isinstance(action, Move) and getattr(step, "action", "") == "copy_tree"
            if entry is not None:
                copied.append(entry)
    try:
        # A run killed after the copies, before this record, leaves copies no manifest
        # lists; the next run copies nothing, and the rename it completes records them.
        if copied or (renamed and not manifest.load(ctx.store(spec.durable)).last_seq):
            lines.append(record(ctx, spec, copied))
    except DurableError as exc:
        errors.append(f"{spec.name}: manifest: {exc}")
    return changes


def _report(
    ctx: Setup, lines: list[str], changes: int, errors: list[str], dry_run: bool
) -> MigrateReport:
    if not changes:
        lines.append("migrate: nothing to do (already migrated)")
    else:
        lines.append(f"migrate: {changes} change(s){' planned (dry run)' if dry_run else ''}")
    return MigrateReport(
        tuple(shown(ctx.config.s3, line) for line in lines),
        changes,
        tuple(shown(ctx.config.s3, line) for line in errors),
        dry_run,
    )


__all__ = ["Action", "MigrateReport", "Setup", "plan_dirs", "plan_step", "run"]
