"""Choosing the walk: the one place that decides how each live tree is walked.

Owns the dispatch, not the walking.  A tree whose directory table is valid is
walked by `tablewalk` (lstat every indexed path, list only directories that
changed); any other tree, or one whose table turns out not to fit its index,
is listed whole by `listing`.  The two walks do not import each other: the
table walk lists a changed directory through the `listing.walk_listing` it is
handed here.  `scan_paths` looks only at the paths a file watcher reported.

When the process has a single thread (the one-shot CLI) either walk is split
across forked worker processes; with threads running (daemon, embedded use)
it walks serially in the calling thread, because forking a threaded process
is unsafe (`forked.can_fork`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from syncengine.walk import forked, listing, tablewalk
from syncengine.walk.job import ScanJob, ScanResult, new_result


def scan(jobs: Sequence[ScanJob], *, workers: int = 2) -> dict[str, ScanResult]:
    """Walk every job's tree and return a ScanResult per job name."""
    results = {job.name: new_result(job) for job in jobs}
    workers = workers if workers > 1 and forked.can_fork() else 1
    tabled = [j for j in jobs if j.table is not None]
    whole = [j for j in jobs if j.table is None]
    if tabled:  # a table that does not fit its index hands its job back: listed whole
        whole += tablewalk.scan(tabled, results, workers, relist=listing.walk_listing)
    if whole:
        listing.list_trees(whole, results, workers)
    return results


def scan_paths(job: ScanJob, paths: Iterable[str]) -> ScanResult:
    """Look only at `paths` (hints from a file watcher), not the whole tree (see
    `listing.scan_paths`)."""
    return listing.scan_paths(job, paths)
