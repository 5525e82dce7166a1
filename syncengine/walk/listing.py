"""The listing walk: list every directory of a tree, report what changed since the index.

Owns the walk over live trees only (never the durable side).  A walk yields,
per adapter, the regular files and symlinks whose stat signature differs from
the index, the directories whose mode (or presence) differs from the index's
directory record, the special files it skipped (FIFOs, sockets, devices are
never opened), and counts to detect paths that disappeared.  Excluded
directories are not entered, so never reported.  A directory's mode comes
from the ``fstat`` of the descriptor it is listed through, which the
directory table needs anyway: no system call is added.

`scan_paths` looks only at the paths a file watcher reported (a partial
scan); its result says which of those paths are gone, and nothing else.

Speed: an idle pass is dominated by one ``lstat`` per file.  Given more than
one worker (the dispatcher, `scan`, gives it more only when the process may
fork) the walk is split across forked worker processes by directory, which
brings a 100,000-file walk under the cost of ``find -newer``.  The table walk
(`tablewalk`) is not imported here: it calls `walk_listing` as it is handed it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Mapping, Sequence

from syncengine.fs.savefile import TEMP_SUFFIX
from syncengine.local import dirtable
from syncengine.local.dirtable import GONE, UNKNOWN
from syncengine.local.index import DIR_ABSENT, absent_passes, signature, unpacked
from syncengine.walk import forked
from syncengine.walk.job import ScanJob, ScanResult, Seen, SeenDir, hidden, new_result

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FRONTIER = 64  # directories to hand out before forking ...
_EXPAND_LIMIT = 4000  # ... or entries the parent walks first, whichever comes first
_SAMPLE = 2000  # index keys sampled to estimate where the files are
_SPLIT_ROUNDS = 4


def walk_listing(
    job: ScanJob,
    start: str,
    out: ScanResult,
    *,
    limit: int | None = None,
    skip_known: set[str] | None = None,
) -> list[str]:
    """Walk `start` depth-first; with `limit`, stop after that many entries and
    return the directories not yet entered (the frontier).

    With `skip_known` (re-listing a directory the table says changed),
    directories in it are not entered and indexed paths are not looked at: the
    table-driven walk checks those itself.  Only what is new is reported.

    The loop body runs once per file of every tree on every pass: it keeps to
    local names, the DirEntry's cached type, and one ``lstat`` per file.
    That is why it is one long function (a helper per file would add a call
    per file): the one hot loop tests/test_layout.py allows over 60 lines.
    Each directory listed (the root excepted) is compared with its record
    (`_compare_dir`).
    """
    root, records, skip = job.root, unpacked(job.records), job.skip_dirs
    sigs = out.walk.listed if out.walk is not None else None
    recent = job.recent_ns or 0
    excluded = job.matcher.excluded if job.matcher else None
    pack = signature
    get = records.get
    absent = absent_passes
    changed = out.changed
    stack = [start]
    handled = seen = known = 0
    while stack:
        if limit is not None and (handled >= limit or len(stack) >= _FRONTIER):
            break
        d = stack.pop(0) if limit is not None else stack.pop()
        prefix = f"{d}/" if d else ""
        try:
            # By descriptor: each entry's lstat is then relative to it (fstatat),
            # not a walk of the whole path from the root again.
            dir_fd = (
                os.open(f"{root}/{d}", _DIR_FLAGS | os.O_NOFOLLOW)
                if d
                else os.open(root, _DIR_FLAGS)
            )
        except FileNotFoundError:
            if d == "":
                out.exists = False
            if sigs is not None:
                sigs[d] = GONE
            continue
        except OSError as exc:
            if sigs is not None:  # a directory that could not be listed is tried again
                sigs[d] = GONE if exc.errno in (errno.ELOOP, errno.ENOTDIR) else UNKNOWN
            if d and exc.errno in (errno.ELOOP, errno.ENOTDIR):
                continue  # replaced by a symlink or a file since it was listed: never followed
            out.errors.append((d or ".", exc.strerror or str(exc)))
            continue
        try:
            if sigs is not None or d:  # taken before reading: a later change moves it
                st = os.fstat(dir_fd)
                if sigs is not None:
                    sigs[d] = dirtable.dir_sig(st.st_ino, st.st_mtime_ns, st.st_ctime_ns, recent)
                if d:
                    _compare_dir(job, d, st.st_mode, out)
            it = os.scandir(dir_fd)
        except OSError as exc:
            os.close(dir_fd)
            if sigs is not None:
                sigs[d] = UNKNOWN
            out.errors.append((d or ".", exc.strerror or str(exc)))
            continue
        try:
            with it:
                for e in it:
                    handled += 1
                    name = e.name
                    rel = prefix + name
                    try:
                        if e.is_dir(follow_symlinks=False):
                            if (
                                rel not in skip
                                and not (excluded and excluded(rel, True))
                                and (skip_known is None or rel not in skip_known)
                            ):
                                stack.append(rel)
                            continue
                        if name.endswith(TEMP_SUFFIX) or (excluded and excluded(rel, False)):
                            continue
                        if not (e.is_file(follow_symlinks=False) or e.is_symlink()):
                            out.specials.append(rel)  # FIFO, socket, device: never opened
                            continue
                        if skip_known is not None:
                            raw = get(rel)
                            if raw is not None and not absent(raw):
                                continue  # indexed: the table-driven walk lstats it
                        st = e.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # vanished while we looked: not an error
                    except OSError as exc:
                        out.errors.append((rel, exc.strerror or str(exc)))
                        continue
                    seen += 1
                    raw = get(rel)
                    if raw is not None:
                        if not absent(raw):  # counted only while not already marked absent
                            known += 1
                        if raw.startswith(pack(st.st_size, st.st_mtime_ns, st.st_ctime_ns)):
                            continue
                    changed.append(
                        Seen(rel, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                    )
        finally:
            os.close(dir_fd)
    out.seen += seen
    out.known += known
    return stack if limit is not None else []


def _compare_dir(job: ScanJob, d: str, st_mode: int, out: ScanResult) -> None:
    """Report directory `d` when its record differs (a new one, a mode change, back after
    missing); count it when it is recorded as present."""
    mode = st_mode & 0o7777
    rec = job.dirs.get(d)
    if rec != mode:
        out.dirs.append(SeenDir(d, mode))
    if rec is not None and rec < DIR_ABSENT:
        out.dirs_known += 1


def list_trees(jobs: Sequence[ScanJob], results: dict[str, ScanResult], workers: int) -> None:
    """List every job's tree whole into its entry of `results` (split across `workers`
    forked processes when more than one)."""
    parallel = workers > 1
    frontier: list[tuple[float, int, str]] = []
    for i, job in enumerate(jobs):
        if not parallel:
            walk_listing(job, "", results[job.name])
            continue
        rest = walk_listing(job, "", results[job.name], limit=_EXPAND_LIMIT)
        frontier.extend((w, i, d) for w, d in _balance(job, rest, results[job.name], workers))
    if len(frontier) < 2:
        for _, i, d in frontier:
            walk_listing(jobs[i], d, results[jobs[i].name])
        return
    _scan_forked(jobs, _pack(frontier, workers), results)


def _weights(records: Mapping[str, bytes], dirs: list[str]) -> dict[str, float]:
    """Estimated number of indexed files under each of `dirs`, from a strided sample."""
    keys = list(records)
    step = max(1, len(keys) // _SAMPLE)
    per_key = step if keys else 0
    weight = dict.fromkeys(dirs, 1.0)
    for key in keys[::step]:
        parent = key.rpartition("/")[0]
        while parent:
            if parent in weight:
                weight[parent] += per_key
                break
            parent = parent.rpartition("/")[0]
    return weight


def _balance(
    job: ScanJob, frontier: list[str], out: ScanResult, workers: int
) -> list[tuple[float, str]]:
    """Split frontier directories that hold too large a share of the tree.

    The index says where the files are: a directory estimated to hold more
    than 1/(4 x workers) of them is listed here and replaced by its
    subdirectories, so one deep subtree cannot leave a worker idle.
    """
    weight = _weights(job.records, frontier)
    total = sum(weight.values())
    for _ in range(_SPLIT_ROUNDS):
        heavy = [d for d in weight if weight[d] > total / (4 * workers) and weight[d] > 1]
        if not heavy:
            break
        for d in heavy:
            del weight[d]
            for sub in walk_listing(job, d, out, limit=1):  # one listing: its files, then subdirs
                weight[sub] = 1.0
        weight = _weights(job.records, list(weight))
    return [(w, d) for d, w in weight.items()]


def _pack(frontier: list[tuple[float, int, str]], workers: int) -> list[list[tuple[int, str]]]:
    """Greedy bin packing: heaviest directory first, onto the lightest worker."""
    bins: list[list[tuple[int, str]]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for w, i, d in sorted(frontier, reverse=True):
        k = load.index(min(load))
        bins[k].append((i, d))
        load[k] += w
    return [b for b in bins if b]


def _scan_forked(
    jobs: Sequence[ScanJob], shares: list[list[tuple[int, str]]], results: dict[str, ScanResult]
) -> None:
    def walk_share(share: list[tuple[int, str]]) -> dict[str, ScanResult]:
        part = {job.name: new_result(job) for job in jobs}
        for i, d in share:
            walk_listing(jobs[i], d, part[jobs[i].name])
        return part

    for share, part in zip(shares, forked.fork_map(shares, walk_share), strict=True):
        if part is None:  # a worker failed: walk its share here, nothing is lost
            part = walk_share(share)
        for name, res in part.items():
            results[name].merge(res)


def scan_paths(job: ScanJob, paths: Iterable[str]) -> ScanResult:
    """Look only at `paths` (hints from a file watcher), not the whole tree.

    Each path is ``lstat``ed: a file or symlink is compared with the index as
    a full walk would; a directory is walked (a directory created or moved
    in); a path that no longer exists is listed in ``gone`` so that only the
    hinted paths, never the rest of the index, can be marked absent.
    """
    out = ScanResult(gone=[])
    assert out.gone is not None
    if not os.path.isdir(job.root):
        out.exists = False
        return out
    pack = signature
    walked: list[str] = []
    for rel in sorted(set(paths)):
        if not rel or rel.startswith("/") or ".." in rel.split("/") or hidden(job, rel):
            continue
        if any(rel.startswith(d + "/") for d in walked):
            continue
        try:
            st = os.lstat(f"{job.root}/{rel}")
        except FileNotFoundError:
            out.gone.append(rel)
            continue
        except OSError as exc:
            out.errors.append((rel, exc.strerror or str(exc)))
            continue
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            if not (job.matcher and job.matcher.excluded(rel, True)):
                walked.append(rel)
                walk_listing(job, rel, out)
            continue
        if job.matcher and job.matcher.excluded(rel, False):
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            out.specials.append(rel)
            continue
        out.seen += 1
        raw = job.records.get(rel)
        if raw is not None and not absent_passes(raw):
            out.known += 1
        if raw is not None and raw.startswith(pack(st.st_size, st.st_mtime_ns, st.st_ctime_ns)):
            continue
        out.changed.append(Seen(rel, mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return out
