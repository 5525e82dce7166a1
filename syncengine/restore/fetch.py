"""Placing one durable entry in the live tree: a file, a log rebuilt from its chain, a link,
a directory.

Owns the per-entry side of a restore (restore.py plans and runs them).  The
bytes (from the plain object, or from a pack when restore/packed.py has them;
all-zero blocks as holes: `syncengine.fs.sparse`) go to a closed temp file
beside the target and are checked against the manifest's record
(`recorded.judge`, the rule verify uses too) before
anything is placed; only then is the temp renamed over the target with the
recorded mode (never setuid, setgid or sticky: the plan dropped them) and
mtime.  A copy that fails the check leaves the live path as it was and its
temp file is removed.  Directories are reached through a `DirCache`, never
following a symlink, so nothing is written outside the live root.  A recorded
directory is made there too (`make_dir`), owner-only at first, and given its
recorded mode by descriptor (restore.py decides when).  A secret file's object
(its entry is marked sealed, or it matches the adapter's ``secrets`` and is a
sealed object) is opened with the adapter's keys (`syncengine.crypt.chunked`,
streamed chunk by chunk): a missing or wrong key fails that path alone before
anything is written; a chunk that fails authentication fails it before
anything is placed (the temp file is removed).  With `new_only`
(the background part of `run`'s restore, restore/later.py) a file is placed
only where no file has appeared since the plan (`Staged.publish_absent`): a
file the agent wrote meanwhile wins, and the outcome is `KeepLocal(WRITTEN)`.
"""

from __future__ import annotations

import io
import logging
import os
import stat

import attrs

from syncengine.crypt import chunked, sealed
from syncengine.crypt.secrets import Secrets, sealed_with
from syncengine.durable import chain, chainread, recorded
from syncengine.durable.manifest import Entry
from syncengine.durable.store import ObjectInfo, Opened, Store
from syncengine.errors import DurableError, SourceError, source_error
from syncengine.fs import savefile, sparse
from syncengine.fs.safepath import DirCache, UnsafePath
from syncengine.fs.stream import Vanished, link_hash, stream
from syncengine.plan import Fetch, KeepLocal, LocalState, keep_reason
from syncengine.restore.packed import PackedFetch

log = logging.getLogger("syncengine")
Done = tuple[Entry, os.stat_result, int]  # what was placed, its stat, its hash
WRITTEN = "written locally during the background restore; the local file is kept"


def local_state(live: DirCache, relpath: str) -> LocalState | None:
    """What is at `relpath` in the live tree (lstat), or None."""
    try:
        with live.parent(relpath) as (dir_fd, name):
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    else:
        kind = "other"
    return LocalState(kind, st.st_size, st.st_mtime_ns, st.st_mode & 0o7777)


def fetch_file(
    action: Fetch,
    live: DirCache,
    durable: Store,
    *,
    unrecorded: bool,
    secrets: Secrets | None = None,
    packed: PackedFetch | None = None,
    new_only: bool = False,
) -> Done | Vanished | KeepLocal:
    """Copy one durable file into place, checked; Vanished: an old-layout file gone since
    the listing (skipped, like rsync's exit 24).  `packed`: its bytes from a pack, already
    checked against the entry (restore/packed.py), or None: the plain object is read."""
    entry = action.entry
    data = packed(entry) if packed is not None else None
    if data is not None:
        info = ObjectInfo(entry.location, len(data), entry.mtime_ns, entry.mode)
        return _place(
            action, Opened(info, io.BytesIO(data)), live, entry.location, unrecorded, new_only
        )
    try:
        with durable.open(entry.location) as src:
            if sealed_with(entry.extra) or (secrets is not None and secrets.secret(entry.path)):
                src = _unsealed(entry, src, secrets)
            try:
                return _place(
                    action, src, live, durable.where(entry.location), unrecorded, new_only
                )
            except sealed.SealError as exc:
                raise SourceError(
                    entry.path, "restore", f"{exc.why}; not restored: {exc.fix}"
                ) from None
    except FileNotFoundError as exc:  # the durable object (`_place` raises no OSError)
        if action.walked:
            log.info(
                "restore.vanished path=%s: gone from the durable tree (old layout, no "
                "manifest) since it was listed; skipped",
                entry.path,
                extra={"event": "restore.vanished"},
            )
            return Vanished(entry.path)
        raise SourceError(
            entry.path,
            "restore",
            f"listed in the manifest but missing on the durable side ({entry.location})",
        ) from exc


def _unsealed(entry: Entry, src: Opened, secrets: Secrets | None) -> Opened:
    """A secret file's object as its plaintext (a plain one as it is); raise SourceError
    naming the path and the fix when it cannot be opened."""
    name = secrets.name(entry.path) if secrets is not None else entry.path
    keys = secrets.keys if secrets is not None else None
    try:
        plain = chunked.reader(src.file, keys, name, marked=bool(sealed_with(entry.extra)))
    except sealed.SealError as exc:
        raise SourceError(entry.path, "restore", f"{exc.why}; not restored: {exc.fix}") from None
    return Opened(src.info, plain)


def _place(
    action: Fetch, src: Opened, live: DirCache, where: str, unrecorded: bool, new_only: bool
) -> Done | KeepLocal:
    entry = action.entry
    try:
        if src.info.kind != "file":
            raise SourceError(
                entry.path, "restore", f"durable object {entry.location} is not a regular file"
            )
        with (
            live.parent(entry.path) as (dir_fd, name),
            savefile.staged(dir_fd=dir_fd, source_mode=entry.mode) as tmp,
        ):
            try:
                sink = sparse.HoleWriter(tmp.fd)  # zero blocks stay holes (sparse files)
                n, h = stream(src.file, None, sink.write, src_name=where, dst_name=entry.path)
                sink.end()
            except DurableError as exc:  # here the "durable" side of stream() is the live file
                raise SourceError(entry.path, "write", str(exc)) from exc
            placed = entry if action.walked else _checked(entry, n, src.info, h, unrecorded)
            tmp.close(mode=entry.mode, mtime_ns=placed.mtime_ns)
            _publish(tmp, name, dir_fd, new_only)
            after = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        return KeepLocal(entry, WRITTEN)
    except OSError as exc:
        raise source_error("restore", entry.path, exc) from exc
    return placed, after, h


