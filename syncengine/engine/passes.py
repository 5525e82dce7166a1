"""A checkpoint or restore pass across an engine's adapters: walk, plan, execute.

Owns the sequence of one pass once the state lock is held: get each
adapter's state (its index loaded, rebuilt from the manifest when it is new,
and checked against the durable side at a start: `adapterstates`), walk
every live tree at once, plan and execute per adapter, and keep the
directory table in step.  The heavy half of the `Engine`, imported on first
use (`Engine.passes`), so `syncengine status` and `journal record` load none
of the walk, the planner or the executors; `restore` imports the restore side
itself, so a one-shot checkpoint does not load it.  The engine keeps the lock,
the status files, the lease and the durable root; this module is handed the
engine's `Context`, its `AdapterStates`, and two of the root's hooks:
`prepare_store` (the lease, then the probe, before a store's first write in a
pass) and `copy_jobs` (how many copies run at once).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from syncengine.checkpoint import checkpointer, record, sealing, sqlite
from syncengine.config import AdapterSpec
from syncengine.durable.lifecycle import DurableStore
from syncengine.engine.adapterstates import AdapterStates
from syncengine.engine.context import Context
from syncengine.errors import DurableError, NameTaken, local_error
from syncengine.local import behind, chainstate, pending
from syncengine.local import seed as seeding
from syncengine.local.adapter import AdapterState
from syncengine.local.index import Index, settled
from syncengine.plan import (
    PUBLISHING,
    CheckpointAction,
    Fetch,
    PlainCopy,
    RecordDir,
    RecordLink,
)
from syncengine.plan import plan_checkpoint as plan_actions
from syncengine.report import AdapterReport, PathError
from syncengine.walk import missing as missing_mod
from syncengine.walk import tablewalk
from syncengine.walk.job import ScanJob, ScanResult, Seen
from syncengine.walk.scan import scan, scan_paths

log = logging.getLogger("syncengine")

Hints = Mapping[str, "set[str] | frozenset[str] | None"]


class Passes:
    """The pass machinery of one engine, with what it remembers between passes: its
    adapters' states (`AdapterStates`) and which paths to look at again."""

    def __init__(
        self,
        ctx: Context,
        adapters: AdapterStates,
        *,
        prepare_store: Callable[[DurableStore], None],
        copy_jobs: Callable[[], int],
    ) -> None:
        self.ctx, self.config = ctx, ctx.config
        self.adapters = adapters  # indexes, seeding, start check
        self.prepare_store, self.copy_jobs = prepare_store, copy_jobs
        self._recheck: dict[str, set[str]] = {}
        self.later: dict[str, list[Fetch]] = {}  # a `run` restore's files for the background

    # -- checkpoint ------------------------------------------------------
    def scan_jobs(self, states: Sequence[AdapterState], started: int) -> list[ScanJob]:
        """One walk job per adapter, with its directory table when it has a valid one."""
        recent = started - record.GRANULARITY_NS  # directories changed since: list again
        jobs = [
            ScanJob(
                s.name,
                os.fspath(s.live),
                self.ctx.matcher(s.name),
                s.index.record_view(),
                self.ctx.skip_dirs(self.config.adapter(s.name)),
                s.index.dir_view(),
                recent_ns=recent,
            )
            for s in states
        ]
        return [
            attrs.evolve(j, table=tablewalk.load_table(s.index_path, j, s.index))
            for j, s in zip(jobs, states, strict=True)
        ]

    def _walk(self, jobs: Sequence[ScanJob], hints: Hints) -> dict[str, ScanResult]:
        """Walk the trees without hints all at once; look only at the hinted paths (and
        those to look at again) in the others."""
        full = [j for j in jobs if hints.get(j.name) is None]
        results = scan(full, workers=self.ctx.scan_workers) if full else {}
        for job in jobs:
            paths = hints.get(job.name)
            if paths is not None:
                results[job.name] = scan_paths(job, set(paths) | self._recheck.get(job.name, set()))
        return results

    def checkpoint(
        self,
        specs: Sequence[AdapterSpec],
        started: int,
        dry_run: bool,
        final: bool,
        hints: Hints,
        *,
        rebuilt: bool = False,
        check: bool = False,
    ) -> list[AdapterReport]:
        """One checkpoint pass over `specs` (the caller holds the state lock); `check`:
        the start-up check first whatever was checked before, a fork repaired from here."""
        reports: list[AdapterReport] = []
        states = self.adapters.states(specs, reports)
        if not dry_run:
            states = self.adapters.start_checks(states, reports, force=check, rebase=check)
        jobs = self.scan_jobs(states, started)
        results = self._walk(jobs, hints)
        for state, job in zip(states, jobs, strict=True):
            reports.extend(
                self._adapter_pass(
                    state, job, results[state.name], started, dry_run, final, rebuilt
                )
            )
        return reports

    def _adapter_pass(
        self,
        state: AdapterState,
        job: ScanJob,
        result: ScanResult,
        started: int,
        dry_run: bool,
        final: bool,
        rebuilt: bool,
    ) -> list[AdapterReport]:
        """One adapter's part of a checkpoint pass, after the walk: plan, make the durable
        side ready, execute, keep the directory table."""
        t0 = time.monotonic()
        for path, reason in result.errors:
            self.ctx.notices.warn(
                "scan.error",
                state.name,
                path,
                reason,
                "scan.error adapter=%s path=%s error=%s",
                state.name,
                path,
                reason,
            )
        if not result.exists:
            return [AdapterReport(state.name, absent=True)]
        # a full listing rebuilds the directory table: what it saw, before the pass
        scanned = (
            missing_mod.walk_coverage(state, result)
            if job.table is None and result.walk is not None
            else None
        )
        actions = self._plan(state, result, started)
        if dry_run:
            return [AdapterReport(state.name, plan=tuple(map(str, actions)))]
        fatal = self._ready(state, actions, final)
        if fatal is not None:
            return [AdapterReport(state.name, fatal=fatal)]
        try:
            rep = checkpointer.run(
                state,
                actions,
                started_ns=started,
                jobs=self.copy_jobs(),
                final=final,
                progress=self.ctx.progress,
            )
        except NameTaken as exc:
            if rebuilt:
                return [AdapterReport(state.name, fatal=str(exc))]
            return self._manifest_ahead(state, exc, started, dry_run, final)
        self._after(state, job, result, scanned)
        scan_errors = tuple(PathError(state.name, p, "scan", r) for p, r in result.errors)
        return [_with(rep, errors=rep.errors + scan_errors, duration_s=time.monotonic() - t0)]

    def _manifest_ahead(
        self, state: AdapterState, exc: NameTaken, started: int, dry_run: bool, final: bool
    ) -> list[AdapterReport]:
        """The durable manifest is ahead of this index (a pass killed between its
        manifest object and its index, an older copy of the state dir, another
        writer): checkpointer.run dropped the index; this adapter's pass runs again
        from one rebuilt from the manifest, publishing what differs."""
        log.warning(
            "checkpoint.manifest-behind adapter=%s: %s; rebuilding the index "
            "from the durable manifest",
            state.name,
            exc,
            extra={"event": "checkpoint.manifest-behind"},
        )
        self.adapters.drop(state.name)  # its pending paths pass to the rebuilt one
        return self.checkpoint(
            [self.config.adapter(state.name)], started, dry_run, final, {}, rebuilt=True
        )

    def _plan(
        self, state: AdapterState, result: ScanResult, started: int
    ) -> tuple[CheckpointAction, ...]:
        """The adapter's checkpoint plan: every input the planner needs, gathered here."""
        if result.gone is None:
            missing = missing_mod.find_missing(state, result)
        else:
            missing = missing_mod.missing_among(state, result.gone)
        logs = state.segments is not None
        quiet_ns = self.ctx.quiet_ns()
        secrets = state.secrets if state.secrets is not None and state.secrets.keys else None
        waiting = pending.paths(state.index)  # not back yet: neither absent nor changed
        return plan_actions(
            result,
            state.index,
            pending.without(waiting, missing),
            chainstate.idle_chains(state.index, started) - waiting if logs else frozenset(),
            logs=state.segments,
            sniff=checkpointer.LiveContent(state.live) if state.sqlite is not None else None,
            plain=(
                chainstate.plain_wanted(state.index, started, quiet_ns) - waiting
                if logs
                else frozenset()
            ),
            plain_why=f"quiet for {self.config.plain_after:g} s",
            missing_dirs=missing_mod.missing_dirs(state, result),
            trust_hashes=not state.staging_marker.exists(),
            seals=secrets.seals if secrets is not None else None,
            reseal=sealing.stale_secrets(state, self.adapters.sealed),
        ) + tuple(sqlite.plan_databases(state.live, state.sqlite_patterns, state.index))

    def _ready(
        self, state: AdapterState, actions: Sequence[CheckpointAction], final: bool
    ) -> str | None:
        """Make the durable side ready for this plan; the fatal error if it cannot be."""
        # a final pass also records logs whose newest segments no manifest lists yet
        may_write = any(isinstance(a, (*PUBLISHING, RecordLink, RecordDir)) for a in actions) or (
            final and bool(chainstate.unrecorded(state.index))
        )
        may_write = may_write or behind.rebase_due(state.index.meta)  # a fork to repair
        prepare = functools.partial(self.prepare_store, state.store)
        if may_write and state.name in self.adapters.unseeded:
            try:  # only now: an idle pass never reads the durable side
                prepare()
            except DurableError as exc:
                return str(exc)
            self.adapters.unseeded.discard(state.name)
            seeding.from_manifest(state)
        else:  # health check and probe (cached) just before the first durable write: a
            # pass that only re-checks files whose hashes still match does no mount I/O
            state.store.before_first_write(prepare)
        return None

    def _after(
        self, state: AdapterState, job: ScanJob, result: ScanResult, scanned: dict[str, Any] | None
    ) -> None:
        """Keep the directory table in step and remember what to look at again."""
        try:
            tablewalk.keep_table(state.index_path, job, state.index, result, scanned)
        except OSError as exc:  # a cache: the next walk lists every directory instead
            log.warning(
                "checkpoint.table-unsaved adapter=%s error=%s",
                state.name,
                local_error("save directory table", exc.filename or state.index_path.parent, exc),
                extra={"event": "checkpoint.table-unsaved"},
            )
        self._recheck[state.name] = _unsettled(state.index, result.changed)

    def writable_state(self, spec: AdapterSpec) -> AdapterState:
        """One adapter's state whose store takes the lease and is probed just before its
        first write (gc: a new base and packs publish the way the mount supports)."""
        state = self.adapters.adapter_state(spec, seed=True)
        state.store.before_first_write(functools.partial(self.prepare_store, state.store))
        return state

    def plain_phase(self, rep: AdapterReport, started: int, dry_run: bool) -> AdapterReport:
        """After a final checkpoint: publish each log whose plain copy is behind its chain
        whole at its plain path (segments.py), as a pass of its own."""
        spec = self.config.adapter(rep.name)
        if rep.fatal is not None or not spec.segments:
            return rep
        state = self.adapters.state(spec)
        actions = [
            PlainCopy(p, rec.size, "final checkpoint")
            for p in sorted(
                chainstate.plain_wanted(state.index, started, self.ctx.quiet_ns(), final=True)
                - pending.paths(state.index)
            )
            if (rec := state.index.get(p)) is not None
        ]
        if dry_run or not actions:
            return _with(rep, plan=rep.plan + tuple(map(str, actions)))
        state.store.before_first_write(functools.partial(self.prepare_store, state.store))
        more = checkpointer.run(
            state,
            actions,
            started_ns=started,
            jobs=self.copy_jobs(),
            final=True,
            progress=self.ctx.progress,
        )
        return _with(
            rep,
            files=rep.files + more.files,
            bytes=rep.bytes + more.bytes,
            plain_copies=rep.plain_copies + more.plain_copies,
            errors=rep.errors + more.errors,
            fatal=more.fatal,
            manifest=more.manifest or rep.manifest,
        )

    # -- restore ---------------------------------------------------------
    def restore(self, spec: AdapterSpec, dry_run: bool, later: bool = False) -> AdapterReport:
        """Fill one adapter's live tree from its durable checkpoint; `later`: only its first
        set, the rest left in `self.later` for `restore_batch` (plan/order.py)."""
        from syncengine.restore import later as restore_later  # a checkpoint never loads
        from syncengine.restore import restorer  # the restore side

        t0 = time.monotonic()
        try:
            state = self.adapters.state(spec)
            fresh = spec.name in self.adapters.unseeded
            self.adapters.unseeded.discard(spec.name)  # restore reads the manifest itself
            entries, problems, source = restorer.durable_entries(state.store, state.index)
            # a manifest or a listed object: a checkpoint, known without one more LIST
            nothing = source != "manifest" and not entries and not state.store.exists()
            if nothing:
                log.info(
                    "restore.nothing adapter=%s durable=%s (no checkpoint yet)",
                    spec.name,
                    state.store.describe(),
                    extra={"event": "restore.nothing"},
                )
            for problem in problems:
                log.error("manifest.problem %s", problem, extra={"event": "manifest.problem"})
            actions = restorer.plan(state, entries, source)
            if dry_run:
                return AdapterReport(
                    spec.name, plan=tuple(map(str, actions)), absent=nothing and not actions
                )
            if later and source == "manifest":  # `run`: the rest after COMMAND starts
                actions, self.later[spec.name] = restore_later.defer(
                    state, actions, restore_later.order_of(spec)
                )
            else:
                pending.reset(state.index, ())
            log.info(
                "restore.start adapter=%s entries=%d source=%s",
                spec.name,
                len(entries),
                source,
                extra={"event": "restore.start"},
            )
            rep = restorer.run(state, actions, jobs=self.copy_jobs(), progress=self.ctx.progress)
            if fresh:  # built from what the durable side holds now: it cannot be ahead of it
                self.adapters.remember_checked(spec.name)
        except DurableError as exc:
            return AdapterReport(spec.name, fatal=str(exc))
        # A manifest that lost information cannot prove the tree is whole: a server
        # must not start on it (restore incomplete), even if every listed file came back.
        lost = tuple(
            PathError(spec.name, state.store.where(".syncengine/manifest"), "read", p)
            for p in problems
        )
        idle = nothing and not (rep.files or rep.dirs or rep.links or rep.errors)
        return _with(rep, errors=rep.errors + lost, duration_s=time.monotonic() - t0, absent=idle)

    def restore_batch(self, spec: AdapterSpec, batch: list[Fetch], **how: Any) -> AdapterReport:
        """One batch of a background restore (caller holds the lock): `later.run_batch`,
        `how` its `save` (the index) and `served` (its packed files)."""
        from syncengine.restore import later

        try:
            return later.run_batch(self.adapters.state(spec), batch, self.copy_jobs(), **how)
        except DurableError as exc:
            return AdapterReport(spec.name, fatal=str(exc))


def _unsettled(index: Index, changed: Sequence[Seen]) -> set[str]:
    """Changed paths the index does not yet hold as settled (dirty, or not recorded)."""
    if not changed:  # an idle pass: the index's records stay packed
        return set()
    records = index.records
    return {
        seen.path
        for seen in changed
        if not settled(records.get(seen.path), seen.size, seen.mtime_ns, seen.ctime_ns)
    }


def _with(rep: AdapterReport, **changes: Any) -> AdapterReport:
    return attrs.evolve(rep, **changes)
