"""The embedded runner: restore, then checkpoint in a background thread until stopped.

Owns the checkpoint loop shared by Python services and ``syncengine run``:
one pass per interval (``wait=False``: a pass that finds another checkpoint
running skips its turn), driven by change hints from `syncengine.daemon.watch` when
inotify is usable, a status file (``<state_dir>/daemon.json``) that
``syncengine status`` reads from another process, the Prometheus metrics
endpoint when given an address (`syncengine.daemon.metrics`; `metrics_address`
says where it listens), and the final checkpoint on stop.  Passes of one runner
never overlap (a mutex), and the state lock keeps them from overlapping with any
other process's.

`checkpoint_now` and the final pass walk the whole tree rather than use
hints: inotify delivers events asynchronously, so a write made just before the
call may not have reached the watcher yet.

Usage::

    from syncengine import Runner, load_config
    with Runner(load_config(), interval=15) as runner:   # restores, then loops
        ...
        report = runner.checkpoint_now(timeout=30)        # durable when it returns
    # leaving the block takes the final checkpoint and joins the thread
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from syncengine.config import Config
from syncengine.daemon.background import BackgroundRestore, PassLock
from syncengine.daemon.describe import describe_failure, describe_start
from syncengine.daemon.metrics import Metrics
from syncengine.daemon.metricserver import MetricsServer
from syncengine.daemon.watch import Watcher
from syncengine.engine import Engine
from syncengine.errors import Incomplete, LeaseLost, LockBusy
from syncengine.fs import savefile
from syncengine.local import status as status_files
from syncengine.report import Report

log = logging.getLogger("syncengine")


def _seconds(ns: Any) -> float | None:
    return ns / 1e9 if isinstance(ns, int) and ns > 0 else None


class Runner:
    """Restore, check the durable side against the index, then checkpoint every
    `interval` seconds in a thread; final pass on stop."""

    def __init__(
        self,
        engine: Engine | Config,
        *,
        interval: float | None = None,
        watch: bool = True,
        rescan_interval: float | None = None,
        takeover: bool = False,
        on_lease_lost: Callable[[], None] | None = None,
        metrics_address: str | None = None,
        restore: str | None = None,
    ) -> None:
        self.engine = engine if isinstance(engine, Engine) else Engine(engine)
        self.takeover = takeover  # take the durable root's lease without waiting
        self.on_lease_lost = on_lease_lost  # `syncengine run`: stop the child, exit 76
        self.lease_lost: str | None = None  # another instance took the lease: we stopped
        cfg = self.engine.config
        self.interval = float(interval if interval is not None else cfg.interval)
        self.watcher: Watcher | None = None
        if watch:
            self.watcher = Watcher(
                {s.name: s.live for s in cfg.adapters},
                rescan_interval=rescan_interval or cfg.rescan_interval,
                skip_dirs={s.name: self.engine.skip_dirs(s) for s in cfg.adapters},
            )
        self._mutex = PassLock()  # one pass (or background restore batch) at a time
        # "background": each adapter's first set before `start` returns, the rest after
        self.restore_mode = restore or cfg.restore
        self.background: BackgroundRestore | None = None
        self.on_background_end: Callable[[str], None] | None = None  # `run`: its stderr line
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running = False
        self._status_path = cfg.state_dir / "daemon.json"
        self.passes = 0
        self.last_pass_ns: int | None = None
        self.last_ok_ns: int | None = None
        self.last_error: str | None = None
        self.final_ok: bool | None = None  # the checkpoint taken on stop (and any after it)
        # Prometheus metrics on HOST:PORT (default: the config's metrics_address; None: off)
        self._metrics_at = metrics_address or cfg.metrics_address
        self.metrics: Metrics | None = None
        self._metrics_server: MetricsServer | None = None

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> Report:
        """Restore every adapter, then start the loop; raise `Incomplete` if restore failed.

        A server must never write new state over a partially restored tree,
        so nothing is started when the restore is incomplete.
        """
        if self._running:
            raise RuntimeError("runner already started")
        self.engine.config.select(None, publish=True)  # ConfigError: nothing started
        self._serve_metrics()  # first: the lease wait and the restore's progress are seen
        try:
            report = self._restore()
            # The index must not be ahead of the bucket (a write-back mount that lost
            # uploads): compared now, so the first pass publishes again what it lacks.
            self.engine.check_durable()
        except BaseException:
            self._stop_metrics()
            raise
        later = self.engine.passes.later if self.restore_mode == "background" else {}
        if self.watcher is not None and any(later.values()):  # see `Watcher.start_after`
            self.watcher.start_after(lambda: not (self.background and self.background.running))
        elif self.watcher is not None:
            self.watcher.start()
        self._stop.clear()
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="syncengine-runner", daemon=True)
        self._thread.start()
        if any(later.values()):
            self.background = BackgroundRestore(
                self.engine,
                dict(later),
                self._mutex,
                changed=self._write_status,
                say=self.on_background_end,
            )
            self.background.start()
            if self.metrics is not None:
                self.metrics.background = self.background.status
        self._write_status()  # `status`: running, before the first pass
        log.info(
            "runner.started %s",
            describe_start(report, self.engine.config, self.interval, self.mode, self.later),
            extra={"event": "runner.started"},
        )
        return report

    @property
    def later(self) -> int:
        """Files the background restore had to bring back when it started."""
        return self.background.files_total if self.background is not None else 0

    def _restore(self) -> Report:
        # one writer per durable root: wait for (or take over) another instance's lease
        self.engine.lease.acquire(takeover=self.takeover)
        report = self.engine.restore(later=self.restore_mode == "background")
        if not report.ok:
            self.engine.lease.release()
            exc = Incomplete("restore incomplete, not starting:\n" + describe_failure(report))
            exc.report = report  # type: ignore[attr-defined]
            raise exc
        if self.metrics is not None:  # the loss window runs from the checkpoints before
            state_dir = self.engine.config.state_dir
            self.metrics.started(
                {
                    s.name: _seconds(
                        status_files.read_json(status_files.status_path(state_dir, s.name)).get(
                            "last_checkpoint_ns"
                        )
                    )
                    for s in self.engine.config.adapters
                }
            )
        return report

    def stop(self) -> Report | None:
        """Stop the loop (a pass in progress finishes), take the final checkpoint, join.

        Returns the final checkpoint's report (None if the runner was not running).
        """
        if not self._running:
            return None
        self._running = False
        self._stop.set()
        try:
            if self.background is not None:  # after its batch; the rest stays pending
                self.background.stop()
            if self._thread is not None:
                self._thread.join()
                self._thread = None
            if self.lease_lost is not None:  # fenced: nothing more is published
                return None
            report = self._pass("final", wait=True, full=True)
            self.engine.lease.release()  # the next instance may take over at once
            return report
        finally:
            if self.watcher is not None:
                self.watcher.stop()
            self._write_status()
            self._stop_metrics()
            log.info("runner.stopped passes=%d", self.passes, extra={"event": "runner.stopped"})

    def __enter__(self) -> Runner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._running

    # -- passes --------------------------------------------------------------
    def checkpoint_now(self, timeout: float | None = None) -> Report:
        """Take a checkpoint now (whole tree) and return once it is durable.

        Thread-safe.  Waits for a pass already running; raises `LockBusy` if
        that, or another process's checkpoint, takes longer than `timeout`.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        report = self._pass("now", wait=True, full=True, deadline=deadline)
        if report.skipped_busy:
            raise LockBusy(
                f"checkpoint_now: another checkpoint or restore held the state lock "
                f"for more than {timeout}s"
            )
        return report

    def _loop(self) -> None:
        renew_every = self.engine.config.lease_seconds / 3
        due = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, min(due - time.monotonic(), renew_every))):
            try:
                if time.monotonic() < due:  # between passes: the lease only, when due
                    self.engine.lease.renew()
                    continue
                due = time.monotonic() + self.interval
                self._pass("timer", wait=False)
            except LeaseLost as exc:  # another instance took over: stop checkpointing
                self._fenced(str(exc))
                return
            except Exception as exc:  # never let the loop die; retried next interval
                log.error(
                    "runner.pass-failed kind=timer error=%s",
                    exc,
                    extra={"event": "runner.pass-failed"},
                )

    def _pass(
        self, kind: str, *, wait: bool, full: bool = False, deadline: float | None = None
    ) -> Report:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._mutex.acquire(timeout=-1 if remaining is None else remaining):
            raise LockBusy(f"checkpoint_now: a checkpoint still running after {remaining}s")
        try:
            taken = self.watcher.take() if self.watcher is not None else None
            hints = None if full else taken
            log.info(
                "runner.pass-start kind=%s mode=%s",
                kind,
                "walk" if hints is None else "events",
                extra={"event": "runner.pass-start"},
            )
            lock_timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                # the stop pass is final: logs to their exact end, and every chain recorded
                report = self.engine.checkpoint(
                    wait=wait, hints=hints, lock_timeout=lock_timeout, final=kind == "final"
                )
            except Exception as exc:
                if isinstance(exc, LeaseLost):  # also in a final pass: `run` exits 76
                    self.lease_lost = str(exc)
                if self.metrics is not None:
                    self.metrics.pass_failed(
                        "lease_lost" if isinstance(exc, LeaseLost) else "error"
                    )
                self._failed(kind, taken, str(exc))
                if kind == "final" or not self._running:
                    self.final_ok = False
                    self._write_status()
                raise
            self.passes += 1
            self.last_pass_ns = report.started_ns
            if self.metrics is not None:
                self.metrics.passed(report)
            if kind == "final" or not self._running:  # the last word on what is durable
                self.final_ok = report.ok
            if report.skipped_busy:
                self._give_back(taken)
            elif report.ok:
                self.last_ok_ns = report.started_ns
                self.last_error = None
            else:
                self._failed(kind, taken, describe_failure(report).splitlines()[0])
            log.info(
                "runner.pass-end kind=%s files=%d bytes=%d ok=%s busy=%s duration=%.3f",
                kind,
                report.files,
                report.bytes,
                report.ok,
                report.skipped_busy,
                report.duration_s,
                extra={"event": "runner.pass-end"},
            )
            self._write_status()
            return report
        finally:
            self._mutex.release()

    def _give_back(self, taken: dict[str, set[str] | None] | None) -> None:
        if self.watcher is not None and taken is not None:
            self.watcher.give_back(taken)

    def _failed(self, kind: str, taken: dict[str, set[str] | None] | None, error: str) -> None:
        self._give_back(taken)
        # the same failure pass after pass is said once, then at debug level (path warnings
        # are deduplicated the same way by the engine's notices); `status` shows it meanwhile.
        # The final pass always says it: it decides what stays durable.
        level = logging.DEBUG if error == self.last_error and kind != "final" else logging.ERROR
        self.last_error = error
        log.log(
            level,
            "runner.pass-incomplete kind=%s error=%s (retried next pass)",
            kind,
            error,
            extra={"event": "runner.pass-incomplete"},
        )

    def _fenced(self, error: str) -> None:
        self.lease_lost = error
        if self.background is not None:
            self.background.stop()
        self._write_status()
        if self.on_lease_lost is not None:
            self.on_lease_lost()

    # -- observability -------------------------------------------------------
    @property
    def metrics_address(self) -> str | None:
        """``HOST:PORT`` the metrics are served on, as bound (None: not serving)."""
        return self._metrics_server.address if self._metrics_server is not None else None

    def _serve_metrics(self) -> None:
        if self._metrics_at is None:
            return
        cfg = self.engine.config
        self.metrics = Metrics([s.name for s in cfg.adapters], self.engine.lease.holder.describe)
        self.engine.progress.watchers.append(self.metrics.watch)
        self._metrics_server = MetricsServer(self._metrics_at, self.metrics.render)
        self._metrics_server.start()

    def _stop_metrics(self) -> None:
        if self._metrics_server is not None:
            if self.metrics is not None and self.metrics.watch in self.engine.progress.watchers:
                self.engine.progress.watchers.remove(self.metrics.watch)
            self._metrics_server.stop()
            self._metrics_server = None

    @property
    def mode(self) -> str:
        return self.watcher.mode if self.watcher is not None else "scanning"

    def status(self) -> dict[str, Any]:
        """Mode, pending changed paths per adapter, last pass, last error."""
        pending = self.watcher.pending() if self.watcher is not None else {}
        return {
            "pid": os.getpid(),
            "running": self._running,
            "mode": self.mode,
            "interval": self.interval,
            "passes": self.passes,
            "last_pass_ns": self.last_pass_ns,
            "last_ok_ns": self.last_ok_ns,
            "last_error": self.last_error,
            "final_ok": self.final_ok,
            "watch_error": self.watcher.last_error if self.watcher is not None else None,
            "overflows": self.watcher.overflows if self.watcher is not None else 0,
            "pending": pending,
            "lease": self.engine.lease.holder.describe(),
            "lease_lost": self.lease_lost,
            "metrics_address": self.metrics_address,
            "restore_background": self.background.status() if self.background else None,
            "updated_ns": time.time_ns(),
        }

    def _write_status(self) -> None:
        try:
            savefile.write_file(
                self._status_path, json.dumps(self.status()).encode(), mode=0o600, fsync=False
            )
        except OSError as exc:
            log.warning(
                "runner.status-unwritable path=%s error=%s",
                self._status_path,
                exc,
                extra={"event": "runner.status-unwritable"},
            )
