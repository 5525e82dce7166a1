"""The public entry point for embedding: build from a config, checkpoint, restore, status.

Owns the sequence of one run across adapters: take the state lock, load each
adapter's index, walk all live trees at once, plan and execute per adapter,
and return a frozen `Report`.  Configuration arrives as a `Config` (from
`syncengine.config`); this module never reads the environment.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import attrs

from syncengine.config import AdapterSpec, Config, config_from_dict, load_config
from syncengine.durable.posix import probe, writeback
from syncengine.durable.posix.store import Store
from syncengine.errors import (
    ConfigError,
    DurableError,
    LockBusy,
    NameTaken,
    SyncEngineError,
    local_error,
    side_error,
)
from syncengine.local import status
from syncengine.local.index import Index, file_signature, settled
from syncengine.local.lock import StateLock
from syncengine.notices import Notices
from syncengine.patterns import Matcher, compile_patterns, database_patterns
from syncengine.progress import Reporter
from syncengine.report import AdapterReport, PathError, Report

if TYPE_CHECKING:  # imported where used: `journal record` and `status` need none of them
    from syncengine.checkpoint import sqlite
    from syncengine.model import AdapterState
    from syncengine.ops import gc as gc_
    from syncengine.ops import migrate as migrate_
    from syncengine.ops import verify as verify_
    from syncengine.ops.journal import Journal
    from syncengine.walk.job import ScanJob, Seen

log = logging.getLogger("syncengine")

Hints = Mapping[str, "set[str] | frozenset[str] | None"]


# A durable tree's own directory, never live state: the old rsync script's restore
# (after a rollback) copies it into the live tree, and published back it would land
# over the manifest and chains it is a copy of.
RESERVED = "/.syncengine/"


def exclusion_patterns(spec: AdapterSpec) -> tuple[str, ...]:
    """An adapter's exclusions: its own list plus its SQLite databases and companions,
    and `RESERVED`.

    A listed database is never copied as a file: its WAL and SHM are read at
    different transaction boundaries (the SQLite adapter snapshots it instead).
    """
    return spec.exclude + database_patterns(spec.sqlite) + (RESERVED,)


class Engine:
    """Checkpoint and restore the adapters of one `Config`."""

    def __init__(self, config: Config, *, clock: Callable[[], int] = time.time_ns,
                 scan_workers: int = 2, progress: Reporter | None = None) -> None:
        self.config = config
        self.clock = clock
        self.progress = progress or Reporter()  # *.progress lines every 5 s; a bar if given
        self.scan_workers = scan_workers
        self._matchers: dict[str, Matcher] = {
            s.name: compile_patterns(exclusion_patterns(s), where=f"adapter {s.name!r} exclude")
            for s in config.adapters
        }
        self._logs: dict[str, Matcher] = {
            s.name: compile_patterns(s.segments, where=f"adapter {s.name!r} segments")
            for s in config.adapters if s.segments
        }
        self._indexes: dict[str, Index] = {}
        self._recheck: dict[str, set[str]] = {}
        self._caps: probe.Capabilities | None = None
        self._uploads: writeback.Uploads | None = None  # for self._caps's mount instance
        self._jobs: int | None = None
        self._unseeded: set[str] = set()  # fresh indexes not yet rebuilt from the manifest
        self._restored_fresh: set[str] = set()  # indexes this engine's restore built whole
        self._checked: dict[str, str] = {}  # adapter -> mount instance checked (seed.due)
        self.notices = Notices()  # a path's repeated warning is said once per engine

    @classmethod
    def from_file(cls, path: str | os.PathLike[str] | None = None, *,
                  env: Mapping[str, str] | None = None,
                  overrides: Mapping[str, Any] | None = None) -> Engine:
        return cls(load_config(path, env=env, overrides=overrides))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], *, env: Mapping[str, str] | None = None
                  ) -> Engine:
        return cls(config_from_dict(raw, env=env if env is not None else {}))

    # -- paths under state_dir -------------------------------------------
    def _index_path(self, name: str) -> Path:
        return status.index_path(self.config.state_dir, name)

    def _state(self, spec: AdapterSpec) -> AdapterState:
        from syncengine.checkpoint.execute import staging_marker
        from syncengine.model import AdapterState

        index = self._indexes.get(spec.name)
        if index is not None and index.file_sig != file_signature(self._index_path(spec.name)):
            # Another process (a checkpoint typed by a person) saved it since: never
            # continue from a stale manifest sequence.
            index = None
        if index is None:
            index = Index.load(self._index_path(spec.name))
            if index is None:
                index = Index()
                self._unseeded.add(spec.name)
            self._indexes[spec.name] = index
        state = AdapterState(
            name=spec.name, live=spec.live, store=Store(spec.durable), index=index,
            index_path=self._index_path(spec.name),
            staging_marker=staging_marker(self.config.state_dir, spec.name),
            segments=self._logs.get(spec.name),
            sqlite=self._sqlite_options(), sqlite_patterns=spec.sqlite, notices=self.notices,
        )
        return state

    def _sqlite_options(self) -> sqlite.Options:
        from syncengine.checkpoint import sqlite

        state_dir = self.config.state_dir
        return sqlite.Options(staging=state_dir / "sqlite-staging",
                              quarantine=state_dir / "sqlite-quarantine",
                              busy_timeout=self.config.sqlite_busy_timeout)

    def adapter_state(self, spec: AdapterSpec, *, seed: bool = True) -> AdapterState:
        """One adapter's live root, store and loaded index (for gc and migrate)."""
        state = self._state(spec)
        if seed and spec.name in self._unseeded:
            from syncengine.local import seed as seeding

            self._unseeded.discard(spec.name)
            seeding.from_manifest(state)
        return state

    def skip_dirs(self, spec: AdapterSpec) -> frozenset[str]:
        state_dir = self.config.state_dir
        if spec.live in state_dir.parents:
            return frozenset({state_dir.relative_to(spec.live).as_posix()})
        return frozenset()

    # -- operations ------------------------------------------------------
    def checkpoint(self, adapters: Sequence[str] | None = None, *, wait: bool = True,
                   dry_run: bool = False, final: bool = False, hints: Hints | None = None,
                   lock_timeout: float | None = None) -> Report:
        """Publish what changed in each adapter's live tree.

        With ``wait=False`` (the periodic timer) a run that finds another one
        holding the lock returns at once with ``skipped_busy=True``; with
        `lock_timeout` it waits that long at most.  With ``final=True`` (after
        the writers stopped) append-only logs are published to their exact
        end, trailing partial line included.  `hints` (from a file watcher)
        maps an adapter name to the relative paths that changed, or None for a
        full walk; adapters not in it are walked in full.  Paths that changed
        in the previous pass are looked at again (a copy that raced a writer,
        or a too-recent mtime, is re-checked next pass).
        """
        started = self.clock()
        t0 = time.monotonic()
        specs = self.config.select(adapters)
        self.check_local_root()
        lock = StateLock(self.config.state_dir, wait=wait or lock_timeout is not None,
                         timeout=lock_timeout)
        try:
            lock.acquire()
        except LockBusy:
            log.info("checkpoint.skipped reason=busy state_dir=%s", self.config.state_dir)
            return Report("checkpoint", started, 0.0, (), skipped_busy=True)
        try:
            reports = self._checkpoint_locked(specs, started, dry_run, final, hints or {})
            if final:  # every log's bytes are durable: now each one whole at its path
                reports = [self._plain_phase(rep, started, dry_run) for rep in reports]
        except OSError as exc:  # not translated where it happened: still one clear line
            raise self.os_error("checkpoint", exc) from exc
        finally:
            lock.release()
        report = Report("checkpoint", started, time.monotonic() - t0, tuple(reports),
                        dry_run=dry_run)
        if not dry_run:
            self._write_status(report)
        return report

    def _scan_jobs(self, states: Sequence[AdapterState], started: int) -> list[ScanJob]:
        """One walk job per adapter, with its directory table when it has a valid one."""
        from syncengine.checkpoint import execute as checkpoint
        from syncengine.walk import tablewalk
        from syncengine.walk.job import ScanJob

        recent = started - checkpoint.GRANULARITY_NS  # directories changed since: list again
        jobs = [ScanJob(s.name, os.fspath(s.live), self._matchers[s.name], s.index.records,
                        self.skip_dirs(self.config.adapter(s.name)), s.index.dir_view(),
                        recent_ns=recent)
                for s in states]
        return [attrs.evolve(j, table=tablewalk.load_table(s.index_path, j, s.index))
                for j, s in zip(jobs, states, strict=True)]

    def _checkpoint_locked(self, specs: Sequence[AdapterSpec], started: int, dry_run: bool,
                           final: bool, hints: Hints, *, rebuilt: bool = False
                           ) -> list[AdapterReport]:
        from syncengine.checkpoint import execute as checkpoint
        from syncengine.checkpoint import segments, sqlite
        from syncengine.local import seed as seeding
        from syncengine.plan import PUBLISHING, RecordDir, RecordLink, plan_checkpoint
        from syncengine.walk import missing as missing_mod
        from syncengine.walk import tablewalk
        from syncengine.walk.scan import scan, scan_paths

        states = []
        reports = []
        for spec in specs:
            try:
                states.append(self._state(spec))
            except DurableError as exc:
                reports.append(AdapterReport(spec.name, fatal=str(exc)))
        if not dry_run:
            states = self._start_checks(states, reports)
        jobs = self._scan_jobs(states, started)
        full = [j for j in jobs if hints.get(j.name) is None]
        results = scan(full, workers=self.scan_workers) if full else {}
        for job in jobs:
            paths = hints.get(job.name)
            if paths is not None:
                results[job.name] = scan_paths(job, set(paths) | self._recheck.get(job.name, set()))
        for state, job in zip(states, jobs, strict=True):
            t0 = time.monotonic()
            result = results[state.name]
            for path, reason in result.errors:
                self.notices.warn("scan.error", state.name, path, reason,
                                  "scan.error adapter=%s path=%s error=%s", state.name, path,
                                  reason)
            if not result.exists:
                reports.append(AdapterReport(state.name))
                continue
            # a full listing rebuilds the directory table: what it saw, before the pass
            scanned = (missing_mod.walk_coverage(state, result)
                       if job.table is None and result.walk is not None else None)
            if result.gone is None:
                missing = missing_mod.find_missing(state, result)
            else:
                missing = missing_mod.missing_among(state, result.gone)
            idle = segments.idle_chains(state.index, started) if state.segments else frozenset()
            plain = segments.plain_wanted(state.index, started, self._quiet_ns()
                                          ) if state.segments else frozenset()
            sniff = checkpoint.LiveContent(state.live) if state.sqlite is not None else None
            actions = plan_checkpoint(result, state.index, missing, idle, logs=state.segments,
                                      sniff=sniff, plain=plain,
                                      plain_why=f"quiet for {self.config.plain_after:g} s",
                                      missing_dirs=missing_mod.missing_dirs(state, result)
                                      ) + tuple(
                sqlite.plan_databases(state.live, state.sqlite_patterns, state.index))
            if dry_run:
                reports.append(AdapterReport(state.name, plan=tuple(map(str, actions))))
                continue
            # a final pass also records logs whose newest segments no manifest lists yet
            may_write = any(isinstance(a, (*PUBLISHING, RecordLink, RecordDir))
                            for a in actions) or (
                final and segments.unrecorded(state.index))
            if may_write and state.name in self._unseeded:
                try:  # only now: an idle pass never reads the durable side
                    self._prepare_store(state.store)
                except DurableError as exc:
                    reports.append(AdapterReport(state.name, fatal=str(exc)))
                    continue
                self._unseeded.discard(state.name)
                seeding.from_manifest(state)
            else:  # health check and probe (cached) just before the first durable write: a
                # pass that only re-checks files whose hashes still match does no mount I/O
                state.store.before_first_write(
                    functools.partial(self._prepare_store, state.store))
            try:
                rep = checkpoint.run(state, actions, started_ns=started,
                                     jobs=self._copy_jobs(), final=final,
                                     progress=self.progress)
            except NameTaken as exc:
                if rebuilt:
                    reports.append(AdapterReport(state.name, fatal=str(exc)))
                    continue
                # The durable manifest is ahead of this index (a pass killed between its
                # manifest object and its index, an older copy of the state dir, another
                # writer): checkpoint.run dropped the index; this adapter's pass runs
                # again from one rebuilt from the manifest, publishing what differs.
                log.warning("checkpoint.manifest-behind adapter=%s: %s; rebuilding the index "
                            "from the durable manifest", state.name, exc)
                self._indexes.pop(state.name, None)
                reports.extend(self._checkpoint_locked(
                    [self.config.adapter(state.name)], started, dry_run, final, {},
                    rebuilt=True))
                continue
            try:
                tablewalk.keep_table(state.index_path, job, state.index, result, scanned)
            except OSError as exc:  # a cache: the next walk lists every directory instead
                log.warning("checkpoint.table-unsaved adapter=%s error=%s", state.name,
                            local_error("save directory table", exc.filename or
                                        state.index_path.parent, exc))
            self._recheck[state.name] = _unsettled(state.index, result.changed)
            scan_errors = tuple(
                PathError(state.name, p, "scan", r) for p, r in result.errors)
            reports.append(_with(rep, errors=rep.errors + scan_errors,
                                 duration_s=time.monotonic() - t0))
        return reports

    def _start_checks(self, states: list[AdapterState], reports: list[AdapterReport], *,
                      force: bool = False) -> list[AdapterState]:
        """The index against the durable side, for each adapter at a start (a new mount
        instance since its last check, or `force`): see `syncengine.local.seed`."""
        from syncengine.local import seed as seeding

        now = probe.instance(self.config.durable_root)
        kept, healthy = [], False
        for state in states:
            try:
                forced = force and state.name not in self._restored_fresh
                if forced or (self._checked.get(state.name) != now
                              and seeding.due(self.config.state_dir, state.name, now)):
                    if not healthy:  # an unmounted root must never look like an empty bucket
                        self._check_durable_root()
                        healthy = True
                    if state.name not in self._unseeded:
                        seeding.check(state, now)
                        self._indexes[state.name] = state.index
                    seeding.remember(self.config.state_dir, state.name, now, self.clock())
                self._checked[state.name] = now
            except DurableError as exc:
                reports.append(AdapterReport(state.name, fatal=str(exc)))
                continue
            kept.append(state)
        return kept

    def _remember_checked(self, name: str) -> None:
        from syncengine.local import seed as seeding

        now = probe.instance(self.config.durable_root)
        seeding.remember(self.config.state_dir, name, now, self.clock())
        self._checked[name] = now
        self._restored_fresh.add(name)

    def check_durable(self, adapters: Sequence[str] | None = None) -> None:
        """Compare each adapter's durable side with its index now, whatever was checked
        before (the `Runner` at start; see `syncengine.local.seed`)."""
        with StateLock(self.config.state_dir, wait=True):
            reports: list[AdapterReport] = []
            states = []
            for spec in self.config.select(adapters):
                try:
                    states.append(self._state(spec))
                except DurableError as exc:
                    reports.append(AdapterReport(spec.name, fatal=str(exc)))
            try:
                self._start_checks(states, reports, force=True)
            except OSError as exc:
                raise self.os_error("check the durable side", exc) from exc
        for rep in reports:
            log.error("durable.check-failed adapter=%s error=%s", rep.name, rep.fatal)

    def _quiet_ns(self) -> int:
        return int(self.config.plain_after * 1e9)

    def _plain_phase(self, rep: AdapterReport, started: int, dry_run: bool) -> AdapterReport:
        """After a final checkpoint: publish each log whose plain copy is behind its chain
        whole at its plain path (segments.py), as a pass of its own."""
        from syncengine.checkpoint import execute as checkpoint
        from syncengine.checkpoint import segments
        from syncengine.plan import PlainCopy

        spec = self.config.adapter(rep.name)
        if rep.fatal is not None or not spec.segments:
            return rep
        state = self._state(spec)
        actions = [PlainCopy(p, rec.size, "final checkpoint") for p in sorted(
            segments.plain_wanted(state.index, started, self._quiet_ns(), final=True))
            if (rec := state.index.get(p)) is not None]
        if dry_run or not actions:
            return _with(rep, plan=rep.plan + tuple(map(str, actions)))
        state.store.before_first_write(functools.partial(self._prepare_store, state.store))
        more = checkpoint.run(state, actions, started_ns=started, jobs=self._copy_jobs(),
                              final=True, progress=self.progress)
        return _with(rep, files=rep.files + more.files, bytes=rep.bytes + more.bytes,
                     plain_copies=rep.plain_copies + more.plain_copies,
                     errors=rep.errors + more.errors, fatal=more.fatal,
                     manifest=more.manifest or rep.manifest)

    def restore(self, adapters: Sequence[str] | None = None, *, dry_run: bool = False
                ) -> Report:
        """Fill each adapter's live tree from its durable checkpoint (never older over newer)."""
        started = self.clock()
        t0 = time.monotonic()
        specs = self.config.select(adapters)
        with StateLock(self.config.state_dir, wait=True):
            try:
                self._check_durable_root()  # once: a missing root stops every adapter alike
            except DurableError as exc:
                reports = [AdapterReport(spec.name, fatal=str(exc)) for spec in specs]
            else:
                try:
                    reports = [self._restore_one(spec, dry_run) for spec in specs]
                except OSError as exc:
                    raise self.os_error("restore", exc) from exc
        report = Report("restore", started, time.monotonic() - t0, tuple(reports),
                        dry_run=dry_run)
        if not dry_run:
            self._write_restore_status(report)
        return report

    def _restore_one(self, spec: AdapterSpec, dry_run: bool) -> AdapterReport:
        from syncengine.restore import (
            execute as restore,  # not needed by a checkpoint: imported when used
        )

        t0 = time.monotonic()
        try:
            state = self._state(spec)
            fresh = spec.name in self._unseeded
            self._unseeded.discard(spec.name)  # restore reads the manifest itself
            if not state.store.exists():  # local databases are still checked (sqlite_restore)
                log.info("restore.nothing adapter=%s durable=%s (no checkpoint yet)", spec.name,
                         spec.durable)
            entries, problems, source = restore.durable_entries(state.store, state.index)
            for problem in problems:
                log.error("manifest.problem %s", problem)
            actions = restore.plan(state, entries, source)
            if dry_run:
                return AdapterReport(spec.name, plan=tuple(map(str, actions)))
            log.info("restore.start adapter=%s entries=%d source=%s", spec.name, len(entries),
                     source)
            rep = restore.run(state, actions, jobs=self._copy_jobs(), progress=self.progress)
            if fresh:  # built from what the durable side holds now: it cannot be ahead of it
                self._remember_checked(spec.name)
        except DurableError as exc:
            return AdapterReport(spec.name, fatal=str(exc))
        # A manifest that lost information cannot prove the tree is whole: a server
        # must not start on it (restore incomplete), even if every listed file came back.
        lost = tuple(PathError(spec.name, str(spec.durable / ".syncengine/manifest"), "read",
                               p) for p in problems)
        return _with(rep, errors=rep.errors + lost, duration_s=time.monotonic() - t0)

    def check_local_root(self) -> None:
        """Refuse a local_root that does not exist (checkpoint, gc): nothing is created under
        a typo.  Only restore (a fresh container) and migrate create it."""
        root = self.config.local_root
        if not root.is_dir():
            where = self.config.sources.get("local_root", "")
            raise ConfigError(
                f"local_root {root} ({where}) does not exist or is not a directory: create it, "
                "or fix AM_LOCAL / local_root / --local-root (syncengine never creates it, so "
                "a typo cannot look like a fresh start)")

    def os_error(self, operation: str, exc: OSError) -> SyncEngineError:
        """An OSError no lower layer translated: one clear error naming the path and the fix
        (durable or local by where the path is; the state dir when it has none)."""
        return side_error(operation, exc, durable_root=self.config.durable_root,
                          default_path=self.config.state_dir)

    def _check_durable_root(self) -> None:
        probe.check_root(self.config.durable_root, require_mount=self.config.require_mount,
                         state_dir=self.config.state_dir)

    def _copy_jobs(self) -> int:
        """Parallel copies: `jobs` on a FUSE or network mount, one thread on a local disk
        (unless `jobs` was set explicitly)."""
        if self._jobs is None:
            explicit = self.config.sources.get("jobs", "default") != "default"
            remote = probe.is_remote(self.config.durable_root)
            self._jobs = self.config.jobs if explicit or remote else 1
        return self._jobs

    def _prepare_store(self, store: Store) -> None:
        caps = self._durable_ready()
        store.configure(rename_supported=caps.rename_supported,
                        attrs_after_close=caps.attrs_after_close,
                        keeps_mtime=caps.set_mtime or caps.attrs_on_handle, uploads=self._uploads)

    def _durable_ready(self) -> probe.Capabilities:
        """Health-check the durable root and learn what it supports (once per mount
        instance: a remounted client is probed again)."""
        self._check_durable_root()
        root = self.config.durable_root
        if self._caps is None or self._caps.instance != probe.instance(root):
            self._caps = probe.capabilities(root, self.config.state_dir)
            self._uploads = writeback.uploads(self._caps, self.config)
            log.info("probe.durable root=%s %s", root, self._caps.describe())
        return self._caps

    def export(self, path: str, out: BinaryIO, *, adapter: str | None = None) -> int:
        """Write the durable copy of one live path (a log rebuilt from its segments) to `out`
        (see `syncengine.ops.export`); returns the bytes written."""
        from syncengine.ops import export

        return export.export(self.config, path, out, adapter=adapter)

    def verify(self, adapters: Sequence[str] | None = None, *, sample: float = 10.0,
               strict: bool = False, restart: bool = False, limit: int | None = None
               ) -> verify_.VerifyReport:
        from syncengine.ops import verify as verify_

        """Check the durable side against the manifest (see `syncengine.ops.verify`)."""
        self._check_durable_root()
        stores = {s.name: Store(s.durable) for s in self.config.select(adapters)}
        return verify_.verify(stores, self.config.state_dir, sample=sample, strict=strict,
                              restart=restart, limit=limit, progress=self.progress)

    def gc(self, adapters: Sequence[str] | None = None, *, apply: bool = False) -> gc_.GcReport:
        from syncengine.ops import gc as gc_

        """Plan (and with `apply`, carry out) garbage collection (see `syncengine.ops.gc`)."""
        self.check_local_root()
        self._check_durable_root()
        return gc_.run(self, self.config.select(adapters), apply=apply)

    def migrate(self, *, dry_run: bool = False) -> migrate_.MigrateReport:
        from syncengine.ops import migrate as migrate_

        """Move a deployment from the old rsync layout (see `syncengine.ops.migrate`)."""
        self._check_durable_root()
        return migrate_.run(self, dry_run=dry_run)

    def journal(self) -> Journal:
        """The input journal (`journal_dir`, default ``<durable_root>/journal``)."""
        from syncengine.ops.journal import Journal

        root = self.config.journal_dir or self.config.durable_root / "journal"
        return Journal(self.writable_store(root), self.config.state_dir, clock=self.clock)

    def writable_store(self, root: Path) -> Store:
        """A Store under the durable root that publishes the way the mount supports
        (probed once per Engine; a mount without rename gets unique objects)."""
        store = Store(root)
        self._prepare_store(store)
        return store

    # -- status ----------------------------------------------------------
    def _write_status(self, report: Report) -> None:
        try:
            status.write_checkpoint(self.config.state_dir, report)
        except OSError as exc:
            raise local_error("write status", exc.filename or self.config.state_dir / "status",
                              exc) from exc

    def _write_restore_status(self, report: Report) -> None:
        try:
            status.write_restore(self.config.state_dir, report, self.clock())
        except OSError as exc:
            raise local_error("write restore status",
                              exc.filename or self.config.state_dir / "restore.json", exc) from exc

    def status(self) -> dict[str, Any]:
        """Effective configuration with sources, and per-adapter state (local files only)."""
        return status.gather(self.config, self._matchers, self.clock())


def _unsettled(index: Index, changed: Sequence[Seen]) -> set[str]:
    """Changed paths the index does not yet hold as settled (dirty, or not recorded)."""
    records = index.records
    return {seen.path for seen in changed
            if not settled(records.get(seen.path), seen.size, seen.mtime_ns, seen.ctime_ns)}


def _with(rep: AdapterReport, **changes: Any) -> AdapterReport:
    return attrs.evolve(rep, **changes)


__all__ = ["ConfigError", "Engine"]
