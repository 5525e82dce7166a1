"""What `syncengine migrate` plans: one frozen action per change, with a readable line.

Owns the action values, the report, and `Setup` (what migrate is given); migrate.py
decides the actions from the disk (or the bucket), migrate_execute.py carries them
out (a dry run prints them).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs

from syncengine.config import Config
from syncengine.durable.lifecycle import DurableStore
from syncengine.restore.openfiles import SnapshotOpen


def _never(path: Path, rel: str, new_rel: str) -> bool:
    return False


@attrs.frozen
class Setup:
    """What migrate works with, given explicitly by its caller (the engine)."""

    config: Config
    clock: Callable[[], int]
    store: Callable[[Path], DurableStore]  # the durable directory at a path (probed before a write)
    rename: Callable[[Path, str, str], None]  # (dir, name, new name): old-layout renames
    # (dir, name, new name): whether the new name holds a rename a killed run left half
    # done, which `rename` completes (a bucket: copy and delete per object; never on disk)
    unfinished: Callable[[Path, str, str], bool] = _never


@attrs.frozen
class MakeDir:
    """Create an adapter's live or durable directory (and its parents)."""

    path: Path

    def __str__(self) -> str:
        return f"create directory {self.path}"


@attrs.frozen
class Unlink:
    """Remove a symlink (never what it points to)."""

    path: Path
    target: str
    durable: bool = False  # on the durable side: through the Store
    then_mkdir: bool = False  # create a directory in its place

    def __str__(self) -> str:
        then = "; create the directory" if self.then_mkdir else ""
        return f"unlink symlink {self.path} -> {self.target}{then}"


@attrs.frozen
class Link:
    """Make `path` a symlink to `target` (`ln -sfn`: a symlink there is replaced)."""

    path: Path
    target: Path
    replaces: str | None = None  # the old link's target, if one is there

    def __str__(self) -> str:
        old = f" (replaces the link to {self.replaces})" if self.replaces is not None else ""
        return f"link {self.path} -> {self.target}{old}"


@attrs.frozen
class Copy:
    """Copy one legacy file (or record one symlink) into a checkpoint."""

    adapter: str
    src_root: Path
    rel: str
    dest: str  # relative to the adapter's durable checkpoint
    listed: bool  # recorded in the manifest (False: a raw SQLite file, for restore's fallback)
    reason: str
    link_target: str | None = None
    mtime_ns: int = 0

    def __str__(self) -> str:
        what = f"link -> {self.link_target}" if self.link_target is not None else self.reason
        return f"copy {self.src_root}/{self.rel} -> {self.adapter}:{self.dest} ({what})"


@attrs.frozen
class Move:
    """Rename a legacy directory or a cache file to a free name beside or below it."""

    store: Path
    rel: str
    new_rel: str
    resume: bool = False  # the new name holds this rename half done (a bucket): complete it

    def __str__(self) -> str:
        again = " (complete the rename a killed run began)" if self.resume else ""
        return f"rename {self.store}/{self.rel} -> {self.store}/{self.new_rel}{again}"


@attrs.frozen
class Note:
    """A step with nothing to do, and why."""

    text: str

    def __str__(self) -> str:
        return self.text


Action = MakeDir | Unlink | Link | Copy | Move | SnapshotOpen | Note


@attrs.frozen
class MigrateReport:
    lines: tuple[str, ...]
    changes: int
    errors: tuple[str, ...]
    dry_run: bool

    @property
    def exit_code(self) -> int:
        return 1 if self.errors else 0


__all__ = [
    "Action",
    "Copy",
    "Link",
    "MakeDir",
    "MigrateReport",
    "Move",
    "Note",
    "Setup",
    "Unlink",
]
