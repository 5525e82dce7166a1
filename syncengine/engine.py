"""The public entry point for embedding: build from a config, checkpoint, restore, status.

Owns the sequence of one run across adapters: take the state lock, load each
adapter's index, walk all live trees at once, plan and execute per adapter,
and return a frozen `Report`.  Configuration arrives as a `Config` (from
`syncengine.config`); this module never reads the environment.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from syncengine import checkpoint, probe, restore, savefile
from syncengine.checkpoint import AdapterState
from syncengine.config import AdapterSpec, Config, config_from_dict, load_config
from syncengine.errors import ConfigError, DurableError, LockBusy
from syncengine.index import DIRTY, Index
from syncengine.lock import StateLock
from syncengine.manifest import load as load_manifest
from syncengine.patterns import Matcher, compile_patterns
from syncengine.plan import RecordLink, Upload, plan_checkpoint
from syncengine.report import AdapterReport, PathError, Report
from syncengine.scan import ScanJob, scan
from syncengine.store import Store

log = logging.getLogger("syncengine")

SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")


def exclusion_patterns(spec: AdapterSpec) -> tuple[str, ...]:
    """An adapter's exclusions: its own list plus its SQLite databases and companions.

    A listed database is never copied as a file: its WAL and SHM are read at
    different transaction boundaries (the SQLite adapter snapshots it instead).
    """
    dbs = tuple(f"/{p.lstrip('/')}{suffix}" for p in spec.sqlite for suffix in SQLITE_COMPANIONS)
    return spec.exclude + dbs


class Engine:
    """Checkpoint and restore the adapters of one `Config`."""

    def __init__(self, config: Config, *, clock: Callable[[], int] = time.time_ns,
                 scan_workers: int = 2) -> None:
        self.config = config
        self.clock = clock
        self.scan_workers = scan_workers
        self._matchers: dict[str, Matcher] = {
            s.name: compile_patterns(exclusion_patterns(s), where=f"adapter {s.name!r} exclude")
            for s in config.adapters
        }
        self._indexes: dict[str, Index] = {}
        self._caps: probe.Capabilities | None = None
        self._unseeded: set[str] = set()  # fresh indexes not yet rebuilt from the manifest

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
        return self.config.state_dir / "index" / f"{name}.idx"

    def _status_path(self, name: str) -> Path:
        return self.config.state_dir / "status" / f"{name}.json"

    def _state(self, spec: AdapterSpec) -> AdapterState:
        index = self._indexes.get(spec.name)
        if index is None:
            index = Index.load(self._index_path(spec.name))
            if index is None:
                index = Index()
                self._unseeded.add(spec.name)
            self._indexes[spec.name] = index
        state = AdapterState(
            name=spec.name, live=spec.live, store=Store(spec.durable), index=index,
            index_path=self._index_path(spec.name),
            staging_marker=self.config.state_dir / "staging" / f"{spec.name}.pending",
        )
        return state

    def _skip_dirs(self, spec: AdapterSpec) -> frozenset[str]:
        state_dir = self.config.state_dir
        if spec.live in state_dir.parents:
            return frozenset({state_dir.relative_to(spec.live).as_posix()})
        return frozenset()

    # -- operations ------------------------------------------------------
    def checkpoint(self, adapters: Sequence[str] | None = None, *, wait: bool = True,
                   dry_run: bool = False) -> Report:
        """Publish what changed in each adapter's live tree.

        With ``wait=False`` (the periodic timer) a run that finds another one
        holding the lock returns at once with ``skipped_busy=True``.
        """
        started = self.clock()
        t0 = time.monotonic()
        specs = self.config.select(adapters)
        lock = StateLock(self.config.state_dir, wait=wait)
        try:
            lock.acquire()
        except LockBusy:
            log.info("checkpoint.skipped reason=busy state_dir=%s", self.config.state_dir)
            return Report("checkpoint", started, 0.0, (), skipped_busy=True)
        try:
            reports = self._checkpoint_locked(specs, started, dry_run)
        finally:
            lock.release()
        report = Report("checkpoint", started, time.monotonic() - t0, tuple(reports),
                        dry_run=dry_run)
        if not dry_run:
            self._write_status(report)
        return report

    def _checkpoint_locked(self, specs: Sequence[AdapterSpec], started: int, dry_run: bool
                           ) -> list[AdapterReport]:
        states = []
        reports = []
        for spec in specs:
            try:
                states.append(self._state(spec))
            except DurableError as exc:
                reports.append(AdapterReport(spec.name, fatal=str(exc)))
        jobs = [ScanJob(s.name, os.fspath(s.live), self._matchers[s.name], s.index.records,
                        self._skip_dirs(self.config.adapter(s.name))) for s in states]
        results = scan(jobs, workers=self.scan_workers)
        for state in states:
            t0 = time.monotonic()
            result = results[state.name]
            for path, reason in result.errors:
                log.warning("scan.error adapter=%s path=%s error=%s", state.name, path, reason)
            if not result.exists:
                reports.append(AdapterReport(state.name))
                continue
            missing = checkpoint.find_missing(state, result)
            actions = plan_checkpoint(result, state.index, missing)
            if dry_run:
                reports.append(AdapterReport(state.name, plan=tuple(map(str, actions))))
                continue
            if any(isinstance(a, (Upload, RecordLink)) for a in actions):
                try:  # a run that may write: health check and probe (cached); idle runs skip it
                    caps = self._durable_ready()
                except DurableError as exc:
                    reports.append(AdapterReport(state.name, fatal=str(exc)))
                    continue
                state.store.configure(rename_supported=caps.rename_supported,
                                      attrs_after_close=caps.attrs_after_close)
                if state.name in self._unseeded:  # only now: an idle pass never reads durable
                    self._unseeded.discard(state.name)
                    _seed_from_manifest(state)
            rep = checkpoint.run(state, actions, started_ns=started, jobs=self.config.jobs)
            scan_errors = tuple(
                PathError(state.name, p, "scan", r) for p, r in result.errors)
            reports.append(_with(rep, errors=rep.errors + scan_errors,
                                 duration_s=time.monotonic() - t0))
        return reports

    def restore(self, adapters: Sequence[str] | None = None, *, dry_run: bool = False
                ) -> Report:
        """Fill each adapter's live tree from its durable checkpoint (never older over newer)."""
        started = self.clock()
        t0 = time.monotonic()
        specs = self.config.select(adapters)
        reports = []
        with StateLock(self.config.state_dir, wait=True):
            for spec in specs:
                reports.append(self._restore_one(spec, dry_run))
        report = Report("restore", started, time.monotonic() - t0, tuple(reports),
                        dry_run=dry_run)
        if not dry_run:
            self._write_restore_status(report)
        return report

    def _restore_one(self, spec: AdapterSpec, dry_run: bool) -> AdapterReport:
        t0 = time.monotonic()
        try:
            self._check_durable_root()
            state = self._state(spec)
            self._unseeded.discard(spec.name)  # restore reads the manifest itself
            if not state.store.exists():
                log.info("restore.nothing adapter=%s durable=%s (no checkpoint yet)", spec.name,
                         spec.durable)
                return AdapterReport(spec.name)
            entries, problems, source = restore.durable_entries(state.store, state.index)
            for problem in problems:
                log.warning("manifest.problem %s", problem)
            actions = restore.plan(state, entries)
            if dry_run:
                return AdapterReport(spec.name, plan=tuple(map(str, actions)))
            log.info("restore.start adapter=%s entries=%d source=%s", spec.name, len(entries),
                     source)
            rep = restore.run(state, actions, jobs=self.config.jobs)
        except DurableError as exc:
            return AdapterReport(spec.name, fatal=str(exc))
        return _with(rep, duration_s=time.monotonic() - t0)

    def _check_durable_root(self) -> None:
        probe.check_root(self.config.durable_root, require_mount=self.config.require_mount,
                         state_dir=self.config.state_dir)

    def _durable_ready(self) -> probe.Capabilities:
        """Health-check the durable root and learn what it supports (once per Engine run)."""
        self._check_durable_root()
        if self._caps is None:
            self._caps = probe.capabilities(self.config.durable_root, self.config.state_dir)
            log.info("probe.durable root=%s %s", self.config.durable_root, self._caps.describe())
        return self._caps

    # -- status ----------------------------------------------------------
    def _write_status(self, report: Report) -> None:
        for rep in report.adapters:
            path = self._status_path(rep.name)
            old = _read_json(path)
            now = report.started_ns
            status = {
                "adapter": rep.name,
                "last_attempt_ns": now,
                "last_checkpoint_ns": now if rep.ok else old.get("last_checkpoint_ns"),
                "last_files": rep.files,
                "last_bytes": rep.bytes,
                "total_files": int(old.get("total_files", 0)) + rep.files,
                "total_bytes": int(old.get("total_bytes", 0)) + rep.bytes,
                "errors": [str(e) for e in rep.errors][:20],
                "last_error": rep.fatal or (str(rep.errors[0]) if rep.errors else
                                            (old.get("last_error") if not rep.ok else None)),
            }
            savefile.write_file(path, json.dumps(status).encode(), mode=0o600, fsync=False)

    def _write_restore_status(self, report: Report) -> None:
        data = {"complete": report.ok, "finished_ns": self.clock(),
                "errors": [str(e) for e in report.errors][:50],
                "fatal": [f"{a.name}: {a.fatal}" for a in report.adapters if a.fatal]}
        savefile.write_file(self.config.state_dir / "restore.json", json.dumps(data).encode(),
                            mode=0o600, fsync=True)

    def status(self) -> dict[str, Any]:
        """Effective configuration with sources, and per-adapter state (local files only)."""
        cfg = self.config
        adapters = []
        for spec in cfg.adapters:
            st = _read_json(self._status_path(spec.name))
            idx = Index.load(self._index_path(spec.name))
            adapters.append({
                "name": spec.name, "live": str(spec.live), "durable": str(spec.durable),
                "origin": spec.origin, "exclude": list(self._matchers[spec.name].patterns),
                "live_exists": spec.live.is_dir(),
                "indexed_files": len(idx) if idx is not None else 0,
                **{k: v for k, v in st.items() if k != "adapter"},
            })
        return {
            "config": {
                "local_root": [str(cfg.local_root), cfg.sources.get("local_root")],
                "durable_root": [str(cfg.durable_root), cfg.sources.get("durable_root")],
                "state_dir": [str(cfg.state_dir), cfg.sources.get("state_dir")],
                "interval": [cfg.interval, cfg.sources.get("interval")],
                "jobs": [cfg.jobs, cfg.sources.get("jobs")],
                "adapters": [[s.name for s in cfg.adapters], cfg.sources.get("adapters")],
                "require_mount": [cfg.require_mount, cfg.sources.get("require_mount")],
            },
            "durable_probe": _probe_status(cfg.state_dir, cfg.durable_root),
            "restore": _read_json(cfg.state_dir / "restore.json") or None,
            "adapters": adapters,
        }


