"""Warnings about one path, said once per run.

Owns the rule that a problem which repeats every pass for the same path (an
unlisted database, one that stays locked, a file that cannot be read) is a
warning the first time and a debug line afterwards, until its reason changes
or the path succeeds in between.  One `Notices` lives as long as an `Engine`
(a daemon's whole run; one CLI call), so a second run warns again.
Thread-safe: copies report from a pool.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("syncengine")


class Notices:
    """The last reason warned for each (event, adapter, path)."""

    def __init__(self) -> None:
        self._said: dict[tuple[str, str, str], str] = {}
        self._lock = threading.Lock()

    def warn(
        self, event: str, adapter: str, path: str, reason: str, msg: str, *args: object
    ) -> bool:
        """Log `msg % args` as a warning the first time (True), else at debug level."""
        key = (event, adapter, path)
        with self._lock:
            repeat = self._said.get(key) == reason
            self._said[key] = reason
        log.log(logging.DEBUG if repeat else logging.WARNING, msg, *args, extra={"event": event})
        return not repeat

    def settled(self, event: str, adapter: str, path: str) -> None:
        """`event` no longer applies to `path` (it succeeded): the next one is news again."""
        if self._said:
            with self._lock:
                self._said.pop((event, adapter, path), None)
