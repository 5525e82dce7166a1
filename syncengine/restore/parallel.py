"""Carrying out a restore's copies: in threads on a mount, in forked processes on a disk.

Owns `execute_all`, which places each file and link of a restore plan and
yields its outcome in plan order, and the forked path for a large restore
onto a local disk: contiguous shares of about equal cost, one per core
(`syncengine.walk.forked`), results sent back as picklable tuples, a share
whose process failed done again here.  A durable-side error stops the run
after every share's results are yielded, so what was placed is recorded.
What the outcomes mean for the index and the report is `restore.restorer`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from syncengine.durable.store import Store
from syncengine.errors import DurableError, SourceError
from syncengine.fs.safepath import DirCache
from syncengine.fs.stream import Vanished, in_order
from syncengine.local.adapter import AdapterState
from syncengine.plan import Fetch, KeepLocal, MakeLink
from syncengine.restore.fetch import Done, fetch_file, fetch_log, make_link
from syncengine.restore.packed import PackedFetch
from syncengine.walk import forked

Outcome = Done | KeepLocal | Vanished | SourceError  # KeepLocal: a log whose chain is not newer


def execute_all(
    actions: list[Fetch | MakeLink],
    live: DirCache,
    state: AdapterState,
    jobs: int,
    unrecorded: bool,
    packed: PackedFetch | None = None,
    new_only: bool = False,
) -> Generator[tuple[Fetch | MakeLink, Outcome], None, None]:
    """Each action's outcome, in order: threads on a mount, processes on a local disk.

    On a mount (`jobs` > 1) copies overlap their round trips in threads.  On a
    local disk a restore is Python per file: a large one from the one-shot CLI
    is split into contiguous shares of the (path-sorted) actions, one per
    core, in forked processes (syncengine.walk.forked).  A secret file is opened with
    the adapter's keys (`state.secrets`, `fetch.fetch_file`).  `new_only`: place files
    only where none has appeared since the plan (the background part, fetch.py).
    """
    durable: Store = state.store

    def one(action: Fetch | MakeLink) -> Outcome:
        try:
            if isinstance(action, MakeLink):
                return make_link(action.entry, live)
            if action.entry.kind == "segments":
                return fetch_log(action.entry, live, durable, new_only=new_only)
            return fetch_file(
                action,
                live,
                durable,
                unrecorded=unrecorded,
                secrets=state.secrets,
                packed=packed,
                new_only=new_only,
            )
        except SourceError as exc:
            return exc

    n = forked.workers()
    if jobs > 1 or n < 2 or len(actions) < _FORK_MIN or not forked.can_fork():
        return in_order(actions, one, jobs=jobs, name="syncengine-restore")
    return execute_forked(actions, one, n)


_FORK_MIN = 1000  # fewer actions than this: a fork costs more than it saves


_FILE_COST = 128 << 10  # a file's fixed cost (opens, rename, Python) in bytes copied


def execute_forked(
    actions: list[Fetch | MakeLink], one: Callable[[Fetch | MakeLink], Outcome], n: int
) -> Generator[tuple[Fetch | MakeLink, Outcome], None, None]:
    def work(share: list[Fetch | MakeLink]) -> tuple[list[tuple[Any, ...]], str | None]:
        out: list[tuple[Any, ...]] = []  # picklable, see below
        for action in share:
            try:
                result = one(action)
            except DurableError as exc:  # stops the run: report it after the rest
                return out, str(exc)
            if isinstance(result, SourceError):
                out.append(("error", result.operation, result.reason))
            elif isinstance(result, (KeepLocal, Vanished)):
                out.append(("as is", result))
            else:  # the entry only when it differs (a log rebuilt to its chain's end)
                entry = None if result[0] is action.entry else result[0]
                out.append(("done", entry, result[1], result[2]))
        return out, None

    shares = _split(actions, n)
    fatal = None
    for share, done in zip(shares, forked.fork_map(shares, work), strict=True):
        if done is None:  # its process failed: do that share here
            done = work(share)
        results, fatal = done[0], fatal or done[1]
        for action, result in zip(share, results, strict=False):  # short after a fatal error
            if result[0] == "done":
                yield action, (result[1] or action.entry, result[2], result[3])
            elif result[0] == "as is":
                yield action, result[1]
            else:
                yield action, SourceError(action.entry.path, result[1], result[2])
    if fatal is not None:  # after every share's results: what was placed gets recorded
        raise DurableError(fatal)


def _split(actions: list[Fetch | MakeLink], n: int) -> list[list[Fetch | MakeLink]]:
    """`n` contiguous shares of about equal cost (a file costs its bytes plus a fixed part)."""
    cost = [_FILE_COST + (a.entry.size or 0) for a in actions]
    per_share = sum(cost) / n
    shares: list[list[Fetch | MakeLink]] = [[]]
    acc = 0.0
    for action, c in zip(actions, cost, strict=True):
        if acc >= per_share * len(shares) and len(shares) < n:
            shares.append([])
        shares[-1].append(action)
        acc += c
    return shares
