"""Splitting CPU-bound work across forked processes (the one-shot CLI).

Owns fork, the result pipes and reaping.  The engine's hot loops (the walk of
a 100,000-file tree, a restore of as many files) are Python per file; on a
machine with more than one core they run faster split across processes.
`fork_map` runs the first share in the calling process and each other share
in a forked child that sends back its pickled result.  A child that fails
gives None: the caller redoes that share itself, so nothing is lost.

Only for a process with a single thread (`can_fork`): forking a threaded
process is unsafe, so the daemon and embedding services run serially.
"""

from __future__ import annotations

import gc
import os
import pickle
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def can_fork() -> bool:
    """Whether forking is available and safe here (a single-threaded process)."""
    return hasattr(os, "fork") and threading.active_count() == 1


def workers() -> int:
    """How many processes to split work into: the cores this process may use, at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


def fork_map(shares: Sequence[T], work: Callable[[T], R]) -> list[R | None]:
    """`work(share)` for each share: the first here, the others in forked children.

    Results come back in share order; None marks a child that failed (its
    share is the caller's to redo).  Children exit without running cleanup
    handlers (``os._exit``), so nothing of the parent's is flushed twice.
    """
    children: list[tuple[int, int]] = []
    gc.freeze()  # children's collections then skip the inherited heap (copy-on-write)
    try:
        for share in shares[1:]:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _child(work, share, w)
            os.close(w)
            children.append((pid, r))
    finally:
        gc.unfreeze()
    try:
        first: R | None = work(shares[0]) if shares else None
    finally:
        rest = [_collect(pid, r) for pid, r in children]
    return [first, *rest] if shares else []


def _child(work: Callable[[T], R], share: T, wfd: int) -> NoReturn:
    code = 0
    try:
        data = pickle.dumps(work(share), protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(wfd, "wb") as f:
            f.write(data)
    except BaseException:
        code = 1
    os._exit(code)


def _collect(pid: int, rfd: int) -> Any:
    with os.fdopen(rfd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 or not data:
        return None
    return pickle.loads(data)
