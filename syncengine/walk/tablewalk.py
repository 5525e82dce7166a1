"""The table-driven walk: lstat every indexed path, list only directories that changed.

Owns the incremental walk of a tree whose directory table is valid (see
`dirtable` for why it is safe) and the table's life around a checkpoint pass:
loading it for the saved index, and keeping it in step after the pass.

An idle pass over 100,000 files in 20,000 directories then makes one
``fstatat`` per directory and one per indexed file, and lists nothing:
122,600 system calls in all, against 322,700 when every directory is listed
(open, getdents twice, close; ``find`` must do the same) (``strace -c -f``).
What the listing would have found is found another way:

- a changed or new file that is indexed: its own ``lstat``;
- a new file, directory or special file: its directory's signature moved, so
  that directory is listed (its indexed files and known subdirectories are
  skipped there, new subdirectories are walked whole);
- a missing file: its ``lstat`` fails, and it is reported in ``gone``;
- a directory replaced by a symlink: it is not a directory any more, so the
  paths under it are reported gone, never looked up through the link;
- a new directory, or one whose mode changed: a chmod moves its ctime, so its
  signature moved and it is listed again, which compares it with its record
  (`listing.walk_listing`); a recorded directory now missing: its signature is
  GONE, and it is reported in ``dirs_gone``.  Directories whose signature did
  not move cost nothing more than before.

With more than one process available the derived directories and the keys
are split in contiguous slices across forked workers, like the listing walk.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from syncengine.local import dirtable
from syncengine.local.dirtable import GONE, UNKNOWN, DirTable, DirWalk
from syncengine.local.index import (
    ABSENT_BYTE,
    DIR_ABSENT,
    RECORD,
    Index,
    absent_passes,
    packed,
    signature,
)
from syncengine.walk import forked
from syncengine.walk.job import Lister, ScanJob, ScanResult, Seen, entered, reported

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_Prep = tuple[ScanJob, list[str], list[str], bytes]


def scan(
    jobs: Sequence[ScanJob], results: dict[str, ScanResult], workers: int, *, relist: Lister
) -> list[ScanJob]:
    """Walk each job (all have a table) into its entry of `results`, listing changed
    directories with `relist`; return the jobs whose table does not fit their index
    (without it: the caller lists them whole)."""
    preps: list[_Prep] = []
    unfit: list[ScanJob] = []
    for job in jobs:
        assert job.table is not None
        res = results[job.name]
        if not os.path.isdir(job.root):
            res.exists = False
            continue
        keys, blob = packed(job.records)  # an index's records, read in place
        order = job.table.order
        if order is None:  # a table saved without its order
            order = dirtable.derive(keys)
        if len(order) != len(job.table.sigs):  # not the table of these keys: list everything
            unfit.append(attrs.evolve(job, table=None))
            continue
        res.walk = DirWalk(order=order)
        res.gone = []
        res.dirs_gone = []
        preps.append((job, order, keys, blob))
    if not preps:
        return unfit
    shares = [[(p, w) for p in range(len(preps))] for w in range(workers)]

    def work(share: list[tuple[int, int]]) -> dict[str, ScanResult]:
        part = {}
        for p, w in share:
            out = ScanResult(walk=DirWalk(), gone=[], dirs_gone=[])
            _walk_share(preps[p], w, workers, out, relist)
            part[preps[p][0].name] = out
        return part

    parts = forked.fork_map(shares, work) if workers > 1 else [work(shares[0])]
    for share, part in zip(shares, parts, strict=True):
        for name, res in (part if part is not None else work(share)).items():
            results[name].merge(res)
    for job, _, _, _ in preps:
        _finish(job, results[job.name])
    return unfit


def _slice(n: int, w: int, workers: int) -> range:
    return range(n * w // workers, n * (w + 1) // workers)


def _walk_share(prep: _Prep, w: int, workers: int, out: ScanResult, lister: Lister) -> None:
    job, order, keys, blob = prep
    assert job.table is not None and out.walk is not None
    try:
        rfd = os.open(job.root, _DIR_FLAGS)
    except OSError as exc:
        out.walk.fresh.extend([UNKNOWN] * len(_slice(len(order), w, workers)))
        out.errors.append((".", exc.strerror or str(exc)))
        return
    try:
        relist = _check_dirs(job, order, _slice(len(order), w, workers), rfd, out)
        if w == 0:
            relist += _check_extras(job, rfd, out)
        relist = [d for d in relist if entered(job, d)]  # an indexed path may sit in an
        if relist:  # excluded one: never list that
            known = set(order)
            known.update(job.table.extras)
            for d in relist:
                lister(job, d, out, skip_known=known)
        _check_keys(job, keys, blob, _slice(len(keys), w, workers), rfd, out)
    finally:
        os.close(rfd)


def _check_dirs(
    job: ScanJob, order: list[str], span: range, rfd: int, out: ScanResult
) -> list[str]:
    """Signature of each derived directory in `span`; the ones to list again."""
    assert job.table is not None and out.walk is not None
    old, fresh = job.table.sigs, out.walk.fresh
    relist = []
    for i in span:
        d = order[i]
        s, replaced = _dir_sig(job, d, rfd, out)
        if replaced:  # a file or symlink now: the paths under it are never looked up
            out.walk.broken.append(d)
        if s == GONE:
            _dir_gone(job, d, out)
        fresh.append(UNKNOWN if s is None else s)
        if s is not None and s != GONE and (s != old[i] or s == UNKNOWN):
            relist.append(d)
    return relist


def _check_extras(job: ScanJob, rfd: int, out: ScanResult) -> list[str]:
    """The same for the directories that hold no indexed path (kept by name)."""
    assert job.table is not None and out.walk is not None
    relist = []
    for d, old in job.table.extras.items():
        s, _ = _dir_sig(job, d, rfd, out)
        if s == GONE:
            _dir_gone(job, d, out)
        if s is None or s == GONE:
            out.walk.listed[d] = UNKNOWN if s is None else s  # tried again, or dropped
        elif s != old or s == UNKNOWN:
            relist.append(d)
    return relist


def _dir_gone(job: ScanJob, d: str, out: ScanResult) -> None:
    """A directory of the table is missing (or not a directory): gone, if recorded present."""
    rec = job.dirs.get(d)
    if rec is not None and rec < DIR_ABSENT and d:
        assert out.dirs_gone is not None
        out.dirs_gone.append(d)


def _dir_sig(job: ScanJob, d: str, rfd: int, out: ScanResult) -> tuple[int | None, bool]:
    """A directory's signature now and whether it was replaced by something else:
    GONE when missing or replaced, None (an error recorded) when it cannot be
    looked at, UNKNOWN when it changed too recently to trust."""
    try:
        st = os.stat(d or ".", dir_fd=rfd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return GONE, False
    except OSError as exc:
        out.errors.append((d or ".", exc.strerror or str(exc)))
        return None, False
    if not stat.S_ISDIR(st.st_mode):
        return GONE, True
    return dirtable.dir_sig(st.st_ino, st.st_mtime_ns, st.st_ctime_ns, job.recent_ns or 0), False


def _check_keys(
    job: ScanJob, keys: list[str], blob: bytes, span: range, rfd: int, out: ScanResult
) -> None:
    """One ``lstat`` per indexed path in `span`, relative to the root.

    The hot loop of an idle pass: local names only; path ``j``'s record is
    ``blob[j * RECORD.size:]``, compared in place (`Index.packed`).  A path
    recorded as absent is reported in ``gone`` again (the engine counts its
    absences).
    """
    assert job.table is not None and out.gone is not None
    unwalked = job.table.unwalked
    pack, lstat, changed, gone = signature, os.stat, out.changed, out.gone
    size, last = RECORD.size, ABSENT_BYTE
    is_reg, is_lnk = stat.S_ISREG, stat.S_ISLNK
    seen = 0
    for j in span:
        k = keys[j]
        if unwalked and k in unwalked:
            continue
        at = j * size
        if blob[at + last]:
            gone.append(k)
            continue
        try:
            st = lstat(k, dir_fd=rfd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            gone.append(k)
            continue
        except OSError as exc:
            out.errors.append((k, exc.strerror or str(exc)))
            continue
        mode = st.st_mode
        if not (is_reg(mode) or is_lnk(mode)):
            if stat.S_ISDIR(mode):
                gone.append(k)  # a directory now: its parent is listed again
            continue  # a special file now: the listing of its directory reports it
        seen += 1
        if blob.startswith(pack(st.st_size, st.st_mtime_ns, st.st_ctime_ns), at):
            continue
        changed.append(Seen(k, mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    out.seen += seen
    out.known += seen


def _finish(job: ScanJob, res: ScanResult) -> None:
    """After the workers: paths under a directory that became a symlink are gone
    (whatever an lstat through the link said), found paths are not gone, and
    special files in directories not listed again are still reported."""
    assert job.table is not None and res.walk is not None and res.gone is not None
    assert res.dirs_gone is not None
    if res.walk.broken:
        prefixes = tuple(d + "/" for d in res.walk.broken)
        res.changed = [s for s in res.changed if not s.path.startswith(prefixes)]
        res.gone.extend(k for k in job.records if k.startswith(prefixes))
        res.dirs = [s for s in res.dirs if not s.path.startswith(prefixes)]
        res.dirs_gone.extend(
            d for d, rec in job.dirs.items() if rec < DIR_ABSENT and d.startswith(prefixes)
        )
    found = {s.path for s in res.changed}
    res.gone = [k for k in dict.fromkeys(res.gone) if k not in found]
    if res.dirs_gone:
        there = {s.path for s in res.dirs}
        res.dirs_gone = [d for d in dict.fromkeys(res.dirs_gone) if d not in there]
    listed = res.walk.listed
    for rel in job.table.specials:
        if rel.rpartition("/")[0] not in listed and _still_special(job.root, rel):
            res.specials.append(rel)


def _still_special(root: str, rel: str) -> bool:
    try:
        mode = os.lstat(f"{root}/{rel}").st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISDIR(mode))


# -- the table around a pass ---------------------------------------------


def table_path(index_path: Path) -> Path:
    return index_path.with_suffix(".dirs")


def _fingerprint(job: ScanJob) -> str:
    return dirtable.fingerprint(
        job.root, job.matcher.patterns if job.matcher else (), job.skip_dirs
    )


def load_table(index_path: Path, job: ScanJob, index: Index) -> DirTable | None:
    """The table for this index as saved, or None (the walk then lists everything)."""
    if index.changed or index.file_sig is None:
        return None
    table = dirtable.load(table_path(index_path), index.file_sig, _fingerprint(job))
    if table is None or table.nkeys != len(index):
        return None
    return table


def keep_table(
    index_path: Path, job: ScanJob, index: Index, result: ScanResult, scanned: dict[str, Any] | None
) -> None:
    """Save the table that goes with the index as it is now, after a pass.

    `scanned` (after a full listing) is what the engine noted right after the
    walk, before the pass changed the index: ``nkeys``, ``listed`` and
    ``complete`` (the walk saw every present path except the listed databases,
    so those are the only ones a walk never reports).
    Nothing is written when nothing changed (an idle pass writes nothing).
    """
    if index.file_sig is None:
        return
    old, walk = job.table, result.walk
    fp = _fingerprint(job)

    def hidden(rel: str) -> bool:
        return not reported(job, rel)

    if walk is None:  # a pass driven by watcher hints (the daemon)
        if old is None or old.index_sig == index.file_sig or len(index) != old.nkeys or result.dirs:
            # New paths (or directories recorded: one not in the table would never be
            # looked at again): let the table go stale rather than derive every directory
            # on each small pass; the daemon's next full walk lists everything once.
            return
        new = attrs.evolve(old, index_sig=index.file_sig)  # same paths: same order
    elif old is not None:
        _relist_unrecorded(index, result, walk)
        if (
            old.index_sig == index.file_sig
            and walk.fresh == old.sigs
            and not walk.listed
            and tuple(result.specials) == old.specials
        ):
            return  # idle: nothing to write
        new = dirtable.rebase(
            old, walk, list(index.records), hidden, result.specials, index.file_sig, fp
        )
    else:
        _relist_unrecorded(index, result, walk)
        assert scanned is not None, "a full listing's coverage is noted before the pass"
        new = _first_table(index, result, walk, scanned, hidden, fp)
    dirtable.save(table_path(index_path), new)


def _first_table(
    index: Index,
    result: ScanResult,
    walk: DirWalk,
    scanned: dict[str, Any],
    hidden: Callable[[str], bool],
    fp: str,
) -> DirTable:
    """The table after a full listing with none before it: the paths the walk never
    reports (`unwalked`) are the listed databases, or found among the first records."""
    assert index.file_sig is not None, "keep_table returns first for an unsaved index"
    n = scanned["nkeys"]
    unwalked = (
        scanned["listed"]
        if scanned["complete"]
        else [
            k for k, raw in list(index.records.items())[:n] if not absent_passes(raw) and hidden(k)
        ]
    )
    return dirtable.rebase(
        None, walk, list(index.records), hidden, result.specials, index.file_sig, fp, unwalked, n
    )


def _relist_unrecorded(index: Index, result: ScanResult, walk: DirWalk) -> None:
    """A path the walk found but the pass did not record (its copy failed, the durable
    side stopped the pass, it could not be read) is found again only by listing its
    directory: mark that directory UNKNOWN.  Indexed paths are lstat-ed every pass.
    A directory the pass did not record (see `plan.SkipDir`) is marked UNKNOWN itself,
    so it is listed and compared again."""
    for seen in result.changed:  # none in an idle pass: the records stay packed
        raw = index.records.get(seen.path)
        if raw is None or absent_passes(raw):
            walk.listed[seen.path.rpartition("/")[0]] = UNKNOWN
    for path, _ in result.errors:
        walk.listed[path.rpartition("/")[0]] = UNKNOWN
    for d in result.dirs:
        if index.dirs.get(d.path) != d.mode:
            walk.listed[d.path] = UNKNOWN
