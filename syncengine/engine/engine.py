"""The public entry point for embedding: build from a config, checkpoint, restore, status.

Owns the composition root's wiring and one run's frame.  `Engine` builds the
frozen `Context` the parts share once (`syncengine.engine.context`) and hands
each part only what it uses: the durable root (`durable`: health check, probe,
stores, copy jobs), the lease (`lease`, with a callback to forget loaded
indexes), the adapters' states (`adapters`) and the pass machinery (`passes`).
No part holds the `Engine`.  Each operation takes the state lock, hands the
pass to `passes` (load each adapter's index, walk all live trees at once, plan
and execute per adapter), writes the status files and returns a frozen
`Report`.  Configuration arrives as a `Config`; this module never reads the
environment.

Imports: what `syncengine status` and `journal record` need is imported at the
top.  The adapters' states, the pass machinery and each maintenance command
(`export`, `verify`, `gc`, `migrate`, `journal`) are imported where they are
used, on first use, so a short command does not pay for loading them
(`python -X importtime`; tests/test_layout.py checks what `status` loads).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from syncengine.config import AdapterSpec, Config, config_from_dict, load_config
from syncengine.crypt.secrets import of_adapters
from syncengine.durable.lifecycle import DurableStore
from syncengine.durable.posix import store as posix_store
from syncengine.durable.posix.store import PosixStore
from syncengine.engine import context
from syncengine.engine.durableroot import DurableRoot
from syncengine.engine.rootlease import RootLease
from syncengine.errors import (
    ConfigError,
    DurableError,
    LeaseHeld,
    LockBusy,
    SyncEngineError,
    local_error,
    side_error,
)
from syncengine.local import leaseprocess, status
from syncengine.local.lock import StateLock
from syncengine.progress import Reporter
from syncengine.report import AdapterReport, Report

if TYPE_CHECKING:  # imported where used (see the module docstring)
    from syncengine.engine.adapterstates import AdapterStates
    from syncengine.engine.passes import Hints, Passes
    from syncengine.local.adapter import AdapterState
    from syncengine.ops import gc as gc_
    from syncengine.ops import migrate as migrate_
    from syncengine.ops import verify as verify_
    from syncengine.ops.journal import Journal

log = logging.getLogger("syncengine")


class Engine:
    """Checkpoint and restore the adapters of one `Config`."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], int] = time.time_ns,
        scan_workers: int = 2,
        progress: Reporter | None = None,
        stores: Callable[[Path], DurableStore] = PosixStore,
    ) -> None:
        self.context = context.build(
            config, clock=clock, stores=stores, progress=progress, scan_workers=scan_workers
        )
        self.durable = DurableRoot(config, self.context.stores)  # health, probe, copy jobs
        # one writer per durable root; it tells the root when loaded indexes are stale
        self.lease = RootLease(config, self.context.stores, self.durable, self._forget_indexes)
        self._adapters: AdapterStates | None = None
        self._passes: Passes | None = None

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Engine:
        return cls(load_config(path, env=env, overrides=overrides))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], *, env: Mapping[str, str] | None = None) -> Engine:
        return cls(config_from_dict(raw, env=env if env is not None else {}))

    def close(self) -> None:
        """Release the durable root's lease if this engine took it (the next instance
        may take over at once).  Also done by ``with Engine(...) as engine:`` and, for
        an engine still holding one, when the interpreter exits; a killed process's
        lease expires after `lease_seconds`.  A release that fails (the durable side
        unreachable) is logged, not raised: that lease expires instead."""
        leaseprocess.release_quietly(self.lease)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- what the context holds (read-only: the parts were built with it) --
    @property
    def config(self) -> Config:
        return self.context.config

    @property
    def clock(self) -> Callable[[], int]:
        return self.context.clock

    @property
    def stores(self) -> Callable[[Path], DurableStore]:
        """A durable directory's Store (tests: an in-memory one; an s3:// root: S3)."""
        return self.context.stores

    @property
    def progress(self) -> Reporter:
        return self.context.progress

    def skip_dirs(self, spec: AdapterSpec) -> frozenset[str]:
        """What a walk of `spec`'s live tree never enters (`adapterspec.skip_dirs`)."""
        return self.context.skip_dirs(spec)

    # -- the parts built on first use ----------------------------------------
    @property
    def adapters(self) -> AdapterStates:
        """The adapters' loaded indexes, seeding and start check, built on first use."""
        if self._adapters is None:
            from syncengine.engine.adapterstates import AdapterStates

            self._adapters = AdapterStates(self.context, self.durable.check, self.lease.fence)
        return self._adapters

    @property
    def passes(self) -> Passes:
        """The pass machinery (walk, plan, execute), imported and built on first use."""
        if self._passes is None:
            from syncengine.engine.passes import Passes

            self._passes = Passes(
                self.context,
                self.adapters,
                prepare_store=self.lease.prepare_store,
                copy_jobs=self.durable.copy_jobs,
            )
        return self._passes

    def _forget_indexes(self, keep: frozenset[str]) -> None:
        """The lease's callback: another instance wrote last (or this state dir wrote
        another root), so each loaded index but `keep`'s is dropped."""
        if self._adapters is not None:  # none loaded yet: nothing in memory to drop
            self._adapters.forget_indexes(keep)

    def adapter_state(self, spec: AdapterSpec, *, seed: bool = True) -> AdapterState:
        """One adapter's live root, store and loaded index (for gc and migrate)."""
        return self.adapters.adapter_state(spec, seed=seed)

    # -- operations ------------------------------------------------------
    def checkpoint(
        self,
        adapters: Sequence[str] | None = None,
        *,
        wait: bool = True,
        dry_run: bool = False,
        final: bool = False,
        hints: Hints | None = None,
        lock_timeout: float | None = None,
        check_durable: bool = False,
    ) -> Report:
        """Publish what changed in each adapter's live tree.

        With ``wait=False`` (the periodic timer) a run that finds another one holding
        the lock returns at once with ``skipped_busy=True``; with `lock_timeout` it waits
        that long at most.  With ``final=True`` (after the writers stopped) append-only
        logs are published to their exact end, trailing partial line included.  `hints`
        (from a file watcher) maps an adapter name to the relative paths that changed,
        or None for a full walk; adapters not in it are walked in full (and paths that
        changed last pass again).  `check_durable`: the start-up check first (a fork is
        repaired), whatever was checked before.  The durable root is reached once per
        engine, even by a pass with nothing to publish (docs/IDLE.md)."""
        started = self.clock()
        t0 = time.monotonic()
        specs = self.config.select(adapters, publish=True)
        self.check_local_root()
        self.durable.reach()
        lock = StateLock(
            self.config.state_dir, wait=wait or lock_timeout is not None, timeout=lock_timeout
        )
        try:
            lock.acquire()
        except LockBusy:
            log.info(
                "checkpoint.skipped reason=busy state_dir=%s",
                self.config.state_dir,
                extra={"event": "checkpoint.skipped"},
            )
            return Report("checkpoint", started, 0.0, (), skipped_busy=True)
        try:
            if not dry_run:  # DATA_DIR changed: this state dir's indexes are another root's
                self.lease.before_pass()
            reports = self.passes.checkpoint(
                specs, started, dry_run, final, hints or {}, check=check_durable
            )
            if final:  # every log's bytes are durable: now each one whole at its path
                reports = [self.passes.plain_phase(rep, started, dry_run) for rep in reports]
            if not dry_run:
                self.lease.renew()
        except OSError as exc:  # not translated where it happened: still one clear line
            raise self.os_error("checkpoint", exc) from exc
        finally:
            lock.release()
        report = Report(
            "checkpoint", started, time.monotonic() - t0, tuple(reports), dry_run=dry_run
        )
        if not dry_run:
            self._write_status(report)
        self.lease.raise_if_stopped()
        return report

    def check_durable(self, adapters: Sequence[str] | None = None) -> None:
        """Compare each adapter's durable side with its index now, whatever was checked
        before (the `Runner` at start; see `syncengine.local.seed`)."""
        with StateLock(self.config.state_dir, wait=True):
            try:
                reports = self.adapters.check_durable(self.config.select(adapters))
            except OSError as exc:
                raise self.os_error("check the durable side", exc) from exc
        for rep in reports:
            log.error(
                "durable.check-failed adapter=%s error=%s",
                rep.name,
                rep.fatal,
                extra={"event": "durable.check-failed"},
            )

    def restore(
        self,
        adapters: Sequence[str] | None = None,
        *,
        dry_run: bool = False,
        takeover: bool = False,
        later: bool = False,
    ) -> Report:
        """Fill each adapter's live tree from its durable checkpoint (never older over newer).
        Waits for another instance's lease (`lease_wait`), or with `takeover` takes it.
        `later`: each adapter's first set only, the rest in `passes.later` (`run`)."""
        started = self.clock()
        t0 = time.monotonic()
        specs = self.config.select(adapters)
        with StateLock(self.config.state_dir, wait=True):
            try:
                self.durable.check()  # once: a missing root stops every adapter alike
                if not dry_run:  # a new instance waits for the old one's lease
                    self.lease.before_restore(takeover=takeover)
                    self.lease.before_pass()
            except LeaseHeld:  # the command exits 77, like `run`
                raise
            except DurableError as exc:
                reports = [AdapterReport(spec.name, fatal=str(exc)) for spec in specs]
            else:
                try:
                    reports = [self.passes.restore(spec, dry_run, later) for spec in specs]
                except OSError as exc:
                    raise self.os_error("restore", exc) from exc

        report = Report("restore", started, time.monotonic() - t0, tuple(reports), dry_run=dry_run)
        if not dry_run:
            self._write_restore_status(report)
            self.lease.after_restore([r.name for r in reports if not r.fatal])
        return report

    def check_local_root(self) -> None:
        """Refuse a local_root that does not exist (checkpoint, gc): nothing is created under
        a typo.  Only restore (a fresh container) and migrate create it."""
        root = self.config.local_root
        if not root.is_dir():
            where = self.config.sources.get("local_root", "")
            raise ConfigError(
                f"local_root {root} ({where}) does not exist or is not a directory: create it, "
                "or fix AM_LOCAL / local_root / --local-root (syncengine never creates it, so "
                "a typo cannot look like a fresh start)"
            )

    def os_error(self, operation: str, exc: OSError) -> SyncEngineError:
        """An OSError no lower layer translated: one clear error naming the path and the fix
        (durable or local by where the path is; the state dir when it has none)."""
        return side_error(
            operation,
            exc,
            durable_root=self.config.durable_root,
            default_path=self.config.state_dir,
        )

    def export(self, path: str, out: BinaryIO, *, adapter: str | None = None) -> int:
        """Write the durable copy of one live path (a log rebuilt from its segments) to `out`
        (see `syncengine.ops.export`); returns the bytes written."""
        from syncengine.ops import export

        return export.export(self.config, path, out, adapter=adapter, open_store=self.stores)

    def verify(
        self,
        adapters: Sequence[str] | None = None,
        *,
        sample: float = 10.0,
        strict: bool = False,
        restart: bool = False,
        limit: int | None = None,
    ) -> verify_.VerifyReport:
        """Check the durable side against the manifest (see `syncengine.ops.verify`)."""
        from syncengine.ops import verify as verify_

        self.durable.check()
        stores = {s.name: self.stores(s.durable) for s in self.config.select(adapters)}
        return verify_.verify(
            stores,
            self.config.state_dir,
            sample=sample,
            strict=strict,
            restart=restart,
            limit=limit,
            progress=self.progress,
            secrets=of_adapters(self.config.select(adapters), self.config.keys),
        )

    def gc(self, adapters: Sequence[str] | None = None, *, apply: bool = False) -> gc_.GcReport:
        """Plan (and with `apply`, carry out) garbage collection (see `syncengine.ops.gc`)."""
        from syncengine.ops import gc as gc_

        self.check_local_root()
        self.durable.check()
        return gc_.run(
            self.config.select(adapters),
            self.passes.writable_state,
            self.config.gc,
            self.config.state_dir,
            clock=self.clock,
            apply=apply,
        )

    def migrate(self, *, dry_run: bool = False) -> migrate_.MigrateReport:
        """Move a deployment from the old rsync layout (see `syncengine.ops.migrate`)."""
        from syncengine.ops import migrate as migrate_

        self.durable.check()
        if self.config.s3 is None:
            ctx = migrate_.Setup(
                self.config, self.clock, self.durable.lazy_store, posix_store.rename_new
            )
        else:  # a legacy tree in the bucket: renames are copies and deletes per object
            from syncengine.durable.s3 import select as s3_select

            ctx = migrate_.Setup(
                self.config, self.clock, *s3_select.migration(self.config, self.durable.lazy_store)
            )
        return migrate_.run(ctx, dry_run=dry_run)

    def journal(self) -> Journal:
        """The input journal (`journal_dir`, default ``<durable_root>/journal``)."""
        from syncengine.ops.journal import Journal

        root = self.config.journal_dir or self.config.durable_root / "journal"
        return Journal(self.durable.writable_store(root), self.config.state_dir, clock=self.clock)

    # -- status ----------------------------------------------------------
    def _write_status(self, report: Report) -> None:
        try:
            status.write_checkpoint(self.config.state_dir, report)
        except OSError as exc:
            raise local_error(
                "write status", exc.filename or self.config.state_dir / "status", exc
            ) from exc

    def _write_restore_status(self, report: Report) -> None:
        try:
            status.write_restore(self.config.state_dir, report, self.clock())
        except OSError as exc:
            raise local_error(
                "write restore status", exc.filename or self.config.state_dir / "restore.json", exc
            ) from exc

    def status(self) -> dict[str, Any]:
        """Effective configuration with sources, and per-adapter state (local files only)."""
        out = status.gather(self.config, self.context.exclusions, self.clock())
        out["lease"] = self.lease.status()
        return out


__all__ = ["ConfigError", "Engine"]
