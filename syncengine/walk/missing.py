"""Which published paths are missing from the live tree this pass (deciding only).

Owns the rules for marking a path absent: a path is missing when it is gone,
when it is a directory now, or when a directory above it is gone or became a
symlink (never looked up through the link).  A path already absent is counted
once more each pass, up to a cap (gc's grace period counts passes and time).
Listed SQLite databases are never scanned as files, so never missing here.
Recorded directories follow the same rules (`missing_dirs`): nothing durable
is deleted for one, but its manifest entry stays until gc's tombstone drops
it, exactly as a file's does.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from syncengine.local.adapter import AdapterState
from syncengine.local.dirtable import GONE
from syncengine.local.index import DIR_ABSENT, Index, absent_passes
from syncengine.sqlite import files
from syncengine.walk.job import ScanResult

_ABSENT_CAP = 255


def _listed(index: Index) -> list[str]:
    """Databases the adapter lists: never scanned as files (the sqlite module watches them)."""
    return [p for p, extra in index.extras.items() if files.is_listed(extra)]


def walk_coverage(state: AdapterState, scan: ScanResult) -> dict[str, Any]:
    """What the directory table needs to know of a walk before the pass changes the index:
    how many keys there were, and whether the walk saw every present path but the
    listed databases (then those are the only paths a walk never reports)."""
    index = state.index
    listed = _listed(index)
    return {
        "nkeys": len(index.records),
        "listed": listed,
        "complete": scan.known >= index.present_count() - len(listed),
    }


def find_missing(state: AdapterState, scan: ScanResult) -> list[str]:
    """Published paths not present in the live tree this pass."""
    index = state.index
    listed = _listed(index)  # never scanned
    need_lstat = scan.known < index.present_count() - len(listed)
    if not need_lstat and not index.absent:
        return []  # every published path was seen: nothing to look up (the idle case)
    changed = {s.path for s in scan.changed}
    skip = set(listed)
    real_dir = _real_dirs(state.live)
    out: list[str] = []
    for path, raw in index.records.items():
        absent = absent_passes(raw)
        if path in skip:
            continue
        if absent:
            if absent < _ABSENT_CAP and path not in changed:
                out.append(path)
        elif need_lstat and path not in changed:
            if not real_dir(path.rpartition("/")[0]):
                out.append(path)  # its directory is gone, or a symlink now: never followed
                continue
            try:
                if stat.S_ISDIR(os.lstat(state.live / path).st_mode):
                    out.append(path)  # a directory now: the published file is gone
            except FileNotFoundError:
                out.append(path)
            except OSError:
                pass
    return out


def _real_dirs(live: Path) -> Callable[[str], bool]:
    """Whether a relative directory is a directory all the way down (no symlink), cached."""
    known: dict[str, bool] = {"": True}

    def real_dir(rel: str) -> bool:
        ok = known.get(rel)
        if ok is None:
            try:
                ok = real_dir(rel.rpartition("/")[0]) and stat.S_ISDIR(os.lstat(live / rel).st_mode)
            except OSError:
                ok = False
            known[rel] = ok
        return ok

    return real_dir


def missing_among(state: AdapterState, gone: Sequence[str]) -> list[str]:
    """Published paths absent after a partial (hinted) scan: only the hinted ones.

    A hinted path the index does not know may be a directory that was removed
    or moved away: the published paths under it are missing too (one pass over
    the index, only in that case).
    """
    if not gone:  # an idle pass: the index's records stay packed
        return []
    records = state.index.records
    out = [p for p in gone if p in records and absent_passes(records[p]) < _ABSENT_CAP]
    prefixes = tuple(p + "/" for p in gone if p not in records)
    if prefixes:
        out.extend(
            p
            for p, raw in records.items()
            if p.startswith(prefixes) and absent_passes(raw) < _ABSENT_CAP
        )
    return out


def missing_dirs(state: AdapterState, scan: ScanResult) -> list[str]:
    """Recorded directories not in the live tree this pass, whichever walk `scan` was.

    A table-driven walk names the ones it found gone; a hinted one names gone
    paths (a directory's own, or one above it); a full listing saw every
    directory it listed and counted the recorded ones (`dirs_known`), so only
    when some are unaccounted for is each of those looked up.  A directory
    already missing is counted once more each pass unless it was seen again.
    """
    index = state.index
    if not index.dir_count():
        return []
    seen = {s.path for s in scan.dirs}
    if scan.dirs_gone is not None:  # the table-driven walk
        return scan.dirs_gone + (_still_absent(index.dirs, seen) if index.dirs_absent else [])
    if scan.gone is not None:  # hints from a watcher: only what they name
        if not scan.gone:
            return []
        gone = set(scan.gone)
        prefixes = tuple(p + "/" for p in scan.gone)
        return [
            p
            for p, v in index.dirs.items()
            if (p in gone or p.startswith(prefixes))
            and v // DIR_ABSENT < _ABSENT_CAP
            and p not in seen
        ]
    need_lookup = scan.dirs_known < index.dir_count() - index.dirs_absent
    if not need_lookup:
        return _still_absent(index.dirs, seen) if index.dirs_absent else []
    dirs = index.dirs
    listed = scan.walk.listed if scan.walk is not None else {}
    real_dir = _real_dirs(state.live)
    out = []
    for path, value in dirs.items():
        if path in seen:
            continue
        if value >= DIR_ABSENT:
            if value // DIR_ABSENT < _ABSENT_CAP:
                out.append(path)
        elif listed.get(path, GONE) == GONE and not real_dir(path):
            out.append(path)  # gone, not a directory now, or under a symlink now
    return out


def _still_absent(dirs: dict[str, int], seen: set[str]) -> list[str]:
    return [
        p
        for p, v in dirs.items()
        if v >= DIR_ABSENT and v // DIR_ABSENT < _ABSENT_CAP and p not in seen
    ]