def _seed_from_manifest(state: AdapterState) -> None:
    """A missing index is rebuilt from the durable manifest, so nothing is re-uploaded.

    Every entry is recorded dirty: the next pass hashes the local file and
    uploads it only when its content differs.  This is the one time a
    checkpoint lists the durable side (the manifest directory).
    """
    if not state.store.exists():
        return
    manifest_state = load_manifest(state.store)
    for entry in manifest_state.entries.values():
        if entry.kind in ("file", "symlink"):
            state.index.record(entry.path, size=entry.size, mtime_ns=entry.mtime_ns,
                               ctime_ns=DIRTY, hash64=entry.hash or 0, mode=entry.mode,
                               kind=entry.kind, target=entry.target, extra=entry.index_extra())
    if manifest_state.last_seq:
        state.index.meta.update(manifest_seq=manifest_state.last_seq,
                                base_seq=manifest_state.base_seq,
                                deltas=manifest_state.deltas_since_base)


def _probe_status(state_dir: Path, root: Path) -> dict[str, Any] | None:
    """The cached probe of the durable root, with a one-line summary (no mount operation)."""
    cached = probe.read_cache(state_dir, root)
    if not cached:
        return None
    caps = probe.Capabilities.from_json(cached)
    if caps is None:
        return None
    return {**cached, "summary": caps.describe(), "rename_supported": caps.rename_supported}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _with(rep: AdapterReport, **changes: Any) -> AdapterReport:
    return attrs.evolve(rep, **changes)


__all__ = ["ConfigError", "Engine"]
