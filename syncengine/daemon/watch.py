"""Change hints from inotify (watchdog): which paths changed since the last pass.

Owns the file watcher over each adapter's live tree.  Events are hints, not
truth: `Watcher.take` hands the engine, per adapter, the set of relative paths
that changed, or None when the next pass must walk the whole tree:

- at start, and for an adapter whose live tree did not exist yet;
- after any watch error (the watcher thread died, ``inotify_add_watch`` failed
  with ENOSPC on ``max_user_watches``, a handler raised);
- when the kernel event queue overflowed (IN_Q_OVERFLOW).  watchdog handles
  the overflow internally and does not pass it on, so the watcher uses its own
  `InotifyFD` subclass that sees every raw event first (see `_make_observer`
  for why that pins watchdog to 7.1.x);
- when more than `HINT_LIMIT` paths piled up in one interval (a burst: a walk
  is as cheap, and the memory stays bounded);
- every `rescan_interval` seconds, to catch anything inotify cannot see.

When inotify is unavailable (no inotify, instance or watch limit reached) the
watcher logs a warning and every pass walks the tree: checkpointing goes on.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from watchdog.events import (
    DirAttribEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver

log = logging.getLogger("syncengine")

HINT_LIMIT = 10_000
# DirAttribEvent: a chmod of a directory (its mode is recorded in the manifest).
EVENTS = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileAttribEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    DirAttribEvent,
]


def _make_observer(
    on_overflow: Callable[[], None], on_error: Callable[[str], None]
) -> BaseObserver:
    """An inotify observer whose own InotifyFD reports queue overflow and errors.

    This is the one place that uses watchdog's private inotify classes, which is
    why pyproject pins watchdog to 7.1.x (tested: 6.0 lacks FileAttribEvent, 7.0
    drops IN_Q_OVERFLOW before `handle_event` and shares one InotifyFD per
    process).  No public API reports an overflow: 7.1 rebuilds its watches and
    tells event handlers nothing, so without this hook lost events would go
    unnoticed until the next periodic rescan.
    """
    from watchdog.observers.inotify import InotifyEmitter
    from watchdog.observers.inotify_c import InotifyFD

    class _FD(InotifyFD):
        def handle_event(self, event: Any) -> None:
            if event.is_queue_overflow:
                on_overflow()
            try:
                super().handle_event(event)
            except Exception as exc:  # e.g. ENOSPC adding a watch for a new directory
                on_error(f"{type(exc).__name__}: {exc}")

        def _add_callback(self, path: bytes, mask: Any, callback: Any, id_: Any) -> Any:
            # A directory created while watchdog walks its new parent is found by the
            # walk and reported again by its own IN_CREATE: watchdog then adds the same
            # callback to the same watch twice and prints a 2 KB RuntimeWarning
            # ("Callback with id ... already exists for watch", seen under harnesses
            # that mkdir -p).  Adding it again changes nothing: do it silently.
            watch = self._get_or_create_watch(path, mask)
            watch.callbacks[id_] = callback
            return watch.wd

    class _Observer(BaseObserver):
        def __init__(self) -> None:
            self._fd = _FD()
            self._fd.name = "syncengine-inotify"
            self._fd.start()
            super().__init__(InotifyEmitter, inotify_fd=self._fd)

        def on_thread_stop(self) -> None:
            super().on_thread_stop()
            self._fd.stop()
            self._fd.join()

        def alive(self) -> bool:
            return bool(self.is_alive() and self._fd.is_alive())

    observer = _Observer()
    observer.name = "syncengine-watch"
    return observer


class _Handler(FileSystemEventHandler):
    """Turns events under one live root into relative paths in the watcher's set."""

    def __init__(self, watcher: Watcher, name: str, root: str, skip: frozenset[str]) -> None:
        self.watcher, self.name, self.prefix = watcher, name, root + "/"
        self.skip, self.skip_under = skip, tuple(d + "/" for d in skip)

    def _add(self, path: str | bytes) -> None:
        p = os.fsdecode(path)
        if p.startswith(self.prefix):
            rel = p[len(self.prefix) :]
            if rel and rel not in self.skip and not rel.startswith(self.skip_under):
                self.watcher.add(self.name, rel)

    def on_any_event(self, event: FileSystemEvent) -> None:
        self._add(event.src_path)
        if event.dest_path:
            self._add(event.dest_path)


