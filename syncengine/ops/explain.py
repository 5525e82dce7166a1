"""Explaining an adapter: what a checkpoint does with each path of its live tree, and why.

Owns ``syncengine explain``: for every path of one adapter's live tree (or
the paths given), the action a checkpoint takes (published as a file,
appended as segments, snapshotted as SQLite, excluded, ...) and the rule
that decided it, with the file the rule comes from.  It decides with the
engine's own pieces, in the engine's order: the walk's exclusion matcher
(`adapterspec.exclusion_patterns` compiled by `patterns.compile_patterns`, the
same as a checkpoint), the walk's visibility rules (`scan.entered`,
`scan.reported`), the adapter's ``sqlite`` globs (`sqlite.files.matches`), the
companion and header checks of `sqlite.files`, and the ``segments``
matcher.  Naming the rule compiles each pattern alone with the same
compiler.  It only reads the live tree: never the durable side, the index,
or the state lock.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import attrs

from syncengine.config import AdapterSpec, Config
from syncengine.config.adapterspec import RESERVED, exclusion_patterns, skip_dirs
from syncengine.errors import ConfigError
from syncengine.fs.savefile import TEMP_SUFFIX
from syncengine.patterns import Matcher, compile_patterns
from syncengine.sqlite import files
from syncengine.sqlite.files import COMPANIONS, database_patterns, matches
from syncengine.walk.job import ScanJob, entered, reported

# What a checkpoint does with a path (the first column of the output).
PUBLISH = "publish"  # copied whole as one closed object when it changes
SEGMENTS = "segments"  # append-only log: new complete lines as immutable segments
SNAPSHOT = "snapshot"  # a listed SQLite database: online backup, checked, published
UNLISTED_DB = "unlisted-db"  # starts with the SQLite header but not listed: snapshotted
COMPANION = "companion"  # -wal/-shm/-journal of a database: never copied (its database is)
LINK = "link"  # a symlink: recorded (target), never followed
EXCLUDE = "exclude"  # matched an exclusion pattern: never published
SPECIAL = "special"  # FIFO, socket or device: never opened
INTERNAL = "internal"  # syncengine's own state directory or temp file
DIRECTORY = "dir"  # walked and recorded with its mode; its entries have their own lines
ABSENT = "absent"  # a PATH argument that does not exist
PUBLISHED = frozenset({PUBLISH, SEGMENTS, SNAPSHOT, UNLISTED_DB, LINK, DIRECTORY})


class Configured(Protocol):
    """What explaining needs of its caller: the run's configuration (an `Engine` has it)."""

    @property
    def config(self) -> Config: ...


@attrs.frozen
class Decision:
    """One path: its type, the action a checkpoint takes, and the rule behind it."""

    path: str  # relative to the live tree
    kind: str  # "file", "dir", "symlink", "special", "missing"
    action: str
    rule: str  # the pattern, or what else decided ("SQLite header", ...)
    source: str  # where the rule comes from ("exclude in built-in codex.toml", ...)

    def __str__(self) -> str:
        path = self.path + ("/" if self.kind == "dir" else "")
        why = f"{self.rule} ({self.source})" if self.source else self.rule
        return f"{self.action:<11} {path}  [{why}]"

    def to_json(self) -> dict[str, str]:
        return attrs.asdict(self)


@attrs.frozen
class _Rules:
    """One adapter's rules, compiled the way the engine compiles them."""

    spec: AdapterSpec
    job: ScanJob
    logs: Matcher | None
    singles: tuple[tuple[str, str, Matcher], ...]  # (pattern, its key, matcher of it alone)

    @classmethod
    def of(cls, config: Config, spec: AdapterSpec) -> _Rules:
        where = f"adapter {spec.name!r} exclude"
        matcher = compile_patterns(exclusion_patterns(spec), where=where)
        job = ScanJob(
            spec.name, os.fspath(spec.live), matcher, {}, skip_dirs(spec, config.state_dir)
        )
        logs = (
            compile_patterns(spec.segments, where=f"adapter {spec.name!r} segments")
            if spec.segments
            else None
        )
        singles = tuple((p, "exclude", compile_patterns([p], where=where)) for p in spec.exclude)
        singles += tuple(
            (p, "sqlite", compile_patterns([p], where=where))
            for p in database_patterns(spec.sqlite)
        )
        singles += ((RESERVED, "reserved", compile_patterns([RESERVED], where=where)),)
        return cls(spec, job, logs, singles)

    def source(self, key: str) -> str:
        if key == "reserved":
            return "syncengine's own directory: a copy of a durable tree's, never live state"
        return f"{key} in {self.spec.origin}" if self.spec.origin else key

    def excluded_by(self, rel: str, is_dir: bool) -> tuple[str, str]:
        """The pattern (and its key) that excludes `rel`; the walk's matcher decided."""
        for pattern, key, single in self.singles:
            if single.excluded(rel, is_dir):
                return pattern, key
        return "exclusion patterns", "exclude"  # unreachable while the matcher agrees

    def segment_rule(self, rel: str) -> str:
        for pattern in self.spec.segments:
            if compile_patterns([pattern]).excluded(rel, False):
                return pattern
        return "segments"

    def sqlite_rule(self, rel: str) -> str:
        return next(g for g in self.spec.sqlite if matches([g], rel))


