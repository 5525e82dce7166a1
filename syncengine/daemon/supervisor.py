"""``syncengine run -- COMMAND``: the container entrypoint around an agent server.

Owns the process side of the lifecycle: restore (and refuse to start COMMAND
when the restore is incomplete), start COMMAND as a child, let the `Runner`
checkpoint in the background, forward SIGTERM/SIGINT/SIGHUP to the child, take
the final checkpoint, and exit with the child's status (128 + signal number
when it died of a signal, as a shell does), except that a child that
succeeded (0) while the final checkpoint was incomplete exits
`FINAL_INCOMPLETE` (75, sysexits' EX_TEMPFAIL): the state since the last
complete checkpoint is not durable, and an orchestrator must not read that as
success; and 1 when COMMAND exited 0 but the background part of the restore
failed (the tree is not whole: some files did not come back).  As PID 1 it
also reaps orphaned zombies.

Signals are recorded by handlers that do nothing else but forward them to the
child (no locks, no logging); the main thread wakes through
``signal.set_wakeup_fd`` and ``select``, never a polling sleep.  A second
signal during the final checkpoint is forwarded too, and the checkpoint runs
to completion: every object is staged and renamed, so it is never cut in half.

Shutdown order: forward the signal, wait up to `grace` for the child, take the
final checkpoint (it waits for a timer pass already running); if the child is
still alive, wait until `stop_timeout` after the signal, SIGKILL it, and take
one more checkpoint after it exits.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType

from syncengine.daemon.describe import describe_pass, describe_start
from syncengine.daemon.runner import Runner
from syncengine.errors import Incomplete, LeaseHeld, LeaseLost

log = logging.getLogger("syncengine")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
FINAL_INCOMPLETE = 75  # COMMAND exited 0, the final checkpoint did not complete
LEASE_LOST = LeaseLost.exit_code  # 76: another instance took the durable root over


class Supervisor:
    """Run one command under a `Runner`; `run()` returns the exit status to use."""

    def __init__(
        self,
        runner: Runner,
        command: Sequence[str],
        *,
        grace: float = 1.0,
        stop_timeout: float = 10.0,
        reap_orphans: bool | None = None,
        quiet: bool = False,
    ) -> None:
        self.runner = runner
        self.quiet = quiet  # -q: not the restore and final-checkpoint lines
        self.command = list(command)
        self.grace = grace
        self.stop_timeout = stop_timeout
        self.reap_orphans = os.getpid() == 1 if reap_orphans is None else reap_orphans
        self.child: subprocess.Popen[bytes] | None = None
        self.status: int | None = None  # the child's exit code (negative: signal)
        self.signals: list[int] = []
        self.final_ok: bool | None = None  # the last checkpoint after COMMAND stopped
        self._reported = 0
        self._forwarded = 0  # how many of `signals` the child has been sent
        self._forwarding = False
        self._wake_r = self._wake_w = -1
        runner.on_lease_lost = self._lease_lost
        runner.on_background_end = self._background_end

    def _lease_lost(self) -> None:
        """From the runner's thread: stop as on SIGTERM (forwarded to the child), then
        exit `LEASE_LOST`; the final checkpoint publishes nothing (fenced).  With
        ``lease_lost = "keep"`` COMMAND runs on, checkpointed no more, and `run` exits
        `LEASE_LOST` when it ends."""
        if self.runner.engine.config.lease_lost == "stop":
            os.kill(os.getpid(), signal.SIGTERM)

    # -- signal handling (handlers only record and forward) ------------------
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)
        self._forward()

    def _forward(self) -> None:
        """Send the child every recorded signal it has not been sent yet.  A signal that
        arrives while `Popen` is starting the child finds no child yet (the child may
        already be running and printing); the wait loop forwards it once the child is
        known.  The handler runs between two bytecodes of this very method, so a nested
        call leaves the work to the outer one, and the wait loop catches what lands
        after the outer loop's last check."""
        child = self.child
        if child is None or self.status is not None or self._forwarding:
            return
        self._forwarding = True
        try:
            while self._forwarded < len(self.signals):
                signum = self.signals[self._forwarded]
                self._forwarded += 1
                try:
                    os.kill(child.pid, signum)
                except ProcessLookupError:
                    pass
        finally:
            self._forwarding = False

    def _install(self) -> dict[int, object]:
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        old: dict[int, object] = {}
        for sig in (*STOP_SIGNALS, signal.SIGCHLD):
            handler = self._on_signal if sig in STOP_SIGNALS else _ignore
            old[sig] = signal.signal(sig, handler)
        old[-1] = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        return old

    def _uninstall(self, old: dict[int, object]) -> None:
        signal.set_wakeup_fd(int(old.pop(-1)))  # type: ignore[call-overload]
        for sig, handler in old.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        os.close(self._wake_r)
        os.close(self._wake_w)

    # -- waiting -------------------------------------------------------------
    def _sleep(self, timeout: float | None) -> None:
        try:
            select.select([self._wake_r], [], [], timeout)
        except InterruptedError:
            pass
        try:
            while os.read(self._wake_r, 256):
                pass
        except BlockingIOError:
            pass

    def _reap(self) -> None:
        child = self.child
        if child is None or (self.status is not None and not self.reap_orphans):
            return
        while True:
            try:
                pid, wstatus = os.waitpid(-1 if self.reap_orphans else child.pid, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == child.pid:
                self.status = os.waitstatus_to_exitcode(wstatus)
                child.returncode = self.status  # Popen must not wait for it again
                log.info(
                    "run.child-exited pid=%d status=%d",
                    pid,
                    self.status,
                    extra={"event": "run.child-exited"},
                )
                if not self.reap_orphans:
                    return
            else:
                log.debug("run.reaped-orphan pid=%d", pid, extra={"event": "run.reaped-orphan"})

    def _wait_child(self, deadline: float | None, *, until_signal: bool = False) -> None:
        while True:
            self._reap()
            self._forward()
            self._log_signals()
            if self.status is not None or (until_signal and self.signals):
                return
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            self._sleep(remaining)

    def _log_signals(self) -> None:
        for sig in self.signals[self._reported :]:
            log.info(
                "run.signal sig=%s forwarded to pid=%s",
                signal.Signals(sig).name,
                self.child.pid if self.child else "-",
                extra={"event": "run.signal"},
            )
        self._reported = len(self.signals)

    # -- the run ---------------------------------------------------------------
    def run(self) -> int:
        old = self._install()
        try:
            return self._run()
        finally:
            if self.runner.running:  # an unexpected error: still stop the threads
                self.runner.stop()
            self._uninstall(old)

    def _background_end(self, line: str) -> None:
        """From the background restore's thread: its closing line (a failure even with
        -q: it is reported as a foreground one is)."""
        if self.runner.background is not None and self.runner.background.failed:
            print(f"syncengine run: {line}", file=sys.stderr, flush=True)
        else:
            self._say(line)

    def _say(self, line: str) -> None:
        """What `run` did, one line on stderr (stdout is COMMAND's)."""
        if not self.quiet:
            print(f"syncengine run: {line}", file=sys.stderr, flush=True)

    def _run(self) -> int:
        try:
            restored = self.runner.start()
        except LeaseHeld as exc:
            print(
                f"syncengine run: {exc}\nsyncengine run: not starting {self.command[0]}",
                file=sys.stderr,
            )
            return LeaseHeld.exit_code
        except Incomplete as exc:
            print(
                f"syncengine run: {exc}\nsyncengine run: not starting {self.command[0]}",
                file=sys.stderr,
            )
            return 1
        runner = self.runner
        self._say(
            describe_start(
                restored, runner.engine.config, runner.interval, runner.mode, runner.later
            )
        )
        if self.signals:
            self._final()
            return 128 + self.signals[0]
        try:
            self.child = subprocess.Popen(self.command)
        except OSError as exc:
            print(
                f"syncengine run: cannot start {self.command[0]}: {exc.strerror}", file=sys.stderr
            )
            self._final()
            return 127 if isinstance(exc, FileNotFoundError) else 126
        log.info(
            "run.started pid=%d command=%s",
            self.child.pid,
            " ".join(self.command),
            extra={"event": "run.started"},
        )
        self._wait_child(None, until_signal=True)
        if self.status is None:
            self._stop_child()
        else:
            self._final()
        return self._exit_code()

    def _exit_code(self) -> int:
        """COMMAND's status, unless what `run` must report overrides it (module doc)."""
        assert self.status is not None
        if self.runner.lease_lost is not None:
            log.error(
                "run.exit status=%d: the lease was lost (%s); the child was stopped",
                LEASE_LOST,
                self.runner.lease_lost,
                extra={"event": "run.exit"},
            )
            return LEASE_LOST
        code = 128 - self.status if self.status < 0 else self.status
        if code == 0 and self.final_ok is False:
            log.error(
                "run.exit status=%d: COMMAND exited 0 but the final checkpoint was "
                "incomplete (see the errors above; `syncengine status` shows them)",
                FINAL_INCOMPLETE,
                extra={"event": "run.exit"},
            )
            return FINAL_INCOMPLETE
        if code == 0 and self.runner.background is not None and self.runner.background.failed:
            log.error(
                "run.exit status=1: COMMAND exited 0 but the background restore failed "
                "(see the errors above; `syncengine status` shows them)",
                extra={"event": "run.exit"},
            )
            return 1
        return code

    def _stop_child(self) -> None:
        """After a signal: the grace period, the final checkpoint, then the stop timeout and
        SIGKILL for a child still running, and a checkpoint after it exits."""
        child = self.child
        assert child is not None
        t_signal = time.monotonic()
        self._wait_child(t_signal + self.grace)
        self._final()
        if self.status is None:
            log.warning(
                "run.child-still-running pid=%d: waiting up to %.1fs, then SIGKILL",
                child.pid,
                self.stop_timeout,
                extra={"event": "run.child-still-running"},
            )
            self._wait_child(t_signal + self.stop_timeout)
            if self.status is None:
                log.warning(
                    "run.kill pid=%d after stop timeout",
                    child.pid,
                    extra={"event": "run.kill"},
                )
                child.kill()
                self._wait_child(None)
            self._checkpoint("after-exit")

    def _final(self) -> None:
        try:
            report = self.runner.stop()
        except Exception as exc:
            log.error(
                "run.final-checkpoint-failed error=%s",
                exc,
                extra={"event": "run.final-checkpoint-failed"},
            )
            self.final_ok = False
            return
        self.final_ok = report is None or report.ok
        if report is not None and report.ok:
            self._say(f"final checkpoint: {describe_pass(report)}")
        if report is not None and not report.ok:
            log.error(
                "run.final-checkpoint-incomplete files=%d errors=%d",
                report.files,
                len(report.errors),
                extra={"event": "run.final-checkpoint-incomplete"},
            )

    def _checkpoint(self, kind: str) -> None:
        try:
            report = self.runner.checkpoint_now()
        except Exception as exc:
            log.error(
                "run.checkpoint-failed kind=%s error=%s",
                kind,
                exc,
                extra={"event": "run.checkpoint-failed"},
            )
            self.final_ok = False
            return
        self.final_ok = report.ok
        if report.ok:
            self._say(f"checkpoint after {self.command[0]} exited: {describe_pass(report)}")
        log.info(
            "run.checkpoint kind=%s files=%d ok=%s",
            kind,
            report.files,
            report.ok,
            extra={"event": "run.checkpoint"},
        )


def _ignore(signum: int, frame: FrameType | None) -> None:
    """SIGCHLD needs a Python handler for the wakeup fd to be written."""
