"""The background part of `run`'s restore: the files left after COMMAND started.

Owns the thread that brings them back (issue 27 part 1): batch by batch,
newest first, the files a pack serves last (`syncengine.restore.later`: a full
restore of a packed root stays a few requests), each batch under the state lock and
the runner's `PassLock`, so a checkpoint pass runs between two batches, never
during one, and never sees a half-placed batch (each file is renamed into
place whole; the ones not back yet are pending in the index, and a pass keeps
their durable entries).  A pass asking for the lock goes before the next batch.
`stop` (SIGTERM) lets the current batch finish; what is left stays pending
for the next start's restore.  The progress (`status`) goes into the
runner's status file and metrics; the end is one log line and a line on
``run``'s stderr; a failure is also recorded in ``restore.json`` (incomplete,
as a foreground failure is: gc refuses until a restore completes).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from syncengine.daemon.describe import describe_background
from syncengine.engine import Engine
from syncengine.local import status as status_files
from syncengine.local.lock import StateLock
from syncengine.plan import Fetch
from syncengine.report import AdapterReport

log = logging.getLogger("syncengine")


class PassLock:
    """One at a time: a checkpoint pass, or a background batch; a pass asking first wins."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cv = threading.Condition()
        self._asking = 0

    def acquire(self, timeout: float = -1) -> bool:
        with self._cv:
            self._asking += 1
        try:
            return self._lock.acquire(timeout=timeout)
        finally:
            with self._cv:
                self._asking -= 1
                self._cv.notify_all()

    def release(self) -> None:
        self._lock.release()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Held for one background batch, once no pass is asking."""
        with self._cv:
            while self._asking:
                self._cv.wait()
        with self._lock:
            yield


class BackgroundRestore:
    """Restore `later` (adapter -> files, newest first) in a thread; `stop` after a batch."""

    def __init__(
        self,
        engine: Engine,
        later: dict[str, list[Fetch]],
        lock: PassLock,
        *,
        changed: Callable[[], None] = lambda: None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.engine, self.later, self.lock = engine, later, lock
        self.changed = changed  # after each batch: the runner rewrites its status file
        self.say = say  # `run`: the closing line on stderr
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.state = "running"
        self.files_total = sum(len(v) for v in later.values())
        self.bytes_total = sum(a.entry.size or 0 for v in later.values() for a in v)
        self.files = self.bytes = self.kept = 0
        self.errors: list[str] = []
        self.started = time.monotonic()
        self.seconds = 0.0

    @property
    def failed(self) -> bool:
        return self.state == "failed"

    @property
    def running(self) -> bool:
        return self.state == "running"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="syncengine-background-restore", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop after the batch under way (then what is left stays pending)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the end (True) or `timeout` (False)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.state != "running"

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "files": self.files,
            "bytes": self.bytes,
            "kept": self.kept,
            "files_total": self.files_total,
            "bytes_total": self.bytes_total,
            "errors": self.errors[:20],
            "seconds": round(self.seconds or time.monotonic() - self.started, 3),
        }

    def _run(self) -> None:
        try:
            for name, actions in self.later.items():
                self._adapter(name, actions)
        except Exception as exc:  # reported like a foreground failure, never raised
            self.errors.append(str(exc))
        self.seconds = time.monotonic() - self.started
        if self.errors:
            self.state = "failed"
        elif self._stop.is_set() and self.files + self.kept < self.files_total:
            self.state = "stopped"
        else:
            self.state = "done"
        self._finish()

    def _adapter(self, name: str, actions: list[Fetch]) -> None:
        from syncengine.restore import later  # loaded with the restore side

        spec = self.engine.config.adapter(name)
        # which files the packs serve, asked once (a listing and the packs' indexes, read
        # beside the passes): those come last, pack by pack, each batch its own spans
        actions, served = later.arrange(self.engine.stores(spec.durable), actions)
        batches = list(later.batches(actions))
        for i, batch in enumerate(batches):
            stop = self._stop.is_set()  # then only the index is saved
            with self.lock.batch(), StateLock(self.engine.config.state_dir, wait=True):
                try:
                    rep = self.engine.passes.restore_batch(
                        spec,
                        [] if stop else batch,
                        save=stop or i == len(batches) - 1,
                        served=served,
                    )
                except OSError as exc:
                    raise self.engine.os_error("restore", exc) from exc
            self._account(rep)
            self.changed()
            if stop or rep.fatal is not None:  # the durable side failed: the rest stays
                return  # pending (a pass saves the index)

    def _account(self, rep: AdapterReport) -> None:
        self.files += rep.files
        self.bytes += rep.bytes
        self.kept += rep.kept_local
        self.errors.extend(str(e) for e in rep.errors)
        if rep.fatal is not None:
            self.errors.append(f"{rep.name}: {rep.fatal}")

    def _finish(self) -> None:
        line = describe_background(self.status())
        level = logging.ERROR if self.failed else logging.INFO
        log.log(
            level,
            "restore.background state=%s %s",
            self.state,
            line,
            extra={"event": "restore.background"},
        )
        if self.say is not None:
            self.say(line)
        try:
            status_files.write_background(self.engine.config.state_dir, self.status())
        except OSError as exc:
            log.warning(
                "restore.status unwritable, error=%s", exc, extra={"event": "restore.status"}
            )
        self.changed()
