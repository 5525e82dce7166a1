"""Deciding which part of a restore comes before COMMAND starts, and the order of the rest.

Owns the rule of `run`'s background restore (issue 27): an adapter's *first
set* is restored before COMMAND starts, everything else after it, in
batches, newest first.  The first set is every action that is not a plain
file or log missing locally (directories, links, databases, refusals, a local
copy to compare or keep), every path its ``restore_first`` patterns match, the
newest ``restore_newest_count`` paths its ``restore_newest`` patterns match,
and everything under a directory whose recorded mode keeps restore out (set
after its contents, so all of them come first).  Only a file *missing*
locally waits: the background places it only where no file has appeared
since (`restore.later`), so it never needs to compare with a local copy.

Patterns are the ``exclude`` language (`syncengine.patterns`); a pattern
ending in ``/`` names a directory, and then every path below it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from syncengine.patterns import Matcher, compile_patterns
from syncengine.plan.restore import Fetch, MakeDir, RestoreAction

MISSING = "missing"  # Fetch.reason of a file the live tree lacks (plan_restore_entry)


@attrs.frozen
class Order:
    """An adapter's restore order: `first` and `newest` patterns, how many newest."""

    first: tuple[str, ...] = ()
    newest: tuple[str, ...] = ()
    newest_count: int = 0


@attrs.frozen
class PathSet:
    """Paths a pattern list names: a file pattern matches the path, a directory pattern
    (trailing ``/``) any directory above it."""

    files: Matcher
    dirs: Matcher
    _under: dict[str, bool] = attrs.field(factory=dict, eq=False)  # directory -> inside?

    @classmethod
    def of(cls, patterns: Sequence[str]) -> PathSet:
        dirs = [p for p in patterns if p.strip().endswith("/")]
        files = [p for p in patterns if not p.strip().endswith("/")]
        return cls(
            compile_patterns(files, where="restore"), compile_patterns(dirs, where="restore")
        )

    def __contains__(self, path: object) -> bool:
        assert isinstance(path, str)
        if self.files.excluded(path, False):
            return True
        return bool(self.dirs) and self._inside(path.rpartition("/")[0])

    def _inside(self, directory: str) -> bool:
        """Whether `directory` or one above it is named (cached: files share parents)."""
        if not directory:
            return False
        found = self._under.get(directory)
        if found is None:
            found = self.dirs.excluded(directory, True) or self._inside(
                directory.rpartition("/")[0]
            )
            self._under[directory] = found
        return found


def _newest_first(action: Fetch) -> tuple[int, str]:
    return -action.entry.mtime_ns, action.entry.path


def split(
    actions: Sequence[RestoreAction], order: Order
) -> tuple[list[RestoreAction], list[Fetch]]:
    """(now, later): the first set in plan order, the rest newest first.  An adapter that
    declares no pattern at all (an [[adapter]] written before the order existed) is
    restored whole first, as before."""
    if not order.first and not order.newest:
        return list(actions), []
    first = PathSet.of(order.first)
    closed = tuple(a.entry.path + "/" for a in actions if isinstance(a, MakeDir) and a.deferred)
    movable = [
        a
        for a in actions
        if isinstance(a, Fetch)
        and a.reason == MISSING
        and not a.walked
        and a.entry.kind in ("file", "segments")
        and not (closed and a.entry.path.startswith(closed))
        and a.entry.path not in first
    ]
    newest_set = PathSet.of(order.newest)
    wanted = sorted((a for a in movable if a.entry.path in newest_set), key=_newest_first)
    keep = {a.entry.path for a in wanted[: order.newest_count]}
    later = sorted((a for a in movable if a.entry.path not in keep), key=_newest_first)
    waiting = {a.entry.path for a in later}
    now = [a for a in actions if a.entry.path not in waiting or not isinstance(a, Fetch)]
    return now, later