def explain(run: Configured, adapter: str, paths: Sequence[str] = ()) -> list[Decision]:
    """Decisions for every path of `adapter`'s live tree, or for `paths` (absolute, or
    relative to the live tree), in path order."""
    spec = run.config.adapter(adapter)
    rules = _Rules.of(run.config, spec)
    if not paths:
        return sorted(_walk(rules), key=lambda d: d.path)
    return [decide(rules, _relative(spec, p)) for p in paths]


def _relative(spec: AdapterSpec, path: str) -> str:
    full = Path(os.path.normpath(os.path.join(spec.live, path)))
    if full != spec.live and spec.live not in full.parents:
        raise ConfigError(
            f"{path} is not inside the live tree {spec.live} of adapter "
            f"{spec.name!r}: give a path under it, or relative to it"
        )
    return full.relative_to(spec.live).as_posix() if full != spec.live else ""


def _walk(rules: _Rules) -> Iterator[Decision]:
    root = rules.job.root
    stack = [""]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(f"{root}/{d}" if d else root) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            rel = f"{d}/{e.name}" if d else e.name
            decision = decide(rules, rel)
            yield decision
            if decision.action == DIRECTORY:
                stack.append(rel)


def decide(rules: _Rules, rel: str) -> Decision:
    """What a checkpoint does with `rel`, in the order the engine decides it."""
    spec, job = rules.spec, rules.job
    full = f"{job.root}/{rel}" if rel else job.root
    try:
        st = os.lstat(full)
    except OSError:
        return Decision(rel, "missing", ABSENT, "not in the live tree", "")
    kind = (
        "dir"
        if stat.S_ISDIR(st.st_mode)
        else "file"
        if stat.S_ISREG(st.st_mode)
        else "symlink"
        if stat.S_ISLNK(st.st_mode)
        else "special"
    )
    if (
        kind == "file"
        and matches(spec.sqlite, rel)
        and not rel.endswith((*COMPANIONS, TEMP_SUFFIX))
    ):  # exclusions do not apply
        return Decision(rel, kind, SNAPSHOT, rules.sqlite_rule(rel), rules.source("sqlite"))
    hidden = _hidden_by(rules, rel)
    if hidden is not None:
        return attrs.evolve(hidden, path=rel, kind=kind)
    if kind == "dir":
        if rel and not entered(job, rel):
            pattern, key = rules.excluded_by(rel, True)
            return Decision(rel, kind, EXCLUDE, pattern, rules.source(key))
        return Decision(
            rel, kind, DIRECTORY, "walked; recorded with its mode" if rel else "walked", ""
        )
    if not reported(job, rel):
        if rel.endswith(TEMP_SUFFIX):
            return Decision(rel, kind, INTERNAL, f"*{TEMP_SUFFIX}", "syncengine temp file")
        pattern, key = rules.excluded_by(rel, False)
        action = COMPANION if key == "sqlite" else EXCLUDE
        return Decision(rel, kind, action, pattern, rules.source(key))
    if kind == "special":
        return Decision(rel, kind, SPECIAL, "not a regular file or symlink", "")
    if kind == "symlink":
        return Decision(rel, kind, LINK, f"-> {os.readlink(full)}", "")
    return _regular(rules, rel, full, st.st_size)


def _hidden_by(rules: _Rules, rel: str) -> Decision | None:
    """The decision for a path inside an excluded or internal directory (or None)."""
    parts = rel.split("/")
    for i in range(1, len(parts)):
        d = "/".join(parts[:i])
        if d in rules.job.skip_dirs:
            return Decision(rel, "", INTERNAL, f"inside {d}/", "syncengine state_dir")
        if not entered(rules.job, d):
            pattern, key = rules.excluded_by(d, True)
            return Decision(rel, "", EXCLUDE, f"inside {d}/: {pattern}", rules.source(key))
    if rel in rules.job.skip_dirs:
        return Decision(rel, "", INTERNAL, "state_dir", "syncengine state_dir")
    return None


def _regular(rules: _Rules, rel: str, full: str, size: int) -> Decision:
    base = files.companion_base(rules.spec.live, rel)
    if base is not None:
        return Decision(
            rel, "file", COMPANION, f"companion of unlisted database {base}", "SQLite header"
        )
    if rules.logs is not None and rules.logs.excluded(rel, False):
        return Decision(rel, "file", SEGMENTS, rules.segment_rule(rel), rules.source("segments"))
    if size >= files.MIN_SIZE and files.has_header(full):
        return Decision(
            rel,
            "file",
            UNLISTED_DB,
            "SQLite header, not in the adapter's sqlite list",
            "list it under sqlite, or exclude it",
        )
    return Decision(rel, "file", PUBLISH, "not excluded", "")


def lines(decisions: Iterable[Decision]) -> list[str]:
    return [str(d) for d in decisions]


def command(run: Configured, adapter: str, paths: Sequence[str], as_json: bool) -> int:
    """``syncengine explain``: print the decisions; exit 0 (2 for a bad adapter or path)."""
    import json

    spec = run.config.adapter(adapter)
    decisions = explain(run, adapter, paths)
    if as_json:
        print(
            json.dumps(
                {
                    "adapter": spec.name,
                    "live": os.fspath(spec.live),
                    "paths": [d.to_json() for d in decisions],
                },
                indent=2,
            )
        )
        return 0
    print(f"{spec.name}: {spec.live} ({spec.origin})")
    if not paths and not spec.live.is_dir():
        print("  live tree does not exist yet: nothing to explain")
    for line in lines(decisions):
        print(f"  {line}")
    return 0
