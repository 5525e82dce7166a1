"""One checkpoint or restore at a time per state directory (a flock'd lock file).

A periodic checkpoint that finds the lock held skips its turn; restore, the
final checkpoint and a checkpoint typed by a person wait for it.  The lock is
local (``flock`` on the state directory, which is on local disk): it does not
protect a durable root shared by two machines.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from syncengine.errors import LockBusy, local_error


class StateLock:
    """An exclusive lock on ``<state_dir>/lock``; usable as a context manager."""

    def __init__(self, state_dir: Path, *, wait: bool = True, timeout: float | None = None) -> None:
        self.path = state_dir / "lock"
        self.wait = wait
        self.timeout = timeout
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            os.makedirs(self.path.parent, mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise local_error("create the lock file", self.path, exc) from exc
        try:
            self._lock(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _lock(self, fd: int) -> None:
        if self.wait and self.timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        deadline = time.monotonic() + (self.timeout or 0.0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if not self.wait or time.monotonic() >= deadline:
                    raise LockBusy(
                        f"{self.path}: another checkpoint or restore is running"
                    ) from None
                time.sleep(0.05)  # flock has no timed wait; poll until the deadline

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StateLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
