"""Killing a harness mid-turn: every process it started, each by pid, and proof none survived.

A kill of the process group is not enough: OpenClaw's launcher starts the real
agent in a session of its own, and ``timeout`` moves itself and its child into a
new group (docs/harnesses.md).  So the tree is collected from ``/proc`` (parent
links), together with every process whose environment carries the run's marker
variable (a daemonised grandchild re-parented to init still has it); each is
stopped first (a stopped process cannot fork a child we would miss), then killed
with SIGKILL by pid, and the tree is collected again until nothing is left.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

MARKER = "SYNCENGINE_HARNESS_RUN"


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = data.rsplit(")", 1)[1].split()
    return int(rest[1]), rest[0]


def _has_marker(pid: int, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{MARKER}={marker}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def _pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def tree(root: int, marker: str | None = None) -> set[int]:
    """Live (not zombie) processes: `root`, its descendants, and any with the marker."""
    parents: dict[int, int] = {}
    alive: set[int] = set()
    for pid in _pids():
        st = _stat(pid)
        if st is None:
            continue
        parents[pid] = st[0]
        if st[1] != "Z":
            alive.add(pid)
    found = {root}
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if ppid in found and pid not in found:
                found.add(pid)
                changed = True
    if marker:
        found |= {pid for pid in alive if pid != os.getpid() and _has_marker(pid, marker)}
    return found & alive


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _wait_gone(pids: Iterable[int], deadline: float) -> None:
    """Wait (on pidfds, no polling) until each process has terminated or `deadline`."""
    import select

    fds = []
    for pid in pids:
        try:
            fds.append(os.pidfd_open(pid))
        except ProcessLookupError:
            continue
    try:
        pending = list(fds)
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            ready, _, _ = select.select(pending, [], [], remaining)
            pending = [fd for fd in pending if fd not in ready]
    finally:
        for fd in fds:
            os.close(fd)


def kill_tree(root: int, marker: str | None = None, *, timeout: float = 20.0) -> list[int]:
    """SIGKILL `root` and everything it started; return the pids killed.

    Raises AssertionError naming the survivors if any process is still alive
    (not a zombie) after `timeout` seconds.
    """
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = tree(root, marker) - {os.getpid()}
        if not pids or time.monotonic() > deadline:
            break
        _signal(pids, signal.SIGSTOP)  # frozen: none of them can start another
        pids |= tree(root, marker) - {os.getpid()}
        _signal(pids, signal.SIGKILL)
        killed |= pids
        _wait_gone(pids, deadline)
    survivors = sorted(tree(root, marker) - {os.getpid()})
    if survivors:
        raise AssertionError(f"processes survived SIGKILL: {survivors}")
    return sorted(killed)
