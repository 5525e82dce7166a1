"""The public entry point for embedding: build from a config, checkpoint, restore, status.

Owns one run's frame: take the state lock, hand the pass to `passes` (load
each adapter's index, walk all live trees at once, plan and execute per
adapter), write the status files and return a frozen `Report`.  The durable
root as the engine knows it (its health check, the probe of what the mount
supports, the stores built on it) is `engine.durable`, a
`syncengine.durableroot.DurableRoot`.  Configuration arrives as a `Config`
(from `syncengine.config`); this module never reads the environment.

Imports: what `syncengine status` and `journal record` need is imported at the
top.  The pass machinery (walk, planner, executors: `Engine.passes`) and each
maintenance command (`export`, `verify`, `gc`, `migrate`, `journal`) are
imported in the one method that uses them, on first use, so that a short
command does not pay for loading them (measured: `python -X importtime`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from syncengine.config import AdapterSpec, Config, config_from_dict, load_config
from syncengine.config.adapterspec import exclusion_patterns, skip_dirs
from syncengine.durable.lifecycle import DurableStore
from syncengine.durable.posix import store as posix_store
from syncengine.durable.posix.store import PosixStore
from syncengine.engine.durableroot import DurableRoot
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
from syncengine.notices import Notices
from syncengine.patterns import Matcher, compile_patterns
from syncengine.progress import Reporter
from syncengine.report import AdapterReport, Report
from syncengine.engine.rootlease import RootLease

if TYPE_CHECKING:  # imported where used (see the module docstring)
    from syncengine.local.adapter import AdapterState
    from syncengine.ops import gc as gc_
    from syncengine.ops import migrate as migrate_
    from syncengine.ops import verify as verify_
    from syncengine.ops.journal import Journal
    from syncengine.engine.passes import Hints, Passes

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
        self.config = config
        self.clock = clock
        if config.s3 is not None and stores is PosixStore:  # durable_root = "s3://..."
            from syncengine.durable.s3 import select as s3_select

            stores = s3_select.stores(config)
        self.stores = stores  # a durable directory's Store (tests: an in-memory one)
        self.progress = progress or Reporter()  # *.progress lines every 5 s; a bar if given
        self.scan_workers = scan_workers
        self._matchers: dict[str, Matcher] = {
            s.name: compile_patterns(exclusion_patterns(s), where=f"adapter {s.name!r} exclude")
            for s in config.adapters
        }
        self._logs: dict[str, Matcher] = {
            s.name: compile_patterns(s.segments, where=f"adapter {s.name!r} segments")
            for s in config.adapters
            if s.segments
        }
        self._passes: Passes | None = None
        self.durable = DurableRoot(config, stores)  # its health, probe, stores, copy jobs
        self.notices = Notices()  # a path's repeated warning is said once per engine
        self.lease = RootLease(self)  # one writer per durable root (rootlease.py)

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

    @property
    def passes(self) -> Passes:
        """The pass machinery (walk, plan, execute), imported and built on first use."""
        if self._passes is None:
            from syncengine.engine.passes import Passes

            self._passes = Passes(self)
        return self._passes

    def adapter_state(self, spec: AdapterSpec, *, seed: bool = True) -> AdapterState:
        """One adapter's live root, store and loaded index (for gc and migrate)."""
        return self.passes.adapters.adapter_state(spec, seed=seed)

    def matcher(self, name: str) -> Matcher:
        """An adapter's exclusions (`exclusion_patterns`), compiled."""
        return self._matchers[name]

    def log_matcher(self, name: str) -> Matcher | None:
        """An adapter's append-only logs (its `segments` patterns), compiled; None: none."""
        return self._logs.get(name)

    def quiet_ns(self) -> int:
        """How long a log stays unchanged before its plain copy is published."""
        return int(self.config.plain_after * 1e9)

    def skip_dirs(self, spec: AdapterSpec) -> frozenset[str]:
        """What a walk of `spec`'s live tree never enters (`adapterspec.skip_dirs`)."""
        return skip_dirs(spec, self.config.state_dir)

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

        With ``wait=False`` (the periodic timer) a run that finds another one
        holding the lock returns at once with ``skipped_busy=True``; with
        `lock_timeout` it waits that long at most.  With ``final=True`` (after
        the writers stopped) append-only logs are published to their exact
        end, trailing partial line included.  `hints` (from a file watcher)
        maps an adapter name to the relative paths that changed, or None for a
        full walk; adapters not in it are walked in full (and paths that changed
        last pass again).  `check_durable`: the start-up check first (a fork is
        repaired), whatever was checked before.
        """
        started = self.clock()
        t0 = time.monotonic()
        specs = self.config.select(adapters)
        self.check_local_root()
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
                reports = self.passes.adapters.check_durable(self.config.select(adapters))
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
    ) -> Report:
        """Fill each adapter's live tree from its durable checkpoint (never older over newer).
        Waits for another instance's lease (`lease_wait`), or with `takeover` takes it."""
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
                    reports = [self.passes.restore(spec, dry_run) for spec in specs]
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
        )

    def gc(self, adapters: Sequence[str] | None = None, *, apply: bool = False) -> gc_.GcReport:
        """Plan (and with `apply`, carry out) garbage collection (see `syncengine.ops.gc`)."""
        from syncengine.ops import gc as gc_

        self.check_local_root()
        self.durable.check()
        return gc_.run(
            self.config.select(adapters),
            self.adapter_state,
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
        out = status.gather(self.config, self._matchers, self.clock())
        out["lease"] = self.lease.status()
        return out


__all__ = ["ConfigError", "Engine"]
