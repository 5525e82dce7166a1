"""What a walk of the live trees works on and finds: jobs, seen paths, results.

Owns the values shared by the walks (`listing`, `tablewalk`) and their
dispatcher (`scan`), and the rule of which paths a walk reports (`reported`,
`entered`).  No walking happens here.
"""

from __future__ import annotations

import stat
from collections.abc import Mapping
from typing import NamedTuple, Protocol

import attrs

from syncengine.fs.savefile import TEMP_SUFFIX
from syncengine.local.dirtable import DirTable, DirWalk
from syncengine.patterns import Matcher


class Seen(NamedTuple):
    """A file or symlink whose stat differs from the index (or is new).

    A NamedTuple rather than an attrs class: a first full walk sends 100,000
    of these from worker processes, and tuples pickle several times faster.
    """

    path: str
    mode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @property
    def is_link(self) -> bool:
        return stat.S_ISLNK(self.mode)


class SeenDir(NamedTuple):
    """A listed directory whose mode differs from its record (or that has none, or whose
    record says it was missing): the root of the tree itself is never one."""

    path: str
    mode: int  # permission bits only (0o7777)


@attrs.frozen
class ScanJob:
    """One tree to walk: root, exclusions, the index records to compare against.

    With `recent_ns` the walk also takes each listed directory's signature
    (for the directory table); with a `table` as well, it lists only the
    directories whose signature changed.  `dirs` is the index's directory
    records (`Index.dirs`).
    """

    name: str
    root: str
    matcher: Matcher
    records: Mapping[str, bytes]
    skip_dirs: frozenset[str] = frozenset()
    dirs: Mapping[str, int] = attrs.field(factory=dict)
    recent_ns: int | None = None
    table: DirTable | None = None


@attrs.define
class ScanResult:
    """What a walk of one tree found."""

    changed: list[Seen] = attrs.field(factory=list)
    seen: int = 0
    known: int = 0
    specials: list[str] = attrs.field(factory=list)
    errors: list[tuple[str, str]] = attrs.field(factory=list)
    exists: bool = True
    gone: list[str] | None = None  # partial or table-driven scan: indexed paths now missing
    walk: DirWalk | None = None  # what the walk learned about directories
    dirs: list[SeenDir] = attrs.field(factory=list)  # directories to record
    dirs_known: int = 0  # listed directories recorded as present (a full listing)
    dirs_gone: list[str] | None = None  # table-driven scan: directories recorded, now missing

    def merge(self, other: ScanResult) -> None:
        self.changed.extend(other.changed)
        self.seen += other.seen
        self.known += other.known
        self.dirs.extend(other.dirs)
        self.dirs_known += other.dirs_known
        if other.dirs_gone is not None:
            self.dirs_gone = (self.dirs_gone or []) + other.dirs_gone
        self.specials.extend(other.specials)
        self.errors.extend(other.errors)
        if other.gone is not None:
            self.gone = (self.gone or []) + other.gone
        if other.walk is not None:
            if self.walk is None:
                self.walk = DirWalk()
            self.walk.merge(other.walk)


def new_result(job: ScanJob) -> ScanResult:
    """An empty result; it collects directory signatures when the job asks for them."""
    return ScanResult(walk=DirWalk() if job.recent_ns is not None else None)


def hidden(job: ScanJob, rel: str) -> bool:
    """Whether a full walk would never report `rel` (excluded, internal or temp)."""
    parts = rel.split("/")
    matcher = job.matcher
    for i in range(1, len(parts)):
        d = "/".join(parts[:i])
        if d in job.skip_dirs or (matcher and matcher.excluded(d, True)):
            return True
    return rel in job.skip_dirs or parts[-1].endswith(TEMP_SUFFIX)


def reported(job: ScanJob, rel: str) -> bool:
    """Whether a full walk would report `rel` if it were a file (not excluded or internal)."""
    return not (hidden(job, rel) or (job.matcher and job.matcher.excluded(rel, False)))


def entered(job: ScanJob, rel: str) -> bool:
    """Whether a full walk would list directory `rel` (it and its parents not excluded)."""
    return rel == "" or not (hidden(job, rel) or (job.matcher and job.matcher.excluded(rel, True)))


class Lister(Protocol):
    """The listing walk, as the table walk calls it to list a changed directory."""

    def __call__(
        self,
        job: ScanJob,
        start: str,
        out: ScanResult,
        *,
        limit: int | None = None,
        skip_known: set[str] | None = None,
    ) -> list[str]: ...