class Watcher:
    """Collects changed relative paths per adapter between passes (thread-safe)."""

    def __init__(
        self,
        roots: Mapping[str, Path],
        *,
        rescan_interval: float,
        skip_dirs: Mapping[str, frozenset[str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.roots = {n: os.fspath(r) for n, r in roots.items()}
        self.rescan_interval = rescan_interval
        self.skip = {n: (skip_dirs or {}).get(n, frozenset()) for n in self.roots}
        self.clock = clock
        self._lock = threading.Lock()
        self._pending: dict[str, set[str] | None] = dict.fromkeys(self.roots)
        self._watched: set[str] = set()
        self._observer: Any = None
        self._error: str | None = None
        self._next_rescan = clock() + rescan_interval
        self._next_retry = 0.0
        self.last_error: str | None = None
        self.overflows = 0
        self._closed = False
        self._after: Callable[[], bool] | None = None  # `start_after`

    # -- called from watchdog threads ------------------------------------
    def add(self, name: str, rel: str) -> None:
        with self._lock:
            pending = self._pending.get(name)
            if pending is None:
                return  # a full walk is due anyway
            pending.add(rel)
            if len(pending) > HINT_LIMIT:
                self._pending[name] = None
                log.info(
                    "watch.burst adapter=%s paths>%d: next pass walks the tree",
                    name,
                    HINT_LIMIT,
                    extra={"event": "watch.burst"},
                )

    def _overflow(self) -> None:
        with self._lock:
            self.overflows += 1
            self._pending = dict.fromkeys(self.roots)
        log.warning(
            "watch.overflow inotify queue overflowed: next pass walks every tree",
            extra={"event": "watch.overflow"},
        )

    def _failed(self, reason: str) -> None:
        with self._lock:
            self._error = reason
            self._pending = dict.fromkeys(self.roots)

    # -- called by the checkpoint loop -----------------------------------
    @property
    def mode(self) -> str:
        return "events" if self._observer is not None and self._watched else "scanning"

    def start(self) -> bool:
        """Start watching the live trees that exist; False (warned) if inotify is unusable."""
        self._closed = False
        try:
            self._observer = _make_observer(self._overflow, self._failed)
            self._observer.start()
        except Exception as exc:
            self._give_up(f"cannot start inotify: {exc}")
            return False
        self._watch_new()
        return self._observer is not None

    def start_after(self, ready: Callable[[], bool]) -> None:
        """Start at the first `take` that finds `ready()` true; until then every pass walks.
        `run`'s background restore: each file it places would be an event for the
        watchdog threads, competing with it for the GIL (20,000 files: 11.5 s with the
        watcher, 6.0 s without)."""
        self._after = ready

    def _give_up(self, reason: str) -> None:
        self.last_error = reason
        log.warning(
            "watch.unavailable %s; falling back to walking the trees every pass "
            "(raise fs.inotify.max_user_watches / max_user_instances to use events)",
            reason,
            extra={"event": "watch.unavailable"},
        )
        self._halt()
        self._next_retry = self.clock() + self.rescan_interval

    def _watch_new(self) -> None:
        for name, root in self.roots.items():
            if name in self._watched or self._observer is None or not os.path.isdir(root):
                continue
            try:
                self._observer.schedule(
                    _Handler(self, name, root, self.skip[name]),
                    root,
                    recursive=True,
                    event_filter=EVENTS,
                )
            except Exception as exc:
                self._give_up(f"cannot watch {root}: {exc}")
                return
            self._watched.add(name)
            with self._lock:
                self._pending[name] = None  # changes before the watch: walk once

    def take(self) -> dict[str, set[str] | None]:
        """The hints for the next pass (None: walk that tree), and start a new collection."""
        now = self.clock()
        if self._closed:
            return dict.fromkeys(self.roots)
        if self._after is not None:
            if not self._after():
                return dict.fromkeys(self.roots)
            self._after = None
            self.start()  # its first pass walks
        if self._observer is None and now >= self._next_retry and self._next_retry:
            self.start()
        if self._observer is not None:
            if not self._observer.alive():
                self._failed("the watcher thread stopped")
            if self._error:
                reason, self._error = self._error, None
                self._give_up(f"watch error: {reason}")
            else:
                self._watch_new()
        if now >= self._next_rescan:
            self._next_rescan = now + self.rescan_interval
            with self._lock:
                self._pending = dict.fromkeys(self.roots)
        with self._lock:
            out = self._pending
            self._pending = {
                n: set() if n in self._watched and self._observer is not None else None
                for n in self.roots
            }
        return out

    def give_back(self, hints: Mapping[str, set[str] | None]) -> None:
        """A pass failed or was skipped: its hints are taken again next pass."""
        with self._lock:
            for name, paths in hints.items():
                pending = self._pending.get(name)
                if paths is None or pending is None:
                    self._pending[name] = None
                else:
                    pending |= paths

    def pending(self) -> dict[str, int | None]:
        """Per adapter: changed paths waiting for the next pass (None: a walk is due)."""
        with self._lock:
            return {n: None if p is None else len(p) for n, p in self._pending.items()}

    def stop(self) -> None:
        """Stop watching for good (joins the watchdog threads)."""
        self._closed = True
        self._halt()

    def _halt(self) -> None:
        observer, self._observer = self._observer, None
        self._watched.clear()
        if observer is not None:
            try:
                observer.stop()
                if observer.is_alive():
                    observer.join()
            except Exception as exc:  # stopping must not fail the shutdown
                log.warning("watch.stop-failed %s", exc, extra={"event": "watch.stop-failed"})
        with self._lock:
            self._pending = dict.fromkeys(self.roots)
