"""The processes behind a lease on this host: whether a taker is gone, and the release
at interpreter exit.

A lease names the process that took it (host, pid).  Another process of the
same state directory keeps that lease (`leasing.Keep`); whether it also
releases it at its end depends on whether the taker is still there: a
``syncengine checkpoint`` typed beside the running daemon must not end the
daemon's lease, while the first command after a killed one must (else the
next instance waits for the expiry).  An embedded engine that never closed
releases at interpreter exit (`AtExit`).  Never touches the durable side.
"""

from __future__ import annotations

import atexit
import logging
import os
import weakref
from typing import Protocol

from syncengine.durable.lease import Holder
from syncengine.errors import SyncEngineError

log = logging.getLogger("syncengine")


def gone(holder: Holder) -> bool:
    """Whether `holder`'s process has ended.  Only knowable on this host: another
    host's process, or a pid that exists, counts as alive (a reused pid only leaves the
    lease to expire instead of being released)."""
    if holder.host != os.uname().nodename or holder.pid <= 0 or holder.pid == os.getpid():
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: it exists
        return False
    return False


class Releasing(Protocol):
    def release(self) -> None: ...


class AtExit:
    """Releases one holder's lease when the interpreter exits, unless disarmed first
    (it was released).  Holds the holder weakly: an engine dropped is not kept alive."""

    def __init__(self) -> None:
        self._hook: _Hook | None = None

    def arm(self, holder: Releasing) -> None:
        if self._hook is None:
            self._hook = _Hook(weakref.ref(holder))
            atexit.register(self._hook)

    def disarm(self) -> None:
        if self._hook is not None:
            atexit.unregister(self._hook)
            self._hook = None


class _Hook:
    """The callable registered with `atexit`."""

    def __init__(self, ref: weakref.ref[Releasing]) -> None:
        self.ref = ref

    def __call__(self) -> None:
        holder = self.ref()
        if holder is not None:
            release_quietly(holder)


def release_quietly(holder: Releasing) -> None:
    """Release, logging a failure (the durable side unreachable) instead of raising it:
    that lease expires instead (`Engine.close`, the release at exit)."""
    try:
        holder.release()
    except (SyncEngineError, OSError) as exc:
        log.warning("lease.release-failed %s", exc, extra={"event": "lease.release-failed"})


__all__ = ["AtExit", "gone", "release_quietly"]
