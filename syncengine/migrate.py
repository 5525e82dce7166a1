"""Migration from the old rsync layout, described per harness by ``[[migrate]]`` steps.

Owns `syncengine migrate` and the restore-side reconciliation of open-rollout
copies.  Each step of an adapter (config.MigrateStep; README "Migrating from
the rsync layout") is *planned* by looking at the disk, giving frozen actions
with a readable line each; a dry run prints them, a real run executes them
under the state lock.  Nothing is ever deleted: legacy directories are copied
and kept (or renamed to a rollback name that is free), cache files are moved
into quarantine, only a known local symlink is unlinked.  Copies follow
restore's rule (`plan.plan_restore_entry`): an equal or newer destination is
left alone, which is also what makes a second run a no-op.  Files copied into
a checkpoint are recorded in its manifest (a base including what was already
there when the checkpoint had no manifest, else a delta), and the adapter's
local index is dropped so it is rebuilt from that manifest.

Open files (``snapshot_open``): a file under the adapter's trees that a
process holds open (``/proc/*/fd``) is copied as its writer sees it, up to the
last complete line, to ``.syncengine/migration/open/<path>.<time_ns>`` as a
new closed object and read back; the canonical path is never written.
`reconcile` lets a later restore prefer the longest such copy when the
canonical durable file is missing or a shorter prefix of it.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import xxhash

from syncengine import manifest, segments
from syncengine.config import AdapterSpec, MigrateStep
from syncengine.copier import stream, upload
from syncengine.errors import DurableError, SourceError, durable_error
from syncengine.lock import StateLock
from syncengine.manifest import Entry
from syncengine.patterns import Matcher, compile_patterns
from syncengine.plan import Fetch, LocalState, MakeLink, plan_restore_entry
from syncengine.store import META_DIR, Store

if TYPE_CHECKING:
    from syncengine.engine import Engine

OPEN_DIR = f"{META_DIR}/migration/open"
_COPY_NAME = re.compile(r"^(.+)\.(\d{19})$")


@attrs.frozen
class Unlink:
    """Remove a symlink (never what it points to)."""

    path: Path
    target: str
    durable: bool = False  # on the durable side: through the Store

    def __str__(self) -> str:
        return f"unlink symlink {self.path} -> {self.target}"


@attrs.frozen
class Copy:
    """Copy one legacy file (or record one symlink) into a checkpoint."""

    adapter: str
    src_root: Path
    rel: str
    dest: str  # relative to the adapter's durable checkpoint
    listed: bool  # recorded in the manifest (False: a raw SQLite file, for restore's fallback)
    reason: str
    link_target: str | None = None
    mtime_ns: int = 0

    def __str__(self) -> str:
        what = f"link -> {self.link_target}" if self.link_target is not None else self.reason
        return f"copy {self.src_root}/{self.rel} -> {self.adapter}:{self.dest} ({what})"


@attrs.frozen
class Move:
    """Rename a legacy directory or a cache file to a free name beside or below it."""

    store: Path
    rel: str
    new_rel: str

    def __str__(self) -> str:
        return f"rename {self.store}/{self.rel} -> {self.store}/{self.new_rel}"


@attrs.frozen
class SnapshotOpen:
    """Copy an open file, as its writer sees it, to a closed migration object."""

    adapter: str
    proc_path: str  # /proc/<pid>/fd/<n>
    rel: str
    size: int  # up to the last complete line

    def __str__(self) -> str:
        return (f"copy open file {self.adapter}:{self.rel} (held by pid "
                f"{self.proc_path.split('/')[2]}, {self.size} bytes of complete lines) -> "
                f"{OPEN_DIR}/{self.rel}.<time>")


@attrs.frozen
class Note:
    """A step with nothing to do, and why."""

    text: str

    def __str__(self) -> str:
        return self.text


Action = Unlink | Copy | Move | SnapshotOpen | Note


@attrs.frozen
class MigrateReport:
    lines: tuple[str, ...]
    changes: int
    errors: tuple[str, ...]
    dry_run: bool

    @property
    def exit_code(self) -> int:
        return 1 if self.errors else 0


# -- planning ---------------------------------------------------------------


def _expand(text: str, engine: Engine, spec: AdapterSpec, source: Path | None = None) -> Path:
    cfg = engine.config
    for key, value in (("{durable_root}", cfg.durable_root), ("{local_root}", cfg.local_root),
                       ("{durable}", spec.durable), ("{live}", spec.live),
                       ("{from}", source or "")):
        text = text.replace(key, os.fspath(value))
    return Path(os.path.normpath(text))


def plan_step(engine: Engine, spec: AdapterSpec, step: MigrateStep, now_ns: int
              ) -> list[Action]:
    """The actions of one step, decided against the disk as it is now."""
    if step.action == "unlink_symlink":
        return _plan_unlink(engine, spec, step)
    if step.action == "copy_tree":
        return _plan_copy_tree(engine, spec, step, now_ns)
    if step.action == "quarantine":
        return _plan_quarantine(spec, step, now_ns)
    return _plan_snapshot_open(spec, step)


def _plan_unlink(engine: Engine, spec: AdapterSpec, step: MigrateStep) -> list[Action]:
    path = spec.live / step.path
    try:
        target = os.readlink(path)
    except (FileNotFoundError, OSError):
        return [Note(f"{spec.name}: {path} is not a symlink: nothing to unlink")]
    if step.target:
        want = _expand(step.target, engine, spec)
        if Path(os.path.normpath(path.parent / target)) != want:
            return [Note(f"{spec.name}: {path} -> {target} is not the old link to {want}: "
                         "left alone")]
    return [Unlink(path, target)]


def _db_matcher(spec: AdapterSpec) -> Matcher:
    return compile_patterns([f"/{p.lstrip('/')}{s}" for p in spec.sqlite
                             for s in ("", "-wal", "-shm", "-journal")], where="sqlite")


def _plan_copy_tree(engine: Engine, spec: AdapterSpec, step: MigrateStep, now_ns: int
                    ) -> list[Action]:
    src = _expand(step.source, engine, spec)
    try:
        st = os.lstat(src)
    except FileNotFoundError:
        return [Note(f"{spec.name}: nothing at {src}: nothing to copy")]
    if stat.S_ISLNK(st.st_mode):
        if step.if_symlink == "unlink":
            return [Unlink(src, os.readlink(src), durable=True)]
        return [Note(f"{spec.name}: {src} is a symlink: skipped")]
    if not stat.S_ISDIR(st.st_mode):
        return [Note(f"{spec.name}: {src} is not a directory: skipped")]
    store = Store(spec.durable)
    entries = manifest.load(store).entries if store.exists() else {}
    excluded = compile_patterns(spec.exclude, where=f"adapter {spec.name!r} exclude")
    dbs = _db_matcher(spec)
    actions: list[Action] = []
    for rel, fst in sorted(Store(src).walk()):
        dest = f"{step.to.strip('/')}/{rel}" if step.to.strip("/") else rel
        raw_db = dbs.excluded(dest, False)
        if not raw_db and excluded.excluded(dest, False):
            continue
        link = os.readlink(src / rel) if stat.S_ISLNK(fst.st_mode) else None
        if link is not None and raw_db:
            continue
        kind = "symlink" if link is not None else "file"
        entry = Entry(dest, kind, fst.st_size, fst.st_mtime_ns, fst.st_mode & 0o7777,
                      target=link)
        decision = plan_restore_entry(entry, _dest_state(store, entries.get(dest), dest),
                                      unsafe=None)
        if isinstance(decision, (Fetch, MakeLink)):
            actions.append(Copy(spec.name, src, rel, dest, not raw_db, decision.reason,
                                link, fst.st_mtime_ns))
    if step.rename_to:
        new = _expand(step.rename_to, engine, spec, src)
        if new.parent != src.parent:
            return [*actions, Note(f"{spec.name}: rename_to {new} must stay beside {src}")]
        if os.path.lexists(new):  # the rollback name is taken: a timestamped one
            stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(now_ns / 1e9))
            new = new.with_name(f"{new.name}.{stamp}")
        actions.append(Move(src.parent, src.name, new.name))
    return actions or [Note(f"{spec.name}: {src} already copied: nothing to do")]


def _dest_state(store: Store, entry: Entry | None, dest: str) -> LocalState | None:
    """The destination as restore's rule sees it: the manifest entry, else the object."""
    if entry is not None:
        return LocalState(entry.kind if entry.kind == "symlink" else "file", entry.size,
                          entry.mtime_ns)
    st = store.stat(dest)
    if st is None:
        return None
    return LocalState("file" if stat.S_ISREG(st.st_mode) else "other", st.st_size,
                      st.st_mtime_ns)