def _publish(tmp: savefile.Staged, name: str, dir_fd: int, new_only: bool) -> None:
    if new_only:
        tmp.publish_absent(name, target_dir_fd=dir_fd)
    else:
        tmp.publish(name, target_dir_fd=dir_fd)


def _checked(entry: Entry, size: int, st: ObjectInfo, digest: int, unrecorded: bool) -> Entry:
    """The entry as placed: the recorded one, or a newer complete version (raise if corrupt)."""
    verdict = recorded.judge(entry, size, st.mtime_ns, digest, unrecorded=unrecorded)
    if verdict.problem is not None:
        raise SourceError(
            entry.path,
            "restore",
            f"the durable copy {entry.location} "
            f"{verdict.problem}; the live path was left as it was",
        )
    if not verdict.newer:
        return entry
    log.warning(
        "restore.newer-than-manifest path=%s: the durable copy is a newer complete "
        "version than the manifest records (a checkpoint was interrupted before "
        "recording it); restored with its own mtime",
        entry.path,
        extra={"event": "restore.newer-than-manifest"},
    )
    return attrs.evolve(entry, size=size, mtime_ns=st.mtime_ns, hash=digest)


def fetch_log(
    entry: Entry, live: DirCache, durable: Store, *, new_only: bool = False
) -> Done | KeepLocal:
    """Rebuild an append-only log from its chain, listed here (in the copy pool, so the
    listings of many logs overlap on a slow mount), and from its plain copy where that
    extends the chain (chain.py).

    Returns the log as rebuilt, with the chain state the index needs, or
    KeepLocal when the local copy is as new as what the durable side holds;
    nothing is placed unless every object verified.
    """
    resolved = chain.load(durable, entry)
    plain = chainread.plain_copy(durable, entry, resolved.size)
    try:
        keep = _keep_local(entry, resolved, live, plain)
        if keep is not None:
            return keep
        with (
            live.parent(entry.path) as (dir_fd, name),
            savefile.staged(dir_fd=dir_fd, source_mode=entry.mode) as tmp,
        ):

            def write(chunk: memoryview) -> None:
                try:
                    tmp.write(chunk)
                except OSError as exc:  # the live side: this file fails, the run goes on
                    raise source_error("write", entry.path, exc) from exc

            listed = len(resolved.pieces)
            resolved, h = chainread.read(resolved, durable, write)
            rebuilt = resolved.as_entry(h)
            grown = chainread.extend(durable, entry, resolved.size, h, write) if plain else None
            if grown is not None:  # the chain's state stays; the index sees the rest as new
                rebuilt = attrs.evolve(
                    rebuilt,
                    size=grown[0],
                    mtime_ns=max(grown[1], rebuilt.mtime_ns),
                    extra={
                        **rebuilt.extra,
                        chain.PLAIN: {"size": grown[0], "hash": f"{grown[2]:016x}"},
                    },
                )
            elif plain is not None or len(resolved.pieces) < listed:
                keep = _keep_local(entry, resolved, live, None)  # less than planned: ask again
                if keep is not None:
                    return keep
            tmp.close(mode=entry.mode, mtime_ns=rebuilt.mtime_ns)
            _publish(tmp, name, dir_fd, new_only)
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except UnsafePath:
        raise
    except FileExistsError:
        return KeepLocal(entry, WRITTEN)
    except OSError as exc:
        raise source_error("restore", entry.path, exc) from exc
    return rebuilt, st, h


def _keep_local(
    entry: Entry, resolved: chain.Chain, live: DirCache, plain: ObjectInfo | None
) -> KeepLocal | None:
    """KeepLocal when the live copy of a log is as new as its chain, or as its plain copy
    when that is longer (hot restart)."""
    local = local_state(live, entry.path)
    if local is None:
        return None
    durable = resolved.as_entry()
    if plain is not None:
        durable = attrs.evolve(durable, size=plain.size, mtime_ns=plain.mtime_ns)
    reason = keep_reason(durable, local)
    return KeepLocal(entry, reason) if reason is not None else None


def make_link(entry: Entry, live: DirCache) -> Done:
    if not entry.target:
        raise SourceError(entry.path, "symlink", "the manifest records no target")
    try:
        with live.parent(entry.path) as (dir_fd, name):
            savefile.place_symlink(entry.target, name, dir_fd=dir_fd, mtime_ns=entry.mtime_ns)
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except UnsafePath:
        raise
    except OSError as exc:
        raise source_error("symlink", entry.path, exc) from exc
    return entry, st, link_hash(entry.target)


def make_dir(entry: Entry, live: DirCache, *, set_mode: bool) -> int:
    """Make the recorded directory `entry` where it is missing (never through a symlink;
    owner-only, as restore makes every parent) and, with `set_mode`, give it its recorded
    mode; return the mode it has now."""
    try:
        with live.pinned(entry.path) as fd:
            if set_mode:
                os.fchmod(fd, entry.mode)
            return os.fstat(fd).st_mode & 0o7777
    except UnsafePath:
        raise
    except OSError as exc:
        raise source_error("mkdir", entry.path, exc) from exc
