"""Open files during migration: find them, copy them closed, reconcile them at restore.

Owns the rule of the design's migration note: a file (a Codex rollout) that a
running process still holds open is copied *as its writer sees it* (through
``/proc/<pid>/fd/<n>``, up to its last complete line) to a new closed object
``<durable>/.syncengine/migration/open/<path>.<time_ns>``, read back to
verify; the canonical durable path is never written, since the writer may
still close its own shorter view over it.  `reconcile` lets restore use the
longest such copy when the canonical file is missing, or is a plain file that
is a shorter prefix of the copy; the next checkpoint then publishes it.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs
import xxhash

from syncengine.checkpoint import segments
from syncengine.config import AdapterSpec, MigrateStep
from syncengine.durable.manifest import Entry
from syncengine.durable.store import META_DIR, Store
from syncengine.errors import DurableError, SourceError
from syncengine.fs.stream import stream
from syncengine.patterns import compile_patterns

OPEN_DIR = f"{META_DIR}/migration/open"
_COPY_NAME = re.compile(r"^(.+)\.(\d{19})$")


@attrs.frozen
class SnapshotOpen:
    """Copy an open file, as its writer sees it, to a closed migration object."""

    adapter: str
    proc_path: str  # /proc/<pid>/fd/<n>
    rel: str
    size: int  # up to the last complete line

    def __str__(self) -> str:
        return (
            f"copy open file {self.adapter}:{self.rel} (held by pid "
            f"{self.proc_path.split('/')[2]}, {self.size} bytes of complete lines) -> "
            f"{OPEN_DIR}/{self.rel}.<time>"
        )


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


def plan(spec: AdapterSpec, step: MigrateStep, store: Store) -> list[SnapshotOpen | str]:
    """A copy per matching open file; a line of text when there is nothing to do.

    `store` is the adapter's durable side (its copies so far); the open files are
    found through /proc, by the real path of ``spec.durable``.
    """
    matcher = compile_patterns(step.patterns, where=f"adapter {spec.name!r} migrate")
    actions: list[SnapshotOpen | str] = []
    # Only files open *on the durable side* (the old layout wrote there through a
    # symlink): a writer on the live tree is the new layout, checkpointed as usual,
    # so a migrate run after deployment stays a no-op.
    roots = [Path(os.path.realpath(spec.durable))]
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
            actions.append(f"{spec.name}: open file {rel} already copied ({cut} bytes)")
            continue
        actions.append(SnapshotOpen(spec.name, proc_path, rel, cut))
    return actions or [f"{spec.name}: no open {' '.join(step.patterns)}: nothing to copy"]


def snapshot(store: Store, action: SnapshotOpen, now_ns: int) -> None:
    name = f"{OPEN_DIR}/{action.rel}.{now_ns:019d}"
    fd, st = _open_held(action.proc_path)
    try:
        with store.writer(name, mode=st.st_mode, mtime_ns=st.st_mtime_ns, unique=True) as out:
            n, h = stream(
                fd, action.size, out.write, src_name=action.proc_path, dst_name=store.where(name)
            )
            if n != action.size:
                raise SourceError(action.rel, "copy open file", "shrank while copying")
    finally:
        os.close(fd)
    back = xxhash.xxh3_64_intdigest(store.read_bytes(name))
    if back != h:
        raise DurableError(f"{store.where(name)}: read back differs from what was written")


def is_copy(entry: Entry) -> bool:
    """Whether restore takes this entry from an open-file copy (`reconcile`)."""
    return bool(entry.object and entry.object.startswith(OPEN_DIR + "/"))


def _copies(store: Store) -> dict[str, list[tuple[str, int, int, int]]]:
    """Open-file copies on the durable side: path -> [(object, bytes, mtime_ns, mode)]."""
    out: dict[str, list[tuple[str, int, int, int]]] = {}
    prefix = OPEN_DIR + "/"
    for info in store.list(OPEN_DIR):
        m = _COPY_NAME.match(info.key[len(prefix) :])
        if m and info.kind == "file":
            out.setdefault(m.group(1), []).append((info.key, info.size, info.mtime_ns, info.mode))
    return out


def _hash(store: Store, relpath: str, limit: int | None) -> tuple[int, int]:
    with store.open(relpath) as durable:
        return stream(durable.file, limit, None, src_name=store.where(relpath))


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