def _plan_quarantine(spec: AdapterSpec, step: MigrateStep, now_ns: int) -> list[Action]:
    import fnmatch

    store = Store(spec.durable)
    to = step.to.strip("/")
    actions: list[Action] = []
    for name in store.listdir(""):
        st = store.stat(name)
        if st is None or not stat.S_ISREG(st.st_mode):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in step.patterns):
            new = f"{to}/{name}"
            if store.stat(new) is not None:
                new = f"{new}.{now_ns}"
            actions.append(Move(spec.durable, name, new))
    return actions or [Note(f"{spec.name}: no {' '.join(step.patterns)} in {spec.durable}: "
                            "nothing to quarantine")]


def open_files(roots: Sequence[Path]) -> dict[Path, str]:
    """Files under `roots` that some other process holds open: path -> /proc/<pid>/fd/<n>."""
    found: dict[Path, str] = {}
    me = str(os.getpid())
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() and p != me]
    except OSError:
        return found
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # gone, or not ours to look at
        for fd in fds:
            proc_path = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(proc_path)
            except OSError:
                continue
            target = target.removesuffix(" (deleted)")
            path = Path(target)
            if any(r in path.parents for r in roots):
                found.setdefault(path, proc_path)
    return found


def _open_held(proc_path: str) -> tuple[int, os.stat_result]:
    """Open the file behind /proc/<pid>/fd/<n> (a magic link: O_NOFOLLOW cannot be used)."""
    fd = os.open(proc_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(f"{proc_path} is not a regular file")
    return fd, st


def _plan_snapshot_open(spec: AdapterSpec, step: MigrateStep) -> list[Action]:
    matcher = compile_patterns(step.patterns, where=f"adapter {spec.name!r} migrate")
    store = Store(spec.durable)
    actions: list[Action] = []
    roots = [Path(os.path.realpath(spec.durable)), Path(os.path.realpath(spec.live))]
    for path, proc_path in sorted(open_files(roots).items()):
        root = next(r for r in roots if r in path.parents)
        rel = path.relative_to(root).as_posix()
        if rel.startswith(META_DIR + "/") or not matcher.excluded(rel, False):
            continue
        try:
            fd, st = _open_held(proc_path)
        except OSError:  # closed meanwhile, or not a regular file
            continue
        try:
            cut = segments.complete_lines_end(fd, st.st_size)
        except segments.Waiting:
            continue
        finally:
            os.close(fd)
        if cut == 0:
            continue
        copies = _copies(store).get(rel, [])
        if any(c[1] == cut for c in copies):
            actions.append(Note(f"{spec.name}: open file {rel} already copied ({cut} bytes)"))
            continue
        actions.append(SnapshotOpen(spec.name, proc_path, rel, cut))
    return actions or [Note(f"{spec.name}: no open {' '.join(step.patterns)}: nothing to copy")]


# -- doing --------------------------------------------------------------------


def run(engine: Engine, *, dry_run: bool) -> MigrateReport:
    """Plan every adapter's steps; unless `dry_run`, execute them under the state lock."""
    lines: list[str] = []
    errors: list[str] = []
    changes = 0
    lock = StateLock(engine.config.state_dir, wait=True)
    if not dry_run:
        lock.acquire()
    try:
        for spec in engine.config.adapters:
            copied: list[Entry] = []
            for step in spec.migrate:
                try:
                    actions = plan_step(engine, spec, step, engine.clock())
                except DurableError as exc:
                    errors.append(f"{spec.name}: {step.action}: {exc}")
                    continue
                for action in actions:
                    if isinstance(action, Note):
                        lines.append(str(action))
                        continue
                    changes += 1
                    if dry_run:
                        lines.append(f"would {action}")
                        continue
                    try:
                        entry = _execute(engine, spec, action)
                    except (DurableError, SourceError, OSError) as exc:
                        errors.append(f"{action}: {exc}")
                        continue
                    lines.append(f"done: {action}")
                    if entry is not None:
                        copied.append(entry)
            if copied:
                try:
                    lines.append(_record(engine, spec, copied))
                except DurableError as exc:
                    errors.append(f"{spec.name}: manifest: {exc}")
    finally:
        lock.release()
    if not changes:
        lines.append("migrate: nothing to do (already migrated)")
    else:
        lines.append(f"migrate: {changes} change(s){' planned (dry run)' if dry_run else ''}")
    return MigrateReport(tuple(lines), changes, tuple(errors), dry_run)


def _execute(engine: Engine, spec: AdapterSpec, action: Action) -> Entry | None:
    if isinstance(action, Unlink):  # the symlink itself; its target is never touched
        if action.durable:
            Store(action.path.parent).delete(action.path.name)
        else:
            os.unlink(action.path)
    elif isinstance(action, Move):
        Store(action.store).rename_new(action.rel, action.new_rel)
    elif isinstance(action, SnapshotOpen):
        _snapshot(Store(spec.durable), action, engine.clock())
    elif isinstance(action, Copy):
        if action.link_target is not None:
            return Entry(action.dest, "symlink", mtime_ns=action.mtime_ns,
                         target=action.link_target)
        c = upload(Store(spec.durable), os.fspath(action.src_root), action.rel,
                   known_hash=None, known_size=None, dest=action.dest)
        if action.listed:
            return Entry(action.dest, "file", c.size, c.mtime_ns, c.mode & 0o7777, c.hash64)
    return None


def _snapshot(store: Store, action: SnapshotOpen, now_ns: int) -> None:
    name = f"{OPEN_DIR}/{action.rel}.{now_ns:019d}"
    fd, st = _open_held(action.proc_path)
    try:
        with store.staged(st.st_mode) as tmp:
            n, h = stream(fd, action.size, tmp.write, src_name=action.proc_path,
                          dst_name=f"{store.root}/{name}")
            if n != action.size:
                raise SourceError(action.rel, "copy open file", "shrank while copying")
            tmp.close(mode=st.st_mode, mtime_ns=st.st_mtime_ns)
            store.publish(tmp, name)
    finally:
        os.close(fd)
    back = xxhash.xxh3_64_intdigest(store.read_bytes(name))
    if back != h:
        raise DurableError(f"{store.root}/{name}: read back differs from what was written")


def _record(engine: Engine, spec: AdapterSpec, copied: list[Entry]) -> str:
    """Record migrated files in the checkpoint's manifest; drop the (cached) index."""
    store = Store(spec.durable)
    mstate = manifest.load(store)
    seq = mstate.last_seq + 1
    entries: dict[str, Entry] = {}
    kind = "delta"
    if not mstate.last_seq:  # no manifest yet: the base also lists what was already there
        kind = "base"
        excluded = compile_patterns(spec.exclude, where=f"adapter {spec.name!r} exclude")
        dbs = _db_matcher(spec)
        for rel, st in store.walk():
            if excluded.excluded(rel, False) or dbs.excluded(rel, False):
                continue
            if stat.S_ISLNK(st.st_mode):
                entries[rel] = Entry(rel, "symlink", mtime_ns=st.st_mtime_ns,
                                     target=os.readlink(store.root / rel))
            else:
                entries[rel] = Entry(rel, "file", st.st_size, st.st_mtime_ns,
                                     st.st_mode & 0o7777)
    entries.update((e.path, e) for e in copied)
    store.barrier()
    name = manifest.write(store, spec.name, seq, kind, entries.values(), created_ns=engine.clock())
    index_path = engine.adapter_state(spec, seed=False).index_path
    try:
        index_path.unlink(missing_ok=True)
    except OSError as exc:
        raise durable_error("remove the local index", index_path, exc) from exc
    return f"done: recorded {len(copied)} migrated path(s) in {spec.name}:{name}"


# -- restore side -------------------------------------------------------------


def is_copy(entry: Entry) -> bool:
    """Whether restore takes this entry from an open-file copy (`reconcile`)."""
    return bool(entry.object and entry.object.startswith(OPEN_DIR + "/"))


def _copies(store: Store) -> dict[str, list[tuple[str, int, int, int]]]:
    """Open-file copies on the durable side: path -> [(object, bytes, mtime_ns, mode)]."""
    out: dict[str, list[tuple[str, int, int, int]]] = {}
    prefix = OPEN_DIR + "/"
    for rel, st in store.walk(OPEN_DIR):
        m = _COPY_NAME.match(rel[len(prefix):])
        if m and stat.S_ISREG(st.st_mode):
            out.setdefault(m.group(1), []).append((rel, st.st_size, st.st_mtime_ns,
                                                   st.st_mode & 0o7777))
    return out


def _hash(store: Store, relpath: str, limit: int | None) -> tuple[int, int]:
    with store.reader() as durable:
        fd = durable.open_file(relpath)
    try:
        return stream(fd, limit, None, src_name=f"{store.root}/{relpath}")
    finally:
        os.close(fd)


def reconcile(store: Store, entries: Iterable[Entry]) -> list[Entry]:
    """Entries for restore, with each open-file copy in place of a missing or shorter file.

    A copy replaces the canonical entry only when the canonical file is
    missing, or is a plain file shorter than the copy whose bytes are a
    prefix of it (so nothing the canonical file holds is lost).
    """
    out = {e.path: e for e in entries}
    for path, copies in _copies(store).items():
        obj, size, mtime, mode = max(copies, key=lambda c: (c[1], c[0]))
        current = out.get(path)
        if current is not None:
            if current.kind != "file" or current.size >= size:
                continue
            try:
                n, canonical = _hash(store, current.location, None)
                m, prefix = _hash(store, obj, n)
            except (OSError, SourceError):
                continue  # unreadable: keep the canonical entry, restore reports it
            if n != current.size or m != n or canonical != prefix:
                continue
        out[path] = Entry(path, "file", size, mtime, mode, object=obj)
    return list(out.values())
