"""Making the recorded directories around a restore's files.

Owns the order: the missing directories are made (shallowest first) before
any file is placed, and a mode that would keep restore out (the owner lacks
read, write or search, e.g. 0500) is set after everything inside is placed,
deepest first, even when the durable side stopped the run.  `make_dir`
(fetch.py) does each one; restorer.py records what was made.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from syncengine.errors import SourceError
from syncengine.fs.safepath import DirCache
from syncengine.local.adapter import AdapterState
from syncengine.plan import MakeDir
from syncengine.report import PathError
from syncengine.restore.fetch import make_dir

log = logging.getLogger("syncengine")


@contextmanager
def dirs_around(
    state: AdapterState,
    dirs: list[MakeDir],
    live: DirCache,
    made: dict[str, int],
    errors: list[PathError],
) -> Iterator[None]:
    """Make the missing directories (shallowest first) before the files are placed, and
    set the modes that would have kept restore out of them after (deepest first: a
    directory's descendants before it), even when the durable side stopped the run."""
    _make_dirs(state, sorted(dirs, key=lambda a: a.entry.path), live, made, errors, last=False)
    try:
        yield
    finally:
        late = [a for a in dirs if a.deferred and a.entry.path in made]
        _make_dirs(
            state,
            sorted(late, key=lambda a: a.entry.path, reverse=True),
            live,
            made,
            errors,
            last=True,
        )


def _make_dirs(
    state: AdapterState,
    dirs: list[MakeDir],
    live: DirCache,
    made: dict[str, int],
    errors: list[PathError],
    *,
    last: bool,
) -> None:
    for action in dirs:
        try:
            made[action.entry.path] = make_dir(
                action.entry, live, set_mode=last or not action.deferred
            )
        except SourceError as exc:  # made owner-only, if at all: recorded as it is
            failed(state, action.entry.path, exc, errors)


def failed(state: AdapterState, path: str, exc: SourceError, errors: list[PathError]) -> None:
    """A path the restore could not place: its error, and one log line."""
    errors.append(PathError(state.name, path, exc.operation, exc.reason))
    log.warning(
        "restore.failed adapter=%s path=%s error=%s",
        state.name,
        path,
        exc.reason,
        extra={"event": "restore.failed"},
    )
