"""A SQLite database as files: its header, its companions, and which files are databases.

Owns the facts every stage reads the same way: the header a database starts
with (`HEADER`, `starts_with_header`, `has_header`), the files SQLite keeps
beside one (`COMPANIONS`), the adapter's ``sqlite`` globs (`find_databases`
on a live tree, `matches` for one path, `database_patterns` to keep the
listed databases and their companions out of the file copy), the index's
mark of a listed database (`LISTED`), and where a run stages and
quarantines snapshots (`Options`).  Opens files read-only and never as a
database: that is `syncengine.sqlite.check`'s (which imports apsw).
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from syncengine.fs.savefile import TEMP_SUFFIX

HEADER = b"SQLite format 3\x00"
MIN_SIZE = 512  # a SQLite database is at least one 512-byte page
COMPANIONS = ("-wal", "-shm", "-journal")  # files SQLite keeps beside a database
LISTED = "_listed"  # an index extra: the adapter's globs list this database
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@attrs.frozen
class Options:
    """Where snapshots are staged and invalid databases quarantined; the lock wait."""

    staging: Path
    quarantine: Path
    busy_timeout: float = 2.0
    secrets: Any = None  # the adapter's `crypt.secrets.Secrets`: a sealed snapshot's keys


def starts_with_header(fd: int) -> bool:
    """Whether the open file starts with the SQLite header (False when unreadable)."""
    try:
        return os.pread(fd, len(HEADER), 0) == HEADER
    except OSError:
        return False


def has_header(path: str) -> bool:
    """Whether the file at `path` (a symlink is not followed) starts with the header."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return False
    try:
        return starts_with_header(fd)
    finally:
        os.close(fd)


def companion_base(live: Path, relpath: str) -> str | None:
    """The database `relpath` belongs to, if it is a -wal/-shm/-journal of a SQLite file."""
    for suffix in COMPANIONS:
        if relpath.endswith(suffix) and len(relpath) > len(suffix):
            base = relpath[: -len(suffix)]
            return base if has_header(f"{live}/{base}") else None
    return None


def database_patterns(globs: Sequence[str]) -> tuple[str, ...]:
    """Anchored exclusion patterns for listed databases and their companions: a
    listed database is never copied as a file (snapshotted instead)."""
    return tuple(f"/{g.lstrip('/')}{suffix}" for g in globs for suffix in ("", *COMPANIONS))


def matches(patterns: Sequence[str], relpath: str) -> bool:
    """Whether `relpath` is one of the databases the globs list."""
    parts = relpath.split("/")
    for pattern in patterns:
        globs = [p for p in pattern.strip("/").split("/") if p]
        if len(globs) == len(parts) and all(map(fnmatch.fnmatchcase, parts, globs)):
            return True
    return False


def is_listed(extra: Mapping[str, Any]) -> bool:
    """Whether an index record's extras mark a database the adapter lists (not scanned as
    a file: the SQLite pass watches it)."""
    return bool(extra.get(LISTED))


def find_databases(live: Path, patterns: Sequence[str]) -> list[str]:
    """Relative paths of regular files matching the globs (``*`` never crosses ``/``).

    Exclusions do not apply: a listed database is always snapshotted.
    Symlinks are not followed; companions and temp files never match.
    """
    out: set[str] = set()
    for pattern in patterns:
        parts = [p for p in pattern.strip("/").split("/") if p]
        if parts:
            _glob(os.fspath(live), "", parts, out)
    return sorted(out)


def _glob(root: str, rel: str, parts: list[str], out: set[str]) -> None:
    head, rest = parts[0], parts[1:]
    if any(c in head for c in "*?["):
        try:
            with os.scandir(f"{root}/{rel}" if rel else root) as it:
                names = [e.name for e in it if fnmatch.fnmatchcase(e.name, head)]
        except OSError:
            return
    else:
        names = [head]
    for name in names:
        child = f"{rel}/{name}" if rel else name
        try:
            mode = os.lstat(f"{root}/{child}").st_mode
        except OSError:
            continue
        if rest:
            if stat.S_ISDIR(mode):
                _glob(root, child, rest, out)
        elif stat.S_ISREG(mode) and not name.endswith((*COMPANIONS, TEMP_SUFFIX)):
            out.add(child)
